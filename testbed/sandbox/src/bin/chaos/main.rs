//! `chaos`: the reliability suite (issue 14). Runs each fault against each controller sidecar
//! binary (csi-provisioner, csi-attacher, csi-resizer), with the in-memory API server, the
//! controller-manager stand-in and the mock CSI driver in this process, and prints a table:
//! fault, sidecar, object count, converged, orphaned, duplicated, time to converge, sidecar
//! restarts, what was observed, and upstream's behaviour for the same fault
//! (docs/reliability.md). The node part (`node`) runs the faults of the node sidecars,
//! csi-node-driver-registrar and livenessprobe, and prints a table of its own.
//!
//! `--churn` runs the churn mode instead (bounded resources, [`churn`]).
//!
//! Exit code 0 when every row passed, 1 when one failed, 2 when the suite could not be set up.

mod churn;
mod empty_ids;
mod fault;
mod garbage;
mod node;
mod report;
mod rig;
mod scenario;
mod thaw;
mod workload;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

use fault::Fault;
use scenario::Setup;

const EXIT_FAILED: u8 = 1;
const EXIT_SETUP_FAILED: u8 = 2;

/// A controller sidecar the suite runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Sidecar {
    /// csi-provisioner: claims to PVs.
    Provisioner,
    /// csi-attacher: VolumeAttachments attached.
    Attacher,
    /// csi-resizer: bound claims expanded.
    Resizer,
}

impl Sidecar {
    /// Its binary name (upstream's).
    pub(crate) fn binary(self) -> &'static str {
        match self {
            Sidecar::Provisioner => "csi-provisioner",
            Sidecar::Attacher => "csi-attacher",
            Sidecar::Resizer => "csi-resizer",
        }
    }
}

/// Flags of `chaos`.
#[derive(Debug, Parser)]
#[command(
    name = "chaos",
    about = "Run faults (leader loss, driver errors and crashes, API server restarts, conflicts, mid-operation changes) against the CSI sidecar binaries and print what converged, leaked or repeated"
)]
struct Args {
    /// Sidecars to run (all by default).
    #[arg(long, value_enum, value_delimiter = ',')]
    sidecar: Vec<Sidecar>,
    /// Faults to run (all by default).
    #[arg(long, value_enum, value_delimiter = ',')]
    fault: Vec<Fault>,
    /// Claims created at once for csi-provisioner.
    #[arg(long, default_value_t = 200)]
    claims: usize,
    /// VolumeAttachments created at once for csi-attacher.
    #[arg(long, default_value_t = 200)]
    attachments: usize,
    /// Expansions requested at once for csi-resizer.
    #[arg(long, default_value_t = 100)]
    expansions: usize,
    /// Seed of the random driver errors.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Leader-election timings of the leader faults: fast (3 s / 2 s / 1 s) or upstream's
    /// defaults (15 s / 10 s / 5 s). The API server faults always run with upstream's.
    #[arg(long, value_enum, default_value_t = rig::LeaderTimings::Fast)]
    leader_timings: rig::LeaderTimings,
    /// Longest wait, in seconds, for one scenario's burst to converge.
    #[arg(long, default_value_t = 180)]
    timeout_secs: u64,
    /// Directory with the sidecar binaries (default: this binary's dir).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Directory for sockets, kubeconfigs and sidecar logs (default: a new temp dir, kept).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Also write the table as Markdown to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// resourceVersion of the API server's last write before the run (its etcd revision): a
    /// cluster that has lived a while is in the millions, so its resourceVersions are long.
    #[arg(long, default_value_t = 0)]
    first_resource_version: u64,
    #[command(flatten)]
    churn: churn::ChurnArgs,
    /// Node faults to run (csi-node-driver-registrar, livenessprobe). Given alone, only these
    /// run; with neither `--sidecar` nor `--fault` nor this, every fault of both parts runs.
    #[arg(long, value_enum, value_delimiter = ',')]
    node_fault: Vec<node::NodeFault>,
    /// How long each node churn row runs, in seconds.
    #[arg(long, default_value_t = 180)]
    churn_secs: u64,
    /// Concurrent `/healthz` requests of the livenessprobe flood.
    #[arg(long, default_value_t = 2000)]
    flood: usize,
    /// How many floods the livenessprobe flood row sends.
    #[arg(long, default_value_t = 30)]
    flood_rounds: usize,
}

impl Args {
    /// Whether the controller part runs: unless only node faults were asked for.
    fn controllers(&self) -> bool {
        self.node_fault.is_empty() || !self.sidecar.is_empty() || !self.fault.is_empty()
    }

    /// The node faults that run: those asked for, or all when nothing was selected.
    fn node_faults(&self) -> Vec<node::NodeFault> {
        if !self.node_fault.is_empty() {
            self.node_fault.clone()
        } else if self.sidecar.is_empty() && self.fault.is_empty() {
            node::ALL.to_vec()
        } else {
            Vec::new()
        }
    }

    fn count(&self, sidecar: Sidecar) -> usize {
        match sidecar {
            Sidecar::Provisioner => self.claims,
            Sidecar::Attacher => self.attachments,
            Sidecar::Resizer => self.expansions,
        }
    }
}

fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

fn dirs(args: &Args) -> anyhow::Result<(PathBuf, PathBuf)> {
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()
            .context("cannot find this binary")?
            .parent()
            .context("this binary has no parent directory")?
            .to_owned(),
    };
    let work_dir = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => tempfile::Builder::new()
            .prefix("csi-chaos-")
            .tempdir()
            .context("cannot create the work dir")?
            .keep(),
    };
    Ok((bin_dir, work_dir))
}

fn sidecars(args: &Args) -> Vec<Sidecar> {
    if args.sidecar.is_empty() {
        vec![Sidecar::Provisioner, Sidecar::Attacher, Sidecar::Resizer]
    } else {
        args.sidecar.clone()
    }
}

/// The table and whether a row failed, from the churn mode or the faults.
async fn table(args: &Args, argv: &[String]) -> anyhow::Result<(String, bool)> {
    if args.churn.churn {
        let (bin_dir, work_dir) = dirs(args)?;
        let report = churn::run(
            &args.churn,
            &sidecars(args),
            &bin_dir,
            &work_dir,
            args.first_resource_version,
            argv,
        )
        .await?;
        return Ok((report.render(), report.failed()));
    }
    let report = run(args, argv).await?;
    Ok((report.render(), report.failed()))
}

async fn run(args: &Args, argv: &[String]) -> anyhow::Result<report::Report> {
    let (bin_dir, work_dir) = dirs(args)?;
    let sidecars = sidecars(args);
    let faults = if args.fault.is_empty() {
        fault::ALL.to_vec()
    } else {
        args.fault.clone()
    };
    let mut report = report::Report::new(argv, args.seed, &work_dir);
    let sidecars = if args.controllers() {
        sidecars
    } else {
        Vec::new()
    };
    for &sidecar in &sidecars {
        let binary = bin_dir.join(sidecar.binary());
        anyhow::ensure!(
            binary.is_file(),
            "{} is missing (build it with `cargo build --bins`)",
            binary.display()
        );
        for &fault in faults.iter().filter(|f| f.applies_to(sidecar)) {
            let setup = Setup {
                binary: &binary,
                work_dir: &work_dir,
                count: args.count(sidecar),
                seed: args.seed,
                timeout: Duration::from_secs(args.timeout_secs),
                secrets: &[rig::SECRET_VALUE.to_owned()],
                leader_timings: args.leader_timings,
                first_resource_version: args.first_resource_version,
            };
            eprintln!("chaos: {} against {}", fault.name(), sidecar.binary());
            let row = scenario::run(sidecar, fault, &setup)
                .await
                .with_context(|| format!("{} against {}", fault.name(), sidecar.binary()))?;
            eprintln!("{}", report::render_row(&row));
            report.rows.push(row);
        }
    }
    let setup = node::NodeSetup {
        bin_dir,
        work_dir,
        churn: Duration::from_secs(args.churn_secs),
        flood: args.flood,
        flood_rounds: args.flood_rounds,
    };
    report.node_rows = node::run(&args.node_faults(), &setup).await?;
    report.finish();
    Ok(report)
}

#[tokio::main]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let args = Args::parse();
    testbed_sandbox::fixtures::init_tracing();
    match table(&args, &argv).await {
        Ok((text, failed)) => {
            out(&text);
            if let Some(path) = &args.report
                && let Err(e) = std::fs::write(path, &text)
            {
                eprintln!("chaos: cannot write {}: {e}", path.display());
                return ExitCode::from(EXIT_FAILED);
            }
            if failed {
                ExitCode::from(EXIT_FAILED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(err) => {
            eprintln!("chaos: {err:#}");
            ExitCode::from(EXIT_SETUP_FAILED)
        }
    }
}
