//! Command-line flags of csi-attacher (names, types and defaults as upstream v4.12, spec
//! sidecars.md §1.1 and §5.1) and their validation into a [`Config`].

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;
use csi_common::flags::{self, CommonArgs, FeatureGates};
use csi_common::sidecar::{CommonSettings, SettingsError};

/// Feature gates that mean something to the attacher; any other name is accepted with a
/// warning (upstream also accepts the generic apiserver gates, which change nothing here).
const KNOWN_FEATURE_GATES: [&str; 4] = [
    "ReleaseLeaderElectionOnExit",
    "MutableCSINodeAllocatableCount",
    "AllAlpha",
    "AllBeta",
];

/// csi-attacher's flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "csi-attacher",
    about = "Attaches and detaches CSI volumes for VolumeAttachments",
    disable_version_flag = true
)]
pub struct Args {
    /// `--version`, `--csi-address`, kube client, leader election, HTTP and logging flags.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Timeout for waiting for attaching or detaching the volume.
    #[arg(long, value_name = "duration", default_value = "15s", value_parser = flags::go_duration)]
    timeout: Duration,

    /// Number of attacher worker threads
    #[arg(long, value_name = "uint", default_value = "10", value_parser = flags::go_uint)]
    worker_threads: u32,

    /// Initial retry interval of failed create volume or deletion. It doubles with each failure, up to retry-interval-max.
    #[arg(long, value_name = "duration", default_value = "1s", value_parser = flags::go_duration)]
    retry_interval_start: Duration,

    /// Maximum retry interval of failed create volume or deletion.
    #[arg(long, value_name = "duration", default_value = "5m0s", value_parser = flags::go_duration)]
    retry_interval_max: Duration,

    /// Resync interval of the controller.
    #[arg(long, value_name = "duration", default_value = "10m0s", value_parser = flags::go_duration)]
    resync: Duration,

    /// Resync interval of the VolumeAttachment reconciler.
    #[arg(long, value_name = "duration", default_value = "1m0s", value_parser = flags::go_duration)]
    reconcile_sync: Duration,

    /// Max entries per each page in volume lister call, 0 means no limit.
    #[arg(long, value_name = "int", default_value = "0", allow_negative_numbers = true,
          value_parser = flags::go_int)]
    max_entries: i32,

    /// The default filesystem type of the volume to publish. Defaults to empty string
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    default_fstype: String,

    /// If set, the maximum length of the gRPC response logged at -v=5; -1 (the default) logs all of it.
    #[arg(long, value_name = "int", default_value = "-1", allow_negative_numbers = true,
          value_parser = flags::go_int)]
    max_grpc_log_length: i32,

    /// A set of key=value pairs that describe feature gates for alpha/experimental features. Options are: MutableCSINodeAllocatableCount=true|false (default=true), ReleaseLeaderElectionOnExit=true|false (ALPHA - default=false), AllAlpha=true|false, AllBeta=true|false.
    #[arg(long, value_name = "mapStringBool", value_parser = flags::feature_gates)]
    feature_gates: Vec<FeatureGates>,
}

/// A flag combination that parses but cannot run (upstream exits 1 for each).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A shared flag (see [`SettingsError`]).
    #[error(transparent)]
    Common(#[from] SettingsError),
    /// `--worker-threads=0` would never process anything.
    #[error("--worker-threads must be greater than 0")]
    NoWorkers,
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
    /// `--reconcile-sync=0` would spin.
    #[error("--reconcile-sync must be positive")]
    ReconcileSync,
}

impl ConfigError {
    /// Upstream's exit code: 1 for each of these.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Common(err) => err.exit_code(),
            Self::NoWorkers | Self::RetryIntervals { .. } | Self::ReconcileSync => 1,
        }
    }
}

/// Validated settings of one csi-attacher process.
#[derive(Debug, Clone)]
pub struct Config {
    /// The shared settings (driver address, client, leader election, HTTP, call logging).
    pub common: CommonSettings,
    /// `--timeout`.
    pub timeout: Duration,
    /// `--worker-threads`: workers per queue.
    pub workers: usize,
    /// `--retry-interval-start`.
    pub retry_start: Duration,
    /// `--retry-interval-max`.
    pub retry_max: Duration,
    /// `--resync`; zero turns the periodic resync off.
    pub resync: Duration,
    /// `--reconcile-sync`.
    pub reconcile_sync: Duration,
    /// `--max-entries`.
    pub max_entries: i32,
    /// `--default-fstype`.
    pub default_fstype: String,
    /// `--max-grpc-log-length`; `None` logs whole responses.
    pub max_grpc_log_length: Option<usize>,
    /// The `MutableCSINodeAllocatableCount` gate: attach errors carry the gRPC code.
    pub error_codes: bool,
    /// Warnings to log once logging is up.
    pub warnings: Vec<String>,
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(args: Args) -> Result<Self, ConfigError> {
        let common = CommonSettings::from_args(&args.common, None)?;
        if args.worker_threads == 0 {
            return Err(ConfigError::NoWorkers);
        }
        if args.retry_interval_start.is_zero()
            || args.retry_interval_start > args.retry_interval_max
        {
            return Err(ConfigError::RetryIntervals {
                start: args.retry_interval_start,
                max: args.retry_interval_max,
            });
        }
        if args.reconcile_sync.is_zero() {
            return Err(ConfigError::ReconcileSync);
        }
        let gates = FeatureGates::merge(&args.feature_gates);
        let warnings = unknown_gates(&gates)
            .map(|gate| format!("unrecognized feature gate {gate:?}: ignored"))
            .collect();
        Ok(Self {
            common,
            timeout: args.timeout,
            workers: args.worker_threads as usize,
            retry_start: args.retry_interval_start,
            retry_max: args.retry_interval_max,
            resync: args.resync,
            reconcile_sync: args.reconcile_sync,
            max_entries: args.max_entries,
            default_fstype: args.default_fstype,
            max_grpc_log_length: usize::try_from(args.max_grpc_log_length)
                .ok()
                .filter(|n| *n > 0),
            error_codes: gates
                .get("MutableCSINodeAllocatableCount")
                .copied()
                .unwrap_or(true),
            warnings,
        })
    }
}

fn unknown_gates(gates: &BTreeMap<String, bool>) -> impl Iterator<Item = &String> {
    gates
        .keys()
        .filter(|gate| !KNOWN_FEATURE_GATES.contains(&gate.as_str()))
}

#[cfg(test)]
mod tests;
