use super::*;

fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
    flags::parse(std::iter::once("csi-provisioner").chain(argv.iter().copied()))
}

fn config(argv: &[&str]) -> Result<Config, ConfigError> {
    Config::try_from(parse(argv).unwrap())
}

#[test]
fn defaults_match_upstream() {
    let args = parse(&[]).unwrap();
    assert_eq!(args.master.master, "");
    assert_eq!(args.volume_name_prefix, "pvc");
    assert_eq!(args.volume_name_uuid_length, -1);
    assert_eq!(args.retry_interval_start, Duration::from_secs(1));
    assert_eq!(args.retry_interval_max, Duration::from_mins(5));
    assert_eq!(args.worker_threads, 100);
    assert_eq!(args.cloning_protection_threads, 1);
    assert_eq!(args.snapshot_orphan_sweep_interval, Duration::from_mins(5));
    assert_eq!(args.capacity_threads, 1);
    assert_eq!(args.timeout, Duration::from_secs(10));
    assert!(!args.strict_topology);
    assert!(args.immediate_topology);
    assert!(!args.extra_create_metadata);
    assert!(!args.enable_pprof);
    assert_eq!(args.default_fstype, "");
    assert!((args.kube_api_capacity_qps - 1.0).abs() < f32::EPSILON);
    assert_eq!(args.kube_api_capacity_burst, 5);
    assert!(!args.enable_capacity);
    assert!(!args.capacity_for_immediate_binding);
    assert_eq!(args.capacity_poll_interval, Duration::from_mins(1));
    assert_eq!(args.capacity_ownerref_level, 1);
    assert!(!args.node_deployment);
    assert!(args.node_deployment_immediate_binding);
    assert_eq!(args.node_deployment_base_delay, Duration::from_secs(20));
    assert_eq!(args.node_deployment_max_delay, Duration::from_mins(1));
    assert!(!args.controller_publish_readonly);
    assert!(args.prevent_volume_mode_conversion);
    assert!(args.feature_gates.is_empty());
    assert_eq!(args.common.csi.csi_address, "/run/csi/socket");
    assert!((args.common.kube.kube_api_qps - 5.0).abs() < f64::EPSILON);
    assert_eq!(args.common.kube.kube_api_burst, 10);

    let config = Config::try_from(args).unwrap();
    assert_eq!(config.worker_threads, 100);
    assert_eq!(config.timeout, Duration::from_secs(10));
    assert_eq!(config.retry.start, Duration::from_secs(1));
    assert_eq!(config.retry.max, Duration::from_mins(5));
    assert!(config.leader_election.is_none());
    assert_eq!(config.http.listen_address(), None);
    assert!(config.provisioning.topology_gate);
    assert_eq!(config.provisioning.volume_attributes_class_gate, None);
    assert_eq!(config.provisioning.volume_name_uuid_length, -1);
    assert!(config.warnings.is_empty());
    assert!(!config.log_grpc_calls);
}

#[test]
fn every_provisioner_flag_parses_in_both_value_forms() {
    for (flag, value) in [
        ("master", "https://10.0.0.1:6443"),
        ("volume-name-prefix", "vol"),
        ("volume-name-uuid-length", "16"),
        ("retry-interval-start", "2s"),
        ("retry-interval-max", "10m"),
        ("worker-threads", "50"),
        ("cloning-protection-threads", "1"),
        ("snapshot-orphan-sweep-interval", "5m"),
        ("capacity-threads", "3"),
        ("timeout", "1m30s"),
        ("default-fstype", "ext4"),
        ("kube-api-capacity-qps", "2.5"),
        ("kube-api-capacity-burst", "7"),
        ("capacity-poll-interval", "30s"),
        ("capacity-ownerref-level", "-1"),
        ("node-deployment-base-delay", "1s"),
        ("node-deployment-max-delay", "2s"),
        ("feature-gates", "Topology=false"),
        ("kubeconfig", "/k"),
        ("kube-api-qps", "100"),
        ("kube-api-burst", "200"),
    ] {
        for form in [
            vec![format!("--{flag}={value}")],
            vec![format!("--{flag}"), value.to_owned()],
        ] {
            let argv: Vec<&str> = form.iter().map(String::as_str).collect();
            let args = parse(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            Config::try_from(args).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        }
    }
}

#[test]
fn bool_flags_take_bare_and_equals_forms() {
    for flag in [
        "strict-topology",
        "immediate-topology",
        "extra-create-metadata",
        "enable-pprof",
        "capacity-for-immediate-binding",
        "node-deployment-immediate-binding",
        "controller-publish-readonly",
        "prevent-volume-mode-conversion",
        "leader-election",
    ] {
        parse(&[&format!("--{flag}")]).unwrap();
        parse(&[&format!("--{flag}=false")]).unwrap();
        parse(&[&format!("--{flag}=true")]).unwrap();
    }
    let args = parse(&["--immediate-topology=false", "--strict-topology"]).unwrap();
    assert!(!args.immediate_topology);
    assert!(args.strict_topology);
}

#[test]
fn malformed_values_and_removed_flags_are_usage_errors() {
    for argv in [
        &["--timeout=10"][..],
        &["--worker-threads=-1"],
        &["--worker-threads=many"],
        &["--volume-name-uuid-length=x"],
        &["--strict-topology=yes"],
        &["--feature-gates=Topology"],
        &["--feature-gates=Topology=maybe"],
        &["--leader-election-labels=a=b"],
        &["--provisioner=foo"],
        &["--connection-timeout=30s"],
        &["--enable-leader-election"],
        &["--leader-election-type=leases"],
        &["--provisioning-retry-count=3"],
        &["--deletion-retry-count=3"],
        &["--logtostderr"],
    ] {
        let err = parse(argv).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{argv:?}: {err}");
    }
}

#[test]
fn capacity_tracking_is_enabled_and_its_bad_values_exit_2() {
    let enabled = config(&["--enable-capacity", "--capacity-threads=3"]).unwrap();
    assert_eq!(enabled.capacity.map(|c| c.threads), Some(3));
    assert!(config(&[]).unwrap().capacity.is_none());
    let err = config(&["--enable-capacity", "--capacity-threads=0"]).unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
}

#[test]
fn tuning_flags_of_unsupported_features_are_accepted_while_the_feature_is_off() {
    let config = config(&[
        "--capacity-threads=4",
        "--capacity-poll-interval=5m",
        "--capacity-for-immediate-binding",
        "--capacity-ownerref-level=2",
        "--kube-api-capacity-qps=10",
        "--kube-api-capacity-burst=20",
        "--feature-gates=VolumeAttributesClass=false,AllAlpha=true,CrossNamespaceVolumeDataSource=false",
    ])
    .unwrap();
    assert_eq!(
        config.provisioning.volume_attributes_class_gate,
        Some(false)
    );
    // AllAlpha reaches the alpha gate that was not set explicitly.
    assert!(config.provisioning.release_leader_election_on_exit);
}

#[test]
fn node_deployment_takes_its_flags_and_needs_node_name() {
    let mut node = config(&[
        "--node-deployment",
        "--node-deployment-immediate-binding=false",
        "--node-deployment-base-delay=1s",
        "--node-deployment-max-delay=5s",
        "--feature-gates=VolumeAttributesClass=true",
    ])
    .unwrap();
    assert_eq!(node.provisioning.volume_attributes_class_gate, Some(true));
    let err = node.set_node_name(None).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("NODE_NAME"), "{err}");
    assert!(matches!(
        node.set_node_name(Some(String::new())),
        Err(ConfigError::NodeNameMissing)
    ));
    node.set_node_name(Some("node-1".into())).unwrap();
    assert_eq!(
        node.node_deployment,
        Some(NodeDeploymentSettings {
            node_name: "node-1".into(),
            immediate_binding: false,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(5),
        })
    );

    // Without --node-deployment NODE_NAME is not needed, and the tuning flags change nothing.
    let mut central = config(&["--node-deployment-base-delay=1s"]).unwrap();
    central.set_node_name(None).unwrap();
    assert_eq!(central.node_deployment, None);
}

#[test]
fn feature_gates_accumulate_and_later_values_win() {
    let args = parse(&[
        "--feature-gates=Topology=false, ReleaseLeaderElectionOnExit=true",
        "--feature-gates",
        "Topology=true,,WatchList=false",
    ])
    .unwrap();
    let gates = args.gates();
    assert!(gates.topology);
    assert!(gates.release_leader_election_on_exit);
    assert_eq!(args.unknown_feature_gates(), vec!["WatchList".to_owned()]);
    let config = Config::try_from(args).unwrap();
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(config.warnings[0].contains("WatchList"));
}

#[test]
fn invalid_combinations_fail_with_exit_code_1() {
    for argv in [
        &["--worker-threads=0"][..],
        &["--volume-name-uuid-length=33"],
        &["--volume-name-uuid-length=-2"],
        &["--volume-name-uuid-length=0"],
        &["--volume-name-prefix="],
        &["--retry-interval-start=10m", "--retry-interval-max=5m"],
        &["--retry-interval-start=0s"],
        &["--kube-api-burst=-1"],
        &["--http-endpoint=:8080", "--metrics-address=:8081"],
        &["--csi-address=csi.sock"],
    ] {
        let err = config(argv).unwrap_err();
        assert_eq!(err.exit_code(), 1, "{argv:?}: {err}");
    }
}

#[test]
fn http_endpoint_serves_leader_health_but_metrics_address_does_not() {
    let config = config(&["--http-endpoint=:9811"]).unwrap();
    assert_eq!(config.http.listen_address(), Some((":9811", true)));
    let config = config_of(&["--metrics-address=:9811", "--metrics-path=/m"]);
    assert_eq!(config.http.listen_address(), Some((":9811", false)));
    assert_eq!(config.http.metrics_path, "/m");
}

fn config_of(argv: &[&str]) -> Config {
    config(argv).unwrap()
}

#[test]
fn leader_election_flags_reach_the_config() {
    let config = config_of(&[
        "--leader-election",
        "--leader-election-namespace=csi",
        "--leader-election-lease-duration=30s",
        "--leader-election-labels=a:b",
        "-v=5",
    ]);
    let le = config.leader_election.unwrap();
    assert_eq!(le.namespace, "csi");
    assert_eq!(le.lease_duration, Duration::from_secs(30));
    assert_eq!(le.renew_deadline, Duration::from_secs(10));
    assert_eq!(le.labels.get("a").map(String::as_str), Some("b"));
    assert!(config.log_grpc_calls);
}

#[test]
fn pprof_is_accepted_with_a_warning() {
    let config = config_of(&["--enable-pprof", "--http-endpoint=:8080"]);
    assert!(
        config.warnings[0].contains("pprof"),
        "{:?}",
        config.warnings
    );
}

#[test]
fn data_source_flags_and_gate_reach_the_config() {
    let defaults = config(&[]).unwrap().data_sources;
    assert_eq!(
        defaults,
        DataSourceSettings {
            cloning_protection_threads: 1,
            snapshot_orphan_sweep_interval: Duration::from_mins(5),
            prevent_volume_mode_conversion: true,
            cross_namespace: false,
        }
    );
    let set = config(&[
        "--cloning-protection-threads=4",
        "--snapshot-orphan-sweep-interval=0",
        "--prevent-volume-mode-conversion=false",
        "--feature-gates=CrossNamespaceVolumeDataSource=true",
    ])
    .unwrap()
    .data_sources;
    assert_eq!(
        set,
        DataSourceSettings {
            cloning_protection_threads: 4,
            snapshot_orphan_sweep_interval: Duration::ZERO,
            prevent_volume_mode_conversion: false,
            cross_namespace: true,
        }
    );
    // AllAlpha turns the alpha gate on unless it is set explicitly.
    assert!(
        config(&["--feature-gates=AllAlpha=true"])
            .unwrap()
            .data_sources
            .cross_namespace
    );
}
