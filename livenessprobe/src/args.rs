//! Command-line flags of livenessprobe (its own set, not csi-lib-utils' standardflags: there is
//! no `--version`, no kube or leader-election flags) and their validation into a [`Config`].

use std::time::Duration;

use clap::Parser;
use csi_common::connection::CsiAddress;
use csi_common::flags::{self, CsiAddressArgs, HttpArgs, LoggingArgs};

use crate::Config;

/// Default of `--health-port`; upstream compares against it to detect an explicit setting.
pub(crate) const DEFAULT_HEALTH_PORT: &str = "9808";

/// livenessprobe's flags, names and defaults as upstream v2.19 (sidecars.md §4.1).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "livenessprobe",
    about = "Serves /healthz for the CSI driver container by calling CSI Probe",
    disable_version_flag = true
)]
pub struct Args {
    /// Address of the CSI driver socket and the logging flags are shared with other sidecars.
    #[command(flatten)]
    pub(crate) csi: CsiAddressArgs,

    /// Probe timeout in seconds (one /healthz request: connect plus Probe).
    #[arg(long, default_value = "3s", value_parser = flags::go_duration)]
    pub(crate) probe_timeout: Duration,

    /// TCP port for listening for healthz requests. Deprecated: use --http-endpoint.
    #[arg(long, default_value = DEFAULT_HEALTH_PORT)]
    pub(crate) health_port: String,

    /// `--http-endpoint`, `--metrics-address` and `--metrics-path`.
    #[command(flatten)]
    pub(crate) http: HttpArgs,

    /// `-v`, `--logging-format`, `--automaxprocs`, ...
    #[command(flatten)]
    pub logging: LoggingArgs,
}

/// A flag combination that parses but cannot run; `main` exits 1 like upstream's fatal checks.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--http-endpoint` together with a non-default `--health-port`.
    #[error("only one of --health-port and --http-endpoint can be set")]
    HealthPortAndHttpEndpoint,
    /// `--http-endpoint` together with `--metrics-address`, or a bad logging setting.
    #[error(transparent)]
    Flags(#[from] flags::Error),
    /// `--csi-address` is not a unix socket path.
    #[error(transparent)]
    Address(#[from] csi_common::connection::Error),
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(args: Args) -> Result<Self, Self::Error> {
        args.http.validate()?;
        args.logging.validate()?;
        let http_endpoint = non_empty(args.http.http_endpoint);
        if http_endpoint.is_some() && args.health_port != DEFAULT_HEALTH_PORT {
            return Err(ConfigError::HealthPortAndHttpEndpoint);
        }
        let csi_address = CsiAddress::parse(&args.csi.csi_address)?;
        // With only the deprecated --health-port, upstream serves no metrics at all; with
        // --http-endpoint the metrics share its mux.
        let serve_metrics_on_health = http_endpoint.is_some();
        let health_address = http_endpoint.unwrap_or_else(|| format!(":{}", args.health_port));
        Ok(Config {
            csi_address,
            probe_timeout: args.probe_timeout,
            health_address,
            serve_metrics_on_health,
            metrics_address: non_empty(args.http.metrics_address),
            metrics_path: args.http.metrics_path,
            log_grpc_calls: args.logging.verbosity >= 5,
        })
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        flags::parse(std::iter::once("livenessprobe").chain(argv.iter().copied()))
    }

    fn config(argv: &[&str]) -> Result<Config, ConfigError> {
        Config::try_from(parse(argv).unwrap())
    }

    #[test]
    fn defaults_match_upstream() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.csi.csi_address, "/run/csi/socket");
        assert_eq!(args.probe_timeout, Duration::from_secs(3));
        assert_eq!(args.health_port, "9808");
        assert_eq!(args.http.http_endpoint, "");
        assert_eq!(args.http.metrics_address, "");
        assert_eq!(args.http.metrics_path, "/metrics");
        let config = Config::try_from(args).unwrap();
        assert_eq!(config.health_address, ":9808");
        assert!(!config.serve_metrics_on_health);
        assert_eq!(config.metrics_address, None);
        assert!(!config.log_grpc_calls);
    }

    #[test]
    fn every_flag_accepts_both_dash_forms() {
        for (flag, value) in [
            ("csi-address", "/csi/csi.sock"),
            ("probe-timeout", "10s"),
            ("health-port", "9999"),
            ("http-endpoint", ":8080"),
            ("metrics-address", ":8081"),
            ("metrics-path", "/m"),
            ("v", "5"),
            ("logging-format", "json"),
        ] {
            for dashes in ["-", "--"] {
                for form in [
                    vec![format!("{dashes}{flag}={value}")],
                    vec![format!("{dashes}{flag}"), value.to_owned()],
                ] {
                    let argv: Vec<&str> = form.iter().map(String::as_str).collect();
                    assert!(parse(&argv).is_ok(), "{argv:?}");
                }
            }
        }
        let args = parse(&["-probe-timeout=1m30s", "-csi-address", "/x.sock"]).unwrap();
        assert_eq!(args.probe_timeout, Duration::from_secs(90));
        assert_eq!(args.csi.csi_address, "/x.sock");
    }

    #[test]
    fn bad_values_and_unknown_flags_are_usage_errors_with_exit_code_2() {
        for argv in [
            &["--probe-timeout=3"][..],
            &["--probe-timeout=soon"],
            &["--version"],
            &["--kubeconfig=/k"],
            &["--leader-election"],
            &["--connection-timeout=30s"],
            &["--logging-format=xml"],
            &["-v=loud"],
            &["positional"],
        ] {
            let err = parse(argv).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{argv:?}: {err}");
        }
    }

    #[test]
    fn http_endpoint_and_metrics_address_are_exclusive() {
        let err = config(&["--http-endpoint=:8080", "--metrics-address=:8081"]).unwrap_err();
        assert!(matches!(err, ConfigError::Flags(_)), "{err}");
    }

    #[test]
    fn http_endpoint_with_an_explicit_health_port_is_refused() {
        let err = config(&["--http-endpoint=:8080", "--health-port=9999"]).unwrap_err();
        assert!(matches!(err, ConfigError::HealthPortAndHttpEndpoint));
        // The default value given explicitly is indistinguishable upstream, and allowed.
        assert!(config(&["--http-endpoint=:8080", "--health-port=9808"]).is_ok());
    }

    #[test]
    fn http_endpoint_serves_health_and_metrics_together() {
        let config = config(&["--http-endpoint=127.0.0.1:9000", "-v=5"]).unwrap();
        assert_eq!(config.health_address, "127.0.0.1:9000");
        assert!(config.serve_metrics_on_health);
        assert!(config.log_grpc_calls);
    }

    #[test]
    fn a_relative_csi_address_is_refused() {
        let err = config(&["--csi-address=csi.sock"]).unwrap_err();
        assert!(matches!(err, ConfigError::Address(_)), "{err}");
    }

    // Exit 1: `main` exits 1 on a configuration error.
    testbed_support::flag_property!(
        "livenessprobe",
        Args,
        |line| flags::parse::<Args, _, _>(line),
        |args| Config::try_from(args).map(drop).map_err(|_| 1),
        &[1],
    );
}
