//! CSI migration: the in-tree volume plugins whose PersistentVolumes a CSI driver serves, and
//! the translation of such a PersistentVolume's in-tree source into the CSI source the driver
//! is called with. Rust counterpart of the parts of Kubernetes' csi-translation-lib
//! (`k8s.io/csi-translation-lib`, `translate.go` and `plugins/*.go`) that the controller
//! sidecars call: `IsMigratedCSIDriverByName`, `IsPVMigratable`, `TranslateInTreePVToCSI`
//! (without the node-affinity part, which only a PV written back to the API server needs) and
//! `RepairVolumeHandle`.
//!
//! Since Kubernetes 1.27 every one of these seven plugins is migrated and its in-tree code is
//! gone, so a PersistentVolume created long ago with, say, `awsElasticBlockStore` is attached,
//! detached and expanded by the CSI driver the plugin migrated to, through the sidecars' copy
//! of this translation. The rules, the volume handle formats and the error texts follow
//! csi-translation-lib, because the handle must name the same volume the driver created and
//! the texts end up in `status.attachError` where users search for them.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, AzureDiskVolumeSource, AzureFilePersistentVolumeSource,
    CSIPersistentVolumeSource, CinderPersistentVolumeSource, GCEPersistentDiskVolumeSource,
    PersistentVolume, PersistentVolumeSpec, PortworxVolumeSource, SecretReference,
    VsphereVirtualDiskVolumeSource,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The seven in-tree plugins csi-translation-lib migrates, each to one CSI driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    /// `kubernetes.io/aws-ebs` → `ebs.csi.aws.com`.
    AwsEbs,
    /// `kubernetes.io/gce-pd` → `pd.csi.storage.gke.io`.
    GcePd,
    /// `kubernetes.io/azure-disk` → `disk.csi.azure.com`.
    AzureDisk,
    /// `kubernetes.io/azure-file` → `file.csi.azure.com`.
    AzureFile,
    /// `kubernetes.io/cinder` → `cinder.csi.openstack.org`.
    Cinder,
    /// `kubernetes.io/vsphere-volume` → `csi.vsphere.vmware.com`.
    Vsphere,
    /// `kubernetes.io/portworx-volume` → `pxd.portworx.com`.
    Portworx,
}

impl Plugin {
    /// Every plugin.
    pub const ALL: [Plugin; 7] = [
        Plugin::GcePd,
        Plugin::AwsEbs,
        Plugin::Cinder,
        Plugin::AzureDisk,
        Plugin::AzureFile,
        Plugin::Vsphere,
        Plugin::Portworx,
    ];

    /// The CSI driver the plugin migrated to.
    pub fn csi_driver(self) -> &'static str {
        match self {
            Plugin::AwsEbs => "ebs.csi.aws.com",
            Plugin::GcePd => "pd.csi.storage.gke.io",
            Plugin::AzureDisk => "disk.csi.azure.com",
            Plugin::AzureFile => "file.csi.azure.com",
            Plugin::Cinder => "cinder.csi.openstack.org",
            Plugin::Vsphere => "csi.vsphere.vmware.com",
            Plugin::Portworx => "pxd.portworx.com",
        }
    }

    /// The in-tree plugin's name (a StorageClass `provisioner` of the in-tree days).
    pub fn in_tree_name(self) -> &'static str {
        match self {
            Plugin::AwsEbs => "kubernetes.io/aws-ebs",
            Plugin::GcePd => "kubernetes.io/gce-pd",
            Plugin::AzureDisk => "kubernetes.io/azure-disk",
            Plugin::AzureFile => "kubernetes.io/azure-file",
            Plugin::Cinder => "kubernetes.io/cinder",
            Plugin::Vsphere => "kubernetes.io/vsphere-volume",
            Plugin::Portworx => "kubernetes.io/portworx-volume",
        }
    }

    /// The plugin that migrated to CSI driver `name`.
    pub fn of_csi_driver(name: &str) -> Option<Plugin> {
        Plugin::ALL.into_iter().find(|p| p.csi_driver() == name)
    }
}

/// Whether `driver` is one of the CSI drivers in-tree volumes migrated to
/// (`IsMigratedCSIDriverByName`): the sidecars then label their CSI call metrics `migrated`.
pub fn is_migration_driver(driver: &str) -> bool {
    Plugin::of_csi_driver(driver).is_some()
}

/// A PersistentVolume's in-tree source of one of the seven plugins.
#[derive(Debug, Clone, Copy)]
pub enum InTreeSource<'a> {
    /// `spec.awsElasticBlockStore`.
    AwsEbs(&'a AWSElasticBlockStoreVolumeSource),
    /// `spec.gcePersistentDisk`.
    GcePd(&'a GCEPersistentDiskVolumeSource),
    /// `spec.azureDisk`.
    AzureDisk(&'a AzureDiskVolumeSource),
    /// `spec.azureFile`.
    AzureFile(&'a AzureFilePersistentVolumeSource),
    /// `spec.cinder`.
    Cinder(&'a CinderPersistentVolumeSource),
    /// `spec.vsphereVolume`.
    Vsphere(&'a VsphereVirtualDiskVolumeSource),
    /// `spec.portworxVolume`.
    Portworx(&'a PortworxVolumeSource),
}

impl InTreeSource<'_> {
    /// The plugin the source belongs to.
    pub fn plugin(&self) -> Plugin {
        match self {
            InTreeSource::AwsEbs(_) => Plugin::AwsEbs,
            InTreeSource::GcePd(_) => Plugin::GcePd,
            InTreeSource::AzureDisk(_) => Plugin::AzureDisk,
            InTreeSource::AzureFile(_) => Plugin::AzureFile,
            InTreeSource::Cinder(_) => Plugin::Cinder,
            InTreeSource::Vsphere(_) => Plugin::Vsphere,
            InTreeSource::Portworx(_) => Plugin::Portworx,
        }
    }
}

/// An in-tree source of one of the seven plugins, owned: what a sidecar's cache keeps of a
/// PersistentVolume's in-tree source (boxed, on the few PVs that have one) and puts back into
/// the PersistentVolume it hands out ([`InTreeVolume::restore`]).
#[derive(Debug, Clone, PartialEq)]
pub enum InTreeVolume {
    /// `spec.awsElasticBlockStore`.
    AwsEbs(AWSElasticBlockStoreVolumeSource),
    /// `spec.gcePersistentDisk`.
    GcePd(GCEPersistentDiskVolumeSource),
    /// `spec.azureDisk`.
    AzureDisk(AzureDiskVolumeSource),
    /// `spec.azureFile`.
    AzureFile(AzureFilePersistentVolumeSource),
    /// `spec.cinder`.
    Cinder(CinderPersistentVolumeSource),
    /// `spec.vsphereVolume`.
    Vsphere(VsphereVirtualDiskVolumeSource),
    /// `spec.portworxVolume`.
    Portworx(PortworxVolumeSource),
}

/// The seven in-tree sources of a PersistentVolumeSpec as a cache's wire form reads them, in
/// the spec's field order.
pub type InTreeFields = (
    Option<AWSElasticBlockStoreVolumeSource>,
    Option<GCEPersistentDiskVolumeSource>,
    Option<AzureDiskVolumeSource>,
    Option<AzureFilePersistentVolumeSource>,
    Option<CinderPersistentVolumeSource>,
    Option<VsphereVirtualDiskVolumeSource>,
    Option<PortworxVolumeSource>,
);

impl InTreeVolume {
    /// The one source set among `fields` (the API server lets a PV have one at most).
    pub fn of(fields: InTreeFields) -> Option<Self> {
        let (ebs, gce, azure_disk, azure_file, cinder, vsphere, portworx) = fields;
        None.or(gce.map(Self::GcePd))
            .or(ebs.map(Self::AwsEbs))
            .or(cinder.map(Self::Cinder))
            .or(azure_disk.map(Self::AzureDisk))
            .or(azure_file.map(Self::AzureFile))
            .or(vsphere.map(Self::Vsphere))
            .or(portworx.map(Self::Portworx))
    }

    /// Sets the source in `spec`.
    pub fn restore(&self, spec: &mut PersistentVolumeSpec) {
        match self.clone() {
            Self::AwsEbs(source) => spec.aws_elastic_block_store = Some(source),
            Self::GcePd(source) => spec.gce_persistent_disk = Some(source),
            Self::AzureDisk(source) => spec.azure_disk = Some(source),
            Self::AzureFile(source) => spec.azure_file = Some(source),
            Self::Cinder(source) => spec.cinder = Some(source),
            Self::Vsphere(source) => spec.vsphere_volume = Some(source),
            Self::Portworx(source) => spec.portworx_volume = Some(source),
        }
    }
}

/// PV label with the zone(s) of a volume, beta form (read first by the GCE PD translation).
pub const BETA_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";
/// PV label with the zone(s) of a volume, GA form.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// PV annotation naming the Azure resource group of an Azure File share.
pub const AZURE_FILE_RESOURCE_GROUP_ANNOTATION: &str = "kubernetes.io/azure-file-resource-group";
/// PV annotation kube-controller-manager sets on an in-tree PV whose plugin is migrated, naming
/// the CSI driver; its absence on such a PV means migration was turned off (a rollback).
pub const MIGRATED_TO_ANNOTATION: &str = "pv.kubernetes.io/migrated-to";

/// What a translation reads of the PersistentVolume besides its source.
#[derive(Debug, Clone, Copy, Default)]
pub struct PvFacts<'a> {
    /// `metadata.name` (part of an Azure File handle).
    pub name: &'a str,
    /// `metadata.labels` (the zone labels of a GCE PD).
    pub labels: Option<&'a BTreeMap<String, String>>,
    /// `metadata.annotations` (the resource group of an Azure File share).
    pub annotations: Option<&'a BTreeMap<String, String>>,
    /// `spec.claimRef.namespace` (the Secret namespace of an Azure File share without one).
    pub claim_namespace: Option<&'a str>,
    /// `spec.accessModes` (rewritten for a GCE PD).
    pub access_modes: Option<&'a [String]>,
}

impl<'a> PvFacts<'a> {
    /// The facts of a PV with metadata `meta`, bound to a claim in `claim_namespace`, with
    /// `access_modes`.
    pub fn new(
        meta: &'a ObjectMeta,
        claim_namespace: Option<&'a str>,
        access_modes: Option<&'a [String]>,
    ) -> Self {
        Self {
            name: meta.name.as_deref().unwrap_or_default(),
            labels: meta.labels.as_ref(),
            annotations: meta.annotations.as_ref(),
            claim_namespace,
            access_modes,
        }
    }
}

/// The CSI source a translation gives (`CSIPersistentVolumeSource`).
#[derive(Debug, Clone, PartialEq)]
pub struct CsiSource {
    /// `driver`.
    pub driver: &'static str,
    /// `volumeHandle`.
    pub volume_handle: String,
    /// `fsType`.
    pub fs_type: Option<String>,
    /// `readOnly`.
    pub read_only: bool,
    /// `volumeAttributes`, sorted by key.
    pub volume_attributes: Vec<(String, String)>,
    /// `nodeStageSecretRef` (Azure File only; no plugin sets a `controllerPublishSecretRef`).
    pub node_stage_secret_ref: Option<SecretReference>,
}

/// A translated PersistentVolume: its CSI source and, where the translation rewrites them
/// (GCE PD), its access modes.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The CSI source that replaces the in-tree one.
    pub csi: CsiSource,
    /// The PV's new access modes; `None`: unchanged.
    pub access_modes: Option<Vec<String>>,
}

/// Why an in-tree PersistentVolume cannot be translated. Final for the object as it is: the
/// same spec gives the same error, so a caller retries only with backoff, waiting for a fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslationError {
    /// An EBS `volumeID` of the `aws://` form that does not name a volume.
    #[error("failed to translate Kubernetes ID to EBS Volume ID {0}")]
    EbsVolumeId(EbsIdError),
    /// A GCE PD with zone labels of more than one region, or of no region.
    #[error("failed to get region from zones: {0}")]
    GceRegion(RegionError),
    /// An Azure disk of another kind than `Managed`.
    #[error("kind({0}) is not supported in csi migration")]
    AzureDiskKind(String),
    /// An Azure File share without a Secret namespace.
    #[error("could not find a secret namespace in PersistentVolumeSource or ClaimRef")]
    AzureFileNamespace,
}

/// Why an `aws://` volume ID is not a volume (`KubernetesVolumeIDToEBSVolumeID`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EbsIdError {
    /// Not a URL (Go's `url.Parse` refuses it; here: a bad `%` escape or a control character).
    #[error("Invalid disk name ({id}): {reason}")]
    Unparsable {
        /// The whole ID.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The path is not `vol-...`.
    #[error("Invalid format for AWS volume ({0})")]
    Format(String),
}

/// Why zones give no single region (`gceGetRegionFromZones`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// A zone that is not `<locale>-<region>-<zone>`.
    #[error("zone in unexpected format, expected: {{locale}}-{{region}}-{{zone}}, got: {0}")]
    Zone(String),
    /// Zones of several regions; printed as Go prints the set of them.
    #[error("multiple or no regions gotten from zones, got: {0}")]
    Regions(GoSet),
}

/// A set of strings printed as Go's `%v` prints a `sets.String`: `map[a:{} b:{}]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoSet(pub Vec<String>);

impl fmt::Display for GoSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("map[")?;
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{item}:{{}}")?;
        }
        f.write_str("]")
    }
}

/// Why a volume handle cannot be repaired with the node's ID (GCE PD only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepairError {
    /// Not a migration driver.
    #[error("could not find In-Tree driver name for CSI plugin {0}")]
    UnknownDriver(String),
    /// A handle of fewer than six `/`-separated parts.
    #[error("volume handle has wrong number of elements; got {0}, wanted 6 or more")]
    Handle(usize),
    /// A node ID of fewer than six `/`-separated parts.
    #[error("node handle has wrong number of elements; got {0}, wanted 6 or more")]
    Node(usize),
    /// A handle that is neither zonal nor regional.
    #[error("expected volume handle to have zones or regions regionality value, got: {0}")]
    Regionality(String),
    /// The node's zone gives no region.
    #[error("failed to get region from zone {zone}: {source}")]
    Region {
        /// The node's zone.
        zone: String,
        /// Why.
        source: RegionError,
    },
}

/// GCE's placeholder for a project, zone or region not known from the PV.
const UNSPECIFIED: &str = "UNSPECIFIED";

/// Translates an in-tree PersistentVolume source into the CSI source of the driver its plugin
/// migrated to (`TranslateInTreePVToCSI`, less the node affinity).
///
/// # Errors
/// [`TranslationError`] with csi-translation-lib's text for the sources it refuses.
pub fn translate_pv(
    source: InTreeSource<'_>,
    pv: &PvFacts<'_>,
) -> Result<Translated, TranslationError> {
    let driver = source.plugin().csi_driver();
    let csi = match source {
        InTreeSource::AwsEbs(ebs) => CsiSource::new(
            driver,
            ebs_volume_id(&ebs.volume_id).map_err(TranslationError::EbsVolumeId)?,
            (ebs.fs_type.clone(), ebs.read_only.unwrap_or(false)),
            vec![("partition", ebs.partition.unwrap_or(0).to_string())],
        ),
        InTreeSource::GcePd(pd) => {
            let partition = match pd.partition.unwrap_or(0) {
                0 => String::new(),
                n => n.to_string(),
            };
            let csi = CsiSource::new(
                driver,
                gce_volume_handle(&pd.pd_name, pv.labels)?,
                (pd.fs_type.clone(), pd.read_only.unwrap_or(false)),
                vec![("partition", partition)],
            );
            return Ok(Translated {
                csi,
                access_modes: gce_access_modes(pv.access_modes),
            });
        }
        InTreeSource::AzureDisk(disk) => azure_disk(driver, disk)?,
        InTreeSource::AzureFile(file) => azure_file(driver, file, pv)?,
        InTreeSource::Cinder(cinder) => CsiSource::new(
            driver,
            cinder.volume_id.clone(),
            (cinder.fs_type.clone(), cinder.read_only.unwrap_or(false)),
            Vec::new(),
        ),
        // The in-tree source has no read-only flag.
        InTreeSource::Vsphere(vsphere) => CsiSource::new(
            driver,
            vsphere.volume_path.clone(),
            (vsphere.fs_type.clone(), false),
            vsphere
                .storage_policy_name
                .clone()
                .filter(|name| !name.is_empty())
                .map(|name| ("storagepolicyname", name))
                .into_iter()
                .collect(),
        ),
        // csi-translation-lib does not carry the in-tree read-only flag over for Portworx.
        InTreeSource::Portworx(px) => CsiSource::new(
            driver,
            px.volume_id.clone(),
            (px.fs_type.clone(), false),
            Vec::new(),
        ),
    };
    Ok(Translated {
        csi,
        access_modes: None,
    })
}

impl CsiSource {
    fn new(
        driver: &'static str,
        volume_handle: String,
        (fs_type, read_only): (Option<String>, bool),
        attributes: Vec<(&str, String)>,
    ) -> Self {
        let mut volume_attributes: Vec<(String, String)> = attributes
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        volume_attributes.sort();
        Self {
            driver,
            volume_handle,
            fs_type,
            read_only,
            volume_attributes,
            node_stage_secret_ref: None,
        }
    }
}

/// An Azure disk: only `Managed` ones migrate; the handle is the disk's URI.
fn azure_disk(
    driver: &'static str,
    disk: &AzureDiskVolumeSource,
) -> Result<CsiSource, TranslationError> {
    if let Some(kind) = disk.kind.as_deref()
        && !kind.eq_ignore_ascii_case("Managed")
    {
        return Err(TranslationError::AzureDiskKind(kind.to_owned()));
    }
    let mut attributes = vec![("kind", "Managed".to_owned())];
    if let Some(caching) = &disk.caching_mode {
        attributes.push(("cachingmode", caching.clone()));
    }
    if let Some(fs_type) = &disk.fs_type {
        attributes.push(("fstype", fs_type.clone()));
    }
    Ok(CsiSource::new(
        driver,
        disk.disk_uri.clone(),
        (disk.fs_type.clone(), disk.read_only.unwrap_or(false)),
        attributes,
    ))
}

/// An Azure File share: `<resource group>#<account>#<share>#<PV name>#<Secret namespace>`,
/// with the account's Secret as the node-stage Secret.
fn azure_file(
    driver: &'static str,
    file: &AzureFilePersistentVolumeSource,
    pv: &PvFacts<'_>,
) -> Result<CsiSource, TranslationError> {
    let namespace = file
        .secret_namespace
        .as_deref()
        .or(pv.claim_namespace)
        .filter(|ns| !ns.is_empty())
        .ok_or(TranslationError::AzureFileNamespace)?;
    let account = azure_storage_account(&file.secret_name);
    let resource_group = pv
        .annotations
        .and_then(|a| a.get(AZURE_FILE_RESOURCE_GROUP_ANNOTATION))
        .map_or("", String::as_str);
    let handle = format!(
        "{resource_group}#{account}#{}#{}#{namespace}",
        file.share_name, pv.name
    );
    let mut source = CsiSource::new(
        driver,
        handle,
        (None, file.read_only.unwrap_or(false)),
        vec![("sharename", file.share_name.clone())],
    );
    source.node_stage_secret_ref = Some(SecretReference {
        name: Some(file.secret_name.clone()),
        namespace: Some(namespace.to_owned()),
    });
    Ok(source)
}

/// The in-tree source of `spec` csi-translation-lib would translate, if it has one
/// (`IsPVMigratable`; the API server lets a PV have one volume source at most).
pub fn in_tree_source(spec: &PersistentVolumeSpec) -> Option<InTreeSource<'_>> {
    None.or_else(|| spec.gce_persistent_disk.as_ref().map(InTreeSource::GcePd))
        .or_else(|| {
            spec.aws_elastic_block_store
                .as_ref()
                .map(InTreeSource::AwsEbs)
        })
        .or_else(|| spec.cinder.as_ref().map(InTreeSource::Cinder))
        .or_else(|| spec.azure_disk.as_ref().map(InTreeSource::AzureDisk))
        .or_else(|| spec.azure_file.as_ref().map(InTreeSource::AzureFile))
        .or_else(|| spec.vsphere_volume.as_ref().map(InTreeSource::Vsphere))
        .or_else(|| spec.portworx_volume.as_ref().map(InTreeSource::Portworx))
}

/// `pv`'s spec as csi-translation-lib's `TranslateInTreePVToCSI` gives it, less the node
/// affinity: the in-tree source replaced by the CSI one, and the access modes the translation
/// sets. `None` when the PV has no in-tree source of the seven plugins.
///
/// # Errors
/// [`TranslationError`] as [`translate_pv`].
pub fn translated_spec(
    pv: &PersistentVolume,
) -> Option<Result<PersistentVolumeSpec, TranslationError>> {
    let spec = pv.spec.as_ref()?;
    let source = in_tree_source(spec)?;
    let facts = PvFacts::new(
        &pv.metadata,
        spec.claim_ref
            .as_ref()
            .and_then(|claim| claim.namespace.as_deref()),
        spec.access_modes.as_deref(),
    );
    Some(translate_pv(source, &facts).map(|translated| {
        let csi = translated.csi;
        PersistentVolumeSpec {
            access_modes: translated
                .access_modes
                .or_else(|| spec.access_modes.clone()),
            csi: Some(CSIPersistentVolumeSource {
                driver: csi.driver.to_owned(),
                volume_handle: csi.volume_handle,
                fs_type: csi.fs_type,
                read_only: Some(csi.read_only),
                volume_attributes: Some(csi.volume_attributes.into_iter().collect()),
                node_stage_secret_ref: csi.node_stage_secret_ref,
                ..Default::default()
            }),
            aws_elastic_block_store: None,
            gce_persistent_disk: None,
            azure_disk: None,
            azure_file: None,
            cinder: None,
            vsphere_volume: None,
            portworx_volume: None,
            ..spec.clone()
        }
    }))
}

/// The access modes csi-translation-lib gives a translated GCE PD
/// (`backwardCompatibleAccessModes`, external-attacher issue #153: the PD driver takes one
/// mode): `ReadWriteMany` counts as `ReadWriteOnce`; then `ReadOnlyMany` alone stays, anything
/// else becomes `ReadWriteOnce`. A PV without access modes keeps none.
pub fn gce_access_modes(modes: Option<&[String]>) -> Option<Vec<String>> {
    const RWO: &str = "ReadWriteOnce";
    const ROX: &str = "ReadOnlyMany";
    const RWX: &str = "ReadWriteMany";
    let modes = modes?;
    let (mut rwo, mut rox) = (false, false);
    for mode in modes {
        match mode.as_str() {
            RWO | RWX => rwo = true,
            ROX => rox = true,
            _ => {}
        }
    }
    let mode = if rox && !rwo { ROX } else { RWO };
    Some(vec![mode.to_owned()])
}

/// Fixes a volume handle that a translation left incomplete with what the node's ID says
/// (`RepairVolumeHandle`): only a GCE PD handle changes, when its project is `UNSPECIFIED`;
/// every other driver's handle comes back as it is.
///
/// # Errors
/// [`RepairError`] for a driver that is not a migration driver or handles GCE cannot read.
pub fn repair_volume_handle(
    driver: &str,
    handle: &str,
    node_id: &str,
) -> Result<String, RepairError> {
    match Plugin::of_csi_driver(driver) {
        None => Err(RepairError::UnknownDriver(driver.to_owned())),
        Some(Plugin::GcePd) => repair_gce_handle(handle, node_id),
        Some(_) => Ok(handle.to_owned()),
    }
}

fn repair_gce_handle(handle: &str, node_id: &str) -> Result<String, RepairError> {
    let parts: Vec<&str> = handle.split('/').collect();
    if parts.len() < 6 {
        return Err(RepairError::Handle(parts.len()));
    }
    if parts[1] != UNSPECIFIED {
        return Ok(handle.to_owned());
    }
    let node: Vec<&str> = node_id.split('/').collect();
    if node.len() < 6 {
        return Err(RepairError::Node(node.len()));
    }
    let (project, node_zone, disk) = (node[1], node[3], parts[5]);
    match parts[2] {
        "zones" => {
            let zone = if parts[3] == UNSPECIFIED {
                node_zone
            } else {
                parts[3]
            };
            Ok(format!("projects/{project}/zones/{zone}/disks/{disk}"))
        }
        "regions" => {
            let region = if parts[3] == UNSPECIFIED {
                region_of_zones(&[node_zone]).map_err(|source| RepairError::Region {
                    zone: node_zone.to_owned(),
                    source,
                })?
            } else {
                parts[3].to_owned()
            };
            Ok(format!("projects/{project}/regions/{region}/disks/{disk}"))
        }
        other => Err(RepairError::Regionality(other.to_owned())),
    }
}

/// The EBS volume ID of an in-tree `volumeID`: as it is, unless it is an `aws://<zone>/<id>`
/// URL, whose path must then be `vol-...` (`KubernetesVolumeIDToEBSVolumeID`).
fn ebs_volume_id(id: &str) -> Result<String, EbsIdError> {
    let Some(rest) = id.strip_prefix("aws://") else {
        return Ok(id.to_owned());
    };
    let unparsable = |reason| EbsIdError::Unparsable {
        id: id.to_owned(),
        reason,
    };
    if id.chars().any(char::is_control) {
        return Err(unparsable("invalid control character in URL"));
    }
    // Go's url.Parse: the fragment and the query are cut off, the host runs to the first '/'
    // and must not hold characters a URL host cannot, the path is the rest, '%'-decoded.
    let rest = rest.split(['#', '?']).next().unwrap_or_default();
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if host.contains([' ', '"', '<', '>', '\\', '^', '`', '{', '|', '}']) {
        return Err(unparsable("invalid character in host name"));
    }
    let path = percent_decode(path).ok_or_else(|| unparsable("invalid URL escape"))?;
    let volume = path.trim_matches('/');
    if volume.starts_with("vol-") && !volume[4..].contains('/') {
        Ok(volume.to_owned())
    } else {
        Err(EbsIdError::Format(id.to_owned()))
    }
}

/// `%XX` escapes decoded; `None` for a malformed escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A GCE PD's handle: zonal for one zone label, regional for several, and with `UNSPECIFIED`
/// zone (repaired from the node's ID at attach) when the PV has no zone label.
fn gce_volume_handle(
    pd_name: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<String, TranslationError> {
    let label = |key: &str| labels.and_then(|l| l.get(key)).map_or("", String::as_str);
    let zones_label = match label(BETA_ZONE_LABEL) {
        "" => label(ZONE_LABEL),
        beta => beta,
    };
    let zones: Vec<&str> = zones_label.split("__").collect();
    Ok(match zones.as_slice() {
        [zone] if !zone.is_empty() => {
            format!("projects/{UNSPECIFIED}/zones/{zone}/disks/{pd_name}")
        }
        [_, _, ..] => {
            let region = region_of_zones(&zones).map_err(TranslationError::GceRegion)?;
            format!("projects/{UNSPECIFIED}/regions/{region}/disks/{pd_name}")
        }
        _ => format!("projects/{UNSPECIFIED}/zones/{UNSPECIFIED}/disks/{pd_name}"),
    })
}

/// The one region of GCE zones `<locale>-<region>-<zone>` (`gceGetRegionFromZones`).
fn region_of_zones(zones: &[&str]) -> Result<String, RegionError> {
    let mut regions = std::collections::BTreeSet::new();
    for zone in zones {
        let parts: Vec<&str> = zone.split('-').collect();
        let [locale, region, _] = parts.as_slice() else {
            return Err(RegionError::Zone((*zone).to_owned()));
        };
        regions.insert(format!("{locale}-{region}"));
    }
    match regions.len() {
        1 => Ok(regions.into_iter().next().unwrap_or_default()),
        _ => Err(RegionError::Regions(GoSet(regions.into_iter().collect()))),
    }
}

/// The storage account of an Azure File Secret named `azure-storage-account-<account>-secret`
/// (Go's unanchored `azure-storage-account-(.+)-secret`, leftmost match, greedy); else the
/// Secret's name itself.
fn azure_storage_account(secret_name: &str) -> &str {
    const PREFIX: &str = "azure-storage-account-";
    const SUFFIX: &str = "-secret";
    for (start, _) in secret_name.match_indices(PREFIX) {
        let from = start + PREFIX.len();
        let rest = &secret_name[from..];
        // Greedy `.+`: the last "-secret" after at least one character.
        if let Some(end) = rest.rfind(SUFFIX).filter(|end| *end > 0) {
            return &rest[..end];
        }
    }
    secret_name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn attributes(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        labels(pairs).into_iter().collect()
    }

    fn modes(list: &[&str]) -> Vec<String> {
        list.iter().map(|m| (*m).to_owned()).collect()
    }

    #[test]
    fn each_plugin_names_its_driver_and_only_those_drivers_are_migration_drivers() {
        for plugin in Plugin::ALL {
            assert_eq!(Plugin::of_csi_driver(plugin.csi_driver()), Some(plugin));
            assert!(plugin.in_tree_name().starts_with("kubernetes.io/"));
            assert!(is_migration_driver(plugin.csi_driver()));
        }
        for other in [
            "hostpath.csi.k8s.io",
            "",
            "kubernetes.io/aws-ebs",
            "EBS.CSI.AWS.COM",
        ] {
            assert!(!is_migration_driver(other), "{other}");
        }
    }

    fn ebs(volume_id: &str) -> AWSElasticBlockStoreVolumeSource {
        AWSElasticBlockStoreVolumeSource {
            volume_id: volume_id.into(),
            fs_type: Some("ext4".into()),
            read_only: Some(true),
            partition: None,
        }
    }

    #[test]
    fn an_ebs_volume_id_is_taken_as_it_is_or_from_the_path_of_its_aws_url() {
        let cases = [
            ("vol-0123", Ok("vol-0123")),
            // Not an aws:// URL: no check at all, as csi-translation-lib.
            ("anything/at all", Ok("anything/at all")),
            ("aws://us-east-1a/vol-0123", Ok("vol-0123")),
            ("aws:///vol-0123", Ok("vol-0123")),
            ("aws://us-east-1a/vol-0123?x=1", Ok("vol-0123")),
            ("aws://us-east-1a/vol%2D0123", Ok("vol-0123")),
            (
                "aws://us-east-1a/foo",
                Err(
                    "failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://us-east-1a/foo)",
                ),
            ),
            (
                "aws://vol-0123",
                Err(
                    "failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://vol-0123)",
                ),
            ),
            (
                "aws://zone/vol-1/2",
                Err(
                    "failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://zone/vol-1/2)",
                ),
            ),
            (
                "aws://zone/vol-1%zz",
                Err(
                    "failed to translate Kubernetes ID to EBS Volume ID Invalid disk name (aws://zone/vol-1%zz): invalid URL escape",
                ),
            ),
            (
                "aws://us east/vol-1",
                Err(
                    "failed to translate Kubernetes ID to EBS Volume ID Invalid disk name (aws://us east/vol-1): invalid character in host name",
                ),
            ),
        ];
        for (id, want) in cases {
            let got = translate_pv(InTreeSource::AwsEbs(&ebs(id)), &PvFacts::default());
            match want {
                Ok(handle) => {
                    let got = got.unwrap_or_else(|e| panic!("{id}: {e}"));
                    assert_eq!(got.csi.volume_handle, handle, "{id}");
                }
                Err(text) => assert_eq!(got.map_err(|e| e.to_string()), Err(text.into()), "{id}"),
            }
        }
    }

    #[test]
    fn an_ebs_source_keeps_fs_type_read_only_and_its_partition_even_zero() {
        let translated =
            translate_pv(InTreeSource::AwsEbs(&ebs("vol-1")), &PvFacts::default()).unwrap();
        assert_eq!(
            translated,
            Translated {
                csi: CsiSource {
                    driver: "ebs.csi.aws.com",
                    volume_handle: "vol-1".into(),
                    fs_type: Some("ext4".into()),
                    read_only: true,
                    volume_attributes: attributes(&[("partition", "0")]),
                    node_stage_secret_ref: None,
                },
                access_modes: None,
            }
        );
    }

    #[test]
    fn a_gce_pd_handle_takes_its_zone_or_region_from_the_pvs_zone_labels() {
        let pd = GCEPersistentDiskVolumeSource {
            pd_name: "disk-1".into(),
            ..Default::default()
        };
        let cases = [
            (
                "no labels",
                vec![],
                Ok("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-1"),
            ),
            (
                "beta label",
                vec![(BETA_ZONE_LABEL, "us-central1-a")],
                Ok("projects/UNSPECIFIED/zones/us-central1-a/disks/disk-1"),
            ),
            (
                "GA label",
                vec![(ZONE_LABEL, "europe-west1-b")],
                Ok("projects/UNSPECIFIED/zones/europe-west1-b/disks/disk-1"),
            ),
            (
                "beta first",
                vec![
                    (BETA_ZONE_LABEL, "us-central1-a"),
                    (ZONE_LABEL, "europe-west1-b"),
                ],
                Ok("projects/UNSPECIFIED/zones/us-central1-a/disks/disk-1"),
            ),
            (
                "empty beta label: the GA one",
                vec![(BETA_ZONE_LABEL, ""), (ZONE_LABEL, "europe-west1-b")],
                Ok("projects/UNSPECIFIED/zones/europe-west1-b/disks/disk-1"),
            ),
            (
                "two zones of a region: regional",
                vec![(ZONE_LABEL, "us-central1-a__us-central1-c")],
                Ok("projects/UNSPECIFIED/regions/us-central1/disks/disk-1"),
            ),
            (
                "two regions",
                vec![(ZONE_LABEL, "us-east1-b__us-central1-a")],
                Err(
                    "failed to get region from zones: multiple or no regions gotten from zones, got: map[us-central1:{} us-east1:{}]",
                ),
            ),
            (
                "a zone of another form",
                vec![(ZONE_LABEL, "us-central1-a__moon")],
                Err(
                    "failed to get region from zones: zone in unexpected format, expected: {locale}-{region}-{zone}, got: moon",
                ),
            ),
        ];
        for (name, pairs, want) in cases {
            let labels = labels(&pairs);
            let facts = PvFacts {
                labels: Some(&labels),
                ..Default::default()
            };
            let got = translate_pv(InTreeSource::GcePd(&pd), &facts)
                .map(|t| t.csi.volume_handle)
                .map_err(|e| e.to_string());
            assert_eq!(
                got,
                want.map(str::to_owned).map_err(str::to_owned),
                "{name}"
            );
        }
    }

    #[test]
    fn a_gce_pd_gets_one_access_mode_and_an_empty_partition_for_zero() {
        type Modes<'a> = Option<&'a [&'a str]>;
        let cases: [(Modes<'_>, Modes<'_>); 7] = [
            (None, None),
            (Some(&[]), Some(&["ReadWriteOnce"])),
            (Some(&["ReadWriteMany"]), Some(&["ReadWriteOnce"])),
            (Some(&["ReadOnlyMany"]), Some(&["ReadOnlyMany"])),
            (
                Some(&["ReadOnlyMany", "ReadWriteOnce"]),
                Some(&["ReadWriteOnce"]),
            ),
            (
                Some(&["ReadOnlyMany", "ReadWriteMany"]),
                Some(&["ReadWriteOnce"]),
            ),
            (Some(&["ReadWriteOncePod"]), Some(&["ReadWriteOnce"])),
        ];
        for (given, want) in cases {
            let given = given.map(modes);
            assert_eq!(
                gce_access_modes(given.as_deref()),
                want.map(modes),
                "{given:?}"
            );
        }
        for (partition, want) in [(None, ""), (Some(0), ""), (Some(3), "3")] {
            let pd = GCEPersistentDiskVolumeSource {
                pd_name: "d".into(),
                partition,
                read_only: Some(true),
                fs_type: Some("xfs".into()),
            };
            let rwx = modes(&["ReadWriteMany"]);
            let facts = PvFacts {
                access_modes: Some(&rwx),
                ..Default::default()
            };
            let translated = translate_pv(InTreeSource::GcePd(&pd), &facts).unwrap();
            assert_eq!(
                translated.csi.volume_attributes,
                attributes(&[("partition", want)])
            );
            assert_eq!(translated.csi.driver, "pd.csi.storage.gke.io");
            assert!(translated.csi.read_only);
            assert_eq!(translated.access_modes, Some(modes(&["ReadWriteOnce"])));
        }
    }

    #[test]
    fn an_azure_disk_must_be_managed_and_carries_its_caching_mode_and_fs_type() {
        let disk = |kind: Option<&str>| AzureDiskVolumeSource {
            disk_uri: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/d"
                .into(),
            disk_name: "d".into(),
            kind: kind.map(str::to_owned),
            caching_mode: Some("ReadOnly".into()),
            fs_type: Some("ext4".into()),
            read_only: None,
        };
        for kind in [None, Some("Managed"), Some("managed")] {
            let translated =
                translate_pv(InTreeSource::AzureDisk(&disk(kind)), &PvFacts::default()).unwrap();
            assert_eq!(
                translated.csi,
                CsiSource {
                    driver: "disk.csi.azure.com",
                    volume_handle: disk(None).disk_uri,
                    fs_type: Some("ext4".into()),
                    read_only: false,
                    volume_attributes: attributes(&[
                        ("cachingmode", "ReadOnly"),
                        ("fstype", "ext4"),
                        ("kind", "Managed"),
                    ]),
                    node_stage_secret_ref: None,
                },
                "{kind:?}"
            );
        }
        let dedicated = translate_pv(
            InTreeSource::AzureDisk(&disk(Some("Dedicated"))),
            &PvFacts::default(),
        );
        assert_eq!(
            dedicated.map_err(|e| e.to_string()),
            Err("kind(Dedicated) is not supported in csi migration".into())
        );
    }

    #[test]
    fn an_azure_file_handle_names_group_account_share_pv_and_secret_namespace() {
        let share = |secret: &str, namespace: Option<&str>| AzureFilePersistentVolumeSource {
            secret_name: secret.into(),
            secret_namespace: namespace.map(str::to_owned),
            share_name: "share".into(),
            read_only: Some(true),
        };
        let group = labels(&[(AZURE_FILE_RESOURCE_GROUP_ANNOTATION, "rg")]);
        let cases = [
            (
                "azure-storage-account-acct-secret",
                Some("ns"),
                None,
                Ok("rg#acct#share#pv-1#ns"),
            ),
            (
                "azure-storage-account-a-b-secret-secret",
                Some("ns"),
                None,
                Ok("rg#a-b-secret#share#pv-1#ns"),
            ),
            (
                "my-secret",
                Some("ns"),
                None,
                Ok("rg#my-secret#share#pv-1#ns"),
            ),
            (
                "azure-storage-account-acct-secret",
                None,
                Some("claims"),
                Ok("rg#acct#share#pv-1#claims"),
            ),
            (
                "azure-storage-account-acct-secret",
                Some(""),
                Some("claims"),
                Err("could not find a secret namespace in PersistentVolumeSource or ClaimRef"),
            ),
            (
                "azure-storage-account-acct-secret",
                None,
                None,
                Err("could not find a secret namespace in PersistentVolumeSource or ClaimRef"),
            ),
        ];
        for (secret, namespace, claim_namespace, want) in cases {
            let facts = PvFacts {
                name: "pv-1",
                annotations: Some(&group),
                claim_namespace,
                ..Default::default()
            };
            let source = share(secret, namespace);
            let got = translate_pv(InTreeSource::AzureFile(&source), &facts);
            match want {
                Ok(handle) => {
                    let csi = got.unwrap().csi;
                    assert_eq!(csi.volume_handle, handle, "{secret}");
                    assert_eq!(csi.volume_attributes, attributes(&[("sharename", "share")]));
                    assert!(csi.read_only);
                    let secret_ref = csi.node_stage_secret_ref.unwrap();
                    assert_eq!(secret_ref.name.as_deref(), Some(secret));
                    assert_eq!(
                        secret_ref.namespace.as_deref(),
                        namespace.or(claim_namespace)
                    );
                }
                Err(text) => assert_eq!(got.map_err(|e| e.to_string()), Err(text.into())),
            }
        }
        let source = share("s", Some("ns"));
        let no_group = PvFacts {
            name: "pv-1",
            ..Default::default()
        };
        let csi = translate_pv(InTreeSource::AzureFile(&source), &no_group)
            .unwrap()
            .csi;
        assert_eq!(csi.volume_handle, "#s#share#pv-1#ns");
    }

    #[test]
    fn cinder_vsphere_and_portworx_volumes_keep_their_ids() {
        let cinder = CinderPersistentVolumeSource {
            volume_id: "c-1".into(),
            fs_type: Some("ext4".into()),
            read_only: Some(true),
            secret_ref: None,
        };
        let vsphere = |policy: Option<&str>| VsphereVirtualDiskVolumeSource {
            volume_path: "[ds] kubevols/v.vmdk".into(),
            fs_type: Some("ext4".into()),
            storage_policy_name: policy.map(str::to_owned),
            storage_policy_id: None,
        };
        let portworx = PortworxVolumeSource {
            volume_id: "px-1".into(),
            fs_type: Some("xfs".into()),
            read_only: Some(true),
        };
        let with_policy = vsphere(Some("gold"));
        let without_policy = vsphere(Some(""));
        let cases = [
            (
                InTreeSource::Cinder(&cinder),
                "cinder.csi.openstack.org",
                "c-1",
                true,
                vec![],
            ),
            (
                InTreeSource::Vsphere(&with_policy),
                "csi.vsphere.vmware.com",
                "[ds] kubevols/v.vmdk",
                false,
                vec![("storagepolicyname", "gold")],
            ),
            (
                InTreeSource::Vsphere(&without_policy),
                "csi.vsphere.vmware.com",
                "[ds] kubevols/v.vmdk",
                false,
                vec![],
            ),
            // Portworx's read-only flag is not carried over, as csi-translation-lib.
            (
                InTreeSource::Portworx(&portworx),
                "pxd.portworx.com",
                "px-1",
                false,
                vec![],
            ),
        ];
        for (source, driver, handle, read_only, attrs) in cases {
            let csi = translate_pv(source, &PvFacts::default()).unwrap().csi;
            assert_eq!(csi.driver, driver);
            assert_eq!(csi.volume_handle, handle, "{driver}");
            assert_eq!(csi.read_only, read_only, "{driver}");
            assert_eq!(csi.volume_attributes, attributes(&attrs), "{driver}");
            assert!(csi.fs_type.is_some(), "{driver}");
        }
    }

    #[test]
    fn only_a_gce_handle_of_an_unspecified_project_is_repaired_from_the_node_id() {
        let gce = "pd.csi.storage.gke.io";
        let node = "projects/bing/zones/us-central1-c/instances/boom";
        let cases = [
            (
                gce,
                "projects/UNSPECIFIED/zones/bar/disks/baz",
                node,
                Ok("projects/bing/zones/bar/disks/baz"),
            ),
            (
                gce,
                "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/baz",
                node,
                Ok("projects/bing/zones/us-central1-c/disks/baz"),
            ),
            (
                gce,
                "projects/UNSPECIFIED/regions/UNSPECIFIED/disks/baz",
                node,
                Ok("projects/bing/regions/us-central1/disks/baz"),
            ),
            (
                gce,
                "projects/UNSPECIFIED/regions/europe-west1/disks/baz",
                node,
                Ok("projects/bing/regions/europe-west1/disks/baz"),
            ),
            (
                gce,
                "projects/p/zones/UNSPECIFIED/disks/baz",
                node,
                Ok("projects/p/zones/UNSPECIFIED/disks/baz"),
            ),
            (
                gce,
                "projects/UNSPECIFIED/zones/z",
                node,
                Err("volume handle has wrong number of elements; got 4, wanted 6 or more"),
            ),
            (
                gce,
                "projects/UNSPECIFIED/zones/z/disks/d",
                "boom",
                Err("node handle has wrong number of elements; got 1, wanted 6 or more"),
            ),
            (
                gce,
                "projects/UNSPECIFIED/planets/z/disks/d",
                node,
                Err(
                    "expected volume handle to have zones or regions regionality value, got: planets",
                ),
            ),
            (
                gce,
                "projects/UNSPECIFIED/regions/UNSPECIFIED/disks/d",
                "projects/p/zones/moon/instances/i",
                Err(
                    "failed to get region from zone moon: zone in unexpected format, expected: {locale}-{region}-{zone}, got: moon",
                ),
            ),
            ("ebs.csi.aws.com", "vol-1", "i-1", Ok("vol-1")),
            (
                "hostpath.csi.k8s.io",
                "v",
                "n",
                Err("could not find In-Tree driver name for CSI plugin hostpath.csi.k8s.io"),
            ),
        ];
        for (driver, handle, node_id, want) in cases {
            assert_eq!(
                repair_volume_handle(driver, handle, node_id).map_err(|e| e.to_string()),
                want.map(str::to_owned).map_err(str::to_owned),
                "{driver} {handle} {node_id}"
            );
        }
    }

    #[test]
    fn a_whole_pv_is_translated_in_place_of_its_in_tree_source() {
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv-1", "labels": {ZONE_LABEL: "us-central1-a"}},
            "spec": {
                "gcePersistentDisk": {"pdName": "disk", "fsType": "ext4"},
                "accessModes": ["ReadWriteMany"],
                "capacity": {"storage": "1Gi"},
                "mountOptions": ["noatime"]
            }
        }))
        .unwrap();
        let spec = translated_spec(&pv).unwrap().unwrap();
        assert!(spec.gce_persistent_disk.is_none());
        assert_eq!(spec.access_modes, Some(modes(&["ReadWriteOnce"])));
        assert_eq!(
            spec.mount_options,
            Some(modes(&["noatime"])),
            "the rest stays"
        );
        let csi = spec.csi.unwrap();
        assert_eq!(csi.driver, "pd.csi.storage.gke.io");
        assert_eq!(
            csi.volume_handle,
            "projects/UNSPECIFIED/zones/us-central1-a/disks/disk"
        );
        assert_eq!(csi.fs_type.as_deref(), Some("ext4"));

        let csi_pv = PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(translated_spec(&csi_pv).is_none(), "nothing to translate");
        assert!(translated_spec(&PersistentVolume::default()).is_none());
    }
}
