//! `bench`: measures a real sidecar binary against the in-memory API server and the mock CSI
//! driver (both in this process), per the team rule that speed and memory are measured by a
//! bench command with a written report, never by timed tests.
//!
//! `--sidecar provisioner` (the default) benches csi-provisioner ([`provisioner`]),
//! `--sidecar attacher` benches csi-attacher ([`attacher`]), `--sidecar resizer` csi-resizer
//! ([`resizer`]); docs/bench.md describes them.
//! Exit code 0 when every step succeeded, 1 when a measurement failed (e.g. not every PV
//! appeared in time), 2 when the bench could not be set up.

mod attacher;
mod burst;
mod cache;
mod calls;
mod capacity;
mod preload;
mod procfs;
mod provisioner;
mod queue;
mod requests;
mod resizer;
mod setup;
mod startup;
mod stats;
mod watch;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;

const EXIT_MEASUREMENT_FAILED: u8 = 1;
const EXIT_SETUP_FAILED: u8 = 2;

/// The sidecar a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Sidecar {
    /// csi-provisioner: claims to PVs.
    Provisioner,
    /// csi-provisioner's storage capacity tracking: RSS and API requests, off vs on.
    Capacity,
    /// csi-attacher: VolumeAttachments attached and detached.
    Attacher,
    /// csi-resizer: bound claims expanded.
    Resizer,
}

/// Flags of `bench`.
#[derive(Debug, Parser)]
#[command(
    name = "bench",
    about = "Measure a CSI sidecar (RSS, latency, CPU and API requests per operation) against the in-memory API server and the mock CSI driver"
)]
struct Args {
    /// Which sidecar to measure.
    #[arg(long, value_enum, default_value_t = Sidecar::Provisioner)]
    sidecar: Sidecar,
    /// Directory with the sidecar binary (default: this binary's dir).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Provisioner: number of claims created at once. 200 by default, a run of seconds; the
    /// release test bed keeps up to 5,000 and more (docs/bench.md, "Test bed at 5,000
    /// claims").
    #[arg(long, default_value_t = 200)]
    claims: usize,
    /// Provisioner: create the claims already carrying the storage-provisioner annotations
    /// the controller-manager adds, so csi-provisioner can act on each at once instead of
    /// after the controller-manager stand-in's claim worker reached it. That worker is single,
    /// as kube-controller-manager's `claimWorker`, and also binds every new PV; this shows its
    /// share of a burst (docs/bench.md, "What limits the burst at QPS 1000").
    #[arg(long)]
    claims_annotated: bool,
    /// Attacher: number of VolumeAttachments created at once, then deleted at once.
    #[arg(long, default_value_t = 200)]
    attachments: usize,
    /// Attacher: PVs with an attached VolumeAttachment each; resizer: bound PVC+PV pairs;
    /// stored before the second RSS reading. Provisioner: bound PVC+PV pairs stored before
    /// it starts (a fresh start with that many objects).
    #[arg(long, default_value_t = 2000)]
    cached: usize,
    /// Capacity: Nodes, one topology segment each.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Capacity: WaitForFirstConsumer StorageClasses of the driver.
    #[arg(long, default_value_t = 5)]
    classes: usize,
    /// Capacity: `--capacity-poll-interval` in seconds (short, so the adaptive poll settles
    /// within minutes).
    #[arg(long, default_value_t = 10)]
    capacity_poll_secs: u64,
    /// Capacity: the measurement window in seconds.
    #[arg(long, default_value_t = 120)]
    window_secs: u64,
    /// Resizer: bound claims whose request is raised from 1Gi to 2Gi at once.
    #[arg(long, default_value_t = 100)]
    expansions: usize,
    /// Resizer: running pods (each mounting one cached claim) stored with the cached claims.
    #[arg(long, default_value_t = 2000)]
    pods: usize,
    /// `--kube-api-qps` of the sidecar [default: 100 for the provisioner, 200 for the
    /// attacher, the setting of upstream's attacher figures].
    #[arg(long)]
    kube_api_qps: Option<u32>,
    /// `--kube-api-burst` of the sidecar [default: 200 for the provisioner, 400 for the
    /// attacher].
    #[arg(long)]
    kube_api_burst: Option<u32>,
    /// `--worker-threads` of the sidecar (`--workers` of csi-resizer) [default: 100 for the
    /// provisioner, 10 (upstream's default) for the attacher and the resizer].
    #[arg(long)]
    worker_threads: Option<u32>,
    /// Also write the report as Markdown to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Longest wait, in seconds, for each phase (all PVs to appear, all VolumeAttachments
    /// attached, ...).
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Seconds to let the sidecar settle before each RSS reading (and, for the attacher,
    /// before the request counts after each phase are read).
    #[arg(long, default_value_t = 3)]
    settle_secs: u64,
    /// Directory for the driver socket, kubeconfig and sidecar log (default: a new temp
    /// dir, kept).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

/// The sidecar's kube client and worker flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClientFlags {
    qps: u32,
    burst: u32,
    workers: u32,
}

impl Args {
    /// The flags given, else the defaults of the chosen sidecar.
    fn client_flags(&self) -> ClientFlags {
        let defaults = match self.sidecar {
            Sidecar::Provisioner | Sidecar::Capacity => ClientFlags {
                qps: 100,
                burst: 200,
                workers: 100,
            },
            // Upstream's attacher and resizer figures (issues 10 and 11) were taken at QPS 200 /
            // burst 400.
            Sidecar::Attacher | Sidecar::Resizer => ClientFlags {
                qps: 200,
                burst: 400,
                workers: 10,
            },
        };
        ClientFlags {
            qps: self.kube_api_qps.unwrap_or(defaults.qps),
            burst: self.kube_api_burst.unwrap_or(defaults.burst),
            workers: self.worker_threads.unwrap_or(defaults.workers),
        }
    }
}

fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

fn write_report(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Runs the chosen bench: the report text and whether a measurement failed.
async fn run(args: &Args, argv: Vec<String>) -> anyhow::Result<(String, bool)> {
    match args.sidecar {
        Sidecar::Provisioner => {
            let report = provisioner::run(args, argv).await?;
            Ok((report.render(), report.failed()))
        }
        Sidecar::Capacity => {
            let report = capacity::run(args, argv).await?;
            Ok((report.render(), report.failed()))
        }
        Sidecar::Attacher => {
            let report = attacher::run(args, argv).await?;
            Ok((report.render(), report.failed()))
        }
        Sidecar::Resizer => {
            let report = resizer::run(args, argv).await?;
            Ok((report.render(), report.failed()))
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let args = Args::parse();
    testbed_sandbox::fixtures::init_tracing();
    match run(&args, argv).await {
        Ok((text, failed)) => {
            out(&text);
            if let Some(path) = &args.report
                && let Err(e) = write_report(path, &text)
            {
                eprintln!("bench: {e:#}");
                return ExitCode::from(EXIT_MEASUREMENT_FAILED);
            }
            if failed {
                ExitCode::from(EXIT_MEASUREMENT_FAILED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(err) => {
            eprintln!("bench: {err:#}");
            ExitCode::from(EXIT_SETUP_FAILED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("bench").chain(argv.iter().copied())).unwrap()
    }

    #[test]
    fn without_a_sidecar_flag_the_provisioner_is_benched_with_its_old_defaults() {
        let args = parse(&[]);
        assert_eq!(args.sidecar, Sidecar::Provisioner);
        assert_eq!(args.claims, 200);
        assert_eq!(
            args.client_flags(),
            ClientFlags {
                qps: 100,
                burst: 200,
                workers: 100
            }
        );
    }

    #[test]
    fn the_attacher_gets_upstreams_benchmark_client_settings_unless_flags_say_otherwise() {
        let args = parse(&[
            "--sidecar",
            "attacher",
            "--attachments",
            "50",
            "--cached",
            "7",
        ]);
        assert_eq!(args.sidecar, Sidecar::Attacher);
        assert_eq!((args.attachments, args.cached), (50, 7));
        assert_eq!(
            args.client_flags(),
            ClientFlags {
                qps: 200,
                burst: 400,
                workers: 10
            }
        );
        let args = parse(&[
            "--sidecar=attacher",
            "--kube-api-qps=5",
            "--kube-api-burst=10",
            "--worker-threads=3",
        ]);
        assert_eq!(
            args.client_flags(),
            ClientFlags {
                qps: 5,
                burst: 10,
                workers: 3
            }
        );
    }

    #[test]
    fn an_unknown_sidecar_is_a_usage_error() {
        let err = Args::try_parse_from(["bench", "--sidecar", "snapshotter"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
    }
}
