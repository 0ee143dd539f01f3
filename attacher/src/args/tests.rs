use std::time::Duration;

use super::*;

fn config(argv: &[&str]) -> Result<Config, ConfigError> {
    let args: Args = flags::parse(std::iter::once("csi-attacher").chain(argv.iter().copied()))
        .expect("flags parse");
    Config::try_from(args)
}

#[test]
fn defaults_match_upstream() {
    let config = config(&[]).unwrap();
    assert_eq!(config.timeout, Duration::from_secs(15));
    assert_eq!(config.workers, 10);
    assert_eq!(config.retry_start, Duration::from_secs(1));
    assert_eq!(config.retry_max, Duration::from_mins(5));
    assert_eq!(config.resync, Duration::from_mins(10));
    assert_eq!(config.reconcile_sync, Duration::from_mins(1));
    assert_eq!(config.max_entries, 0);
    assert_eq!(config.default_fstype, "");
    assert_eq!(config.max_grpc_log_length, None);
    assert!(config.error_codes);
    assert_eq!(
        config.common.csi_address.to_string(),
        "unix:///run/csi/socket"
    );
    assert!(config.common.leader_election.is_none());
}

#[test]
fn go_style_values_are_accepted() {
    let config = config(&[
        "-timeout=1m30s",
        "--worker-threads",
        "50",
        "--default-fstype=xfs",
        "--max-entries=100",
        "--feature-gates=MutableCSINodeAllocatableCount=false,SomeApiserverGate=true",
        "--leader-election",
    ])
    .unwrap();
    assert_eq!(config.timeout, Duration::from_secs(90));
    assert_eq!(config.workers, 50);
    assert_eq!(config.default_fstype, "xfs");
    assert_eq!(config.max_entries, 100);
    assert!(!config.error_codes);
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(config.common.leader_election.is_some());
}

#[test]
fn combinations_that_cannot_run_exit_1() {
    for argv in [
        &["--worker-threads=0"][..],
        &["--retry-interval-start=10m"],
        &["--reconcile-sync=0"],
        &["--http-endpoint=:8080", "--metrics-address=:8081"],
    ] {
        let err = config(argv).unwrap_err();
        assert_eq!(err.exit_code(), 1, "{argv:?}: {err}");
    }
}

#[test]
fn malformed_values_are_usage_errors() {
    for argv in [
        &["--timeout=5"][..],
        &["--worker-threads=-1"],
        &["--feature-gates=Foo"],
        &["--no-such-flag"],
    ] {
        let result =
            flags::parse::<Args, _, _>(std::iter::once("csi-attacher").chain(argv.iter().copied()));
        let err = result.unwrap_err();
        assert_eq!(err.exit_code(), 2, "{argv:?}");
    }
}
