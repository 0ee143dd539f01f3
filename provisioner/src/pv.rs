//! The PersistentVolume written for a created volume (spec §2.2, §4.5): what external-provisioner's
//! `Provision` fills in plus what the lib adds before saving (claimRef, finalizer,
//! `pv.kubernetes.io/provisioned-by`, storage class name).
//!
//! The shape matches a PV the Go provisioner wrote (fixture `pv-0-created-by-provisioner.json`),
//! so tools that read PVs see no difference.

use std::collections::BTreeMap;

use csi_common::secrets::{
    ANN_CONTROLLER_MODIFY_SECRET_NAME, ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE,
};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeSpec,
    SecretReference,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proto::csi::v1::volume_capability::access_mode::Mode;
use proto::csi::v1::{CreateVolumeResponse, Volume};
use thiserror::Error;

use crate::annotations::{
    ANN_DELETION_SECRET_NAME, ANN_DELETION_SECRET_NAMESPACE, ANN_PROVISIONED_BY,
    PROVISIONER_ID_KEY, PV_FINALIZER, claim_class_name,
};
use crate::plan_error::ProvisioningState;
use crate::request::{ProvisionInputs, ProvisionOptions, ProvisionPlan, RESOURCE_STORAGE};
use crate::topology::node_affinity;

/// Why a successful CreateVolume cannot become a PV. Every case is
/// [`ProvisioningState::InBackground`]: CreateVolume is repeated (with the same name, so the
/// driver returns the same volume or a corrected one).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum BuildPvError {
    /// The response has no `volume` (upstream would crash on it).
    #[error("CreateVolume response has no volume")]
    NoVolume,
    /// The volume has an empty `volume_id`: nothing to put in the PV or to delete.
    #[error("CreateVolume response has a volume with an empty volume_id")]
    EmptyVolumeId,
    /// The driver made a smaller volume than asked: delete it (with the provisioner secrets) and
    /// retry.
    #[error("created volume capacity {created} less than requested capacity {requested}")]
    CapacityTooSmall {
        /// The volume to delete.
        volume_id: String,
        /// `capacity_bytes` returned.
        created: i64,
        /// `required_bytes` sent.
        requested: i64,
    },
    /// A segment key of `accessible_topology` is not a label key, so kube-apiserver would refuse
    /// the PV's node affinity (422) and the PV could never be saved: delete and retry.
    #[error(
        "CreateVolume returned an invalid accessible topology: key {key:?} is not a qualified name ([prefix/]name)"
    )]
    InvalidTopologyKey {
        /// The volume to delete.
        volume_id: String,
        /// The first offending key.
        key: String,
    },
    /// The PV would be larger than kube-apiserver accepts in one request (its
    /// `MaxRequestBodyBytes`, 3 MiB of JSON; a larger POST answers 413 RequestEntityTooLarge),
    /// e.g. from tens of thousands of distinct accessible topologies or a huge volume context,
    /// so it could never be saved: delete and retry.
    #[error(
        "CreateVolume returned a volume whose PersistentVolume would be {bytes} bytes, above kube-apiserver's request limit of {limit} bytes (accessible topologies: {topologies}, volume context entries: {context})",
        limit = MAX_REQUEST_BODY_BYTES
    )]
    TooLarge {
        /// The volume to delete.
        volume_id: String,
        /// Size of the PV as JSON, what the POST would send.
        bytes: usize,
        /// Entries of `accessible_topology` in the answer.
        topologies: usize,
        /// Entries of `volume_context` in the answer.
        context: usize,
    },
    /// The claim has a data source but the driver did not say it used one: delete and retry.
    #[error("volume content source missing")]
    ContentSourceMissing {
        /// The volume to delete.
        volume_id: String,
    },
}

impl BuildPvError {
    /// Always [`ProvisioningState::InBackground`] (see the type's documentation).
    #[expect(
        clippy::unused_self,
        reason = "asked like every other failure's state(); this type has one answer"
    )]
    pub(crate) fn state(&self) -> ProvisioningState {
        ProvisioningState::InBackground
    }

    /// The volume the controller must DeleteVolume before retrying, if any.
    pub(crate) fn cleanup_volume_id(&self) -> Option<&str> {
        match self {
            Self::CapacityTooSmall { volume_id, .. }
            | Self::ContentSourceMissing { volume_id }
            | Self::InvalidTopologyKey { volume_id, .. }
            | Self::TooLarge { volume_id, .. } => Some(volume_id),
            Self::NoVolume | Self::EmptyVolumeId => None,
        }
    }

    /// Upstream's event text when that DeleteVolume failed too: the volume is orphaned.
    pub(crate) fn with_cleanup_failure(&self, pv_name: &str, cleanup_error: &str) -> String {
        // Upstream spells "Cleanup" in capitals for the capacity case only.
        let cleanup = match self {
            Self::ContentSourceMissing { .. } => "cleanup",
            _ => "Cleanup",
        };
        format!("{self}. {cleanup} of volume {pv_name} failed, volume is orphaned: {cleanup_error}")
    }
}

/// kube-apiserver's limit on the body of a write request (`MaxRequestBodyBytes` of the generic
/// API server, 3 MiB: twice etcd's default 1.5 MiB request limit, as JSON is larger than the
/// protobuf stored); a larger body answers 413 RequestEntityTooLarge.
const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Counts the bytes written to it.
#[derive(Debug, Default)]
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Beyond upstream, which POSTs such a PV and, refused with 413, retries the save forever with
/// the volume stranded: a PV larger than a request may be can never be saved. Measured as the
/// JSON the POST sends (kube encodes the PV with serde_json), without building it.
fn check_size(pv: &PersistentVolume, volume: &Volume) -> Result<(), BuildPvError> {
    let mut count = ByteCount::default();
    // Encoding these types cannot fail (string keys only) and the writer never does.
    serde_json::to_writer(&mut count, pv).ok();
    if count.0 > MAX_REQUEST_BODY_BYTES {
        return Err(BuildPvError::TooLarge {
            volume_id: volume.volume_id.clone(),
            bytes: count.0,
            topologies: volume.accessible_topology.len(),
            context: volume.volume_context.len(),
        });
    }
    Ok(())
}

/// Beyond upstream, which saves such a PV and, refused, retries the save forever with the
/// volume stranded: a key kube-apiserver refuses in a node selector makes the volume unusable.
fn check_topology_keys(volume: &Volume) -> Result<(), BuildPvError> {
    match volume
        .accessible_topology
        .iter()
        .flat_map(|t| t.segments.keys())
        .find(|k| !csi_common::flags::is_qualified_name(k))
    {
        Some(key) => Err(BuildPvError::InvalidTopologyKey {
            volume_id: volume.volume_id.clone(),
            key: key.clone(),
        }),
        None => Ok(()),
    }
}

/// Builds the PersistentVolume for a successful CreateVolume.
pub(crate) fn build_pv(
    opts: &ProvisionOptions,
    inputs: &ProvisionInputs<'_>,
    plan: &ProvisionPlan,
    response: &CreateVolumeResponse,
) -> Result<PersistentVolume, BuildPvError> {
    let volume = response.volume.as_ref().ok_or(BuildPvError::NoVolume)?;
    if volume.volume_id.is_empty() {
        return Err(BuildPvError::EmptyVolumeId);
    }
    let pvc = inputs.pvc;
    let class = inputs.class;
    let claim_spec = pvc.spec.as_ref();

    // CSI lets a driver report 0 ("unknown", e.g. NFS); Kubernetes needs a size, so use the
    // requested one.
    let capacity = if volume.capacity_bytes == 0 {
        plan.requested_bytes
    } else if volume.capacity_bytes < plan.requested_bytes {
        return Err(BuildPvError::CapacityTooSmall {
            volume_id: volume.volume_id.clone(),
            created: volume.capacity_bytes,
            requested: plan.requested_bytes,
        });
    } else {
        volume.capacity_bytes
    };
    if opts.supports_topology() {
        check_topology_keys(volume)?;
    }
    // Upstream checks `spec.dataSource` (and a cross-namespace `dataSourceRef`); the request
    // carries a content source exactly in those cases.
    if plan.request.volume_content_source.is_some() && volume.content_source.is_none() {
        return Err(BuildPvError::ContentSourceMissing {
            volume_id: volume.volume_id.clone(),
        });
    }

    // A lone ReadOnlyMany capability may be published read-only (--controller-publish-readonly).
    let capabilities = &plan.request.volume_capabilities;
    let read_only = opts.controller_publish_readonly
        && capabilities.len() == 1
        && capabilities[0].access_mode.map(|m| m.mode) == Some(Mode::MultiNodeReaderOnly as i32);

    let mut attributes = BTreeMap::from([(
        PROVISIONER_ID_KEY.to_owned(),
        opts.provisioner_identity.clone(),
    )]);
    // The driver's volume context wins over our identity key on collision, as upstream.
    attributes.extend(
        volume
            .volume_context
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );

    let secrets = &plan.pv_secrets;
    let csi = CSIPersistentVolumeSource {
        driver: opts.driver_name.clone(),
        volume_handle: volume.volume_id.clone(),
        read_only: read_only.then_some(true),
        fs_type: (!plan.block && !plan.fs_type.is_empty()).then(|| plan.fs_type.clone()),
        volume_attributes: Some(attributes),
        controller_publish_secret_ref: secrets
            .controller_publish
            .as_ref()
            .map(SecretReference::from),
        node_stage_secret_ref: secrets.node_stage.as_ref().map(SecretReference::from),
        node_publish_secret_ref: secrets.node_publish.as_ref().map(SecretReference::from),
        controller_expand_secret_ref: secrets
            .controller_expand
            .as_ref()
            .map(SecretReference::from),
        node_expand_secret_ref: secrets.node_expand.as_ref().map(SecretReference::from),
    };
    let annotations = annotations(class, plan);

    let class_name = claim_class_name(pvc);
    let spec = PersistentVolumeSpec {
        access_modes: claim_spec.and_then(|s| s.access_modes.clone()),
        capacity: Some(BTreeMap::from([(
            RESOURCE_STORAGE.to_owned(),
            Quantity(csi_common::quantity::format_binary_si(capacity)),
        )])),
        claim_ref: Some(claim_ref(pvc)),
        csi: Some(csi),
        mount_options: class.mount_options.clone(),
        node_affinity: if opts.supports_topology() {
            node_affinity(&volume.accessible_topology)
        } else {
            None
        },
        persistent_volume_reclaim_policy: class.reclaim_policy.clone(),
        storage_class_name: (!class_name.is_empty()).then_some(class_name),
        volume_mode: claim_spec.and_then(|s| s.volume_mode.clone()),
        // The claim's class (the controller plans without it when the gate is off); an empty
        // name is no class, which the API server would refuse on a PV.
        volume_attributes_class_name: claim_spec
            .and_then(|s| s.volume_attributes_class_name.clone())
            .filter(|n| !n.is_empty()),
        ..PersistentVolumeSpec::default()
    };
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(plan.pv_name.clone()),
            annotations: Some(annotations),
            finalizers: Some(vec![PV_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    };
    check_size(&pv, volume)?;
    Ok(pv)
}

/// The PV's annotations: who provisioned it and which secrets later calls need.
fn annotations(class: &StorageClass, plan: &ProvisionPlan) -> BTreeMap<String, String> {
    // Always both deletion-secret annotations, empty when there is no provisioner secret: their
    // presence tells the delete path not to fall back to the (possibly changed) class.
    let deletion = plan.provisioner_secret.as_ref();
    let mut annotations = BTreeMap::from([
        (ANN_PROVISIONED_BY.to_owned(), class.provisioner.clone()),
        (
            ANN_DELETION_SECRET_NAME.to_owned(),
            deletion.map(|s| s.name.clone()).unwrap_or_default(),
        ),
        (
            ANN_DELETION_SECRET_NAMESPACE.to_owned(),
            deletion.map(|s| s.namespace.clone()).unwrap_or_default(),
        ),
    ]);
    // Only when configured (there is no PV field for it): external-resizer reads these.
    if let Some(modify) = &plan.pv_secrets.controller_modify {
        annotations.insert(
            ANN_CONTROLLER_MODIFY_SECRET_NAME.to_owned(),
            modify.name.clone(),
        );
        annotations.insert(
            ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE.to_owned(),
            modify.namespace.clone(),
        );
    }
    annotations
}

/// The claimRef that pre-binds the PV to its claim (client-go `ref.GetReference`).
fn claim_ref(pvc: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("PersistentVolumeClaim".to_owned()),
        name: pvc.metadata.name.clone(),
        namespace: pvc.metadata.namespace.clone(),
        uid: pvc.metadata.uid.clone(),
        resource_version: pvc.metadata.resource_version.clone(),
        field_path: None,
    }
}

#[cfg(test)]
mod tests;
