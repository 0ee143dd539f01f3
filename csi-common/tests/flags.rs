//! Flags and logging through the crate's public API, as a binary's `main` uses them.
//!
//! Only `logging_init_installs_the_global_subscriber_once` installs the process-global
//! tracing subscriber. Other tests in this binary install scoped (thread-local) ones to
//! capture logs, which `tracing::dispatcher::has_been_set` also reports, so this file asks
//! `logging::init` itself whether a global subscriber is installed.

use csi_common::flags::{self, CsiAddressArgs, HttpArgs, LoggingArgs};
use csi_common::logging;

/// The livenessprobe's shape: no `--version`, no leader election, no kube flags.
#[derive(clap::Parser, Debug)]
struct ProbeArgs {
    #[command(flatten)]
    csi: CsiAddressArgs,
    #[command(flatten)]
    http: HttpArgs,
    #[command(flatten)]
    logging: LoggingArgs,
    /// Budget for one probe.
    #[arg(long, default_value = "3s", value_parser = flags::go_duration)]
    probe_timeout: std::time::Duration,
}

#[test]
fn a_binary_flattening_a_subset_gets_only_those_flags() {
    let a: ProbeArgs = flags::parse([
        "livenessprobe",
        "-csi-address=/csi/csi.sock",
        "--probe-timeout",
        "1m",
        "-v=4",
        "-automaxprocs",
    ])
    .unwrap();
    assert_eq!(a.csi.csi_address, "/csi/csi.sock");
    assert_eq!(a.probe_timeout, std::time::Duration::from_mins(1));
    assert_eq!(a.logging.verbosity, 4);
    assert!(a.logging.automaxprocs);
    assert_eq!(a.http.metrics_path, "/metrics");

    for absent in ["--version", "--leader-election", "-kubeconfig=/x"] {
        let err = flags::parse::<ProbeArgs, _, _>(["livenessprobe", absent]).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{absent}");
    }
}

#[test]
fn logging_init_installs_the_global_subscriber_once() {
    let invalid: ProbeArgs = flags::parse(["livenessprobe", "--log-json-split-stream"]).unwrap();
    let err = logging::init(&invalid.logging).unwrap_err();
    assert!(
        matches!(err, logging::Error::InvalidConfiguration(_)),
        "{err}"
    );

    // Had the invalid configuration installed anything, this would be AlreadyInstalled.
    let valid: ProbeArgs = flags::parse(["livenessprobe", "-v=2"]).unwrap();
    let guard = logging::init(&valid.logging)
        .expect("an invalid configuration installs nothing, so the first valid init succeeds");
    assert!(
        tracing::enabled!(tracing::Level::DEBUG),
        "-v=2 enables debug"
    );
    assert!(
        !tracing::enabled!(tracing::Level::TRACE),
        "-v=2 does not enable trace"
    );

    let err = logging::init(&valid.logging).unwrap_err();
    assert!(matches!(err, logging::Error::AlreadyInstalled(_)), "{err}");
    drop(guard);
}
