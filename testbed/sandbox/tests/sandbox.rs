//! The `sandbox` binary end to end: real child processes (mock driver and every sidecar), the
//! in-memory API server over HTTP, kubectl against its kubeconfig, and the exit codes CI
//! relies on.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

/// Every flow of the sandbox; the test below runs them all with every sidecar binary.
const FLOWS: &[&str] = &[
    "livenessprobe healthy",
    "PVC annotated by the controller-manager stand-in",
    "manual static binding",
    "node-driver-registrar registration with kubelet",
    "dynamic provisioning",
    "clone from a claim",
    "restore from a VolumeSnapshot",
    "storage capacity tracking",
    "attach and detach",
    "volume expansion",
    "volume modification",
    "deletion",
    "driver restart -> probe 500 then 200",
];

/// The sidecar binaries the sandbox starts. `cargo test --workspace` (the README's test
/// command, which CI runs after `cargo build --workspace --bins`) builds them, and the mock
/// driver, next to this package's own binaries; no test builds anything itself.
const SIDECARS: &[&str] = &[
    "livenessprobe",
    "csi-node-driver-registrar",
    "csi-provisioner",
    "csi-attacher",
    "csi-resizer",
];

/// The target dir the test binaries were built into (`target/<profile>`).
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_sandbox"))
        .parent()
        .unwrap()
        .to_owned()
}

/// A binary of another workspace package, built into [`bin_dir`] by the workspace's test
/// command.
fn workspace_binary(name: &str) -> PathBuf {
    let binary = bin_dir().join(name);
    assert!(
        binary.is_file(),
        "{} is missing: run the workspace's test command (cargo test --workspace), which builds every binary",
        binary.display()
    );
    binary
}

/// kubectl is part of this project's machine image (`/usr/bin/kubectl`).
fn kubectl() -> PathBuf {
    ["/usr/bin/kubectl", "/usr/local/bin/kubectl"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("kubectl is installed (the machine image has it at /usr/bin/kubectl)")
}

struct Run {
    status: ExitStatus,
    /// stdout, then the sandbox's stderr (for failure messages).
    stdout: String,
    report: Option<Value>,
    kubectl: Option<String>,
}

/// Runs the sandbox; with `kubectl_while_running`, passes `--keep-running`, runs kubectl once
/// the report is printed, then stops the sandbox with SIGTERM.
async fn run_sandbox(bin_dir: &Path, kubectl_while_running: bool) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = tmp.path().join("sandbox.kubeconfig");
    let report = tmp.path().join("report.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandbox"));
    cmd.arg("--claims=3")
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .arg("--report-json")
        .arg(&report)
        .arg("--work-dir")
        .arg(tmp.path().join("work"))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(tmp.path().join("stderr.log")).unwrap())
        .kill_on_drop(true);
    if kubectl_while_running {
        cmd.arg("--keep-running");
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stdout = String::new();
    let mut kubectl_output = None;
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            stdout.push_str(&line);
            stdout.push('\n');
            if line.starts_with("sandbox is running") {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_mins(1), read)
        .await
        .expect("the sandbox printed its report within 60 s");

    if kubectl_while_running {
        let out = tokio::time::timeout(
            Duration::from_secs(20),
            Command::new(kubectl())
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["get", "pvc,pv", "-A"])
                .output(),
        )
        .await
        .expect("kubectl finished within 20 s")
        .unwrap();
        assert!(
            out.status.success(),
            "kubectl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        kubectl_output = Some(String::from_utf8_lossy(&out.stdout).into_owned());
        let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
        rustix::process::kill_process(pid.unwrap(), rustix::process::Signal::TERM).unwrap();
    }
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the sandbox exited within 30 s")
        .unwrap();
    // Whatever came after the marker (nothing expected, but keep it for failure messages).
    while let Ok(Some(line)) = lines.next_line().await {
        stdout.push_str(&line);
        stdout.push('\n');
    }
    stdout.push_str("--- sandbox stderr ---\n");
    stdout.push_str(&std::fs::read_to_string(tmp.path().join("stderr.log")).unwrap_or_default());
    let report = std::fs::read_to_string(&report)
        .ok()
        .map(|text| serde_json::from_str(&text).unwrap());
    Run {
        status,
        stdout,
        report,
        kubectl: kubectl_output,
    }
}

fn outcome<'a>(report: &'a Value, flow: &str) -> &'a str {
    report["flows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == flow)
        .unwrap_or_else(|| panic!("flow {flow:?} missing from the report"))["outcome"]
        .as_str()
        .unwrap()
}

/// A bin dir with the mock driver and every sidecar binary, so the run covers every flow and
/// does not depend on anything else lying in the target dir.
fn bin_dir_with_every_sidecar(tmp: &Path) -> PathBuf {
    let dir = tmp.join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    for binary in std::iter::once(&"mock-csi-driver").chain(SIDECARS) {
        std::os::unix::fs::symlink(workspace_binary(binary), dir.join(binary)).unwrap();
    }
    dir
}

#[tokio::test]
async fn the_sandbox_passes_every_flow_and_serves_kubectl_while_it_keeps_running() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_sandbox(&bin_dir_with_every_sidecar(tmp.path()), true).await;
    let report = run.report.as_ref().expect("a JSON report");
    for flow in FLOWS {
        assert_eq!(
            outcome(report, flow),
            "passed",
            "flow {flow:?}:\n{}",
            run.stdout
        );
    }
    assert_eq!(
        report["flows"].as_array().unwrap().len(),
        FLOWS.len(),
        "a flow this test does not know:\n{}",
        run.stdout
    );
    assert!(
        run.status.success(),
        "exit {:?}:\n{}",
        run.status,
        run.stdout
    );
    assert!(run.stdout.contains("Result: PASSED"), "{}", run.stdout);
    assert!(
        run.stdout.contains("kubectl --kubeconfig"),
        "{}",
        run.stdout
    );
    let sidecar = report["sidecars"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "livenessprobe")
        .unwrap();
    assert!(sidecar["state"].as_str().unwrap().starts_with("running"));
    let highlight = report["highlights"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["sidecar"] == "livenessprobe")
        .unwrap();
    assert_eq!(highlight["healthz"], "200 \"ok\"");
    assert!(
        highlight["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m.as_str().unwrap().contains("/csi.v1.Identity/Probe")),
        "{highlight}"
    );
    let kubectl = run.kubectl.as_ref().expect("kubectl ran");
    for claim in ["sandbox-claim-1", "sandbox-claim-2", "sandbox-claim-3"] {
        assert!(
            kubectl.contains(&format!("persistentvolumeclaim/{claim}")),
            "{kubectl}"
        );
    }
}

/// A bin dir with the real mock driver and a `livenessprobe` that dies at once.
fn bin_dir_with_broken_livenessprobe(tmp: &Path) -> PathBuf {
    let dir = tmp.join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(
        workspace_binary("mock-csi-driver"),
        dir.join("mock-csi-driver"),
    )
    .unwrap();
    let fake = dir.join("livenessprobe");
    std::fs::write(&fake, "#!/bin/sh\necho 'cannot start' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[tokio::test]
async fn a_sidecar_that_cannot_start_fails_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_sandbox(&bin_dir_with_broken_livenessprobe(tmp.path()), false).await;
    assert_eq!(run.status.code(), Some(1), "{}", run.stdout);
    assert!(run.stdout.contains("livenessprobe") && run.stdout.contains("failed to start"));
    assert!(
        run.stdout.contains("cannot start"),
        "log tail in the report:\n{}",
        run.stdout
    );
    let report = run.report.unwrap();
    // Flows that need it are skipped, the others still pass.
    assert_eq!(outcome(&report, "livenessprobe healthy"), "skipped");
    assert_eq!(outcome(&report, "manual static binding"), "passed");
    assert!(run.stdout.contains("Result: FAILED"));
}

#[tokio::test]
async fn a_missing_mock_driver_is_a_setup_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let run = run_sandbox(tmp.path(), false).await;
    assert_eq!(run.status.code(), Some(2), "{}", run.stdout);
    assert!(run.report.is_none());
}
