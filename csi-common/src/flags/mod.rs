//! Command-line flags shared by the sidecars, with Go `flag` compatibility.
//!
//! Rust counterpart of csi-lib-utils `standardflags` plus component-base's logging flags.
//! Unlike `standardflags` there is no global configuration: each group is a clap `Args`
//! struct that a binary flattens into its own `Parser`, and [`parse`] turns argv into it.
//!
//! # Go compatibility
//!
//! * Every long flag is accepted as `-name` and `--name`, with `=value` or a separate value
//!   ([`normalize_args`]); `-v` also as `--v`, `-v=5`, `-v 5` and pflag's `-v5`.
//! * A repeated flag overrides its earlier value, except the accumulating ones
//!   (`--leader-election-labels`, `--vmodule`).
//! * Durations use Go syntax ([`go_duration`]); negative durations are rejected.
//! * A bad value or an unknown flag is a usage error: `main` prints it and exits with
//!   [`clap::Error::exit_code`], which is 2 as with Go's `flag.ExitOnError`.
//! * Deliberate difference: Go stops at the first positional argument and silently ignores
//!   every later flag (so `--leader-election false --v=5` runs without leader election and at
//!   `-v=0`). Here a positional argument is a usage error (exit 2).
//! * Checks that upstream makes after parsing and reports with exit 1
//!   (`--http-endpoint` with `--metrics-address`, alpha logging options) are the `validate`
//!   methods, returning [`Error`]; `main` maps them to exit 1.
//!
//! # Bool flags
//!
//! Go bools are `--flag` (true) or `--flag=<bool>` with [`go_bool`] syntax; `--flag false`
//! does not give the flag a value (`false` becomes a positional argument, rejected). [`parse`]
//! gives every plain `bool` switch these rules, so a binary declares one as clap's default
//! switch, with `default_value = "true"` for the few that default to true:
//!
//! ```
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Args {
//!     #[arg(long)]
//!     enable_pprof: bool,
//!     #[arg(long, default_value = "true")]
//!     immediate_topology: bool,
//! }
//!
//! let on: Args = csi_common::flags::parse(["x", "-enable-pprof"]).unwrap();
//! assert!(on.enable_pprof && on.immediate_topology);
//! let off: Args =
//!     csi_common::flags::parse(["x", "--enable-pprof=F", "--immediate-topology=false"]).unwrap();
//! assert!(!off.enable_pprof && !off.immediate_topology);
//! assert!(csi_common::flags::parse::<Args, _, _>(["x", "--enable-pprof", "false"]).is_err());
//! ```
//!
//! (A flag with other value rules, such as `--automaxprocs` with Go's `BoolFunc` syntax,
//! declares `action = clap::ArgAction::Set` and its own parser; [`parse`] leaves it alone.)

mod args;
mod argv;
mod values;

#[cfg(test)]
mod tests;

pub use args::{
    CommonArgs, CsiAddressArgs, HttpArgs, KubeArgs, LeaderElectionArgs, LogFormat, LoggingArgs,
    MasterArgs,
};
pub use argv::{normalize_args, parse};
pub use values::{
    FeatureGates, LeaseLabels, Quantity, VModule, VModuleItem, feature_gates, format_go_duration,
    go_bool, go_bool_func, go_duration, go_int, go_uint, is_qualified_name, lease_labels, quantity,
    verbosity_level, vmodule,
};

/// Flag combinations that parse but are invalid; upstream reports these after parsing and
/// exits 1 (not 2).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Both the diagnostics endpoint and the deprecated metrics-only address were given.
    #[error("only one of `--metrics-address` and `--http-endpoint` can be set")]
    HttpEndpointAndMetricsAddress,

    /// One of the alpha logging options was set; they need the LoggingAlphaOptions gate,
    /// which no flag can enable, so upstream's validation always fails for them.
    #[error(
        "alpha logging options need the LoggingAlphaOptions feature gate, which cannot be enabled: {}",
        flags.join(", ")
    )]
    AlphaLoggingOptions {
        /// The offending flags, in help order.
        flags: Vec<&'static str>,
    },

    /// `--vmodule` was combined with a non-text `--logging-format`.
    #[error("--vmodule is only supported for the text log format")]
    VModuleRequiresText,

    /// `-v` is above what klog's `int32` level can hold.
    #[error("verbosity {verbosity} must be <= {max}")]
    VerbosityOutOfRange {
        /// The requested verbosity.
        verbosity: u32,
        /// The largest accepted verbosity.
        max: u32,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
