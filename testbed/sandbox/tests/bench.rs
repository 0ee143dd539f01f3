//! The bench at a tiny N, as a smoke test: each controller sidecar's run completes with exit
//! code 0 and its report counts the API writes one operation costs and the requests of a
//! start. Speed and memory are the
//! command's, in docs/bench.md; nothing here reads a time or a size.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::path::Path;

use tokio::process::Command;

/// Runs `bench` with `args` against `sidecar`'s binary beside it, in a work dir removed
/// afterwards; its report once it exited 0.
async fn bench(sidecar: &str, args: &[&str]) -> String {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_bench")).parent().unwrap();
    let binary = bin_dir.join(format!("csi-{sidecar}"));
    assert!(
        binary.is_file(),
        "{} is missing: run the workspace's test command (cargo test --workspace), which builds every binary",
        binary.display()
    );
    let work = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_bench"))
        .arg(format!("--sidecar={sidecar}"))
        .args(args)
        .args(["--settle-secs=1", "--timeout-secs=120"])
        .arg(format!("--bin-dir={}", bin_dir.display()))
        .arg(format!("--work-dir={}", work.path().display()))
        .output()
        .await
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "bench exited with {}:\n{report}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("Result: OK"), "{report}");
    report
}

/// The report's row for `verb` `resource` in the table whose header names `per`.
fn per_operation<'a>(report: &'a str, per: &str, verb: &str, resource: &str) -> &'a str {
    let table = report
        .split(&format!("| per {per} |"))
        .nth(1)
        .unwrap_or_else(|| panic!("no table per {per} in:\n{report}"));
    table
        .lines()
        .find(|l| l.starts_with(&format!("| {verb} | {resource} |")))
        .unwrap_or_else(|| panic!("no {verb} {resource} row per {per} in:\n{report}"))
}

/// The report's row that begins with `start`.
fn timed_row<'a>(report: &'a str, start: &str) -> &'a str {
    report
        .lines()
        .find(|line| line.starts_with(start))
        .unwrap_or_else(|| panic!("no row {start:?} in\n{report}"))
}

#[tokio::test]
async fn the_provisioner_bench_runs_and_saves_one_pv_per_claim() {
    let report = bench("provisioner", &["--claims=5", "--cached=0"]).await;
    assert!(report.contains("| PVs seen | 5 of 5 |"), "{report}");
    let row = per_operation(&report, "provision", "create", "persistentvolumes");
    assert!(
        row.starts_with("| create | persistentvolumes | 5 | 1.00 |"),
        "{row}"
    );
    // The start-up read by the sidecar's own log timestamps: the real log format parses.
    for name in ["start to its first log line", "start to caches synced"] {
        let row = timed_row(&report, &format!("| {name}, by its log's clock | "));
        assert!(row.ends_with(" ms |"), "{row}");
    }
}

#[tokio::test]
async fn the_attacher_bench_runs_and_writes_each_status_once() {
    let report = bench("attacher", &["--attachments=5", "--cached=5"]).await;
    assert!(report.contains("| VAs attached | 5 of 5 |"), "{report}");
    assert!(
        report.contains("| VAs detached (gone) | 5 of 5 |"),
        "{report}"
    );
    let row = per_operation(&report, "attach", "patch", "volumeattachments/status");
    assert!(
        row.starts_with("| patch | volumeattachments/status | 5 | 1.00 |"),
        "{row}"
    );
    // The second start, with the five cached pairs stored, got to ready (its log line) with
    // one streaming watch per informer and no write.
    let row = per_operation(&report, "start", "watch", "volumeattachments");
    assert!(
        row.starts_with("| watch | volumeattachments | 1 | 1.00 |"),
        "{row}"
    );
    assert!(
        report
            .contains("| fresh start with 5 PVs and VAs stored: start to caches synced (ready) | "),
        "{report}"
    );
    let row = timed_row(
        &report,
        "| empty cluster: start to caches synced, by its log's clock | ",
    );
    assert!(row.ends_with(" ms |"), "{row}");
}

#[tokio::test]
async fn the_resizer_bench_runs_and_writes_each_pv_size_once() {
    let report = bench("resizer", &["--expansions=5", "--cached=5", "--pods=5"]).await;
    let row = per_operation(&report, "expansion", "patch", "persistentvolumes");
    assert!(
        row.starts_with("| patch | persistentvolumes | 5 | 1.00 |"),
        "{row}"
    );
    let row = per_operation(&report, "start", "watch", "persistentvolumeclaims");
    assert!(
        row.starts_with("| watch | persistentvolumeclaims | 1 | 1.00 |"),
        "{row}"
    );
}
