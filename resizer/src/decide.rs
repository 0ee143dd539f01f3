//! What the resize controller does with a claim: pure functions of the cached PVC and PV (and
//! the controller's in-memory state), table-tested in `decide/tests.rs`. The executor in
//! `controller/` carries out what they return.
//!
//! Follows external-resizer `pkg/controller/controller.go` (`pvcNeedResize`, `pvNeedResize`,
//! the update filter) and `expand_and_recover.go` (the target-size table), spec sidecars.md
//! §2.3 and §2.4, with the `RecoverVolumeExpansionFailure` gate on.

use std::collections::BTreeMap;

use csi_common::migration;
use csi_common::quantity::{self, QuantityError};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::names::{self, condition, resize_status};

/// Annotation kube-controller-manager's expand controller writes on a claim whose in-tree
/// volume is to be expanded by a CSI driver (CSI migration).
pub(crate) const STORAGE_RESIZER_ANNOTATION: &str = "volume.kubernetes.io/storage-resizer";

/// The sizes (bytes) and resize state of one claim and its volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    /// `spec.resources.requests.storage`.
    pub(crate) spec: i64,
    /// `pv.spec.capacity.storage`.
    pub(crate) pv: i64,
    /// `status.capacity.storage` (0 when absent).
    pub(crate) capacity: i64,
    /// `status.allocatedResources.storage`.
    pub(crate) allocated: Option<i64>,
    /// `status.allocatedResourceStatuses.storage`.
    pub(crate) resize_status: Option<String>,
    /// A `FileSystemResizePending` condition is present.
    pub(crate) fs_resize_pending: bool,
}

/// Why a claim is not expanded now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Skip {
    /// Not Bound, no `spec.volumeName`, or the request is not above `status.capacity`: nothing
    /// to do until the claim changes.
    #[error("claim does not need resizing")]
    NoResizeNeeded,
    /// The PV is not in the cache yet (a race at creation, upstream #521): retry.
    #[error("PV {0:?} bound to the claim is not in the cache yet")]
    VolumeNotCached(String),
    /// The PV is another driver's (or in-tree without migration to us).
    #[error("volume belongs to another driver")]
    NotOurs,
    /// The PV's claimRef does not point at this claim (namespace and UID).
    #[error("PV {0:?} is not bound to this claim")]
    ClaimRefMismatch(String),
    /// A size that is not a quantity (kube-apiserver validates these, so only a corrupt
    /// object gets here).
    #[error("invalid {field} {value:?}")]
    Quantity {
        /// Which field.
        field: &'static str,
        /// Its text.
        value: String,
        /// Why it does not parse.
        #[source]
        source: QuantityError,
    },
}

impl Skip {
    /// Whether the claim should be retried with backoff (the cache may catch up), rather than
    /// left until it changes.
    pub(crate) fn retry(&self) -> bool {
        matches!(self, Self::VolumeNotCached(_))
    }

    /// Whether a user should hear about it (a Warning event on the claim).
    pub(crate) fn is_user_error(&self) -> bool {
        matches!(self, Self::Quantity { .. })
    }
}

/// The `storage` entry of a resource map.
fn storage(map: Option<&BTreeMap<String, Quantity>>) -> Option<&str> {
    map.and_then(|m| m.get(names::STORAGE))
        .map(|q| q.0.as_str())
}

fn bytes(field: &'static str, value: Option<&str>) -> Result<i64, Skip> {
    let Some(value) = value else {
        return Ok(0);
    };
    quantity::parse_bytes(value).map_err(|source| Skip::Quantity {
        field,
        value: value.to_owned(),
        source,
    })
}

/// The PV name of a claim that may need resizing (upstream `pvcNeedResize` without the size
/// part): Bound with `spec.volumeName`.
pub(crate) fn bound_volume(pvc: &PersistentVolumeClaim) -> Option<&str> {
    let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|n| !n.is_empty())?;
    bound.then_some(name)
}

/// Whether `pv` is expanded by `driver`: its CSI volume, or (CSI migration, external-resizer
/// `CanSupport`) a PV without `csi` when `driver` is one in-tree volumes migrated to and
/// kube-controller-manager named it the claim's resizer; the expansion translates such a PV
/// (`request::volume`).
fn ours(pvc: &PersistentVolumeClaim, pv: &PersistentVolume, driver: &str) -> bool {
    if let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) {
        return csi.driver == driver;
    }
    let delegated = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STORAGE_RESIZER_ANNOTATION))
        .is_some_and(|d| d == driver);
    delegated && migration::is_migration_driver(driver)
}

/// Whether this claim is handled by the resizer of `driver` and, if so, its sizes (spec
/// §2.3 "Which PVCs are handled by the resize controller").
pub(crate) fn claim(
    pvc: &PersistentVolumeClaim,
    pv: Option<&PersistentVolume>,
    driver: &str,
) -> Result<Claim, Skip> {
    let Some(pv_name) = bound_volume(pvc) else {
        return Err(Skip::NoResizeNeeded);
    };
    let status = pvc.status.as_ref();
    let spec = bytes(
        "spec.resources.requests.storage",
        storage(
            pvc.spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref()),
        ),
    )?;
    let capacity = bytes(
        "status.capacity.storage",
        storage(status.and_then(|s| s.capacity.as_ref())),
    )?;
    if spec <= capacity {
        return Err(Skip::NoResizeNeeded);
    }
    let Some(pv) = pv else {
        return Err(Skip::VolumeNotCached(pv_name.to_owned()));
    };
    if !ours(pvc, pv, driver) {
        return Err(Skip::NotOurs);
    }
    let pv_spec = pv.spec.as_ref();
    let claim_ref = pv_spec.and_then(|s| s.claim_ref.as_ref());
    let matches = claim_ref.is_some_and(|r| {
        r.namespace == pvc.metadata.namespace && r.uid == pvc.metadata.uid && r.uid.is_some()
    });
    if !matches {
        return Err(Skip::ClaimRefMismatch(pv_name.to_owned()));
    }
    let allocated = storage(status.and_then(|s| s.allocated_resources.as_ref()))
        .map(|q| bytes("status.allocatedResources.storage", Some(q)))
        .transpose()?;
    Ok(Claim {
        spec,
        pv: bytes(
            "spec.capacity.storage",
            storage(pv_spec.and_then(|s| s.capacity.as_ref())),
        )?,
        capacity,
        allocated,
        resize_status: status
            .and_then(|s| s.allocated_resource_statuses.as_ref())
            .and_then(|m| m.get(names::STORAGE))
            .cloned(),
        fs_resize_pending: has_condition(pvc, condition::FILE_SYSTEM_RESIZE_PENDING),
    })
}

/// Whether the claim has a condition of this type.
pub(crate) fn has_condition(pvc: &PersistentVolumeClaim, type_: &str) -> bool {
    pvc.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_))
}

/// What the controller knows about the claim's last expansion attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct History {
    /// The last ControllerExpandVolume ended with a final error (upstream's in-memory
    /// "final error" set): the driver is not working on the old target any more.
    pub(crate) final_error: bool,
    /// Trivial resizer (no controller call).
    pub(crate) trivial: bool,
}

/// The size to expand to, or `None` when there is nothing to do (spec §2.4, expand-and-recover
/// step 3). Every row of the table is a test in `decide/tests.rs`.
pub(crate) fn target(claim: &Claim, history: History) -> Option<i64> {
    let status = claim.resize_status.as_deref();
    // Where the table says "allocated" but the claim has none (status written by an old API
    // server), the request is all there is.
    let allocated = claim.allocated.unwrap_or(claim.spec);
    if claim.pv < claim.spec {
        match status {
            Some(resize_status::NODE_INFEASIBLE) => Some(allocated),
            Some(resize_status::NODE_PENDING | resize_status::NODE_IN_PROGRESS) => {
                // kubelet is finishing a size the controller already reached.
                (claim.pv < allocated).then_some(allocated)
            }
            // An uncertain call may still be running on the driver: its target cannot change.
            // After a final error the user may have lowered the request to recover.
            Some(resize_status::CONTROLLER_IN_PROGRESS) if !history.final_error => Some(allocated),
            _ => Some(claim.spec),
        }
    } else {
        match status {
            Some(resize_status::NODE_PENDING | resize_status::NODE_IN_PROGRESS) => None,
            Some(resize_status::NODE_INFEASIBLE) => Some(if history.trivial {
                claim.spec
            } else {
                allocated
            }),
            Some(resize_status::CONTROLLER_IN_PROGRESS | resize_status::CONTROLLER_INFEASIBLE) => {
                Some(allocated)
            }
            _ => match claim.allocated {
                Some(allocated) => Some(allocated),
                None if claim.fs_resize_pending => None,
                None => Some(claim.spec),
            },
        }
    }
}

/// The legacy flow's size to expand to (`RecoverVolumeExpansionFailure=false`, upstream
/// `pvNeedResize`): the request, while the PV is smaller than it, or while the PV already has
/// it but no `FileSystemResizePending` says the controller part is done (the call is repeated
/// to learn whether node expansion is needed; CSI ControllerExpandVolume is idempotent).
pub(crate) fn legacy_target(claim: &Claim) -> Option<i64> {
    (claim.pv < claim.spec || !claim.fs_resize_pending).then_some(claim.spec)
}

/// Whether a PVC update should queue the claim (spec §2.4 "Enqueue rules", with the recovery
/// gate on): the request changed, the storage-resizer annotation changed, a resync (same
/// resourceVersion), `status.capacity` grew (so the pre-resize annotation can go), or the
/// resize status changed (kubelet reported NodeResizeInfeasible).
pub(crate) fn update_needs_sync(old: &PersistentVolumeClaim, new: &PersistentVolumeClaim) -> bool {
    let request = |pvc: &PersistentVolumeClaim| {
        storage(
            pvc.spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref()),
        )
        .map(str::to_owned)
    };
    let annotation = |pvc: &PersistentVolumeClaim| {
        pvc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STORAGE_RESIZER_ANNOTATION))
            .cloned()
    };
    let capacity = |pvc: &PersistentVolumeClaim| {
        storage(pvc.status.as_ref().and_then(|s| s.capacity.as_ref()))
            .and_then(|q| quantity::parse_bytes(q).ok())
            .unwrap_or(0)
    };
    let status = |pvc: &PersistentVolumeClaim| {
        pvc.status
            .as_ref()
            .and_then(|s| s.allocated_resource_statuses.as_ref())
            .and_then(|m| m.get(names::STORAGE))
            .cloned()
    };
    request(old) != request(new)
        || annotation(old) != annotation(new)
        || old.metadata.resource_version == new.metadata.resource_version
        || capacity(new) > capacity(old)
        || status(old) != status(new)
}

/// The `namespace/name` of the claim a PV with the pre-resize-capacity annotation is bound to.
pub(crate) fn claim_of_annotated_volume(pv: &PersistentVolume) -> Option<String> {
    pv.metadata
        .annotations
        .as_ref()?
        .get(names::PRE_RESIZE_CAPACITY)?;
    let claim = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some(format!(
        "{}/{}",
        claim.namespace.as_deref()?,
        claim.name.as_deref()?
    ))
}

/// Whether the PV's pre-resize-capacity annotation can go: node expansion is complete
/// (`pvc.status.capacity >= pv.spec.capacity`) and the annotation is there (spec §2.4 step 2).
/// Only on this driver's PVs: another driver's resizer owns its own.
pub(crate) fn pre_resize_annotation_done(
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    driver: &str,
) -> bool {
    let has = ours(pvc, pv, driver)
        && pv
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(names::PRE_RESIZE_CAPACITY));
    let parse = |q: Option<&str>| q.and_then(|q| quantity::parse_bytes(q).ok());
    let capacity = parse(storage(
        pvc.status.as_ref().and_then(|s| s.capacity.as_ref()),
    ));
    let pv_size = parse(storage(pv.spec.as_ref().and_then(|s| s.capacity.as_ref())));
    has && matches!((capacity, pv_size), (Some(c), Some(p)) if c >= p)
}

#[cfg(test)]
mod tests;
