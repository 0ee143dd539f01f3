//! Hostile flags (issue 14): malformed, overflowing, negative, unicode and control-character
//! values given to each controller sidecar binary, with a reachable API server and driver so
//! that a value the parser lets through meets the code that uses it. Each must end the process
//! with a usage error (2) or a start-up error (1; csi-provisioner exits 255 there, as upstream's
//! klog.Fatal) and a message naming what is wrong; never a panic, never a hang.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed_cluster::apiserver::ApiServer;
use testbed_mock_csi::{MockDriver, MockDriverConfig};
use tokio::process::Command;

/// One hostile case: the flags, and a piece of text the error must contain.
struct Case {
    flags: &'static [&'static str],
    says: &'static str,
}

const fn case(flags: &'static [&'static str], says: &'static str) -> Case {
    Case { flags, says }
}

/// Cases every controller sidecar shares (csi-common flags).
const COMMON: &[Case] = &[
    case(&["--timeout=abc"], "invalid duration"),
    case(&["--timeout=-5s"], "negative duration"),
    case(&["--timeout=9999999999999h"], "invalid duration"),
    case(&["--timeout=1y"], "unknown unit"),
    case(&["--kube-api-qps=NaN"], "QPS"),
    case(
        &["--kube-api-burst=99999999999999999999"],
        "invalid integer",
    ),
    case(&["--kube-api-burst=-1"], "burst"),
    case(&["--csi-address=tcp://10.0.0.1:50051"], "only unix sockets"),
    case(&["--csi-address=relative/sock"], "relative"),
    case(&["--csi-address="], "empty address"),
    case(&["-v=abc"], "verbosity"),
    case(&["-v=-1"], "verbosity"),
    case(&["-v=99999999999"], "verbosity"),
    case(&["--feature-gates=Foo=maybe"], "invalid bool"),
    case(&["--leader-election=maybe"], "invalid boolean"),
    case(
        &["--leader-election-renew-deadline=garbage"],
        "invalid duration",
    ),
    case(&["--leader-election-labels=a"], "malformed"),
    case(&["--leader-election-labels=\u{202e}:\u{1}"], "label"),
    case(&["--t\u{ed}meout=1s"], "unexpected argument"),
    case(&["--timeout=1s\u{7}"], "unknown unit"),
    case(
        &["--retry-interval-start=2m", "--retry-interval-max=1s"],
        "--retry-interval-start",
    ),
    case(&["--kubeconfig=/nonexistent/kubeconfig"], "kubeconfig"),
    case(&["--http-endpoint=:99999"], "99999"),
    case(&["--http-endpoint=not-an-address"], "not-an-address"),
    case(&["positional"], "positional"),
];

/// csi-provisioner's own.
const PROVISIONER: &[Case] = &[
    case(
        &["--volume-name-uuid-length=64"],
        "--volume-name-uuid-length",
    ),
    case(
        &["--volume-name-uuid-length=-2"],
        "--volume-name-uuid-length",
    ),
    case(&["--worker-threads=0"], "--worker-threads"),
    case(&["--extra-create-metadata=sometimes"], "invalid boolean"),
    case(&["--volume-name-prefix="], "--volume-name-prefix"),
];

/// csi-attacher's own.
const ATTACHER: &[Case] = &[
    case(&["--worker-threads=0"], "--worker-threads"),
    case(&["--reconcile-sync=0s"], "--reconcile-sync"),
];

/// csi-resizer's own.
const RESIZER: &[Case] = &[
    case(&["--workers=-3"], "workers"),
    case(&["--handle-volume-inuse-error=perhaps"], "invalid boolean"),
];

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_chaos"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The flag name of `--name=value` (or `-v`), to leave the base flag out when a case sets it.
fn name_of(flag: &str) -> &str {
    flag.split('=').next().unwrap_or(flag)
}

/// Runs `binary` with `flags` on top of a working configuration; the failures found.
async fn refused(binary: &str, cases: &[Case]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::new();
    let listening = server.listen().await.unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    listening.write_kubeconfig(&kubeconfig).unwrap();
    let driver = MockDriver::start(MockDriverConfig::default(), dir.path().join("csi.sock"))
        .await
        .unwrap();
    let base = [
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--csi-address={}", driver.socket_path().display()),
        "--leader-election".to_owned(),
        "--leader-election-namespace=default".to_owned(),
    ];
    let mut failures = Vec::new();
    for case in COMMON.iter().chain(cases) {
        let set: Vec<&str> = case.flags.iter().map(|f| name_of(f)).collect();
        let args: Vec<String> = base
            .iter()
            .filter(|b| !set.contains(&name_of(b)))
            .cloned()
            .chain(case.flags.iter().map(|f| (*f).to_owned()))
            .collect();
        let run = Command::new(bin_dir().join(binary))
            .args(&args)
            .kill_on_drop(true)
            .output();
        let Ok(output) = tokio::time::timeout(Duration::from_secs(30), run).await else {
            failures.push(format!(
                "{binary} {:?}: still running after 30 s",
                case.flags
            ));
            continue;
        };
        let output = output.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let code = output.status.code();
        if !matches!(code, Some(1 | 2 | 255))
            || stderr.contains("panicked")
            || !stderr.contains(case.says)
        {
            failures.push(format!(
                "{binary} {:?}: exit {code:?}, stderr: {}",
                case.flags,
                stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
            ));
        }
    }
    failures
}

#[tokio::test(flavor = "multi_thread")]
async fn every_hostile_flag_is_refused_with_a_clear_message_by_every_controller_sidecar() {
    let (provisioner, attacher, resizer) = tokio::join!(
        refused("csi-provisioner", PROVISIONER),
        refused("csi-attacher", ATTACHER),
        refused("csi-resizer", RESIZER),
    );
    let failures: Vec<String> = [provisioner, attacher, resizer].concat();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
