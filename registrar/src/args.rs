//! Command-line flags of the node-driver-registrar and what they make the binary do.
//!
//! The registrar has its own flag set (upstream does not use csi-lib-utils' standardflags): no
//! kube, leader-election or metrics flags. Names, defaults and the order of the fatal checks
//! follow upstream v2.17 `cmd/csi-node-driver-registrar/main.go` (sidecars.md §3.1):
//!
//! 1. logging validation (in `main`, exit 1);
//! 2. `--version` (exit 0);
//! 3. a non-empty `--kubelet-registration-path` (exit 1);
//! 4. `--mode=kubelet-registration-probe` (exit 0; the probe command must still pass the path);
//! 5. `--health-port` together with `--http-endpoint` (exit 1).
//!
//! Checks this implementation adds after those (exit 1 too): `--csi-address` must be a unix
//! socket, `--kubelet-registration-path` must be an absolute path.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use csi_common::connection::{self, ConnectOptions, CsiAddress};
use csi_common::flags::{self, CsiAddressArgs, LoggingArgs};

use crate::Config;

/// The `--mode` value that turns the binary into a no-op exec probe.
pub(crate) const MODE_KUBELET_REGISTRATION_PROBE: &str = "kubelet-registration-probe";

/// Default of `--registration-socket-check-interval` (the flag's `default_value`).
#[cfg(test)]
const DEFAULT_SOCKET_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The registrar's flags: upstream's names and defaults, plus one addition
/// (`--registration-socket-check-interval`).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "csi-node-driver-registrar",
    about = "Registers a CSI driver with kubelet through the plugin registration socket",
    disable_version_flag = true
)]
pub struct Args {
    /// `--csi-address`: the driver socket inside the container.
    #[command(flatten)]
    pub(crate) csi: CsiAddressArgs,

    /// The --connection-timeout flag is deprecated
    #[arg(long, value_name = "duration", default_value = "0s", value_parser = flags::go_duration)]
    pub connection_timeout: Duration,

    /// Timeout for waiting for communication with driver
    #[arg(long, value_name = "duration", default_value = "1s", value_parser = flags::go_duration)]
    pub(crate) timeout: Duration,

    /// Path to Kubernetes plugin registration directory.
    #[arg(long, value_name = "string", default_value = "/registration")]
    pub(crate) plugin_registration_path: String,

    /// Path of the CSI driver socket on the Kubernetes host machine.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub(crate) kubelet_registration_path: String,

    /// (deprecated) TCP port for healthz requests. Set to 0 to disable the healthz server. Only one of `--health-port` and `--http-endpoint` can be set.
    #[arg(
        long,
        value_name = "int",
        default_value = "0",
        allow_negative_numbers = true,
        value_parser = flags::go_int
    )]
    pub(crate) health_port: i32,

    /// The TCP network address where the HTTP server for diagnostics, including pprof and the health check indicating whether the registration socket exists, will listen (example: `:8080`). The default is empty string, which means the server is disabled. Only one of `--health-port` and `--http-endpoint` can be set.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub(crate) http_endpoint: String,

    /// Show version.
    #[arg(long)]
    pub(crate) version: bool,

    /// DEPRECATED. If this is set to kubelet-registration-probe, the driver will exit successfully without registering with CSI. If set to any other value node-driver-registrar will do the kubelet plugin registration. This flag will be removed in a future major release because the mode kubelet-registration-probe is no longer needed.
    #[arg(
        long,
        value_name = "string",
        default_value = "",
        hide_default_value = true
    )]
    pub mode: String,

    /// enable pprof profiling (accepted for compatibility; Go's pprof endpoints do not exist in this implementation)
    #[arg(long)]
    pub enable_pprof: bool,

    /// How often to check that the registration socket still exists and re-create it if it was deleted (not in upstream, which never re-creates it). 0 disables the check.
    #[arg(long, value_name = "duration", default_value = "1s", value_parser = flags::go_duration)]
    pub(crate) registration_socket_check_interval: Duration,

    /// `-v`, `--vmodule`, `--logging-format`, `--log-*`, `--automaxprocs`.
    #[command(flatten)]
    pub logging: LoggingArgs,
}

/// What the binary does after parsing its flags.
#[derive(Debug, Clone)]
pub enum Startup {
    /// `--version`: print `<argv0> <version>` and exit 0.
    PrintVersion,
    /// `--mode=kubelet-registration-probe`: exit 0 at once. Upstream v2.9 turned the probe into
    /// a no-op (#309) but old manifests still run it as an exec liveness probe.
    RegistrationProbe,
    /// Normal operation.
    Run(Box<Config>),
}

/// A flag combination that parses but cannot run; `main` exits 1 like upstream's fatal checks.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--kubelet-registration-path` is missing (upstream's message).
    #[error("kubelet-registration-path is a required parameter")]
    MissingKubeletRegistrationPath,
    /// `--kubelet-registration-path` is relative; kubelet would dial it relative to its own
    /// working directory, so the registration could never work.
    #[error(
        "--kubelet-registration-path must be an absolute path of the driver socket on the host, got {0:?}"
    )]
    RelativeKubeletRegistrationPath(String),
    /// Both `--health-port` (> 0) and `--http-endpoint` (upstream's message).
    #[error("only one of `--health-port` and `--http-endpoint` can be set")]
    HealthPortAndHttpEndpoint,
    /// `--csi-address` is not a unix socket path.
    #[error(transparent)]
    Address(#[from] connection::Error),
}

impl TryFrom<Args> for Startup {
    type Error = ConfigError;

    fn try_from(args: Args) -> Result<Self, Self::Error> {
        if args.version {
            return Ok(Startup::PrintVersion);
        }
        if args.kubelet_registration_path.is_empty() {
            return Err(ConfigError::MissingKubeletRegistrationPath);
        }
        if args.mode == MODE_KUBELET_REGISTRATION_PROBE {
            return Ok(Startup::RegistrationProbe);
        }
        if args.health_port > 0 && !args.http_endpoint.is_empty() {
            return Err(ConfigError::HealthPortAndHttpEndpoint);
        }
        // Only a negative or zero port disables the deprecated flag, exactly as upstream.
        let http_address = if args.health_port > 0 {
            Some(format!(":{}", args.health_port))
        } else {
            (!args.http_endpoint.is_empty()).then_some(args.http_endpoint)
        };
        let csi_address = CsiAddress::parse(&args.csi.csi_address)?;
        if !args.kubelet_registration_path.starts_with('/') {
            return Err(ConfigError::RelativeKubeletRegistrationPath(
                args.kubelet_registration_path,
            ));
        }
        Ok(Startup::Run(Box::new(Config {
            csi_address,
            kubelet_registration_path: args.kubelet_registration_path,
            plugin_registration_dir: PathBuf::from(args.plugin_registration_path),
            timeout: args.timeout,
            driver_connect_timeout: ConnectOptions::DEFAULT_CONNECT_TIMEOUT,
            http_address,
            socket_check_interval: (!args.registration_socket_check_interval.is_zero())
                .then_some(args.registration_socket_check_interval),
            log_grpc_calls: args.logging.verbosity >= 5,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        flags::parse(std::iter::once("csi-node-driver-registrar").chain(argv.iter().copied()))
    }

    fn startup(argv: &[&str]) -> Result<Startup, ConfigError> {
        Startup::try_from(parse(argv).unwrap())
    }

    fn config(argv: &[&str]) -> Config {
        match startup(argv).unwrap() {
            Startup::Run(config) => *config,
            other => panic!("expected a normal run, got {other:?}"),
        }
    }

    const HOST_SOCKET: &str = "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock";

    #[test]
    fn defaults_match_upstream() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.csi.csi_address, "/run/csi/socket");
        assert_eq!(args.connection_timeout, Duration::ZERO);
        assert_eq!(args.timeout, Duration::from_secs(1));
        assert_eq!(args.plugin_registration_path, "/registration");
        assert_eq!(args.kubelet_registration_path, "");
        assert_eq!(args.health_port, 0);
        assert_eq!(args.http_endpoint, "");
        assert!(!args.version);
        assert_eq!(args.mode, "");
        assert!(!args.enable_pprof);
        assert_eq!(args.logging.verbosity, 0);
        assert!(!args.logging.automaxprocs);

        let config = config(&[HOST_SOCKET]);
        assert_eq!(
            config.csi_address.path(),
            std::path::Path::new("/run/csi/socket")
        );
        assert_eq!(
            config.kubelet_registration_path,
            "/var/lib/kubelet/plugins/x/csi.sock"
        );
        assert_eq!(
            config.plugin_registration_dir,
            PathBuf::from("/registration")
        );
        assert_eq!(config.timeout, Duration::from_secs(1));
        assert_eq!(config.driver_connect_timeout, Duration::from_secs(30));
        assert_eq!(config.http_address, None);
        assert_eq!(
            config.socket_check_interval,
            Some(DEFAULT_SOCKET_CHECK_INTERVAL)
        );
        assert!(!config.log_grpc_calls);
    }

    #[test]
    fn every_flag_accepts_both_dash_forms() {
        for (flag, value) in [
            ("csi-address", "/csi/csi.sock"),
            ("connection-timeout", "30s"),
            ("timeout", "10s"),
            ("plugin-registration-path", "/reg"),
            (
                "kubelet-registration-path",
                "/var/lib/kubelet/plugins/x/csi.sock",
            ),
            ("health-port", "9809"),
            ("http-endpoint", ":9809"),
            ("mode", "registration"),
            ("registration-socket-check-interval", "5s"),
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
        for bool_flag in ["version", "enable-pprof", "automaxprocs"] {
            for dashes in ["-", "--"] {
                for suffix in ["", "=true", "=false", "=1", "=F"] {
                    let arg = format!("{dashes}{bool_flag}{suffix}");
                    assert!(parse(&[&arg]).is_ok(), "{arg}");
                }
            }
        }
        let args = parse(&["-timeout=1m30s", "-csi-address", "/x.sock", "-enable-pprof"]).unwrap();
        assert_eq!(args.timeout, Duration::from_secs(90));
        assert_eq!(args.csi.csi_address, "/x.sock");
        assert!(args.enable_pprof);
    }

    #[test]
    fn bad_values_and_unknown_flags_are_usage_errors_with_exit_code_2() {
        for argv in [
            &["--timeout=1"][..],
            &["--timeout=soon"],
            &["--connection-timeout=x"],
            &["--health-port=nine"],
            &["--version=maybe"],
            &["--enable-pprof=yes please"],
            &["--kubeconfig=/k"],
            &["--leader-election"],
            &["--metrics-address=:8080"],
            &["--probe-timeout=1s"],
            &["--logtostderr"],
            &["--logging-format=xml"],
            &["-v=loud"],
            &["positional"],
            // A Go bool takes no separate value: `false` is a positional argument.
            &["--enable-pprof", "false"],
        ] {
            let err = parse(argv).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{argv:?}: {err}");
        }
    }

    #[test]
    fn version_wins_over_every_other_check() {
        assert!(matches!(startup(&["--version"]), Ok(Startup::PrintVersion)));
        assert!(matches!(
            startup(&["-version", "--health-port=1", "--http-endpoint=:2"]),
            Ok(Startup::PrintVersion)
        ));
    }

    #[test]
    fn the_kubelet_registration_path_is_required_even_in_probe_mode() {
        assert!(matches!(
            startup(&[]),
            Err(ConfigError::MissingKubeletRegistrationPath)
        ));
        assert!(matches!(
            startup(&["--mode=kubelet-registration-probe"]),
            Err(ConfigError::MissingKubeletRegistrationPath)
        ));
        assert!(matches!(
            startup(&["--mode=kubelet-registration-probe", HOST_SOCKET]),
            Ok(Startup::RegistrationProbe)
        ));
    }

    #[test]
    fn probe_mode_exits_before_the_later_checks_as_upstream() {
        assert!(matches!(
            startup(&[
                "--mode=kubelet-registration-probe",
                "--kubelet-registration-path=relative.sock",
                "--health-port=1",
                "--http-endpoint=:2",
                "--csi-address=tcp://x",
            ]),
            Ok(Startup::RegistrationProbe)
        ));
    }

    #[test]
    fn any_other_mode_is_a_normal_run() {
        for mode in ["registration", "", "anything"] {
            let arg = format!("--mode={mode}");
            config(&[HOST_SOCKET, &arg]);
        }
    }

    #[test]
    fn health_port_and_http_endpoint_are_exclusive_only_for_a_positive_port() {
        assert!(matches!(
            startup(&[HOST_SOCKET, "--health-port=9809", "--http-endpoint=:8080"]),
            Err(ConfigError::HealthPortAndHttpEndpoint)
        ));
        let c = config(&[HOST_SOCKET, "--health-port=-1", "--http-endpoint=:8080"]);
        assert_eq!(c.http_address.as_deref(), Some(":8080"));
        let c = config(&[
            HOST_SOCKET,
            "--health-port=0",
            "--http-endpoint=127.0.0.1:8080",
        ]);
        assert_eq!(c.http_address.as_deref(), Some("127.0.0.1:8080"));
        let c = config(&[HOST_SOCKET, "--health-port", "9809"]);
        assert_eq!(c.http_address.as_deref(), Some(":9809"));
        let c = config(&[HOST_SOCKET, "--health-port=-5"]);
        assert_eq!(c.http_address, None);
    }

    #[test]
    fn bad_addresses_and_relative_host_paths_are_refused() {
        assert!(matches!(
            startup(&[HOST_SOCKET, "--csi-address=csi.sock"]),
            Err(ConfigError::Address(_))
        ));
        assert!(matches!(
            startup(&[HOST_SOCKET, "--csi-address=tcp://127.0.0.1:10000"]),
            Err(ConfigError::Address(_))
        ));
        let err = startup(&["--kubelet-registration-path=plugins/x/csi.sock"]).unwrap_err();
        assert!(
            matches!(err, ConfigError::RelativeKubeletRegistrationPath(_)),
            "{err}"
        );
        // unix:// is a gRPC target, not a path kubelet could dial.
        let err = startup(&["--kubelet-registration-path=unix:///x/csi.sock"]).unwrap_err();
        assert!(
            matches!(err, ConfigError::RelativeKubeletRegistrationPath(_)),
            "{err}"
        );
        let c = config(&[HOST_SOCKET, "--csi-address=unix:///csi/csi.sock"]);
        assert_eq!(c.csi_address.path(), std::path::Path::new("/csi/csi.sock"));
    }

    #[test]
    fn a_zero_socket_check_interval_disables_recreation() {
        let c = config(&[HOST_SOCKET, "--registration-socket-check-interval=0"]);
        assert_eq!(c.socket_check_interval, None);
        let c = config(&[HOST_SOCKET, "--registration-socket-check-interval=250ms"]);
        assert_eq!(c.socket_check_interval, Some(Duration::from_millis(250)));
    }

    #[test]
    fn verbosity_five_logs_grpc_calls() {
        assert!(config(&[HOST_SOCKET, "-v=5"]).log_grpc_calls);
        assert!(!config(&[HOST_SOCKET, "-v=4"]).log_grpc_calls);
    }

    // Exit 1: `main` exits 1 on a configuration error.
    testbed_support::flag_property!(
        "csi-node-driver-registrar",
        Args,
        |line| flags::parse::<Args, _, _>(line),
        |args| Startup::try_from(args).map(drop).map_err(|_| 1),
        &[1],
    );
}
