use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use clap::error::ErrorKind;

use super::*;

// What attacher/resizer/provisioner look like: the common flags plus one own flag.
/// The csi-test sidecar.
#[derive(clap::Parser, Debug)]
#[command(name = "csi-test")]
struct TestArgs {
    #[command(flatten)]
    common: CommonArgs,

    /// An own duration flag, to show binaries mix their flags with the common ones.
    #[arg(long, default_value = "15s", value_parser = go_duration)]
    timeout: Duration,
}

fn parse_ok(args: &[&str]) -> TestArgs {
    let mut argv = vec!["csi-test"];
    argv.extend_from_slice(args);
    match parse::<TestArgs, _, _>(argv) {
        Ok(parsed) => parsed,
        Err(err) => panic!("{args:?} should parse, got: {err}"),
    }
}

fn parse_err(args: &[&str]) -> clap::Error {
    let mut argv = vec!["csi-test"];
    argv.extend_from_slice(args);
    match parse::<TestArgs, _, _>(argv) {
        Ok(parsed) => panic!("{args:?} should be rejected, parsed as {parsed:?}"),
        Err(err) => err,
    }
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn defaults_match_upstream_exactly() {
    let a = parse_ok(&[]).common;
    assert!(!a.version);
    assert_eq!(a.csi.csi_address, "/run/csi/socket");
    assert_eq!(a.kube.kubeconfig, "");
    assert!((a.kube.kube_api_qps - 5.0).abs() < f64::EPSILON);
    assert_eq!(a.kube.kube_api_burst, 10);
    assert!(!a.leader_election.leader_election);
    assert_eq!(a.leader_election.leader_election_namespace, "");
    assert_eq!(
        a.leader_election.leader_election_lease_duration,
        Duration::from_secs(15)
    );
    assert_eq!(
        a.leader_election.leader_election_renew_deadline,
        Duration::from_secs(10)
    );
    assert_eq!(
        a.leader_election.leader_election_retry_period,
        Duration::from_secs(5)
    );
    assert!(a.leader_election.labels().is_empty());
    assert_eq!(a.http.http_endpoint, "");
    assert_eq!(a.http.metrics_address, "");
    assert_eq!(a.http.metrics_path, "/metrics");
    assert_eq!(a.logging.verbosity, 0);
    assert_eq!(a.logging.vmodule_items().count(), 0);
    assert_eq!(a.logging.logging_format, LogFormat::Text);
    assert_eq!(a.logging.log_flush_frequency, Duration::from_secs(5));
    assert!(!a.logging.log_text_split_stream);
    assert!(a.logging.log_text_info_buffer_size.is_zero());
    assert!(!a.logging.log_json_split_stream);
    assert!(a.logging.log_json_info_buffer_size.is_zero());
    assert!(!a.logging.automaxprocs);
    assert_eq!(a.validate(), Ok(()));
}

/// Every long flag with a non-default value, checked through a projection of the parsed args.
/// Reads one flag's value back out of parsed args, as text.
type Project<T> = fn(&CommonArgs) -> T;

fn value_flags() -> Vec<(&'static str, &'static str, Project<String>)> {
    vec![
        ("csi-address", "/csi/csi.sock", |a| {
            a.csi.csi_address.clone()
        }),
        ("kubeconfig", "/etc/kube.conf", |a| {
            a.kube.kubeconfig.clone()
        }),
        ("kube-api-qps", "7.5", |a| a.kube.kube_api_qps.to_string()),
        ("kube-api-burst", "20", |a| {
            a.kube.kube_api_burst.to_string()
        }),
        ("leader-election-namespace", "kube-system", |a| {
            a.leader_election.leader_election_namespace.clone()
        }),
        ("leader-election-lease-duration", "1m30s", |a| {
            format_go_duration(a.leader_election.leader_election_lease_duration)
        }),
        ("leader-election-renew-deadline", "45s", |a| {
            format_go_duration(a.leader_election.leader_election_renew_deadline)
        }),
        ("leader-election-retry-period", "500ms", |a| {
            format_go_duration(a.leader_election.leader_election_retry_period)
        }),
        ("leader-election-labels", "a:b", |a| {
            format!("{:?}", a.leader_election.labels())
        }),
        ("http-endpoint", ":8080", |a| a.http.http_endpoint.clone()),
        ("metrics-address", ":8081", |a| {
            a.http.metrics_address.clone()
        }),
        ("metrics-path", "/m", |a| a.http.metrics_path.clone()),
        ("v", "5", |a| a.logging.verbosity.to_string()),
        ("vmodule", "controller*=4", |a| {
            format!("{:?}", a.logging.vmodule_items().collect::<Vec<_>>())
        }),
        ("logging-format", "json", |a| {
            format!("{:?}", a.logging.logging_format)
        }),
        ("log-flush-frequency", "2s", |a| {
            format_go_duration(a.logging.log_flush_frequency)
        }),
        ("log-text-info-buffer-size", "1Mi", |a| {
            a.logging.log_text_info_buffer_size.to_string()
        }),
        ("log-json-info-buffer-size", "2k", |a| {
            a.logging.log_json_info_buffer_size.to_string()
        }),
    ]
}

#[test]
fn every_value_flag_is_accepted_with_one_or_two_dashes_and_either_value_form() {
    for (flag, value, project) in value_flags() {
        let expected = project(&parse_ok(&[&format!("--{flag}={value}")]).common);
        let default = project(&parse_ok(&[]).common);
        assert_ne!(
            expected, default,
            "--{flag}={value} should change the value"
        );
        for dashes in ["-", "--"] {
            let joined = parse_ok(&[&format!("{dashes}{flag}={value}")]).common;
            assert_eq!(project(&joined), expected, "{dashes}{flag}={value}");
            let separate = parse_ok(&[&format!("{dashes}{flag}"), value]).common;
            assert_eq!(project(&separate), expected, "{dashes}{flag} {value}");
        }
    }
}

/// Every bool flag, checked through a projection of the parsed args.
fn bool_flags() -> Vec<(&'static str, Project<bool>)> {
    vec![
        ("version", |a| a.version),
        ("leader-election", |a| a.leader_election.leader_election),
        ("log-text-split-stream", |a| a.logging.log_text_split_stream),
        ("log-json-split-stream", |a| a.logging.log_json_split_stream),
        ("automaxprocs", |a| a.logging.automaxprocs),
    ]
}

#[test]
fn every_bool_flag_takes_go_bool_syntax_only_in_the_equals_form() {
    for (flag, project) in bool_flags() {
        for dashes in ["-", "--"] {
            assert!(
                project(&parse_ok(&[&format!("{dashes}{flag}")]).common),
                "{dashes}{flag}"
            );
            for truthy in ["1", "t", "T", "true", "TRUE", "True"] {
                let a = parse_ok(&[&format!("{dashes}{flag}={truthy}")]).common;
                assert!(project(&a), "{dashes}{flag}={truthy}");
            }
            for falsy in ["0", "f", "F", "false", "FALSE", "False"] {
                let a = parse_ok(&[
                    &format!("{dashes}{flag}"),
                    &format!("{dashes}{flag}={falsy}"),
                ])
                .common;
                assert!(!project(&a), "{dashes}{flag}={falsy} after {dashes}{flag}");
            }
            let err = parse_err(&[&format!("{dashes}{flag}=yes")]);
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{dashes}{flag}=yes");
            assert_eq!(err.exit_code(), 2);
            // Go: the separate word is a positional argument, not the flag's value.
            let err = parse_err(&[&format!("{dashes}{flag}"), "false"]);
            assert_eq!(
                err.kind(),
                ErrorKind::UnknownArgument,
                "{dashes}{flag} false"
            );
            assert_eq!(err.exit_code(), 2);
        }
    }
}

#[test]
fn leader_election_false_as_a_separate_word_is_a_positional_usage_error() {
    let err = parse_err(&["--leader-election", "false", "--version"]);
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("false"), "{err}");
}

#[test]
fn automaxprocs_with_an_empty_value_means_true_like_go_bool_func() {
    assert!(parse_ok(&["--automaxprocs="]).common.logging.automaxprocs);
    assert!(parse_err(&["--automaxprocs=error"]).exit_code() == 2);
}

#[test]
fn verbosity_is_accepted_in_every_go_and_pflag_spelling() {
    for args in [
        &["-v=5"][..],
        &["-v", "5"],
        &["--v=5"],
        &["--v", "5"],
        &["-v5"],
        &["--v=1", "-v=5"],
    ] {
        assert_eq!(parse_ok(args).common.logging.verbosity, 5, "{args:?}");
    }
    assert_eq!(parse_err(&["-v=-1"]).exit_code(), 2);
    assert_eq!(parse_err(&["-v=high"]).exit_code(), 2);
}

#[test]
fn a_repeated_flag_overrides_the_earlier_value_as_in_go() {
    let a = parse_ok(&[
        "--csi-address=/a",
        "-csi-address",
        "/b",
        "--timeout=1s",
        "--timeout=2s",
    ]);
    assert_eq!(a.common.csi.csi_address, "/b");
    assert_eq!(a.timeout, Duration::from_secs(2));
}

#[test]
fn a_value_that_starts_with_a_dash_is_taken_verbatim_after_a_value_flag() {
    let a = parse_ok(&[
        "--leader-election-namespace",
        "-odd",
        "-kube-api-burst",
        "-1",
        "--kube-api-qps",
        "-2.5",
    ]);
    assert_eq!(a.common.leader_election.leader_election_namespace, "-odd");
    assert_eq!(a.common.kube.kube_api_burst, -1);
    assert!((a.common.kube.kube_api_qps + 2.5).abs() < f64::EPSILON);
}

#[test]
fn kube_api_burst_takes_go_integer_syntax() {
    assert_eq!(
        parse_ok(&["--kube-api-burst=0x10"])
            .common
            .kube
            .kube_api_burst,
        16
    );
    assert_eq!(
        parse_ok(&["--kube-api-burst=010"])
            .common
            .kube
            .kube_api_burst,
        8
    );
    assert_eq!(parse_err(&["--kube-api-burst=ten"]).exit_code(), 2);
    assert_eq!(parse_err(&["--kube-api-qps=fast"]).exit_code(), 2);
}

#[test]
fn a_bad_duration_is_a_usage_error_with_exit_code_2() {
    for bad in ["15", "1x", "-5s", "s", ""] {
        let err = parse_err(&[&format!("--leader-election-lease-duration={bad}")]);
        assert_eq!(err.kind(), ErrorKind::ValueValidation, "{bad:?}");
        assert_eq!(err.exit_code(), 2, "{bad:?}");
    }
    let err = parse_err(&["--timeout=-1s"]);
    assert!(err.to_string().contains("negative"), "{err}");
}

#[test]
fn an_unknown_flag_is_a_usage_error_with_exit_code_2() {
    for unknown in [
        "--logtostderr",
        "-alsologtostderr",
        "--log-dir=/tmp",
        "--enable-leader-election",
    ] {
        let err = parse_err(&[unknown]);
        assert_eq!(err.kind(), ErrorKind::UnknownArgument, "{unknown}");
        assert_eq!(err.exit_code(), 2);
    }
}

#[test]
fn a_value_flag_without_a_value_is_a_usage_error() {
    let err = parse_err(&["--csi-address"]);
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn help_exits_0_in_every_spelling() {
    for help in ["-h", "--help", "-help"] {
        let err = parse_err(&[help]);
        assert_eq!(err.kind(), ErrorKind::DisplayHelp, "{help}");
        assert_eq!(err.exit_code(), 0);
        let text = err.to_string();
        assert!(
            text.starts_with("The csi-test sidecar"),
            "the binary's about comes first:\n{text}"
        );
        assert!(
            !text.contains("attacher"),
            "a flag group's Rust docs leaked into help:\n{text}"
        );
        for name in [
            "--csi-address",
            "--leader-election-labels",
            "--v <Level>",
            "--automaxprocs",
            "[default: 15s]",
        ] {
            assert!(text.contains(name), "help lacks {name}:\n{text}");
        }
    }
}

#[test]
fn lease_labels_accumulate_across_occurrences_and_later_keys_win() {
    let a = parse_ok(&[
        "--leader-election-labels=a:1,b:2",
        "-leader-election-labels",
        "c:3",
        "--leader-election-labels=a:9",
    ]);
    let expected: BTreeMap<String, String> = [("a", "9"), ("b", "2"), ("c", "3")]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    assert_eq!(a.common.leader_election.labels(), expected);
}

#[test]
fn a_malformed_lease_label_is_a_usage_error() {
    for bad in ["a=b", "a:b:c", "a:b,c", ""] {
        let err = parse_err(&[&format!("--leader-election-labels={bad}")]);
        assert_eq!(err.exit_code(), 2, "{bad:?}");
        assert!(err.to_string().contains("malformed item"), "{err}");
    }
}

#[test]
fn a_lease_label_the_api_server_would_refuse_is_a_usage_error() {
    for bad in [
        "\u{202e}:\u{1}",
        "-team:storage",
        "team:gold-",
        "Example.com/team:x",
        "/team:x",
        "team:has space",
        &format!("team:{}", "x".repeat(64)),
        &format!("{}:x", "k".repeat(64)),
    ] {
        let err = parse_err(&[&format!("--leader-election-labels={bad}")]);
        assert_eq!(err.exit_code(), 2, "{bad:?}");
        assert!(err.to_string().contains("invalid label"), "{err}");
    }
    let ok = parse_ok(&["--leader-election-labels=example.com/team:storage,tier:,a.b_c-d:X.y_z"]);
    assert_eq!(ok.common.leader_election.labels().len(), 3);
}

#[test]
fn an_unknown_logging_format_is_a_usage_error() {
    let err = parse_err(&["--logging-format=xml"]);
    assert_eq!(err.kind(), ErrorKind::InvalidValue);
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn vmodule_syntax_is_checked_at_parse_time_and_occurrences_accumulate() {
    let a = parse_ok(&["--vmodule=a*=1,b=2,", "-vmodule", "c=3"])
        .common
        .logging;
    let items: Vec<(String, u32)> = a
        .vmodule_items()
        .map(|i| (i.pattern.clone(), i.verbosity))
        .collect();
    assert_eq!(items, [("a*".into(), 1), ("b".into(), 2), ("c".into(), 3)]);
    for bad in ["a", "a=", "=1", "a=b", "a=1=2", "a=-1", "a=2147483648"] {
        assert_eq!(
            parse_err(&[&format!("--vmodule={bad}")]).exit_code(),
            2,
            "{bad:?}"
        );
    }
}

#[test]
fn alpha_logging_options_parse_but_fail_validation() {
    for (args, flag) in [
        (&["--log-text-split-stream"][..], "--log-text-split-stream"),
        (
            &["--log-text-info-buffer-size=1Mi"],
            "--log-text-info-buffer-size",
        ),
        (&["-log-json-split-stream=true"], "--log-json-split-stream"),
        (
            &["--log-json-info-buffer-size", "512"],
            "--log-json-info-buffer-size",
        ),
    ] {
        let a = parse_ok(args).common;
        let err = a.validate().expect_err("alpha options cannot be enabled");
        assert_eq!(err, Error::AlphaLoggingOptions { flags: vec![flag] });
        assert!(err.to_string().contains("LoggingAlphaOptions"), "{err}");
    }
    // Explicit defaults are fine, as upstream's validation only looks at the values.
    let a = parse_ok(&[
        "--log-text-split-stream=false",
        "--log-json-info-buffer-size=0Ki",
    ])
    .common;
    assert_eq!(a.validate(), Ok(()));
    assert_eq!(
        parse_err(&["--log-text-info-buffer-size=lots"]).exit_code(),
        2
    );
}

#[test]
fn vmodule_with_json_format_fails_validation() {
    let a = parse_ok(&["--vmodule=x=2", "--logging-format=json"]).common;
    assert_eq!(a.validate(), Err(Error::VModuleRequiresText));
    let a = parse_ok(&["--vmodule=x=2"]).common;
    assert_eq!(a.validate(), Ok(()));
}

#[test]
fn verbosity_above_int32_fails_validation() {
    let a = parse_ok(&["-v=2147483648"]).common;
    assert!(matches!(
        a.validate(),
        Err(Error::VerbosityOutOfRange {
            verbosity: 2_147_483_648,
            ..
        })
    ));
    assert_eq!(parse_ok(&["-v=2147483647"]).common.validate(), Ok(()));
}

#[test]
fn http_endpoint_and_metrics_address_together_fail_validation() {
    let a = parse_ok(&["--http-endpoint=:8080", "--metrics-address=:8081"]).common;
    assert_eq!(a.validate(), Err(Error::HttpEndpointAndMetricsAddress));
    assert_eq!(
        parse_ok(&["--http-endpoint=:8080"]).common.validate(),
        Ok(())
    );
    assert_eq!(
        parse_ok(&["--metrics-address=:8081"]).common.validate(),
        Ok(())
    );
}

#[test]
fn normalize_rewrites_single_dash_long_flags_only() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["-csi-address=/x"], &["--csi-address=/x"]),
        (&["-csi-address", "/x"], &["--csi-address", "/x"]),
        (&["-v=5"], &["--v=5"]),
        (&["-v", "5"], &["--v", "5"]),
        (&["-v5"], &["--v=5"]),
        (&["-vmodule=a=1"], &["--vmodule=a=1"]),
        (&["--csi-address=/x"], &["--csi-address=/x"]),
        (&["-1", "-.5", "-", "plain"], &["-1", "-.5", "-", "plain"]),
        (&["-h"], &["--help"]),
        (&["-help"], &["--help"]),
        (&["-a", "--", "-b", "--c"], &["--a", "--", "-b", "--c"]),
    ];
    for (input, expected) in cases {
        let mut argv = vec!["-argv0"];
        argv.extend_from_slice(input);
        let mut want = vec!["-argv0"];
        want.extend_from_slice(expected);
        assert_eq!(normalize_args(os(&argv)), os(&want), "{input:?}");
    }
    assert!(normalize_args(Vec::<OsString>::new()).is_empty());
}

#[test]
fn go_bool_accepts_exactly_go_syntax() {
    for t in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(go_bool(t), Ok(true), "{t}");
    }
    for f in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(go_bool(f), Ok(false), "{f}");
    }
    for bad in ["", "yes", "on", "tRUE", "2", " true"] {
        assert!(go_bool(bad).is_err(), "{bad:?}");
    }
    assert_eq!(go_bool_func(""), Ok(true));
}

#[test]
fn go_duration_follows_time_parse_duration() {
    let ns = Duration::from_nanos;
    let table: &[(&str, Duration)] = &[
        ("0", Duration::ZERO),
        ("+0", Duration::ZERO),
        ("-0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("-0s", Duration::ZERO),
        ("15s", Duration::from_secs(15)),
        ("+15s", Duration::from_secs(15)),
        ("1m30s", Duration::from_secs(90)),
        ("500ms", Duration::from_millis(500)),
        ("1.5h", Duration::from_mins(90)),
        ("300us", Duration::from_micros(300)),
        ("300\u{00b5}s", Duration::from_micros(300)),
        ("300\u{03bc}s", Duration::from_micros(300)),
        ("10ns", ns(10)),
        ("1h2m3s4ms5us6ns", ns(3_723_004_005_006)),
        ("2h45m", Duration::from_mins(165)),
        (".5s", Duration::from_millis(500)),
        ("1.s", Duration::from_secs(1)),
        ("1.0001s", ns(1_000_100_000)),
        ("0.1ns", Duration::ZERO),
        ("1.004ms", ns(1_004_000)),
        ("9223372036854775807ns", ns(9_223_372_036_854_775_807)),
        ("9223372036.854775807s", ns(9_223_372_036_854_775_807)),
        ("0.9223372036854775807s", ns(922_337_203)),
        ("2562047h47m16.854775807s", ns(9_223_372_036_854_775_807)),
        // Found by tests/properties.rs: 20 fraction digits overflowed the scale (a panic in
        // debug builds, a wrong value in release).
        (".00000000000000000000s", Duration::ZERO),
        ("1.000000000000000000000000001h", Duration::from_hours(1)),
        ("0.000000000000000000009h", Duration::ZERO),
    ];
    for &(input, want) in table {
        assert_eq!(go_duration(input), Ok(want), "{input}");
    }
    let errors: &[(&str, &str)] = &[
        ("", "invalid duration"),
        ("3", "missing unit"),
        ("00", "missing unit"),
        ("0.5", "missing unit"),
        ("1x", "unknown unit"),
        ("1S", "unknown unit"),
        ("s", "invalid duration"),
        (".s", "invalid duration"),
        (".", "invalid duration"),
        ("-", "invalid duration"),
        ("1s ", "unknown unit"),
        ("9223372036854775808ns", "invalid duration"),
        ("2562048h", "invalid duration"),
        ("100000000000000000000000000000ns", "invalid duration"),
        ("-5s", "negative"),
        ("-1ns", "negative"),
    ];
    for &(input, want) in errors {
        let err = go_duration(input).expect_err(input);
        assert!(err.contains(want), "{input:?}: {err}");
    }
}

#[test]
fn signed_durations_keep_go_range_including_the_minimum() {
    assert_eq!(
        values::parse_duration_nanos("-9223372036854775808ns"),
        Ok(i64::MIN)
    );
    assert_eq!(values::parse_duration_nanos("-1m"), Ok(-60_000_000_000));
    assert!(values::parse_duration_nanos("-9223372036854775809ns").is_err());
}

#[test]
fn format_go_duration_matches_go_duration_string() {
    let table: &[(Duration, &str)] = &[
        (Duration::ZERO, "0s"),
        (Duration::from_nanos(1), "1ns"),
        (Duration::from_nanos(1_100), "1.1\u{00b5}s"),
        (Duration::from_micros(300), "300\u{00b5}s"),
        (Duration::from_millis(500), "500ms"),
        (Duration::from_micros(2_200), "2.2ms"),
        (Duration::from_millis(1_500), "1.5s"),
        (Duration::from_secs(5), "5s"),
        (Duration::from_secs(15), "15s"),
        (Duration::from_secs(90), "1m30s"),
        (Duration::from_mins(5), "5m0s"),
        (Duration::from_hours(1), "1h0m0s"),
        (Duration::from_nanos(4_500_000_000_001), "1h15m0.000000001s"),
        (
            Duration::from_nanos(9_223_372_036_854_775_807),
            "2562047h47m16.854775807s",
        ),
    ];
    for &(d, want) in table {
        assert_eq!(format_go_duration(d), want, "{d:?}");
        assert_eq!(go_duration(want), Ok(d), "round trip of {want}");
    }
}

#[test]
fn go_int_follows_parse_int_base_0() {
    let table: &[(&str, Result<i32, ()>)] = &[
        ("10", Ok(10)),
        ("+10", Ok(10)),
        ("-10", Ok(-10)),
        ("0", Ok(0)),
        ("0x1f", Ok(31)),
        ("0X1F", Ok(31)),
        ("0o17", Ok(15)),
        ("017", Ok(15)),
        ("0b101", Ok(5)),
        ("0x_1f", Ok(31)),
        ("1_000", Err(())),
        ("0x1__f", Err(())),
        ("0x", Err(())),
        ("08", Err(())),
        ("", Err(())),
        ("1.5", Err(())),
        ("2147483648", Err(())),
        ("-2147483648", Ok(i32::MIN)),
    ];
    for (input, want) in table {
        assert_eq!(go_int(input).map_err(|_| ()), *want, "{input:?}");
    }
}

#[test]
fn go_uint_is_go_int_without_a_sign() {
    for (input, want) in [
        ("100", Ok(100)),
        ("0x10", Ok(16)),
        ("0", Ok(0)),
        ("-1", Err(())),
        ("+1", Err(())),
        ("ten", Err(())),
    ] {
        assert_eq!(go_uint(input).map_err(|_| ()), want, "{input:?}");
    }
}

#[test]
fn feature_gates_follow_component_base_syntax_and_later_values_win() {
    let first = feature_gates(" Topology = false ,, AllAlpha=T").unwrap();
    assert_eq!(
        first.0,
        BTreeMap::from([
            ("AllAlpha".to_owned(), true),
            ("Topology".to_owned(), false)
        ])
    );
    let second = feature_gates("Topology=1").unwrap();
    assert_eq!(
        FeatureGates::merge([&first, &second]),
        BTreeMap::from([("AllAlpha".to_owned(), true), ("Topology".to_owned(), true)])
    );
    assert_eq!(feature_gates("").unwrap(), FeatureGates::default());
    for bad in ["Topology", "Topology=yes", "Topology=true,WatchList"] {
        assert!(feature_gates(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn quantity_checks_kubernetes_syntax_and_zero() {
    for (input, zero) in [
        ("0", true),
        ("0Ki", true),
        ("-0.0", true),
        ("0e3", true),
        ("512", false),
        ("1Mi", false),
        ("1.5G", false),
        ("100m", false),
        ("1E", false),
        ("1e-3", false),
        ("+.5", false),
    ] {
        let q = quantity(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(q.is_zero(), zero, "{input}");
        assert_eq!(q.as_str(), input);
    }
    for bad in ["", "Mi", "1 Mi", "1MB", "1..2", "1e", "1Ki3", "."] {
        assert!(quantity(bad).is_err(), "{bad:?}");
    }
}
