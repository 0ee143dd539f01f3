//! Command-line flags of csi-resizer (names, types and defaults as upstream v2.2, spec
//! sidecars.md §2.1 and §5.1) and their validation into a [`Config`].
//!
//! Every upstream flag parses and every feature it turns on is implemented. The
//! `VolumeAttributesClass` gate stays
//! `None` when not given: start-up then asks discovery (`crate::discovery`).

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;
use csi_common::flags::{self, CommonArgs, FeatureGates, MasterArgs};
use csi_common::sidecar::{CommonSettings, SettingsError};

/// Feature gates that mean something to the resizer (external-resizer `pkg/features`); any
/// other name is accepted with a warning (upstream also accepts the generic apiserver gates,
/// which change nothing here).
const KNOWN_FEATURE_GATES: [&str; 6] = [
    "AnnotateFsResize",
    "RecoverVolumeExpansionFailure",
    "VolumeAttributesClass",
    "ReleaseLeaderElectionOnExit",
    "AllAlpha",
    "AllBeta",
];

/// csi-resizer's flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "csi-resizer",
    about = "Expands CSI volumes when a PersistentVolumeClaim asks for more storage",
    disable_version_flag = true
)]
pub struct Args {
    /// `--version`, `--csi-address`, kube client, leader election, HTTP and logging flags.
    #[command(flatten)]
    pub common: CommonArgs,

    /// `--master`.
    #[command(flatten)]
    pub master: MasterArgs,

    /// Resync period for cache
    #[arg(long, value_name = "duration", default_value = "10m0s", value_parser = flags::go_duration)]
    resync_period: Duration,

    /// Concurrency to process multiple resize requests
    #[arg(long, value_name = "int", default_value = "10", allow_negative_numbers = true,
          value_parser = flags::go_int)]
    workers: i32,

    /// Timeout for waiting for CSI driver socket.
    #[arg(long, value_name = "duration", default_value = "10s", value_parser = flags::go_duration)]
    timeout: Duration,

    /// Initial retry interval of failed volume resize. It exponentially increases with each failure, up to retry-interval-max.
    #[arg(long, value_name = "duration", default_value = "1s", value_parser = flags::go_duration)]
    retry_interval_start: Duration,

    /// Maximum retry interval of failed volume resize.
    #[arg(long, value_name = "duration", default_value = "5m0s", value_parser = flags::go_duration)]
    retry_interval_max: Duration,

    /// Flag to turn on/off capability to handle volume in use error in resizer controller. Defaults to true if not set.
    #[arg(long, default_value = "true")]
    handle_volume_inuse_error: bool,

    /// If set, add pv/pvc metadata to plugin modify requests as parameters.
    #[arg(long)]
    extra_modify_metadata: bool,

    /// A set of key=value pairs that describe feature gates for alpha/experimental features. Options are: AnnotateFsResize=true|false (BETA - default=true), ReleaseLeaderElectionOnExit=true|false (ALPHA - default=false), AllAlpha=true|false, AllBeta=true|false.
    #[arg(long, value_name = "mapStringBool", value_parser = flags::feature_gates)]
    feature_gates: Vec<FeatureGates>,
}

/// The feature gates after merging every occurrence, with component-base's `AllAlpha` /
/// `AllBeta` applied to the gates not set by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gates {
    /// `AnnotateFsResize` (beta, default true): the pre-resize-capacity PV annotation.
    pub annotate_fs_resize: bool,
    /// `RecoverVolumeExpansionFailure` (GA, default true): the expand-and-recover flow.
    pub recover_volume_expansion_failure: bool,
    /// `VolumeAttributesClass` as given (`None`: not set; upstream default true).
    pub volume_attributes_class: Option<bool>,
    /// `ReleaseLeaderElectionOnExit` (alpha, default false). The Lease is handed back on
    /// SIGTERM regardless (team decision, docs/compatibility.md).
    pub release_leader_election_on_exit: bool,
}

impl Gates {
    fn from_merged(merged: &BTreeMap<String, bool>) -> Self {
        let get = |name: &str| merged.get(name).copied();
        let all_alpha = get("AllAlpha").unwrap_or(false);
        let all_beta = get("AllBeta");
        Self {
            annotate_fs_resize: get("AnnotateFsResize").or(all_beta).unwrap_or(true),
            recover_volume_expansion_failure: get("RecoverVolumeExpansionFailure").unwrap_or(true),
            volume_attributes_class: get("VolumeAttributesClass"),
            release_leader_election_on_exit: get("ReleaseLeaderElectionOnExit")
                .unwrap_or(all_alpha),
        }
    }
}

/// A flag combination that parses but cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A shared flag (see [`SettingsError`]).
    #[error(transparent)]
    Common(#[from] SettingsError),
    /// `--workers` below 1 would never process anything.
    #[error("--workers must be greater than 0, got {0}")]
    NoWorkers(i32),
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
    /// The exit code: a shared flag's own, else 1 (upstream exits 1 after parsing).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Common(err) => err.exit_code(),
            Self::NoWorkers(_) | Self::RetryIntervals { .. } => 1,
        }
    }
}

/// Validated settings of one csi-resizer process.
#[derive(Debug, Clone)]
pub struct Config {
    /// The shared settings (driver address, client, leader election, HTTP, call logging).
    pub common: CommonSettings,
    /// `--timeout`: the deadline of every CSI call.
    pub timeout: Duration,
    /// `--workers`: workers of the resize queue.
    pub workers: usize,
    /// `--retry-interval-start`.
    pub retry_start: Duration,
    /// `--retry-interval-max`: the backoff cap, and how long an infeasible size waits.
    pub retry_max: Duration,
    /// `--resync-period`; zero turns the periodic resync off.
    pub resync: Duration,
    /// The feature gates.
    pub gates: Gates,
    /// `--handle-volume-inuse-error`: after FAILED_PRECONDITION (and for an offline-only
    /// driver) the driver is not called while a pod uses the claim.
    pub handle_volume_inuse_error: bool,
    /// `--extra-modify-metadata`: claim and PV names in ControllerModifyVolume's
    /// `mutable_parameters`.
    pub extra_modify_metadata: bool,
    /// Warnings to log once logging is up.
    pub warnings: Vec<String>,
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(args: Args) -> Result<Self, ConfigError> {
        let gates = Gates::from_merged(&FeatureGates::merge(&args.feature_gates));
        let common = CommonSettings::from_args(&args.common, Some(&args.master))?;
        let workers = usize::try_from(args.workers)
            .ok()
            .filter(|w| *w > 0)
            .ok_or(ConfigError::NoWorkers(args.workers))?;
        if args.retry_interval_start.is_zero()
            || args.retry_interval_start > args.retry_interval_max
        {
            return Err(ConfigError::RetryIntervals {
                start: args.retry_interval_start,
                max: args.retry_interval_max,
            });
        }
        let warnings: Vec<String> = unknown_gates(&args)
            .map(|gate| format!("--feature-gates: {gate} has no effect on csi-resizer"))
            .collect();
        Ok(Self {
            common,
            timeout: args.timeout,
            workers,
            retry_start: args.retry_interval_start,
            retry_max: args.retry_interval_max,
            resync: args.resync_period,
            gates,
            handle_volume_inuse_error: args.handle_volume_inuse_error,
            extra_modify_metadata: args.extra_modify_metadata,
            warnings,
        })
    }
}

fn unknown_gates(args: &Args) -> impl Iterator<Item = String> {
    FeatureGates::merge(&args.feature_gates)
        .into_keys()
        .filter(|gate| !KNOWN_FEATURE_GATES.contains(&gate.as_str()))
}

#[cfg(test)]
mod tests;
