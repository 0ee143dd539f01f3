//! Validation that answers 422 Invalid with one cause per field, as kube-apiserver v1.36.2 does
//! (fixtures h1, h2, l4, m7, m9): object names, metadata (labels, annotations, finalizers),
//! and the required fields of the kinds the sidecars write (PVC, PV, VolumeAttachment, Lease,
//! StorageClass, CSIStorageCapacity, CSINode, Events), the size limits of a VolumeAttachment's
//! status (attachment metadata, error messages), and on PVC updates the resize rules
//! (a request may drop only while it stays above `status.capacity`; `allocatedResources` and
//! `allocatedResourceStatuses` take only `storage` and valid values). Messages follow upstream's
//! `field.Error` wording so a sidecar that logs them logs what it would log in a real cluster.
//!
//! VolumeAttributesClass: a class needs a `driverName` and never changes it or its
//! `parameters`; a claim's class cannot be cleared once applied; `modifyVolumeStatus.status`
//! takes only known values ([`classes`]).
//!
//! By concern: [`field`] (the error and its text), [`names`] (name syntax), [`metadata`]
//! (what every kind shares), [`kinds`] (each kind's own fields) and [`classes`] (the
//! VolumeAttributesClass rules).

mod classes;
mod field;
mod kinds;
mod metadata;
mod names;

pub(crate) use field::FieldError;
pub(crate) use kinds::{validate_object, validate_update};

#[cfg(test)]
mod tests;
