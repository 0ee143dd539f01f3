//! The fast subset of the node part of the reliability suite that CI runs: the `chaos` binary
//! with node faults of csi-node-driver-registrar and livenessprobe, a short churn and a smaller
//! flood. Each row checks its positive signals (upstream's `/healthz` statuses and bodies,
//! registrations seen by the kubelet stand-in, exit codes and log lines, `/proc` levels back to
//! the first window's) and the binary exits 1 when one fails. The node faults draw nothing at
//! random, so there is no seed to pass. The full run is the command's (docs/reliability.md,
//! "Node sidecars").

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::path::{Path, PathBuf};

use tokio::process::Command;

/// The target dir the binaries were built into (by the workspace's test command, as for
/// `tests/chaos.rs`).
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_chaos"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Runs `chaos` with the given node faults; returns its table after checking every row passed.
async fn chaos(faults: &[&str]) -> String {
    for binary in ["livenessprobe", "csi-node-driver-registrar"] {
        let binary = bin_dir().join(binary);
        assert!(
            binary.is_file(),
            "{} is missing: run the workspace's test command (cargo test --workspace), which builds every binary",
            binary.display()
        );
    }
    let work = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args([
            &format!("--node-fault={}", faults.join(",")),
            "--churn-secs=15",
            "--flood=500",
            "--flood-rounds=30",
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
    for fault in faults {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {fault} |")))
            .unwrap_or_else(|| panic!("no {fault} row in:\n{table}"));
        assert!(row.contains("| pass |"), "{row}");
    }
    table
}

#[tokio::test(flavor = "multi_thread")]
async fn livenessprobe_answers_upstreams_failures_in_time_and_gives_its_resources_back() {
    let table = chaos(&["driver-hang", "not-ready", "flood", "probe-churn"]).await;
    assert!(
        table.contains("500 `rpc error: code = DeadlineExceeded desc = context deadline exceeded`"),
        "{table}"
    );
    assert!(
        table.contains("30 floods of 500: 15000/15000 × 200"),
        "{table}"
    );
    // One thread under a flood: livenessprobe runs on a current-thread runtime, whose single
    // allocator arena is what lets the memory level off within the first floods.
    let flood = table.lines().find(|l| l.starts_with("| flood |")).unwrap();
    assert!(flood.contains("threads 1;"), "{flood}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_registrar_registers_again_after_kubelet_restarts_rejections_and_lost_sockets() {
    let table = chaos(&[
        "kubelet-restart",
        "registration-rejected",
        "socket-gone",
        "registrar-churn",
        "registrar-flood",
    ])
    .await;
    assert!(table.contains("socket left behind: true"), "{table}");
    assert!(
        table.contains("/healthz 404 `registration socket does not exist`"),
        "{table}"
    );
    // Every one of the flood's requests answered 200 (the row also checks descriptors and
    // memory after each flood, and that the registrar still runs and answers `ok`).
    let flood = table
        .lines()
        .find(|l| l.starts_with("| registrar-flood |"))
        .unwrap();
    assert!(
        flood.contains("30 floods of 500: 15000/15000 × 200"),
        "{flood}"
    );
}
