//! The flag groups the sidecars share, as clap `Args` that each binary flattens.
//!
//! Names and defaults are byte-for-byte csi-lib-utils `standardflags` and component-base's
//! logging flags; help texts follow the upstream `--help` output closely so users recognise
//! them. Bool flags follow Go's syntax (see the recipe on [`crate::flags`]).

use std::collections::BTreeMap;
use std::time::Duration;

use clap::ArgAction;

use super::Error;
use super::values::{self, LeaseLabels, Quantity, VModule, VModuleItem};

/// `--csi-address`: where the CSI driver listens.
///
/// Kept as the raw string: turning it into a socket path or gRPC target (a bare absolute path
/// means `unix://<path>`) is the connection module's job.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(about = None, long_about = None)]
pub struct CsiAddressArgs {
    /// The gRPC endpoint for Target CSI Volume.
    #[arg(long, value_name = "string", default_value = "/run/csi/socket")]
    pub csi_address: String,
}

/// Kubernetes API client flags: `--kubeconfig`, `--kube-api-qps`, `--kube-api-burst`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(about = None, long_about = None)]
pub struct KubeArgs {
    /// Absolute path to the kubeconfig file. Required only when running out of cluster.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub kubeconfig: String,

    /// QPS to use while communicating with the kubernetes apiserver.
    #[arg(
        long,
        value_name = "float",
        default_value = "5",
        allow_negative_numbers = true
    )]
    pub kube_api_qps: f64,

    /// Burst to use while communicating with the kubernetes apiserver.
    #[arg(
        long,
        value_name = "int",
        default_value = "10",
        allow_negative_numbers = true,
        value_parser = values::go_int
    )]
    pub kube_api_burst: i32,
}

/// `--master`: the API server URL, of csi-provisioner and csi-resizer (each defines it in its
/// own `main.go`, with the same help text; csi-attacher has no such flag).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[command(about = None, long_about = None)]
pub struct MasterArgs {
    /// Master URL to build a client config from. Either this or kubeconfig needs to be set if the provisioner is being run out of cluster.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub master: String,
}

/// Lease-based leader election flags (csi-lib-utils `leaderelection`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(about = None, long_about = None)]
pub struct LeaderElectionArgs {
    /// Enable leader election.
    #[arg(long)]
    pub leader_election: bool,

    /// Namespace where the leader election resource lives. Defaults to the pod namespace if not set.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub leader_election_namespace: String,

    /// Duration that non-leader candidates will wait to force acquire leadership.
    #[arg(long, value_name = "duration", default_value = "15s", value_parser = values::go_duration)]
    pub leader_election_lease_duration: Duration,

    /// Duration that the acting leader will retry refreshing leadership before giving up.
    #[arg(long, value_name = "duration", default_value = "10s", value_parser = values::go_duration)]
    pub leader_election_renew_deadline: Duration,

    /// Duration the LeaderElector clients should wait between tries of actions.
    #[arg(long, value_name = "duration", default_value = "5s", value_parser = values::go_duration)]
    pub leader_election_retry_period: Duration,

    /// List of labels to add to lease when given replica becomes leader. Formatted as a comma separated list of key:value labels. Example: 'my-label:my-value,my-second-label:my-second-value'. May be repeated; values accumulate.
    #[arg(long, value_name = "key:value,...", value_parser = values::lease_labels)]
    pub leader_election_labels: Vec<LeaseLabels>,
}

impl LeaderElectionArgs {
    /// All `--leader-election-labels` occurrences merged in command-line order; a later value
    /// for the same key wins, as csi-lib-utils' `stringMap.Set` writes into one map.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut merged = BTreeMap::new();
        for occurrence in &self.leader_election_labels {
            merged.extend(occurrence.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        merged
    }
}

/// Diagnostics HTTP server flags: `--http-endpoint`, the deprecated `--metrics-address`, and
/// `--metrics-path`.
///
/// The node-driver-registrar only has `--http-endpoint` (with its own help text), so it
/// defines that flag itself instead of flattening this group.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(about = None, long_about = None)]
pub struct HttpArgs {
    /// The TCP network address where the HTTP server for diagnostics, including metrics and leader election health check, will listen (example: `:8080`). The default is empty string, which means the server is disabled. Only one of `--metrics-address` and `--http-endpoint` can be set.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub http_endpoint: String,

    /// (deprecated) The TCP network address where the prometheus metrics endpoint will listen (example: `:8080`). The default is empty string, which means metrics endpoint is disabled. Only one of `--metrics-address` and `--http-endpoint` can be set.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub metrics_address: String,

    /// The HTTP path where prometheus metrics will be exposed.
    #[arg(long, value_name = "string", default_value = "/metrics")]
    pub metrics_path: String,
}

impl HttpArgs {
    /// Rejects setting both `--http-endpoint` and `--metrics-address`. Upstream checks this
    /// after parsing and exits 1 (not 2), so it is not a clap conflict.
    pub fn validate(&self) -> Result<(), Error> {
        if !self.http_endpoint.is_empty() && !self.metrics_address.is_empty() {
            return Err(Error::HttpEndpointAndMetricsAddress);
        }
        Ok(())
    }
}

// Help texts of the alpha logging flags, kept out of the doc comments because rustdoc would
// read "[Alpha]" as a link.
const ALPHA_TEXT_SPLIT_STREAM_HELP: &str = "[Alpha] In text format, write error messages to stderr and info messages to stdout. Enable the LoggingAlphaOptions feature gate to use this";
const ALPHA_TEXT_BUFFER_HELP: &str = "[Alpha] In text format with split output streams, the info messages can be buffered for a while to increase performance. Zero disables buffering. Enable the LoggingAlphaOptions feature gate to use this";
const ALPHA_JSON_SPLIT_STREAM_HELP: &str = "[Alpha] In JSON format, write error messages to stderr and info messages to stdout. Enable the LoggingAlphaOptions feature gate to use this";
const ALPHA_JSON_BUFFER_HELP: &str = "[Alpha] In JSON format with split output streams, the info messages can be buffered for a while to increase performance. Zero disables buffering. Enable the LoggingAlphaOptions feature gate to use this";

/// The value of `--logging-format`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// klog-style human-readable lines (the default).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The component-base logging flags every sidecar registers, plus `--automaxprocs`, which
/// every binary that has the logging flags also has (csi-lib-utils `standardflags`), so a
/// binary flattens this one group for both.
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(about = None, long_about = None)]
pub struct LoggingArgs {
    /// Number for the log level verbosity.
    #[arg(
        short = 'v',
        long = "v",
        value_name = "Level",
        default_value = "0",
        value_parser = values::verbosity_level
    )]
    pub verbosity: u32,

    /// Comma-separated list of pattern=N settings for file-filtered logging (only works for text log format).
    #[arg(long, value_name = "pattern=N,...", value_parser = values::vmodule)]
    pub vmodule: Vec<VModule>,

    /// Sets the log format. Permitted formats: "json", "text".
    #[arg(
        long,
        value_enum,
        value_name = "string",
        default_value_t = LogFormat::Text,
        hide_possible_values = true
    )]
    pub logging_format: LogFormat,

    /// Maximum number of seconds between log flushes.
    #[arg(long, value_name = "duration", default_value = "5s", value_parser = values::go_duration)]
    pub log_flush_frequency: Duration,

    /// Alpha `--log-text-split-stream`: errors to stderr, info to stdout in text format. Any
    /// non-default value fails [`LoggingArgs::validate`].
    #[arg(help = ALPHA_TEXT_SPLIT_STREAM_HELP, long)]
    pub log_text_split_stream: bool,

    /// Alpha `--log-text-info-buffer-size`: info buffering for split text streams. Any non-zero
    /// value fails [`LoggingArgs::validate`].
    #[arg(
        help = ALPHA_TEXT_BUFFER_HELP,
        long,
        value_name = "quantity",
        default_value = "0",
        value_parser = values::quantity
    )]
    pub log_text_info_buffer_size: Quantity,

    /// Alpha `--log-json-split-stream`: errors to stderr, info to stdout in JSON format. Any
    /// non-default value fails [`LoggingArgs::validate`].
    #[arg(help = ALPHA_JSON_SPLIT_STREAM_HELP, long)]
    pub log_json_split_stream: bool,

    /// Alpha `--log-json-info-buffer-size`: info buffering for split JSON streams. Any non-zero
    /// value fails [`LoggingArgs::validate`].
    #[arg(
        help = ALPHA_JSON_BUFFER_HELP,
        long,
        value_name = "quantity",
        default_value = "0",
        value_parser = values::quantity
    )]
    pub log_json_info_buffer_size: Quantity,

    /// Automatically size the worker thread pool to match the container CPU quota (the Go sidecars set GOMAXPROCS from it).
    #[arg(
        long,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value = "false",
        hide_default_value = true,
        value_name = "bool",
        value_parser = values::go_bool_func
    )]
    pub automaxprocs: bool,
}

impl LoggingArgs {
    /// Every `--vmodule` item, across all occurrences (component-base appends them).
    pub fn vmodule_items(&self) -> impl Iterator<Item = &VModuleItem> {
        self.vmodule.iter().flat_map(|v| v.0.iter())
    }

    /// The checks component-base's `ValidateAndApply` makes after parsing; upstream reports a
    /// failure as an invalid logging configuration and exits 1.
    ///
    /// * The verbosity must fit klog's `int32`.
    /// * `--vmodule` works with the text format only.
    /// * The four alpha options need the LoggingAlphaOptions gate, which lives in a private
    ///   gate set no flag can reach, so any non-default alpha setting is rejected.
    pub fn validate(&self) -> Result<(), Error> {
        let max = i32::MAX.unsigned_abs();
        if self.verbosity > max {
            return Err(Error::VerbosityOutOfRange {
                verbosity: self.verbosity,
                max,
            });
        }
        if self.logging_format != LogFormat::Text && self.vmodule_items().next().is_some() {
            return Err(Error::VModuleRequiresText);
        }
        let alpha: Vec<&'static str> = [
            (self.log_text_split_stream, "--log-text-split-stream"),
            (
                !self.log_text_info_buffer_size.is_zero(),
                "--log-text-info-buffer-size",
            ),
            (self.log_json_split_stream, "--log-json-split-stream"),
            (
                !self.log_json_info_buffer_size.is_zero(),
                "--log-json-info-buffer-size",
            ),
        ]
        .into_iter()
        .filter_map(|(set, flag)| set.then_some(flag))
        .collect();
        if !alpha.is_empty() {
            return Err(Error::AlphaLoggingOptions { flags: alpha });
        }
        Ok(())
    }
}

/// Every flag the attacher, resizer and provisioner share: `--version`, `--csi-address`, the
/// Kubernetes client, leader election, diagnostics HTTP and logging flags.
///
/// The registrar and livenessprobe have their own smaller flag sets; they flatten only the
/// groups they have ([`CsiAddressArgs`], [`LoggingArgs`], and for livenessprobe
/// [`HttpArgs`]).
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(about = None, long_about = None)]
pub struct CommonArgs {
    /// Show version.
    #[arg(long)]
    pub version: bool,

    /// `--csi-address`.
    #[command(flatten)]
    pub csi: CsiAddressArgs,

    /// `--kubeconfig`, `--kube-api-qps`, `--kube-api-burst`.
    #[command(flatten)]
    pub kube: KubeArgs,

    /// `--leader-election*`.
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,

    /// `--http-endpoint`, `--metrics-address`, `--metrics-path`.
    #[command(flatten)]
    pub http: HttpArgs,

    /// `-v`, `--vmodule`, `--logging-format`, `--log-*`, `--automaxprocs`.
    #[command(flatten)]
    pub logging: LoggingArgs,
}

impl CommonArgs {
    /// [`HttpArgs::validate`] then [`LoggingArgs::validate`]; failures exit 1 upstream.
    pub fn validate(&self) -> Result<(), Error> {
        self.http.validate()?;
        self.logging.validate()
    }
}
