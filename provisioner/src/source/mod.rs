//! Data sources of a claim: which object a new volume is cloned or restored from, and whether
//! that object may be used (spec provisioner.md §4.3 steps 1, 3 and 10, §2.6, §6.4).
//!
//! Everything here is pure: [`reference`] normalises `spec.dataSource` / `spec.dataSourceRef`,
//! [`grant_allows`] applies gateway.networking.k8s.io ReferenceGrants to a cross-namespace
//! source, [`decide_clone`] and [`decide_snapshot`] check the source objects the controller
//! looked up and give the CSI `volume_content_source` or say exactly why not. The controller
//! (`controller::protection`) does the lookups and the finalizer updates.
//!
//! Every [`SourceError`] means "not with these objects": nothing reached the driver, and only a
//! change of the source (it gets bound, becomes ready, is re-created) or of the claim helps.
//! Upstream retries them with the normal backoff (from one second); here they are retried
//! slowly and, because each retry repeats the same message, the Event recorder aggregates them
//! into one Event with a count.

pub(crate) mod objects;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use proto::csi::v1::VolumeContentSource;
use proto::csi::v1::volume_content_source::{SnapshotSource, Type, VolumeSource};
use thiserror::Error;

use crate::plan_error::PlanError;
use crate::request::{RESOURCE_STORAGE, VOLUME_MODE_BLOCK};

pub(crate) use objects::{ContentView, GrantView, SnapshotView};

/// `kind` of a snapshot data source.
pub(crate) const SNAPSHOT_KIND: &str = "VolumeSnapshot";
/// The only API group a snapshot data source may name.
pub(crate) const SNAPSHOT_API_GROUP: &str = "snapshot.storage.k8s.io";
/// `kind` of a clone data source (any apiGroup, as upstream).
pub(crate) const PVC_KIND: &str = "PersistentVolumeClaim";
/// Finalizer on the source claim of a clone until no Pending claim clones it any more.
pub(crate) const CLONE_FINALIZER: &str = "provisioner.storage.kubernetes.io/cloning-protection";
/// Finalizer on a VolumeSnapshot while a volume is being restored from it (upstream v6.2, #1449;
/// distinct from external-snapshotter's `snapshot.storage.kubernetes.io/...` one).
pub(crate) const SNAPSHOT_FINALIZER: &str =
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection";
/// VolumeSnapshotContent annotation that allows restoring into another volume mode (upstream
/// `annAllowVolumeModeChange`: the `kubernetes.io` spelling, unlike the snapshot API group).
pub(crate) const ALLOW_VOLUME_MODE_CHANGE: &str =
    "snapshot.storage.kubernetes.io/allow-volume-mode-change";

/// What a source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceKind {
    /// A PersistentVolumeClaim to clone.
    Clone,
    /// A VolumeSnapshot to restore.
    Snapshot,
}

/// A claim's data source after normalisation (upstream `dataSource()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceRef {
    /// Clone or restore.
    pub(crate) kind: SourceKind,
    /// The source's namespace (the claim's unless a `dataSourceRef` names another).
    pub(crate) namespace: String,
    /// The source's name.
    pub(crate) name: String,
    /// The source's apiGroup as written ("" for the core group).
    pub(crate) api_group: String,
    /// The source is in another namespace than the claim: a ReferenceGrant must allow it.
    pub(crate) cross_namespace: bool,
}

/// Normalises `spec.dataSource` (wins) or `spec.dataSourceRef` and classifies it, in upstream's
/// order: namespace gate, empty name, snapshot apiGroup, then the kind; kinds other than
/// PersistentVolumeClaim and VolumeSnapshot belong to a volume populator.
pub(crate) fn reference(
    pvc: &PersistentVolumeClaim,
    cross_namespace_gate: bool,
) -> Result<Option<SourceRef>, PlanError> {
    let Some(spec) = pvc.spec.as_ref() else {
        return Ok(None);
    };
    let claim_namespace = pvc.metadata.namespace.clone().unwrap_or_default();
    let (kind, name, group, namespace) = if let Some(source) = &spec.data_source {
        (
            &source.kind,
            &source.name,
            source.api_group.as_deref(),
            claim_namespace.clone(),
        )
    } else if let Some(source) = &spec.data_source_ref {
        let namespace = match source.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => {
                if !cross_namespace_gate {
                    return Err(PlanError::DataSourceRefNamespace);
                }
                ns.to_owned()
            }
            _ => claim_namespace.clone(),
        };
        (
            &source.kind,
            &source.name,
            source.api_group.as_deref(),
            namespace,
        )
    } else {
        return Ok(None);
    };
    if name.is_empty() {
        return Err(PlanError::DataSourceNameEmpty {
            claim: pvc.metadata.name.clone().unwrap_or_default(),
        });
    }
    let group = group.unwrap_or_default();
    let kind = match kind.as_str() {
        SNAPSHOT_KIND => {
            if group != SNAPSHOT_API_GROUP {
                return Err(PlanError::SnapshotApiGroup {
                    group: group.to_owned(),
                });
            }
            SourceKind::Snapshot
        }
        PVC_KIND => SourceKind::Clone,
        other => {
            return Err(PlanError::ExternalPopulator {
                kind: other.to_owned(),
            });
        }
    };
    Ok(Some(SourceRef {
        kind,
        cross_namespace: namespace != claim_namespace,
        namespace,
        name: name.clone(),
        api_group: group.to_owned(),
    }))
}

impl SourceRef {
    /// The `kind` string of this source.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self.kind {
            SourceKind::Clone => PVC_KIND,
            SourceKind::Snapshot => SNAPSHOT_KIND,
        }
    }
}

/// Whether a ReferenceGrant in the source's namespace lets claims of `claim_namespace` use
/// `source` (upstream `IsGranted`, Gateway API semantics): some grant must list
/// `from {group "", kind PersistentVolumeClaim, namespace = claim_namespace}` and
/// `to {group = source group, kind = source kind, name = source name or unset/empty}`.
pub(crate) fn grant_allows(
    grants: &[GrantView],
    claim_namespace: &str,
    source: &SourceRef,
) -> bool {
    grants.iter().any(|grant| {
        grant
            .from
            .iter()
            .any(|f| f.group.is_empty() && f.kind == PVC_KIND && f.namespace == claim_namespace)
            && grant.to.iter().any(|t| {
                t.group == source.api_group
                    && t.kind == source.kind_name()
                    && (t.name.is_empty() || t.name == source.name)
            })
    })
}

/// Why a source cannot be used (yet). Each message names the source; none is final in the
/// sense of the state model: retried slowly until the source or the claim changes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum SourceError {
    /// No ReferenceGrant allows the cross-namespace source.
    #[error(
        "accessing {namespace}/{name} of {kind} dataSource from {claim_namespace}/{claim} isn't allowed: no ReferenceGrant in namespace {namespace} permits it"
    )]
    NotGranted {
        /// Source kind.
        kind: &'static str,
        /// Source namespace.
        namespace: String,
        /// Source name.
        name: String,
        /// Claim namespace.
        claim_namespace: String,
        /// Claim name.
        claim: String,
    },
    /// The source object does not exist.
    #[error("{kind} {namespace}/{name} specified as the data source does not exist")]
    SourceNotFound {
        /// Source kind.
        kind: &'static str,
        /// Source namespace.
        namespace: String,
        /// Source name.
        name: String,
    },
    /// The source object is being deleted (a snapshot only counts if an earlier attempt for this
    /// claim already protected it).
    #[error("{kind} {namespace}/{name} specified as the data source is being deleted")]
    SourceDeleting {
        /// Source kind.
        kind: &'static str,
        /// Source namespace.
        namespace: String,
        /// Source name.
        name: String,
    },
    /// The source claim is not Bound.
    #[error("the PVC {0} is not yet bound to a PV, will not attempt to use it as a clone source")]
    CloneSourceNotBound(String),
    /// The source or the new claim has no `spec.storageClassName`.
    #[error(
        "the {which} PVC {claim} has no spec.storageClassName; cloning needs one on both claims"
    )]
    CloneNoStorageClass {
        /// "source" or "requested".
        which: &'static str,
        /// Claim name.
        claim: String,
    },
    /// The new claim asks for less than the source claim.
    #[error(
        "error, new PVC request must be greater than or equal in size to the specified PVC data source, requested {requested} but source is {source_bytes}"
    )]
    CloneTooSmall {
        /// Bytes the new claim requests.
        requested: i64,
        /// Bytes the source claim requests.
        source_bytes: i64,
    },
    /// The source PV is not usable: missing, not CSI, another driver's, or bound elsewhere.
    #[error("the source PV {pv} of PVC {claim} cannot be cloned: {why}")]
    CloneSourceVolume {
        /// PV name.
        pv: String,
        /// Source claim name.
        claim: String,
        /// What is wrong.
        why: String,
    },
    /// Clone with a different volume mode.
    #[error(
        "the source PVC and destination PVCs must have the same volume mode for cloning. Source is {source_mode}. Requested is {requested}"
    )]
    CloneVolumeMode {
        /// Source claim's volume mode.
        source_mode: String,
        /// New claim's volume mode.
        requested: String,
    },
    /// The snapshot has no bound VolumeSnapshotContent.
    #[error("snapshot {0} not bound to a VolumeSnapshotContent")]
    SnapshotNotBound(String),
    /// The bound content does not exist or does not belong to the snapshot.
    #[error("VolumeSnapshotContent {content} of snapshot {snapshot} is unusable: {why}")]
    SnapshotContent {
        /// Content name.
        content: String,
        /// Snapshot namespace/name.
        snapshot: String,
        /// What is wrong.
        why: String,
    },
    /// The snapshot is not ready to use yet.
    #[error("snapshot {0} is not Ready")]
    SnapshotNotReady(String),
    /// The new claim asks for less than the snapshot's restore size.
    #[error(
        "requested volume size {requested} is less than the size {restore_size} for the source snapshot {snapshot}"
    )]
    SnapshotTooSmall {
        /// Bytes the claim requests.
        requested: i64,
        /// The snapshot's `status.restoreSize` in bytes.
        restore_size: i64,
        /// Snapshot name.
        snapshot: String,
    },
    /// Restoring into another volume mode without the content's permission.
    #[error(
        "requested volume {claim} modifies the mode of the source volume but does not have permission to do so. {ALLOW_VOLUME_MODE_CHANGE} annotation is not present on snapshotcontent {content}"
    )]
    VolumeModeConversion {
        /// Claim namespace/name.
        claim: String,
        /// Content name.
        content: String,
    },
    /// An API error while looking a source object up (not NotFound).
    #[error("cannot read {what}: {error}")]
    Lookup {
        /// What was read.
        what: String,
        /// The API error text.
        error: String,
    },
}

/// Inputs of [`decide_clone`]: the new claim, its class's provisioner, and the source objects
/// as found (`None` = does not exist).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CloneInputs<'a> {
    /// The claim being provisioned.
    pub(crate) claim: &'a PersistentVolumeClaim,
    /// `provisioner` of the claim's StorageClass (the driver name).
    pub(crate) class_provisioner: &'a str,
    /// The source claim (from the cache).
    pub(crate) source: Option<&'a PersistentVolumeClaim>,
    /// The source claim's PV (direct GET), if the claim names one and it exists.
    pub(crate) source_pv: Option<&'a PersistentVolume>,
}

/// Checks a clone source like upstream `getPVCSource` and gives the content source.
pub(crate) fn decide_clone(
    source_ref: &SourceRef,
    inputs: &CloneInputs<'_>,
) -> Result<VolumeContentSource, SourceError> {
    let full = format!("{}/{}", source_ref.namespace, source_ref.name);
    let Some(source) = inputs.source else {
        return Err(SourceError::SourceNotFound {
            kind: PVC_KIND,
            namespace: source_ref.namespace.clone(),
            name: source_ref.name.clone(),
        });
    };
    if source.metadata.deletion_timestamp.is_some() {
        return Err(SourceError::SourceDeleting {
            kind: PVC_KIND,
            namespace: source_ref.namespace.clone(),
            name: source_ref.name.clone(),
        });
    }
    if source.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err(SourceError::CloneSourceNotBound(full));
    }
    // Upstream checks `spec.storageClassName == nil` on both claims: the beta annotation does
    // not count, and the empty class (a statically bound source) passes.
    if !has_class_field(source) {
        return Err(SourceError::CloneNoStorageClass {
            which: "source",
            claim: full,
        });
    }
    if !has_class_field(inputs.claim) {
        return Err(SourceError::CloneNoStorageClass {
            which: "requested",
            claim: inputs.claim.metadata.name.clone().unwrap_or_default(),
        });
    }
    // Upstream compares the requests (spec), not the source's actual capacity.
    let requested = request_bytes(inputs.claim);
    let source_bytes = request_bytes(source);
    if requested < source_bytes {
        return Err(SourceError::CloneTooSmall {
            requested,
            source_bytes,
        });
    }
    let pv_name = source
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    let pv_error = |why: &str| SourceError::CloneSourceVolume {
        pv: pv_name.clone(),
        claim: full.clone(),
        why: why.to_owned(),
    };
    if pv_name.is_empty() {
        return Err(pv_error("the source claim names no volume"));
    }
    let pv = inputs.source_pv.ok_or_else(|| pv_error("not found"))?;
    let spec = pv.spec.as_ref();
    let csi = spec
        .and_then(|s| s.csi.as_ref())
        .ok_or_else(|| pv_error("not a CSI volume"))?;
    if csi.driver != inputs.class_provisioner {
        return Err(pv_error(&format!(
            "provisioned by driver {}, not {}",
            csi.driver, inputs.class_provisioner
        )));
    }
    let claim_ref = spec.and_then(|s| s.claim_ref.as_ref());
    let bound_to_source = claim_ref.is_some_and(|r| {
        r.uid == source.metadata.uid
            && r.namespace == source.metadata.namespace
            && r.name == source.metadata.name
    });
    if !bound_to_source {
        return Err(pv_error("bound to another claim"));
    }
    if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err(pv_error("not Bound"));
    }
    let source_mode = volume_mode(source);
    let requested_mode = volume_mode(inputs.claim);
    if source_mode != requested_mode {
        return Err(SourceError::CloneVolumeMode {
            source_mode: source_mode.to_owned(),
            requested: requested_mode.to_owned(),
        });
    }
    Ok(VolumeContentSource {
        r#type: Some(Type::Volume(VolumeSource {
            volume_id: csi.volume_handle.clone(),
        })),
    })
}

/// Inputs of [`decide_snapshot`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct SnapshotInputs<'a> {
    /// The claim being provisioned.
    pub(crate) claim: &'a PersistentVolumeClaim,
    /// `provisioner` of the claim's StorageClass.
    pub(crate) class_provisioner: &'a str,
    /// The VolumeSnapshot, if it exists.
    pub(crate) snapshot: Option<&'a SnapshotView>,
    /// Its bound VolumeSnapshotContent, if the snapshot names one and it exists.
    pub(crate) content: Option<&'a ContentView>,
    /// `--prevent-volume-mode-conversion`.
    pub(crate) prevent_volume_mode_conversion: bool,
}

/// Checks a snapshot source like upstream `getSnapshotSource` and gives the content source.
pub(crate) fn decide_snapshot(
    source_ref: &SourceRef,
    inputs: &SnapshotInputs<'_>,
) -> Result<VolumeContentSource, SourceError> {
    let full = format!("{}/{}", source_ref.namespace, source_ref.name);
    let Some(snapshot) = inputs.snapshot else {
        return Err(SourceError::SourceNotFound {
            kind: SNAPSHOT_KIND,
            namespace: source_ref.namespace.clone(),
            name: source_ref.name.clone(),
        });
    };
    // A snapshot being deleted is only used when our finalizer is already on it: an earlier
    // attempt started restoring and the driver may be creating the volume (#1449).
    if snapshot.deleting && !snapshot.finalizers.iter().any(|f| f == SNAPSHOT_FINALIZER) {
        return Err(SourceError::SourceDeleting {
            kind: SNAPSHOT_KIND,
            namespace: source_ref.namespace.clone(),
            name: source_ref.name.clone(),
        });
    }
    let content_name = snapshot
        .bound_content
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| SourceError::SnapshotNotBound(full.clone()))?;
    let content_error = |why: &str| SourceError::SnapshotContent {
        content: content_name.clone(),
        snapshot: full.clone(),
        why: why.to_owned(),
    };
    let content = inputs.content.ok_or_else(|| content_error("not found"))?;
    let points_back = content.snapshot_uid == snapshot.uid
        && content.snapshot_namespace == snapshot.namespace
        && content.snapshot_name == snapshot.name;
    if !points_back {
        return Err(content_error("it is bound to another VolumeSnapshot"));
    }
    if content.driver != inputs.class_provisioner {
        return Err(content_error(&format!(
            "it belongs to driver {}, not {}",
            content.driver, inputs.class_provisioner
        )));
    }
    if snapshot.ready_to_use != Some(true) {
        return Err(SourceError::SnapshotNotReady(full));
    }
    let handle = content
        .snapshot_handle
        .clone()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| content_error("it has no status.snapshotHandle"))?;
    let requested = request_bytes(inputs.claim);
    if let Some(restore_size) = snapshot.restore_size
        && requested < restore_size
    {
        return Err(SourceError::SnapshotTooSmall {
            requested,
            restore_size,
            snapshot: full,
        });
    }
    if inputs.prevent_volume_mode_conversion
        && let Some(source_mode) = content.source_volume_mode.as_deref()
        && let Some(claim_mode) = inputs
            .claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_mode.as_deref())
        && source_mode != claim_mode
        && !content.allow_volume_mode_change
    {
        return Err(SourceError::VolumeModeConversion {
            claim: format!(
                "{}/{}",
                inputs
                    .claim
                    .metadata
                    .namespace
                    .as_deref()
                    .unwrap_or_default(),
                inputs.claim.metadata.name.as_deref().unwrap_or_default()
            ),
            content: content_name,
        });
    }
    Ok(VolumeContentSource {
        r#type: Some(Type::Snapshot(SnapshotSource {
            snapshot_id: handle,
        })),
    })
}

/// Whether some claim still needs `source` protected: a claim that is not yet bound (phase
/// Pending or unset), not being deleted, and names it as its data source (upstream's
/// clone-protection and snapshot-sweep rule; `dataSourceRef` with a namespace counts for
/// cross-namespace sources), or a create still in flight from it (`in_flight`: the sources of
/// the claims in progress). The latter covers a claim being deleted whose create is repeated
/// from its stored plan until the driver answers: upstream's clone controller counts every
/// Pending claim, terminating or not, for the same reason.
pub(crate) fn still_needed<'a>(
    kind: SourceKind,
    namespace: &str,
    name: &str,
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    in_flight: impl IntoIterator<Item = &'a SourceRef>,
) -> bool {
    let names = |r: &SourceRef| r.kind == kind && r.namespace == namespace && r.name == name;
    in_flight.into_iter().any(names)
        || claims.into_iter().any(|claim| {
            let pending = matches!(
                claim.status.as_ref().and_then(|s| s.phase.as_deref()),
                None | Some("" | "Pending")
            );
            pending
                && claim.metadata.deletion_timestamp.is_none()
                && reference(claim, true)
                    .ok()
                    .flatten()
                    .is_some_and(|r| names(&r))
        })
}

fn has_class_field(claim: &PersistentVolumeClaim) -> bool {
    claim
        .spec
        .as_ref()
        .is_some_and(|s| s.storage_class_name.is_some())
}

fn volume_mode(claim: &PersistentVolumeClaim) -> &str {
    match claim.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) {
        Some(VOLUME_MODE_BLOCK) => VOLUME_MODE_BLOCK,
        _ => "Filesystem",
    }
}

/// `resources.requests.storage` in bytes (0 when absent or unparsable: the claim's own plan
/// reports a bad quantity before the source is looked at).
fn request_bytes(claim: &PersistentVolumeClaim) -> i64 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(RESOURCE_STORAGE))
        .and_then(|q| csi_common::quantity::parse_bytes(&q.0).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
