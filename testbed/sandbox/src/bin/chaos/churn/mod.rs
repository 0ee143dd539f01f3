//! `chaos --churn`: bounded resources under churn (issue 14: "a sidecar under 1 hour of churn,
//! or its time-compressed equivalent, ends with memory back to its level after the first
//! minute, and no task, connection or file-descriptor growth").
//!
//! For each controller sidecar: one replica against the rig of the fault scenarios, object
//! lifecycles one batch after another for `--churn-minutes` ([`lifecycle`]), the process
//! sampled every `--churn-sample-secs` ([`sample`]); then, once the churn stopped, samples
//! until its work queues are empty and every count is back to its first-minute level, or
//! `--churn-settle-secs` passed ([`verdict`]). The table is [`table`]'s.

mod lifecycle;
mod sample;
mod snapshots;
mod table;
mod verdict;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use testbed_cluster::apiserver::ApiServer;
use tokio::time::Instant;

use crate::Sidecar;
use crate::rig::{Extra, NAMESPACE, Rig};
use crate::scenario::wait_leader;
use lifecycle::Lifecycles;
use sample::{Sample, SampleLog};
pub(crate) use table::Report;
use table::Row;

/// Flags of the churn mode.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ChurnArgs {
    /// Run the churn mode (bounded resources under object churn) instead of the faults.
    #[arg(long)]
    pub(crate) churn: bool,
    /// Minutes of churn per sidecar (fractions allowed).
    #[arg(long, default_value_t = 5.0)]
    churn_minutes: f64,
    /// Seconds into the churn at which the level is read ("the first minute").
    #[arg(long, default_value_t = 60)]
    churn_level_secs: u64,
    /// Objects per batch: each batch is created, finished and deleted before the next.
    #[arg(long, default_value_t = 20)]
    churn_batch: usize,
    /// Seconds between two samples of the sidecar process.
    #[arg(long, default_value_t = 5)]
    churn_sample_secs: u64,
    /// csi-provisioner also tracks storage capacity (`--enable-capacity`, polling every 10 s):
    /// every batch adds a WaitForFirstConsumer class and removes the previous batch's, so
    /// CSIStorageCapacity objects are created, updated and deleted all along.
    #[arg(long)]
    churn_capacity: bool,
    /// How far above its first-minute level the RSS may end, in percent.
    #[arg(long, default_value_t = 10)]
    churn_rss_tolerance: u64,
    /// Longest wait after the churn for every count to return to its level. The default
    /// outlasts client-go's 90 s idle-connection timeout, after which a client that trims its
    /// pool has closed the API connections the churn opened (the sidecars' does not yet:
    /// docs/reliability.md, Bounded resources).
    #[arg(long, default_value_t = 120)]
    churn_settle_secs: u64,
}

impl ChurnArgs {
    fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.churn_minutes.max(0.0) * 60.0)
    }
}

/// The process under watch: its pid, `/metrics`, its `User-Agent` product, and the API
/// server.
#[derive(Debug, Clone)]
struct Watched {
    pid: u32,
    http: SocketAddr,
    client: &'static str,
    server: ApiServer,
    api_port: u16,
    started: Instant,
}

impl Watched {
    async fn sample(&self) -> anyhow::Result<Sample> {
        // Its main and leader-election clients both name the binary first.
        let watches: usize = self
            .server
            .requests()
            .open_watches()
            .iter()
            .filter(|(client, _)| client.starts_with(self.client))
            .map(|(_, open)| open)
            .sum();
        sample::take(
            self.pid,
            self.http,
            self.api_port,
            watches as u64,
            self.started.elapsed(),
        )
        .await
        .with_context(|| format!("cannot sample the sidecar (pid {})", self.pid))
    }
}

/// Runs the churn against every sidecar in `sidecars`, one after the other.
pub(crate) async fn run(
    args: &ChurnArgs,
    sidecars: &[Sidecar],
    bin_dir: &Path,
    work_dir: &Path,
    first_resource_version: u64,
    argv: &[String],
) -> anyhow::Result<Report> {
    let mut report = Report::new(argv, work_dir);
    for &sidecar in sidecars {
        let binary = bin_dir.join(sidecar.binary());
        anyhow::ensure!(
            binary.is_file(),
            "{} is missing (build it with `cargo build --bins`)",
            binary.display()
        );
        eprintln!("chaos: churn against {}", sidecar.binary());
        let dir = work_dir.join(format!("{}-churn", sidecar.binary()));
        let mut rig = Rig::start(&dir, &binary, sidecar, first_resource_version).await?;
        let row = churn(&mut rig, args, sidecar).await;
        rig.stop().await;
        let row = row.with_context(|| format!("churn against {}", sidecar.binary()))?;
        eprintln!("{}", table::render_row(&row));
        report.rows.push(row);
    }
    report.finish();
    Ok(report)
}

async fn churn(rig: &mut Rig, args: &ChurnArgs, sidecar: Sidecar) -> anyhow::Result<Row> {
    let capacity = args.churn_capacity && sidecar == Sidecar::Provisioner;
    if capacity {
        rig.extra = Extra {
            args: [
                "--enable-capacity",
                "--capacity-ownerref-level=-1",
                "--capacity-poll-interval=10s",
            ]
            .map(str::to_owned)
            .to_vec(),
            env: vec![
                ("NAMESPACE".to_owned(), NAMESPACE.to_owned()),
                ("POD_NAME".to_owned(), "csi-provisioner-0".to_owned()),
            ],
        };
    }
    let mut lifecycles = Lifecycles::prepare(sidecar, rig, args.churn_batch, capacity)?;
    rig.add_replica("replica-a").await?;
    wait_leader(rig, "replica-a", Duration::from_secs(30)).await?;
    let replica = rig.replicas.first().context("no replica")?;
    let watched = Watched {
        pid: replica.process.pid().context("the replica has no pid")?,
        http: replica.http,
        client: sidecar.binary(),
        server: rig.server.clone(),
        api_port: rig.api_addr().context("the API server is down")?.port(),
        started: Instant::now(),
    };
    let every = Duration::from_secs(args.churn_sample_secs.max(1));
    let until = watched.started + args.duration();
    let mut log = SampleLog::create(rig.work_dir().join("samples.csv"))?;
    let rig = &*rig;
    let (churned, sampled) = tokio::join!(
        lifecycles.run(rig, until),
        sample_until(&watched, &mut log, until, every)
    );
    sampled?;
    let churned_for = watched.started.elapsed();
    let mut problems = Vec::new();
    if let Err(e) = churned {
        problems.push(format!("{e:#}"));
    }
    let level_at = Duration::from_secs(args.churn_level_secs);
    let level = verdict::first_minute(log.samples(), level_at)
        .with_context(|| format!("the churn ended before its level was read at {level_at:?}"))?;
    let settle_until = Instant::now() + Duration::from_secs(args.churn_settle_secs);
    let stopped = Instant::now();
    let end = loop {
        let sample = watched.sample().await?;
        log.push(sample)?;
        let back = verdict::judge(&level, &sample, args.churn_rss_tolerance).is_empty();
        if back || Instant::now() >= settle_until {
            break sample;
        }
        tokio::time::sleep(every).await;
    };
    problems.extend(verdict::judge(&level, &end, args.churn_rss_tolerance));
    if rig.restarts() > 0 || rig.replicas.iter().any(|r| r.process.pid().is_none()) {
        problems.push("the sidecar exited during the churn".to_owned());
    }
    Ok(Row {
        sidecar,
        lifecycles: lifecycles.completed,
        churned_for,
        level,
        peak: verdict::peak(log.samples()),
        late_growth_kib: verdict::second_half_growth(log.samples(), churned_for),
        end,
        settled_in: stopped.elapsed(),
        problems,
    })
}

/// Samples every `every` until `until`, into `log`.
async fn sample_until(
    watched: &Watched,
    log: &mut SampleLog,
    until: Instant,
    every: Duration,
) -> anyhow::Result<()> {
    loop {
        log.push(watched.sample().await?)?;
        if Instant::now() >= until {
            return Ok(());
        }
        tokio::time::sleep(every).await;
    }
}
