//! The CreateVolume request for a claim, and everything about it the PersistentVolume needs
//! later (spec §4.3, upstream `prepareProvision`).
//!
//! [`plan_provision`] runs upstream's checks in upstream's order, so a claim with several
//! problems reports the same one first. It reads nothing but its arguments: the controller
//! passes the claim, its class and a snapshot of Nodes/CSINodes, then fetches the provisioner
//! secret named in the plan and fills `request.secrets` itself.
//!
//! A clone or snapshot source is only classified here ([`ProvisionPlan::source`]); the controller
//! looks the source objects up and fills `volume_content_source` (`crate::source`). Other data
//! source kinds belong to volume populators and are left alone, as upstream does.

use std::collections::{BTreeMap, HashMap};

use csi_common::access_modes;
use csi_common::capabilities::{ControllerCapabilities, PluginCapabilities};
use csi_common::quantity;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec};
use k8s_openapi::api::storage::v1::StorageClass;
use proto::csi::v1::volume_capability::access_mode::Mode;
use proto::csi::v1::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use proto::csi::v1::{CapacityRange, CreateVolumeRequest, TopologyRequirement, VolumeCapability};

use crate::naming::volume_name;
use crate::params;
use crate::plan_error::{MissingCapability, PlanError};
use crate::secrets::{self, ClaimTokens, SecretKind};
use crate::source::{self, SourceKind, SourceRef};
use crate::topology::{self, RequirementInputs, TopologyError};

pub(crate) use crate::secrets::PvSecretRefs;
pub(crate) use crate::topology::TopologyView;
use csi_common::secrets::SecretRef;

/// `spec.volumeMode` of raw block claims.
pub(crate) const VOLUME_MODE_BLOCK: &str = "Block";
/// The resource name of a claim's size request.
pub(crate) const RESOURCE_STORAGE: &str = "storage";

/// The provisioner's configuration that shapes requests and PVs (flags plus what the driver
/// reported at start-up).
#[allow(
    clippy::struct_excessive_bools,
    reason = "one field per upstream boolean flag, named like the flag"
)]
#[derive(Debug, Clone)]
pub(crate) struct ProvisionOptions {
    /// The driver's name (GetPluginInfo).
    pub(crate) driver_name: String,
    /// `--volume-name-prefix`.
    pub(crate) volume_name_prefix: String,
    /// `--volume-name-uuid-length` (-1 = whole UID).
    pub(crate) volume_name_uuid_length: i64,
    /// `--default-fstype`.
    pub(crate) default_fstype: String,
    /// `--extra-create-metadata`.
    pub(crate) extra_create_metadata: bool,
    /// `--strict-topology`.
    pub(crate) strict_topology: bool,
    /// `--immediate-topology`.
    pub(crate) immediate_topology: bool,
    /// `--controller-publish-readonly`.
    pub(crate) controller_publish_readonly: bool,
    /// `<unix-millis>-<rand 0..9999>-<driver>`, generated once per process, written into every
    /// PV's volume attributes.
    pub(crate) provisioner_identity: String,
    /// GetPluginCapabilities.
    pub(crate) plugin_caps: PluginCapabilities,
    /// ControllerGetCapabilities.
    pub(crate) controller_caps: ControllerCapabilities,
    /// Data source flags and gate.
    pub(crate) data_sources: DataSourceOptions,
}

/// Flags and gate about data sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataSourceOptions {
    /// The `CrossNamespaceVolumeDataSource` gate.
    pub(crate) cross_namespace: bool,
    /// `--prevent-volume-mode-conversion`.
    pub(crate) prevent_volume_mode_conversion: bool,
}

impl Default for DataSourceOptions {
    /// Upstream's defaults: gate off, conversion prevented.
    fn default() -> Self {
        Self {
            cross_namespace: false,
            prevent_volume_mode_conversion: true,
        }
    }
}

impl ProvisionOptions {
    /// Whether the driver takes accessibility requirements and reports accessible topology
    /// (VOLUME_ACCESSIBILITY_CONSTRAINTS; the Topology feature gate is GA and always on).
    pub(crate) fn supports_topology(&self) -> bool {
        self.plugin_caps.has_volume_accessibility_constraints()
    }
}

/// One claim to plan for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProvisionInputs<'a> {
    /// The claim (possibly a stored copy of a claim deleted meanwhile).
    pub(crate) pvc: &'a PersistentVolumeClaim,
    /// Its StorageClass.
    pub(crate) class: &'a StorageClass,
    /// From [`crate::decide::ClaimStep::Provision`].
    pub(crate) selected_node: Option<&'a str>,
    /// Nodes and CSINodes. Only read when the driver supports topology and no requirement is
    /// cached.
    pub(crate) topology: TopologyView<'a>,
    /// The requirement an earlier attempt for this claim UID sent (the controller keeps it from
    /// [`ProvisionPlan::topology`] until the claim succeeds, fails finally or is rescheduled),
    /// so that a retried CreateVolume is identical even if nodes changed meanwhile (upstream
    /// #1413/#1465).
    pub(crate) cached_requirement: Option<&'a TopologyRequirement>,
}

/// A planned CreateVolume and what the PV will need from it.
#[derive(Debug, Clone)]
pub(crate) struct ProvisionPlan {
    /// PV name = CSI volume name.
    pub(crate) pv_name: String,
    /// The request, with `secrets` still empty: the controller fetches
    /// [`ProvisionPlan::provisioner_secret`] and fills them.
    pub(crate) request: CreateVolumeRequest,
    /// The secret whose data goes into CreateVolume/DeleteVolume `secrets`, also recorded in the
    /// PV's deletion-secret annotations.
    pub(crate) provisioner_secret: Option<SecretRef>,
    /// The references written into the PV.
    pub(crate) pv_secrets: PvSecretRefs,
    /// `request.accessibility_requirements` again, for the controller's per-claim cache.
    pub(crate) topology: Option<TopologyRequirement>,
    /// `request.capacity_range.required_bytes`.
    pub(crate) requested_bytes: i64,
    /// The resolved fsType ("" = none).
    pub(crate) fs_type: String,
    /// `spec.volumeMode: Block`.
    pub(crate) block: bool,
    /// Deprecation warnings for the controller to log (upstream logs them on every attempt).
    pub(crate) warnings: Vec<String>,
    /// The clone or snapshot source; `request.volume_content_source` is still empty then.
    pub(crate) source: Option<SourceRef>,
}

/// Plans the CreateVolume call for a claim that [`crate::decide::decide_claim`] said to
/// provision.
pub(crate) fn plan_provision(
    opts: &ProvisionOptions,
    inputs: &ProvisionInputs<'_>,
) -> Result<ProvisionPlan, PlanError> {
    let pvc = inputs.pvc;
    let class = inputs.class;
    let default_spec = PersistentVolumeClaimSpec::default();
    let spec = pvc.spec.as_ref().unwrap_or(&default_spec);

    let source = check_claim_features(opts, pvc, spec)?;

    let pv_name = volume_name(
        &opts.volume_name_prefix,
        pvc.metadata.uid.as_deref().unwrap_or_default(),
        opts.volume_name_uuid_length,
    )?;
    let empty = BTreeMap::new();
    let class_params = class.parameters.as_ref().unwrap_or(&empty);
    let fs_type = params::fs_type(class_params, &opts.default_fstype).map_err(PlanError::FsType)?;
    let requested_bytes = requested_bytes(pvc)?;
    let block = spec.volume_mode.as_deref() == Some(VOLUME_MODE_BLOCK);
    let volume_capabilities = spec
        .access_modes
        .iter()
        .flatten()
        .map(|mode| {
            let mode = access_modes::single_to_csi(mode, &opts.controller_caps)
                .map_err(PlanError::AccessMode)?;
            Ok(volume_capability(
                mode,
                block,
                &fs_type,
                class.mount_options.as_deref(),
            ))
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    let requirement = requirement(opts, inputs)?;

    let claim = ClaimTokens::from_pvc(pvc);
    let provisioner_secret =
        secrets::secret_ref(SecretKind::Provisioner, class_params, &pv_name, &claim)
            .map_err(PlanError::Secret)?;
    let pv_secrets =
        secrets::pv_secret_refs(class_params, &pv_name, &claim).map_err(PlanError::Secret)?;

    let mut parameters: HashMap<String, String> =
        params::strip_reserved(class_params).map_err(PlanError::StripParameters)?;
    if opts.extra_create_metadata {
        params::add_extra_create_metadata(&mut parameters, claim.name, claim.namespace, &pv_name);
    }

    let request = CreateVolumeRequest {
        name: pv_name.clone(),
        capacity_range: Some(CapacityRange {
            required_bytes: requested_bytes,
            limit_bytes: 0,
        }),
        volume_capabilities,
        parameters,
        secrets: HashMap::new(),
        volume_content_source: None,
        accessibility_requirements: requirement.clone(),
        mutable_parameters: HashMap::new(),
    };
    Ok(ProvisionPlan {
        pv_name,
        request,
        provisioner_secret,
        pv_secrets,
        topology: requirement,
        requested_bytes,
        fs_type,
        block,
        warnings: params::deprecated_key_warnings(class_params),
        source,
    })
}

/// `resources.requests.storage` in bytes, rounded up; 0 when the claim asks for no size.
pub(crate) fn requested_bytes(pvc: &PersistentVolumeClaim) -> Result<i64, PlanError> {
    let request = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(RESOURCE_STORAGE));
    match request {
        None => Ok(0),
        Some(q) => quantity::parse_bytes(&q.0).map_err(|source| PlanError::StorageRequest {
            value: q.0.clone(),
            source,
        }),
    }
}

/// Data source, VolumeAttributesClass, capability and selector checks, in upstream's order.
fn check_claim_features(
    opts: &ProvisionOptions,
    pvc: &PersistentVolumeClaim,
    spec: &PersistentVolumeClaimSpec,
) -> Result<Option<SourceRef>, PlanError> {
    let source = source::reference(pvc, opts.data_sources.cross_namespace)?;
    let vac = spec
        .volume_attributes_class_name
        .as_deref()
        .is_some_and(|name| !name.is_empty());
    check_capabilities(opts, source.as_ref().map(|s| s.kind), vac)?;
    if spec.selector.is_some() {
        return Err(PlanError::SelectorNotSupported);
    }
    Ok(source)
}

/// The accessibility requirement: none without topology support, the cached one on a retry,
/// else a fresh one.
fn requirement(
    opts: &ProvisionOptions,
    inputs: &ProvisionInputs<'_>,
) -> Result<Option<TopologyRequirement>, PlanError> {
    if !opts.supports_topology() {
        return Ok(None);
    }
    if let Some(cached) = inputs.cached_requirement {
        return Ok(Some(cached.clone()));
    }
    topology::accessibility_requirements(&RequirementInputs {
        driver_name: &opts.driver_name,
        pvc_name: inputs.pvc.metadata.name.as_deref().unwrap_or_default(),
        allowed_topologies: inputs
            .class
            .allowed_topologies
            .as_deref()
            .unwrap_or_default(),
        selected_node: inputs.selected_node,
        strict_topology: opts.strict_topology,
        immediate_topology: opts.immediate_topology,
        view: inputs.topology,
    })
    .map_err(|err| match err {
        // A Kubernetes NotFound upstream: ask the scheduler for another node.
        TopologyError::SelectedCsiNodeNotFound { node } => {
            PlanError::SelectedCsiNodeNotFound { node }
        }
        other => PlanError::Topology(other),
    })
}

/// Upstream `checkDriverCapabilities`.
fn check_capabilities(
    opts: &ProvisionOptions,
    source: Option<SourceKind>,
    vac: bool,
) -> Result<(), PlanError> {
    let controller = &opts.controller_caps;
    let missing = if !opts.plugin_caps.has_controller_service() {
        Some(MissingCapability::ControllerService)
    } else if !controller.has_create_delete_volume() {
        Some(MissingCapability::CreateDeleteVolume)
    } else if source == Some(SourceKind::Snapshot) && !controller.has_create_delete_snapshot() {
        Some(MissingCapability::CreateDeleteSnapshot)
    } else if source == Some(SourceKind::Clone) && !controller.has_clone_volume() {
        Some(MissingCapability::CloneVolume)
    } else if vac && !controller.has_modify_volume() {
        Some(MissingCapability::ModifyVolume)
    } else {
        None
    };
    missing.map_or(Ok(()), |m| Err(PlanError::MissingCapability(m)))
}

/// One VolumeCapability: Block, or Mount with the fsType and the class's mount options.
fn volume_capability(
    mode: Mode,
    block: bool,
    fs_type: &str,
    mount_options: Option<&[String]>,
) -> VolumeCapability {
    let access_type = if block {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume {
            fs_type: fs_type.to_owned(),
            mount_flags: mount_options.unwrap_or_default().to_vec(),
            volume_mount_group: String::new(),
        })
    };
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(access_type),
    }
}

#[cfg(test)]
pub(crate) mod tests;
