//! csi-attacher: watches VolumeAttachments of this CSI driver and calls ControllerPublishVolume
//! / ControllerUnpublishVolume. A drop-in replacement for kubernetes-csi/external-attacher
//! (spec sidecars.md §1).
//!
//! Decisions are pure functions over cached objects (`decide`, `filter`, `source`, `node`,
//! `request`, `patch`, `reconcile`); the controller carries them out.

mod decide;
mod filter;
mod names;
mod node;
mod patch;
mod reconcile;
mod request;
mod source;
