//! `sandbox`: runs the CSI sidecars without a cluster (see `testbed_sandbox`) and prints a
//! report. Exit code 0 only when every flow passed (skipped flows do not fail), 1 when a flow
//! failed or a built sidecar did not start, 2 when the sandbox could not be set up.
//!
//! `--keep-running` leaves everything up after the report until SIGINT/SIGTERM, so the
//! written kubeconfig can be used with kubectl.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use testbed_sandbox::{Options, Sandbox, flows};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

const EXIT_FLOW_FAILED: u8 = 1;
const EXIT_SETUP_FAILED: u8 = 2;

/// Flags of `sandbox`.
#[derive(Debug, Parser)]
#[command(
    name = "sandbox",
    about = "Run the CSI sidecars against an in-memory API server, a controller-manager stand-in and the mock CSI driver, and report what happened"
)]
struct Args {
    /// Keep everything running after the report until Ctrl-C (for kubectl).
    #[arg(long)]
    keep_running: bool,
    /// Where to write the kubeconfig of the in-memory API server.
    #[arg(long, default_value = "sandbox.kubeconfig")]
    kubeconfig_out: PathBuf,
    /// Directory with mock-csi-driver and the sidecar binaries (default: this binary's dir).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Number of PersistentVolumeClaims to create.
    #[arg(long, default_value_t = 5)]
    claims: usize,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    report_json: Option<PathBuf>,
    /// Directory for sockets and child logs (default: a new temp dir, kept).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let bin_dir = match args.bin_dir {
        Some(dir) => dir,
        None => std::env::current_exe()
            .context("cannot find this binary")?
            .parent()
            .context("this binary has no parent directory")?
            .to_owned(),
    };
    let mut options = Options::new(bin_dir);
    options.kubeconfig_out = args.kubeconfig_out;
    options.claims = args.claims;
    options.work_dir = args.work_dir;

    let sandbox = Sandbox::start(options)
        .await
        .context("cannot set up the sandbox")?;
    let flows = sandbox.run_flows(&flows::all()).await;
    let report = sandbox.report(flows).await;
    out(&report.render());
    if let Some(path) = &args.report_json {
        let json = serde_json::to_string_pretty(&report).context("cannot encode the report")?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.keep_running {
        out(&format!(
            "\nsandbox is running; try:\n  kubectl --kubeconfig {} get pvc,pv -A\nPress Ctrl-C to stop.\n",
            report.kubeconfig
        ));
        wait_for_signal().await?;
    }
    sandbox.shutdown().await;
    Ok(report.passed())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                EnvFilter::new("warn,testbed_sandbox=info,testbed_support=info")
            }),
        )
        .init();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_FLOW_FAILED),
        Err(err) => {
            eprintln!("sandbox: {err:#}");
            ExitCode::from(EXIT_SETUP_FAILED)
        }
    }
}
