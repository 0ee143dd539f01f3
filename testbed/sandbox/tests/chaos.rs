//! The fast, seeded subset of the reliability suite that CI runs: the `chaos` binary with two
//! faults per controller sidecar at a small burst. Each row must converge with nothing
//! orphaned or repeated, no unexpected restart, and the Secret's value in no log at `-v=5`
//! (the binary checks all of it and exits 1 otherwise). The full suite is the command's
//! (docs/reliability.md).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::path::{Path, PathBuf};

use tokio::process::Command;

/// The target dir the binaries were built into: the sidecars are built there by the workspace's
/// test command (`cargo test --workspace`), as for `tests/sandbox.rs`.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_chaos"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Runs `chaos` for one sidecar and the given faults; returns its table.
async fn chaos(sidecar: &str, faults: &str) -> String {
    let binary = bin_dir().join(format!("csi-{sidecar}"));
    assert!(
        binary.is_file(),
        "{} is missing: run the workspace's test command (cargo test --workspace), which builds every binary",
        binary.display()
    );
    let work = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args([
            &format!("--sidecar={sidecar}"),
            &format!("--fault={faults}"),
            "--claims=12",
            "--attachments=12",
            "--expansions=8",
            "--seed=14",
            "--timeout-secs=120",
            &format!("--bin-dir={}", bin_dir().display()),
            &format!("--work-dir={}", work.path().display()),
        ])
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "chaos exited with {}:\n{table}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for fault in faults.split(',') {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {fault} | csi-{sidecar} |")))
            .unwrap_or_else(|| panic!("no {fault} row in:\n{table}"));
        assert!(row.contains("| pass |"), "{row}");
    }
    table
}

#[tokio::test(flavor = "multi_thread")]
async fn the_provisioner_converges_without_leaks_under_driver_errors_garbage_and_deleted_claims() {
    let table = chaos("provisioner", "driver-errors,mid-op,driver-garbage").await;
    assert!(table.contains("driver calls failed"), "{table}");
    assert!(table.contains("CreateVolume answers ("), "{table}");
}

/// `leader-stop` rather than `leader-kill`: the latter's takeover bound is a timing, which a
/// test must not assert (it is the command's, docs/reliability.md).
#[tokio::test(flavor = "multi_thread")]
async fn the_attacher_survives_a_paused_leader_and_conflicting_writers() {
    let table = chaos("attacher", "leader-stop,conflicts").await;
    assert!(
        table.contains("resumed leader exited with exit status: 1"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_resizer_survives_an_api_server_restart_with_compaction_and_a_second_resize() {
    let table = chaos("resizer", "api-restart-compacted,mid-op").await;
    assert!(table.contains("rv "), "{table}");
}
