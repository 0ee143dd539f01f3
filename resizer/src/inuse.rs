//! The in-use gate (spec sidecars.md §2.4 steps 6–8): when the driver may not be asked to
//! expand a volume while a pod uses its claim, and which pods count as using it. The pods are
//! watched by `controller::pods`; these are the pure decisions it and the sync share.

use csi_common::capabilities::PluginCapabilities;
use k8s_openapi::api::core::v1::{Pod, PodSpec, Volume};

use crate::mode::Resizer;

/// When the driver may not be called while a pod uses the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// `--handle-volume-inuse-error=false`, upstream's meaning: no pod is ever looked at (and
    /// no pod RBAC is needed), even for an offline-only driver.
    Off,
    /// Upstream: only a claim whose last call failed with FAILED_PRECONDITION ("in use").
    AfterInUseError,
    /// Beyond upstream (#62, #44, #81), for a driver that reports only the OFFLINE
    /// VolumeExpansion capability: before every call. CSI spec, VolumeExpansion OFFLINE: the
    /// volume must not be published (ControllerPublished or NodePublished) when expanded.
    EveryCall,
}

impl Gate {
    /// The gate for `--handle-volume-inuse-error` and the driver's plugin capabilities. A
    /// driver that reports OFFLINE without ONLINE expands only volumes not in use; one that
    /// reports neither is treated as online, as upstream treats every driver (many report
    /// nothing).
    pub(crate) fn new(handle_in_use: bool, plugin: &PluginCapabilities) -> Self {
        if !handle_in_use {
            Self::Off
        } else if plugin.has_offline_expansion() && !plugin.has_online_expansion() {
            Self::EveryCall
        } else {
            Self::AfterInUseError
        }
    }

    /// Whether the sync must ask whether a pod uses the claim before calling the driver;
    /// `marked`: the claim's last call failed with FAILED_PRECONDITION. The trivial resizer
    /// makes no controller call, so nothing is gated.
    pub(crate) fn must_check(self, resizer: Resizer, marked: bool) -> bool {
        resizer == Resizer::Csi
            && match self {
                Self::Off => false,
                Self::AfterInUseError => marked,
                Self::EveryCall => true,
            }
    }
}

/// Whether `pod` uses claim `claim` (in the pod's namespace). A pod that has terminated
/// (`Succeeded` / `Failed`) no longer does: kubelet has torn its volumes down. This is
/// upstream's `inUseChecker` rule; a terminated Job pod therefore frees its claim (#175).
pub(crate) fn uses(pod: &Pod, claim: &str) -> bool {
    !terminated(pod) && claims(pod).any(|name| name == claim)
}

fn terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn claims(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.spec
        .iter()
        .flat_map(|spec| spec.volumes.iter().flatten())
        .filter_map(|volume| volume.persistent_volume_claim.as_ref())
        .map(|source| source.claim_name.as_str())
}

/// Shrinks a cached pod to what [`uses`] reads: its identity (and deletionTimestamp), the claim
/// volumes and the phase.
/// The watch is per namespace and only while a claim there is blocked, and this keeps even
/// that cache small (a pod object is mostly containers, env and status).
pub(crate) fn trim(pod: &mut Pod) {
    let metadata = std::mem::take(&mut pod.metadata);
    pod.metadata.name = metadata.name;
    pod.metadata.namespace = metadata.namespace;
    pod.metadata.uid = metadata.uid;
    pod.metadata.resource_version = metadata.resource_version;
    // A terminating pod still uses its claims; kept for the logs and the tests that say so.
    pod.metadata.deletion_timestamp = metadata.deletion_timestamp;
    let volumes: Vec<Volume> = pod
        .spec
        .take()
        .and_then(|spec| spec.volumes)
        .unwrap_or_default()
        .into_iter()
        .filter(|volume| volume.persistent_volume_claim.is_some())
        .map(|volume| Volume {
            name: volume.name,
            persistent_volume_claim: volume.persistent_volume_claim,
            ..Volume::default()
        })
        .collect();
    pod.spec = Some(PodSpec {
        volumes: Some(volumes),
        ..PodSpec::default()
    });
    let phase = pod.status.take().and_then(|status| status.phase);
    pod.status = phase.map(|phase| k8s_openapi::api::core::v1::PodStatus {
        phase: Some(phase),
        ..Default::default()
    });
}

/// Upstream's `VolumeResizeFailed` message when the claim is in use.
pub(crate) fn message(namespace: &str, claim: &str, driver: &str) -> String {
    format!(
        "Unable to expand {namespace}/{claim} because CSI driver {driver} only supports offline expansion and volume is currently in-use"
    )
}

#[cfg(test)]
mod tests;
