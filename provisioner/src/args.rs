//! Command-line flags of csi-provisioner (names, types and defaults as upstream v6.3, spec
//! provisioner.md §1) and their validation into a [`Config`].
//!
//! Every upstream flag parses and every feature a flag turns on is implemented (the in-tree
//! translation of spec §6.5 has no flag of its own).

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;
use csi_common::connection::CsiAddress;
use csi_common::flags::{self, CommonArgs, FeatureGates, MasterArgs};
use csi_common::sidecar::{CommonSettings, SettingsError};

pub use csi_common::sidecar::{HttpSettings, KubeSettings, LeaderElectionSettings};

/// Default of `--volume-name-prefix`.
pub const DEFAULT_VOLUME_NAME_PREFIX: &str = "pvc";

/// Feature gates that mean something to the provisioner; any other name is accepted with a
/// warning (upstream also accepts ~35 generic apiserver gates that change nothing here).
pub const KNOWN_FEATURE_GATES: [&str; 6] = [
    "Topology",
    "VolumeAttributesClass",
    "CrossNamespaceVolumeDataSource",
    "ReleaseLeaderElectionOnExit",
    "AllAlpha",
    "AllBeta",
];

/// csi-provisioner's flags (spec §1a plus the shared §1b/§1c groups).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "csi-provisioner",
    about = "Creates and deletes CSI volumes for PersistentVolumeClaims",
    disable_version_flag = true
)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one field per upstream bool flag; the names are the contract"
)]
pub struct Args {
    /// `--version`, `--csi-address`, kube client, leader election, HTTP and logging flags.
    #[command(flatten)]
    pub common: CommonArgs,

    /// `--master`.
    #[command(flatten)]
    pub master: MasterArgs,

    /// Prefix to apply to the name of a created volume.
    #[arg(long, value_name = "string", default_value = DEFAULT_VOLUME_NAME_PREFIX)]
    pub volume_name_prefix: String,

    /// Truncates generated UUID of a created volume to this length. Defaults behavior is to not truncate.
    #[arg(long, value_name = "int", default_value = "-1", allow_negative_numbers = true,
          value_parser = flags::go_int)]
    pub volume_name_uuid_length: i32,

    /// Initial retry interval of failed provisioning or deletion. It doubles with each failure, up to retry-interval-max.
    #[arg(long, value_name = "duration", default_value = "1s", value_parser = flags::go_duration)]
    pub retry_interval_start: Duration,

    /// Maximum retry interval of failed provisioning or deletion.
    #[arg(long, value_name = "duration", default_value = "5m", value_parser = flags::go_duration)]
    pub retry_interval_max: Duration,

    /// Number of provisioner worker threads, in other words nr. of simultaneous CSI calls.
    #[arg(long, value_name = "uint", default_value = "100", value_parser = flags::go_uint)]
    pub worker_threads: u32,

    /// Number of simultaneously running threads, handling cloning finalizer removal.
    #[arg(long, value_name = "uint", default_value = "1", value_parser = flags::go_uint)]
    pub cloning_protection_threads: u32,

    /// Duration between snapshot orphan sweeps; 0 disables the sweep.
    #[arg(long, value_name = "duration", default_value = "5m", value_parser = flags::go_duration)]
    pub snapshot_orphan_sweep_interval: Duration,

    /// Number of simultaneously running threads, handling CSIStorageCapacity objects.
    #[arg(long, value_name = "uint", default_value = "1", value_parser = flags::go_uint)]
    pub capacity_threads: u32,

    /// Timeout for waiting for volume operation (creation, deletion, capacity queries).
    #[arg(long, value_name = "duration", default_value = "10s", value_parser = flags::go_duration)]
    pub timeout: Duration,

    /// Late binding: pass only selected node topology to CreateVolume Request, unlike default behavior of passing aggregated cluster topologies that match with topology keys of the selected node.
    #[arg(long)]
    pub strict_topology: bool,

    /// Immediate binding: pass aggregated cluster topologies for all nodes where the CSI driver is available (enabled, the default) or no topology requirements (if disabled).
    #[arg(long, default_value = "true")]
    pub immediate_topology: bool,

    /// If set, add pv/pvc metadata to plugin create requests as parameters.
    #[arg(long)]
    pub extra_create_metadata: bool,

    /// Enable pprof profiling on the TCP network address specified by --http-endpoint. The HTTP path is `/debug/pprof/`.
    #[arg(long)]
    pub enable_pprof: bool,

    /// The default filesystem type of the volume to provision when fstype is unspecified in the StorageClass. If the default is not set and fstype is unset in the StorageClass, then no fstype will be set.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub default_fstype: String,

    /// QPS to use for storage capacity updates while communicating with the kubernetes apiserver.
    #[arg(
        long,
        value_name = "float32",
        default_value = "1",
        allow_negative_numbers = true
    )]
    pub kube_api_capacity_qps: f32,

    /// Burst to use for storage capacity updates while communicating with the kubernetes apiserver.
    #[arg(long, value_name = "int", default_value = "5", allow_negative_numbers = true,
          value_parser = flags::go_int)]
    pub kube_api_capacity_burst: i32,

    /// This enables producing CSIStorageCapacity objects with capacity information from the driver's GetCapacity call.
    #[arg(long)]
    pub enable_capacity: bool,

    /// Enables producing capacity information for storage classes with immediate binding. Not needed for the Kubernetes scheduler, maybe useful for other consumers or for debugging.
    #[arg(long)]
    pub capacity_for_immediate_binding: bool,

    /// How long the external-provisioner waits before checking for storage capacity changes.
    #[arg(long, value_name = "duration", default_value = "1m", value_parser = flags::go_duration)]
    pub capacity_poll_interval: Duration,

    /// The level indicates the number of objects that need to be traversed starting from the pod identified by the POD_NAME and NAMESPACE environment variables to reach the owning object for CSIStorageCapacity objects: -1 for no owner, 0 for the pod itself, 1 for a StatefulSet or DaemonSet, 2 for a Deployment, etc.
    #[arg(long, value_name = "int", default_value = "1", allow_negative_numbers = true,
          value_parser = flags::go_int)]
    pub capacity_ownerref_level: i32,

    /// Enables deploying the external-provisioner together with a CSI driver on nodes to manage node-local volumes.
    #[arg(long)]
    pub node_deployment: bool,

    /// Determines whether immediate binding is supported when deployed on each node.
    #[arg(long, default_value = "true")]
    pub node_deployment_immediate_binding: bool,

    /// Determines how long the external-provisioner sleeps initially before trying to own a PVC with immediate binding.
    #[arg(long, value_name = "duration", default_value = "20s", value_parser = flags::go_duration)]
    pub node_deployment_base_delay: Duration,

    /// Determines how long the external-provisioner sleeps at most before trying to own a PVC with immediate binding.
    #[arg(long, value_name = "duration", default_value = "1m0s", value_parser = flags::go_duration)]
    pub node_deployment_max_delay: Duration,

    /// This option enables PV to be marked as readonly at controller publish volume call if PVC accessmode has been set to ROX.
    #[arg(long)]
    pub controller_publish_readonly: bool,

    /// Prevents an unauthorised user from modifying the volume mode when creating a PVC from an existing VolumeSnapshot.
    #[arg(long, default_value = "true")]
    pub prevent_volume_mode_conversion: bool,

    /// A set of key=value pairs that describe feature gates for alpha/experimental features. Options are: Topology=true|false (GA - default=true), VolumeAttributesClass=true|false (GA - default=true), CrossNamespaceVolumeDataSource=true|false (ALPHA - default=false), ReleaseLeaderElectionOnExit=true|false (ALPHA - default=false), AllAlpha=true|false, AllBeta=true|false. May be repeated; values accumulate.
    #[arg(long, value_name = "mapStringBool", value_parser = flags::feature_gates)]
    pub feature_gates: Vec<FeatureGates>,
}

/// Feature gate values after merging every occurrence (pflag's map flag: later keys win).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gates {
    /// `Topology` (GA, default true): topology-aware provisioning.
    pub topology: bool,
    /// `VolumeAttributesClass` as given: `None` when not set (upstream default true).
    pub volume_attributes_class: Option<bool>,
    /// `CrossNamespaceVolumeDataSource` (alpha, default false; `AllAlpha` turns it on).
    pub cross_namespace_volume_data_source: bool,
    /// `ReleaseLeaderElectionOnExit` (alpha, default false; `AllAlpha` turns it on).
    pub release_leader_election_on_exit: bool,
}

impl Args {
    /// Every `--feature-gates` occurrence merged, later keys winning.
    pub fn merged_feature_gates(&self) -> BTreeMap<String, bool> {
        FeatureGates::merge(&self.feature_gates)
    }

    /// The gates the provisioner acts on, with `AllAlpha` applied to alpha gates that were
    /// not set explicitly (component-base semantics).
    pub fn gates(&self) -> Gates {
        let merged = self.merged_feature_gates();
        let all_alpha = merged.get("AllAlpha").copied().unwrap_or(false);
        let alpha = |name: &str| merged.get(name).copied().unwrap_or(all_alpha);
        Gates {
            topology: merged.get("Topology").copied().unwrap_or(true),
            volume_attributes_class: merged.get("VolumeAttributesClass").copied(),
            cross_namespace_volume_data_source: alpha("CrossNamespaceVolumeDataSource"),
            release_leader_election_on_exit: alpha("ReleaseLeaderElectionOnExit"),
        }
    }

    /// Gate names given on the command line that this provisioner does not know.
    pub fn unknown_feature_gates(&self) -> Vec<String> {
        self.merged_feature_gates()
            .into_keys()
            .filter(|k| !KNOWN_FEATURE_GATES.contains(&k.as_str()))
            .collect()
    }
}

/// A flag combination that parses but cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A shared flag: `--http-endpoint` together with `--metrics-address`, a bad logging
    /// setting, a `--csi-address` that is not a unix socket path, a negative
    /// `--kube-api-burst` (exit 1).
    #[error(transparent)]
    Common(#[from] SettingsError),
    /// `--worker-threads=0` would never process anything (exit 1).
    #[error("--worker-threads must be greater than 0")]
    NoWorkers,
    /// `--volume-name-uuid-length` other than -1 or 1..=32 (upstream panics on the first claim
    /// beyond that, and 0 gives the invalid PV name `pvc-`).
    #[error("--volume-name-uuid-length must be -1 (full UID) or between 1 and 32, got {0}")]
    UuidLength(i32),
    /// `--volume-name-prefix` is empty: every volume name would be invalid.
    #[error("--volume-name-prefix must not be empty")]
    EmptyPrefix,
    /// `--node-deployment` without the `NODE_NAME` environment variable: the instance cannot
    /// tell its claims and volumes from other nodes' (upstream: klog.Fatal, exit 255; here a
    /// usage error, exit 2, docs/compatibility.md).
    #[error(
        "--node-deployment needs the NODE_NAME environment variable (the Kubernetes node this instance runs on, e.g. from the downward API spec.nodeName)"
    )]
    NodeNameMissing,
    /// A capacity flag that cannot run, with `--enable-capacity` (exit 2).
    #[error(transparent)]
    Capacity(#[from] crate::capacity::SettingsError),
    /// `--retry-interval-start` is zero or above `--retry-interval-max`.
    #[error(
        "--retry-interval-start ({start:?}) must be positive and not above --retry-interval-max ({max:?})"
    )]
    RetryIntervals {
        /// `--retry-interval-start`.
        start: Duration,
        /// `--retry-interval-max`.
        max: Duration,
    },
}

impl ConfigError {
    /// The process exit code for this kind of problem: 2 for a missing environment variable or
    /// a capacity flag that cannot run (like a usage error), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::NodeNameMissing | Self::Capacity(_) => 2,
            Self::Common(err) => err.exit_code(),
            Self::NoWorkers
            | Self::UuidLength(_)
            | Self::EmptyPrefix
            | Self::RetryIntervals { .. } => 1,
        }
    }
}

/// Validated settings of one csi-provisioner process; built from [`Args`] by `TryFrom`.
#[derive(Debug, Clone)]
pub struct Config {
    /// The driver socket.
    pub csi_address: CsiAddress,
    /// `--timeout`: deadline of every CSI call.
    pub timeout: Duration,
    /// Kubernetes client settings.
    pub kube: KubeSettings,
    /// Leader election, when `--leader-election` is on.
    pub leader_election: Option<LeaderElectionSettings>,
    /// Diagnostics HTTP server.
    pub http: HttpSettings,
    /// How claims become CreateVolume requests and PVs.
    pub provisioning: ProvisioningSettings,
    /// Per-object exponential backoff of failed provisioning and deletion.
    pub retry: RetrySettings,
    /// `--worker-threads`: claim workers, and separately volume workers; also the bound on
    /// concurrent CreateVolume and, separately, DeleteVolume calls.
    pub worker_threads: usize,
    /// `-v >= 5`: log every CSI call (secrets stripped).
    pub log_grpc_calls: bool,
    /// `--node-deployment`: one instance per node next to a node-local driver (spec §6.2).
    pub node_deployment: Option<NodeDeploymentSettings>,
    /// Warnings to log once logging is up (accepted flags without effect).
    pub warnings: Vec<String>,
    /// Storage capacity tracking, with `--enable-capacity` (`main` adds the environment).
    pub capacity: Option<crate::capacity::CapacitySettings>,
    /// Clones, snapshot restores and cross-namespace sources.
    pub data_sources: DataSourceSettings,
}

/// Flags and gate about data sources (spec §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataSourceSettings {
    /// `--cloning-protection-threads`: clone-protection workers (0 = the controller does not
    /// run; upstream then starts zero workers as well).
    pub cloning_protection_threads: usize,
    /// `--snapshot-orphan-sweep-interval` (zero = no sweep).
    pub snapshot_orphan_sweep_interval: Duration,
    /// `--prevent-volume-mode-conversion`.
    pub prevent_volume_mode_conversion: bool,
    /// The `CrossNamespaceVolumeDataSource` gate (`AllAlpha` included).
    pub cross_namespace: bool,
}

/// Flags that shape requests and PVs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one field per upstream bool flag; the names are the contract"
)]
pub struct ProvisioningSettings {
    /// `--volume-name-prefix`.
    pub volume_name_prefix: String,
    /// `--volume-name-uuid-length`.
    pub volume_name_uuid_length: i64,
    /// `--default-fstype`.
    pub default_fstype: String,
    /// `--extra-create-metadata`.
    pub extra_create_metadata: bool,
    /// `--strict-topology`.
    pub strict_topology: bool,
    /// `--immediate-topology`.
    pub immediate_topology: bool,
    /// `--controller-publish-readonly`.
    pub controller_publish_readonly: bool,
    /// The `Topology` gate.
    pub topology_gate: bool,
    /// The `VolumeAttributesClass` gate as given (`None`: not set).
    pub volume_attributes_class_gate: Option<bool>,
    /// The `ReleaseLeaderElectionOnExit` gate (we release the Lease on SIGTERM regardless).
    pub release_leader_election_on_exit: bool,
}

/// `--node-deployment` and its tuning flags (spec §6.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDeploymentSettings {
    /// `NODE_NAME`: filled in by [`Config::set_node_name`] (empty until then).
    pub node_name: String,
    /// `--node-deployment-immediate-binding`: race other nodes for Immediate claims.
    pub immediate_binding: bool,
    /// `--node-deployment-base-delay`: first wait (and jitter range) before claiming.
    pub base_delay: Duration,
    /// `--node-deployment-max-delay`: cap of the per-claim doubling wait.
    pub max_delay: Duration,
}

impl Config {
    /// Adds `NODE_NAME` (as `main` read it from the environment) to the node deployment;
    /// without node deployment it is ignored, as upstream ignores it.
    pub fn set_node_name(&mut self, node_name: Option<String>) -> Result<(), ConfigError> {
        let Some(node) = self.node_deployment.as_mut() else {
            return Ok(());
        };
        match node_name.filter(|n| !n.is_empty()) {
            Some(name) => {
                node.node_name = name;
                Ok(())
            }
            None => Err(ConfigError::NodeNameMissing),
        }
    }
}

/// `--retry-interval-start` / `--retry-interval-max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    /// First delay after a failure.
    pub start: Duration,
    /// Cap of the doubling delay; also the "infeasible" (InvalidArgument) slow-retry window.
    pub max: Duration,
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(args: Args) -> Result<Self, Self::Error> {
        let common = CommonSettings::from_args(&args.common, Some(&args.master))?;
        let gates = args.gates();
        if args.worker_threads == 0 {
            return Err(ConfigError::NoWorkers);
        }
        if args.volume_name_uuid_length != -1 && !(1..=32).contains(&args.volume_name_uuid_length) {
            return Err(ConfigError::UuidLength(args.volume_name_uuid_length));
        }
        if args.volume_name_prefix.is_empty() {
            return Err(ConfigError::EmptyPrefix);
        }
        if args.retry_interval_start.is_zero()
            || args.retry_interval_start > args.retry_interval_max
        {
            return Err(ConfigError::RetryIntervals {
                start: args.retry_interval_start,
                max: args.retry_interval_max,
            });
        }

        let capacity = crate::capacity::CapacitySettings::from_args(&args)?;

        let mut warnings = Vec::new();
        if args.enable_pprof {
            warnings.push(
                "--enable-pprof: Go pprof endpoints do not exist in this implementation; /debug/pprof/ is not served".to_owned(),
            );
        }
        for gate in args.unknown_feature_gates() {
            warnings.push(format!(
                "--feature-gates: {gate} has no effect on csi-provisioner"
            ));
        }

        Ok(Config {
            csi_address: common.csi_address,
            timeout: args.timeout,
            kube: common.kube,
            leader_election: common.leader_election,
            http: common.http,
            provisioning: ProvisioningSettings {
                volume_name_prefix: args.volume_name_prefix,
                volume_name_uuid_length: i64::from(args.volume_name_uuid_length),
                default_fstype: args.default_fstype,
                extra_create_metadata: args.extra_create_metadata,
                strict_topology: args.strict_topology,
                immediate_topology: args.immediate_topology,
                controller_publish_readonly: args.controller_publish_readonly,
                topology_gate: gates.topology,
                volume_attributes_class_gate: gates.volume_attributes_class,
                release_leader_election_on_exit: gates.release_leader_election_on_exit,
            },
            retry: RetrySettings {
                start: args.retry_interval_start,
                max: args.retry_interval_max,
            },
            worker_threads: args.worker_threads as usize,
            log_grpc_calls: common.log_grpc_calls,
            node_deployment: args.node_deployment.then(|| NodeDeploymentSettings {
                node_name: String::new(),
                immediate_binding: args.node_deployment_immediate_binding,
                base_delay: args.node_deployment_base_delay,
                max_delay: args.node_deployment_max_delay,
            }),
            warnings,
            data_sources: DataSourceSettings {
                cloning_protection_threads: args.cloning_protection_threads as usize,
                snapshot_orphan_sweep_interval: args.snapshot_orphan_sweep_interval,
                prevent_volume_mode_conversion: args.prevent_volume_mode_conversion,
                cross_namespace: gates.cross_namespace_volume_data_source,
            },
            capacity,
        })
    }
}

#[cfg(test)]
mod tests;
