use std::collections::HashMap;

use clap::Parser;

use super::*;
use crate::flags::{CommonArgs, MasterArgs};

/// A controller sidecar's shared flags, as csi-resizer has them (with `--master`).
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    master: MasterArgs,
}

fn settings(argv: &[&str]) -> Result<CommonSettings, SettingsError> {
    let args: Args =
        crate::flags::parse(std::iter::once("csi-resizer").chain(argv.iter().copied()))
            .expect("the flags parse");
    CommonSettings::from_args(&args.common, Some(&args.master))
}

#[test]
fn the_shared_flags_default_to_upstreams_values() {
    let settings = settings(&[]).unwrap();
    assert_eq!(settings.csi_address.to_string(), "unix:///run/csi/socket");
    assert_eq!(
        settings.kube,
        KubeSettings {
            kubeconfig: String::new(),
            master: None,
            qps: 5.0,
            burst: 10,
        }
    );
    assert_eq!(settings.leader_election, None);
    assert_eq!(settings.http.listen_address(), None);
    assert_eq!(settings.http.metrics_path, "/metrics");
    assert!(!settings.log_grpc_calls);
}

#[test]
fn the_shared_flags_reach_the_settings() {
    let settings = settings(&[
        "--csi-address=unix:///csi/csi.sock",
        "--kubeconfig=/etc/kube.conf",
        "--master=https://10.0.0.1:6443",
        "--kube-api-qps=2.5",
        "--kube-api-burst=0",
        "--leader-election",
        "--leader-election-namespace=csi",
        "--leader-election-renew-deadline=12s",
        "--leader-election-labels=a:b",
        "--leader-election-labels=c:d",
        "--http-endpoint=:8080",
        "--metrics-path=/m",
        "-v=5",
    ])
    .unwrap();
    assert_eq!(settings.csi_address.path(), Path::new("/csi/csi.sock"));
    assert_eq!(
        settings.kube,
        KubeSettings {
            kubeconfig: "/etc/kube.conf".into(),
            master: Some("https://10.0.0.1:6443".into()),
            qps: 2.5,
            burst: 0,
        }
    );
    assert_eq!(
        settings.leader_election,
        Some(LeaderElectionSettings {
            namespace: "csi".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(12),
            retry_period: Duration::from_secs(5),
            labels: [("a", "b"), ("c", "d")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        })
    );
    assert_eq!(settings.http.listen_address(), Some((":8080", true)));
    assert_eq!(settings.http.metrics_path, "/m");
    assert!(settings.log_grpc_calls);

    let metrics_only = self::settings(&["--metrics-address=:8081"]).unwrap();
    assert_eq!(metrics_only.http.listen_address(), Some((":8081", false)));
}

#[test]
fn invalid_combinations_of_the_shared_flags_exit_1() {
    for (argv, message) in [
        (
            &["--kube-api-burst=-1"][..],
            "--kube-api-burst must not be negative, got -1",
        ),
        (
            &["--http-endpoint=:8080", "--metrics-address=:8081"],
            "only one of `--metrics-address` and `--http-endpoint` can be set",
        ),
        (
            &["--csi-address=csi.sock"],
            "invalid CSI address \"csi.sock\": relative socket path; use an absolute path or unix:///absolute/path",
        ),
        (
            &["--logging-format=json", "--vmodule=a=5"],
            "--vmodule is only supported for the text log format",
        ),
    ] {
        let err = settings(argv).unwrap_err();
        assert_eq!(err.to_string(), message, "{argv:?}");
        assert_eq!(err.exit_code(), 1, "{argv:?}");
    }
}

#[test]
fn exit_codes_follow_upstream() {
    let fatal = KLOG_FATAL_EXIT_CODE;
    let identity = || identity::Error::EmptyDriverName;
    let cases = [
        (Error::Master("x".into()), fatal),
        (Error::Identity(identity()), fatal),
        (
            Error::Http(http::Error::InvalidAddress {
                address: "x".into(),
            }),
            fatal,
        ),
        (Error::KubeClient(kube_client::Error::QpsNotANumber), fatal),
        (Error::Probe(identity()), 1),
        (Error::Leader(leader::Error::ZeroRetryPeriod), 1),
        (Error::ConnectionLost, 1),
    ];
    for (err, code) in cases {
        assert_eq!(err.exit_code(fatal), code, "{err}");
        assert_eq!(err.exit_code(1), 1, "{err} in csi-attacher and csi-resizer");
    }
}

#[test]
fn only_a_lost_connection_leaves_a_termination_message() {
    assert_eq!(
        Error::ConnectionLost.termination_message(),
        Some("Lost connection to CSI driver, exiting")
    );
    assert_eq!(Error::Master("x".into()).termination_message(), None);
}

#[test]
fn the_environment_comes_from_the_lookups_main_passes() {
    let lookup = |vars: &[(&str, &str)], files: &[(&str, &str)], flag: Option<&str>| {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(k, v)| (PathBuf::from(k), (*v).to_owned()))
            .collect();
        let env =
            Environment::from_lookup(flag, &|k| vars.get(k).cloned(), &|p| files.get(p).cloned());
        (env.hostname, env.lease_namespace)
    };
    let kernel = (KERNEL_HOSTNAME_FILE, "node-1\n");
    let account = (leader::SERVICE_ACCOUNT_NAMESPACE_FILE, "kube-system");
    for (vars, files, flag, expected) in [
        (
            &[("HOSTNAME", "csi-0")][..],
            &[kernel][..],
            None,
            ("csi-0", "default"),
        ),
        (&[("HOSTNAME", "")], &[kernel], None, ("node-1", "default")),
        (&[], &[], None, ("localhost", "default")),
        (&[], &[account], None, ("localhost", "kube-system")),
        (
            &[("POD_NAMESPACE", "csi")],
            &[account],
            None,
            ("localhost", "csi"),
        ),
        (
            &[("POD_NAMESPACE", "csi")],
            &[account],
            Some("elect"),
            ("localhost", "elect"),
        ),
    ] {
        let (hostname, namespace) = lookup(vars, files, flag);
        assert_eq!(
            (hostname.as_str(), namespace.as_str()),
            expected,
            "{vars:?} {files:?} {flag:?}"
        );
    }
}

fn config_with_master(master: &str) -> SidecarConfig {
    let mut settings = settings(&[]).unwrap();
    settings.kube.master = Some(master.to_owned());
    SidecarConfig::new("csi-resizer", settings, Duration::from_secs(10))
}

fn no_environment() -> Environment {
    Environment::from_lookup(None, &|_| None, &|_| None)
}

#[tokio::test]
async fn master_alone_builds_a_client_without_a_kubeconfig() {
    let (client, _) = kube_client(
        &config_with_master("https://10.0.0.1:6443"),
        &no_environment(),
        Some(&Fence::new()),
    )
    .await
    .unwrap();
    assert_eq!(client.default_namespace(), "default");
}

#[tokio::test]
async fn a_master_that_is_not_a_url_is_refused() {
    let Err(err) = kube_client(
        &config_with_master("http://exa mple"),
        &no_environment(),
        None,
    )
    .await
    else {
        panic!("a client for a bad URL");
    };
    assert!(matches!(err, Error::Master(_)), "{err:?}");
    assert_eq!(err.to_string(), r#"invalid --master URL "http://exa mple""#);
}
