use std::time::Duration;

use super::*;

fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
    flags::parse(std::iter::once("csi-resizer").chain(argv.iter().copied()))
}

fn config(argv: &[&str]) -> Result<Config, ConfigError> {
    Config::try_from(parse(argv).expect("flags parse"))
}

#[test]
fn defaults_match_upstream() {
    let args = parse(&[]).unwrap();
    assert_eq!(args.master.master, "");
    assert_eq!(args.resync_period, Duration::from_mins(10));
    assert_eq!(args.workers, 10);
    assert_eq!(args.timeout, Duration::from_secs(10));
    assert_eq!(args.retry_interval_start, Duration::from_secs(1));
    assert_eq!(args.retry_interval_max, Duration::from_mins(5));
    assert!(args.handle_volume_inuse_error);
    assert!(!args.extra_modify_metadata);
    assert!(args.feature_gates.is_empty());
    assert_eq!(args.common.csi.csi_address, "/run/csi/socket");
    assert!((args.common.kube.kube_api_qps - 5.0).abs() < f64::EPSILON);
    assert_eq!(args.common.kube.kube_api_burst, 10);

    let config = Config::try_from(args).unwrap();
    assert_eq!(config.workers, 10);
    assert!(!config.extra_modify_metadata);
    for argv in [
        &["--extra-modify-metadata"],
        &["--extra-modify-metadata=true"],
    ] {
        let parsed = Config::try_from(parse(argv).unwrap()).unwrap();
        assert!(parsed.extra_modify_metadata, "{argv:?}");
    }
    assert_eq!(config.timeout, Duration::from_secs(10));
    assert_eq!(config.resync, Duration::from_mins(10));
    assert_eq!(
        config.gates,
        Gates {
            annotate_fs_resize: true,
            recover_volume_expansion_failure: true,
            volume_attributes_class: None,
            release_leader_election_on_exit: false,
        }
    );
    assert!(config.common.leader_election.is_none());
    assert_eq!(config.common.http.listen_address(), None);
    assert_eq!(
        config.common.csi_address.to_string(),
        "unix:///run/csi/socket"
    );
    assert!(config.handle_volume_inuse_error);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    // The legacy flow runs with the gate off.
    let legacy = self::config(&["--feature-gates=RecoverVolumeExpansionFailure=false"]).unwrap();
    assert!(!legacy.gates.recover_volume_expansion_failure);
}

#[test]
fn go_style_values_are_accepted() {
    let config = config(&[
        "-timeout=1m30s",
        "--workers",
        "50",
        "--resync-period=0",
        "-retry-interval-start=100ms",
        "--retry-interval-max=2s",
        "--handle-volume-inuse-error=false",
        "--extra-modify-metadata=false",
        "--master=http://127.0.0.1:8080",
        "--leader-election",
        "--http-endpoint=:8080",
    ])
    .unwrap();
    assert_eq!(config.timeout, Duration::from_secs(90));
    assert!(!config.handle_volume_inuse_error);
    assert_eq!(config.workers, 50);
    assert_eq!(config.resync, Duration::ZERO);
    assert_eq!(config.retry_start, Duration::from_millis(100));
    assert_eq!(config.retry_max, Duration::from_secs(2));
    assert_eq!(
        config.common.kube.master.as_deref(),
        Some("http://127.0.0.1:8080")
    );
    assert!(config.common.leader_election.is_some());
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn feature_gates_follow_component_base() {
    let cases: [(&[&str], Gates, usize); 6] = [
        (
            &["--feature-gates=AnnotateFsResize=false"],
            Gates {
                annotate_fs_resize: false,
                recover_volume_expansion_failure: true,
                volume_attributes_class: None,
                release_leader_election_on_exit: false,
            },
            0,
        ),
        (
            // AllBeta=false turns the beta gate off unless it is named.
            &["--feature-gates=AllBeta=false"],
            Gates {
                annotate_fs_resize: false,
                recover_volume_expansion_failure: true,
                volume_attributes_class: None,
                release_leader_election_on_exit: false,
            },
            0,
        ),
        (
            &["--feature-gates=AllAlpha=true,AllBeta=false,AnnotateFsResize=true"],
            Gates {
                annotate_fs_resize: true,
                recover_volume_expansion_failure: true,
                volume_attributes_class: None,
                release_leader_election_on_exit: true,
            },
            0,
        ),
        (
            // Repeated occurrences accumulate; later keys win.
            &[
                "--feature-gates=VolumeAttributesClass=false,RecoverVolumeExpansionFailure=true",
                "--feature-gates=ReleaseLeaderElectionOnExit=true",
            ],
            Gates {
                annotate_fs_resize: true,
                recover_volume_expansion_failure: true,
                volume_attributes_class: Some(false),
                release_leader_election_on_exit: true,
            },
            0,
        ),
        (
            // Set explicitly: discovery is not asked.
            &["--feature-gates=VolumeAttributesClass=true"],
            Gates {
                annotate_fs_resize: true,
                recover_volume_expansion_failure: true,
                volume_attributes_class: Some(true),
                release_leader_election_on_exit: false,
            },
            0,
        ),
        (
            &["--feature-gates=SomeApiserverGate=true"],
            Gates {
                annotate_fs_resize: true,
                recover_volume_expansion_failure: true,
                volume_attributes_class: None,
                release_leader_election_on_exit: false,
            },
            1,
        ),
    ];
    for (argv, gates, unknown) in cases {
        let mut argv = argv.to_vec();
        argv.push("--handle-volume-inuse-error=false");
        let config = config(&argv).unwrap();
        assert_eq!(config.gates, gates, "{argv:?}");
        assert_eq!(config.warnings.len(), unknown, "{argv:?}");
    }
}

#[test]
fn the_legacy_flow_and_extra_modify_metadata_are_accepted() {
    let config = config(&[
        "--feature-gates=RecoverVolumeExpansionFailure=false",
        "--extra-modify-metadata",
        "--handle-volume-inuse-error=false",
    ])
    .unwrap();
    assert!(!config.gates.recover_volume_expansion_failure);
    assert!(config.extra_modify_metadata);
    assert!(!config.handle_volume_inuse_error);
}

#[test]
fn combinations_that_cannot_run_exit_1() {
    for argv in [
        &["--workers=0"][..],
        &["--workers=-3"],
        &["--retry-interval-start=10m"],
        &["--retry-interval-start=0"],
        &["--http-endpoint=:8080", "--metrics-address=:8081"],
        &["--kube-api-burst=-1"],
    ] {
        let err = config(argv).unwrap_err();
        assert_eq!(err.exit_code(), 1, "{argv:?}: {err}");
    }
}

#[test]
fn malformed_values_are_usage_errors() {
    for argv in [
        &["--timeout=5"][..],
        &["--timeout=-1s"],
        &["--resync-period=ten"],
        &["--workers=x"],
        &["--handle-volume-inuse-error=maybe"],
        &["--handle-volume-inuse-error", "false"],
        &["--feature-gates=Foo"],
        &["--feature-gates=AnnotateFsResize=yes"],
        &["--leader-election-labels=a"],
        &["--kube-api-qps=fast"],
        // The resizer has no --max-grpc-log-length (attacher-only) and no --worker-threads.
        &["--max-grpc-log-length=10"],
        &["--worker-threads=1"],
        &["--no-such-flag"],
    ] {
        let err = parse(argv).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{argv:?}");
    }
}
