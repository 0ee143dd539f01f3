//! `mock-csi-driver`: the test suite's mock CSI driver as a standalone process, for manual runs
//! and for sandboxes that start sidecar binaries against it.
//!
//! Prints `listening on unix:///...` to stderr once it accepts connections, serves until SIGTERM
//! or SIGINT, then removes its socket and exits 0.

use anyhow::Context as _;
use clap::Parser as _;
use testbed_mock_csi::MockDriver;
use testbed_mock_csi::cli::Args;
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (socket_path, config) = Args::parse().into_config()?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();

    // Handlers first: a supervisor may signal us as soon as it sees the "listening" line.
    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;

    let driver = MockDriver::start(config, &socket_path)
        .await
        .with_context(|| {
            format!(
                "cannot start the mock CSI driver on {}",
                socket_path.display()
            )
        })?;
    eprintln!("listening on {}", driver.endpoint());

    let signal_name = tokio::select! {
        _ = sigterm.recv() => "SIGTERM",
        _ = sigint.recv() => "SIGINT",
    };
    tracing::info!(signal = signal_name, "shutting down");
    driver
        .stop()
        .await
        .context("cannot stop the mock CSI driver cleanly")?;
    Ok(())
}
