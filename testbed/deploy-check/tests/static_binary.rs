//! The image contents without a container engine: the static livenessprobe (built as
//! deploy/image/build-static.sh builds every sidecar, `+crt-static` for
//! x86_64-unknown-linux-gnu) has no dynamic loader and runs inside an otherwise empty root
//! directory, as in a `FROM scratch` image: `--help`, and a real start that answers `/healthz`
//! by calling the mock driver over a socket in that root.
//!
//! The checks that need the static build are ignored, with that reason, in a plain
//! `cargo test`: that build compiles every dependency again for the target triple, which CI's
//! time budget does not hold. deploy/image/check-static.sh builds it (dev profile) and runs
//! them with `--include-ignored`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed setup step should panic"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testbed_deploy_check::elf;
use testbed_support::http_client;
use testbed_support::process::{self, ChildProcess, CommandLine};

/// `target/<profile>`, where the workspace's (dynamic) binaries are.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_owned()
}

/// The static debug build: `target/x86_64-unknown-linux-gnu/debug/livenessprobe`.
fn static_livenessprobe() -> PathBuf {
    let path = bin_dir()
        .parent()
        .unwrap()
        .join("x86_64-unknown-linux-gnu/debug/livenessprobe");
    assert!(
        path.is_file(),
        "{} is missing: build it with RUSTFLAGS='-C target-feature=+crt-static' cargo build -p livenessprobe --target x86_64-unknown-linux-gnu (deploy/image/check-static.sh does)",
        path.display()
    );
    path
}

/// A fresh root directory holding only `binary` at `/<name>`.
fn empty_root_with(binary: &Path, name: &str) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    std::fs::copy(binary, root.path().join(name)).unwrap();
    root
}

/// `chroot <root> <command...>` as root, or inside a user namespace that maps the caller to
/// root (`unshare --map-root-user`) otherwise; the environment is emptied too.
fn chrooted(root: &Path, command: &[&str]) -> (String, Vec<String>) {
    let mut words = Vec::new();
    if !rustix::process::geteuid().is_root() {
        words.extend(["--map-root-user".to_owned(), "chroot".to_owned()]);
    }
    words.push(root.display().to_string());
    words.extend(command.iter().map(|w| (*w).to_owned()));
    let program = if rustix::process::geteuid().is_root() {
        "chroot"
    } else {
        "unshare"
    };
    (program.to_owned(), words)
}

/// `name` looked up on PATH (the command runs with an empty environment, so without PATH).
fn on_path(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH (needed to check the image contents)"))
}

fn run_chrooted(root: &Path, command: &[&str]) -> std::process::Output {
    let (program, args) = chrooted(root, command);
    Command::new(on_path(&program))
        .args(&args)
        .env_clear()
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} (needed to check the image contents): {e}")
        })
}

#[test]
#[ignore = "needs the static build: deploy/image/check-static.sh"]
fn the_static_binary_has_no_dynamic_loader_and_a_workspace_binary_has_one() {
    let static_bytes = std::fs::read(static_livenessprobe()).unwrap();
    assert_eq!(elf::needs_loader(&static_bytes), Ok(false));
    let dynamic = std::fs::read(bin_dir().join("livenessprobe")).unwrap();
    assert_eq!(elf::needs_loader(&dynamic), Ok(true));
}

#[test]
fn a_dynamic_binary_cannot_start_in_an_empty_root() {
    // The check has teeth: the default (dynamic) build needs the loader the root lacks.
    let root = empty_root_with(&bin_dir().join("livenessprobe"), "livenessprobe");
    let output = run_chrooted(root.path(), &["/livenessprobe", "--help"]);
    assert!(!output.status.success(), "{output:?}");
}

#[test]
#[ignore = "needs the static build: deploy/image/check-static.sh"]
fn the_static_binary_prints_its_help_in_an_empty_root() {
    let root = empty_root_with(&static_livenessprobe(), "livenessprobe");
    let output = run_chrooted(root.path(), &["/livenessprobe", "--help"]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("--csi-address"), "{stdout}");
}

#[tokio::test]
#[ignore = "needs the static build: deploy/image/check-static.sh"]
async fn the_static_binary_probes_the_mock_driver_from_an_empty_root() {
    let root = empty_root_with(&static_livenessprobe(), "livenessprobe");
    let logs = tempfile::tempdir().unwrap();
    let socket = root.path().join("csi.sock");
    let mut driver = ChildProcess::spawn(
        "mock-csi-driver",
        &bin_dir().join("mock-csi-driver"),
        &[format!("--endpoint=unix://{}", socket.display())],
        &logs.path().join("driver.log"),
    )
    .unwrap();
    driver
        .wait_ready(Duration::from_secs(10), || process::accepts_unix(&socket))
        .await
        .unwrap();
    let http = process::free_port().unwrap();
    let endpoint = format!("--http-endpoint={http}");
    let (program, args) = chrooted(
        root.path(),
        &["/livenessprobe", "--csi-address=/csi.sock", &endpoint],
    );
    let mut probe = ChildProcess::start(
        "livenessprobe",
        CommandLine::new(program, &args),
        &logs.path().join("livenessprobe.log"),
    )
    .unwrap();
    probe
        .wait_ready(Duration::from_secs(10), || process::accepts_tcp(http))
        .await
        .unwrap();
    let response = http_client::get(http, "/healthz", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(response.status, 200, "{}", probe.log_text());
    assert_eq!(response.body, "ok");
    probe.terminate().await.unwrap();
    driver.terminate().await.unwrap();
}
