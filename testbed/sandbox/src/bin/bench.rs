//! `bench`: measures the real `csi-provisioner` binary against the in-memory API server, the
//! controller-manager stand-in and the mock CSI driver (both in this process), per the team
//! rule that speed and memory are measured by a bench command with a written report, never
//! by timed tests.
//!
//! It reports: the provisioner's RSS at idle after start-up; for N claims of an Immediate
//! StorageClass created at once, the claim-to-PV latency (p50/p90/p99/max), the wall time of
//! the burst and the provisioner CPU time per provision (utime+stime from /proc); the RSS with
//! those objects cached; and how long deleting them took. Exit code 0 when every step
//! succeeded, 1 when a measurement failed (e.g. not every PV appeared in time), 2 when the
//! bench could not be set up.

use std::collections::HashMap;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_cluster::kcm::{self, ControllerManager};
use testbed_mock_csi::{
    DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY, MockDriver, MockDriverConfig,
};
use testbed_support::process::{self, ChildProcess};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing_subscriber::EnvFilter;

const EXIT_MEASUREMENT_FAILED: u8 = 1;
const EXIT_SETUP_FAILED: u8 = 2;

const NAMESPACE: &str = "bench";
const STORAGE_CLASS: &str = "bench-immediate";
const PROVISIONER: &str = "csi-provisioner";
/// How many API requests the bench itself keeps in flight when creating or deleting claims:
/// enough that the claims arrive "at once" for the provisioner, few enough not to starve it
/// of CPU on a small machine.
const CLIENT_CONCURRENCY: usize = 32;
/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks, which Linux fixes at 100 per second
/// for every userspace-visible interface (`getconf CLK_TCK`).
const TICKS_PER_SECOND: u64 = 100;

/// Flags of `bench`.
#[derive(Debug, Parser)]
#[command(
    name = "bench",
    about = "Measure csi-provisioner (RSS, claim-to-PV latency, CPU per provision) against the in-memory API server and the mock CSI driver"
)]
struct Args {
    /// Directory with the csi-provisioner binary (default: this binary's dir).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Number of claims created at once. 200 by default: at 500 the debug in-memory API server
    /// and controller-manager stand-in, not csi-provisioner, become the bottleneck (docs/bench.md).
    #[arg(long, default_value_t = 200)]
    claims: usize,
    /// `--kube-api-qps` of the provisioner.
    #[arg(long, default_value_t = 100)]
    kube_api_qps: u32,
    /// `--kube-api-burst` of the provisioner.
    #[arg(long, default_value_t = 200)]
    kube_api_burst: u32,
    /// `--worker-threads` of the provisioner.
    #[arg(long, default_value_t = 100)]
    worker_threads: u32,
    /// Also write the report as Markdown to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Longest wait, in seconds, for all PVs to appear (and, separately, to be deleted).
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Seconds to let the provisioner settle before each RSS reading.
    #[arg(long, default_value_t = 3)]
    settle_secs: u64,
    /// Directory for the driver socket, kubeconfig and provisioner log (default: a new temp
    /// dir, kept).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

/// What one run measured.
#[derive(Debug, Default)]
struct Measured {
    rss_idle_kib: Option<u64>,
    latencies: Vec<Duration>,
    burst_wall: Option<Duration>,
    cpu_burst: Option<Duration>,
    /// CPU of this process (API server, controller-manager stand-in, mock driver, watch).
    bench_cpu_burst: Option<Duration>,
    load_before: Option<String>,
    load_after: Option<String>,
    rss_loaded_kib: Option<u64>,
    delete_wall: Option<Duration>,
    failures: Vec<String>,
}

/// Everything the report shows.
#[derive(Debug)]
struct Report {
    args: Vec<String>,
    claims: usize,
    provisioner_command: String,
    provisioner_log: PathBuf,
    measured: Measured,
}

fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// `VmRSS` of `pid` in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .with_context(|| format!("no VmRSS in {path}"))?;
    let kib = line
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("cannot parse VmRSS {line:?}"))?;
    Ok(kib)
}

/// utime + stime of `pid` (user and system CPU time of all its threads).
fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // The command name (field 2) is in parentheses and may contain spaces: fields are counted
    // after the last ')'. There field 3 (state) comes first, so utime (14) and stime (15) are
    // at indexes 11 and 12.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .with_context(|| format!("no ')' in {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .with_context(|| format!("{path} is too short"))?
            .parse::<u64>()
            .with_context(|| format!("cannot parse field {} of {path}", i + 3))
    };
    let ticks = tick(11)? + tick(12)?;
    Ok(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// The 1, 5 and 15 minute load averages (the machine is shared; this tells how busy it was).
fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Nearest-rank percentile of sorted `values`.
fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a rank among at most a few million claims, always in 1..=len"
    )]
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn kib(v: u64) -> String {
    #[allow(
        clippy::cast_precision_loss,
        reason = "an RSS in KiB is far below 2^52"
    )]
    let mib = v as f64 / 1024.0;
    format!("{mib:.1} MiB ({v} KiB)")
}

impl Report {
    fn failed(&self) -> bool {
        !self.measured.failures.is_empty()
    }

    fn render(&self) -> String {
        use std::fmt::Write as _;
        let m = &self.measured;
        let na = || "n/a".to_owned();
        let mut sorted = m.latencies.clone();
        sorted.sort();
        let pct = |p| percentile(&sorted, p).map_or_else(na, ms);
        let mut s = String::new();
        let _ = writeln!(s, "# csi-provisioner bench\n");
        let _ = writeln!(s, "- bench command: `{}`", self.args.join(" "));
        let _ = writeln!(s, "- provisioner: `{}`", self.provisioner_command);
        let _ = writeln!(s, "- provisioner log: `{}`", self.provisioner_log.display());
        let _ = writeln!(
            s,
            "- bench build: {}",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        );
        let _ = writeln!(s, "- claims: {}\n", self.claims);
        let _ = writeln!(s, "| measurement | value |");
        let _ = writeln!(s, "|---|---|");
        let _ = writeln!(
            s,
            "| RSS at idle after start-up | {} |",
            m.rss_idle_kib.map_or_else(na, kib)
        );
        let _ = writeln!(s, "| PVs seen | {} of {} |", m.latencies.len(), self.claims);
        let _ = writeln!(s, "| claim-to-PV latency p50 | {} |", pct(0.50));
        let _ = writeln!(s, "| claim-to-PV latency p90 | {} |", pct(0.90));
        let _ = writeln!(s, "| claim-to-PV latency p99 | {} |", pct(0.99));
        let _ = writeln!(
            s,
            "| claim-to-PV latency max | {} |",
            sorted.last().copied().map_or_else(na, ms)
        );
        let _ = writeln!(
            s,
            "| burst wall time (first create to last PV) | {} |",
            m.burst_wall.map_or_else(na, ms)
        );
        let _ = writeln!(
            s,
            "| provisioner CPU during the burst (utime+stime) | {} |",
            m.cpu_burst.map_or_else(na, ms)
        );
        let per = m.cpu_burst.filter(|_| !m.latencies.is_empty()).map(|cpu| {
            #[allow(
                clippy::cast_precision_loss,
                reason = "a claim count is far below 2^52"
            )]
            let n = m.latencies.len() as f64;
            format!("{:.2} ms", cpu.as_secs_f64() * 1000.0 / n)
        });
        let _ = writeln!(
            s,
            "| provisioner CPU per provision | {} |",
            per.unwrap_or_else(na)
        );
        let _ = writeln!(
            s,
            "| bench process CPU during the burst (API server, kcm, mock driver) | {} |",
            m.bench_cpu_burst.map_or_else(na, ms)
        );
        let _ = writeln!(
            s,
            "| load average 1/5/15 min before / after the burst | {} / {} |",
            m.load_before.clone().unwrap_or_else(na),
            m.load_after.clone().unwrap_or_else(na)
        );
        let _ = writeln!(
            s,
            "| RSS with the PVs and PVCs cached | {} |",
            m.rss_loaded_kib.map_or_else(na, kib)
        );
        let _ = writeln!(
            s,
            "| delete wall time (claims deleted to last PV gone) | {} |",
            m.delete_wall.map_or_else(na, ms)
        );
        let _ = writeln!(
            s,
            "\nCPU time comes from /proc in 10 ms ticks. Latency runs from the moment the \
             claim's create call returned to the moment a watch on PVs delivered the PV."
        );
        if m.failures.is_empty() {
            let _ = writeln!(s, "\nResult: OK");
        } else {
            let _ = writeln!(s, "\nResult: FAILED");
            for f in &m.failures {
                let _ = writeln!(s, "- {f}");
            }
        }
        s
    }
}

/// What kubelet and the registrar would have written, so topology-aware provisioning has a
/// node to pick (as provisioner/tests/support does).
fn register_node(server: &ApiServer, driver: &str) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": DEFAULT_NODE_ID, "labels": {DEFAULT_TOPOLOGY_KEY: DEFAULT_NODE_ID}},
    }))?;
    server.put_object(&node).context("cannot store the Node")?;
    let csinode: CSINode = serde_json::from_value(json!({
        "metadata": {"name": DEFAULT_NODE_ID},
        "spec": {"drivers": [{
            "name": driver,
            "nodeID": DEFAULT_NODE_ID,
            "topologyKeys": [DEFAULT_TOPOLOGY_KEY],
        }]},
    }))?;
    server
        .put_object(&csinode)
        .context("cannot store the CSINode")?;
    Ok(())
}

async fn create_fixtures(client: &Client, driver: &str) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::all(client.clone())
        .create(&pp, &namespace)
        .await
        .context("cannot create the Namespace")?;
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": driver,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))?;
    Api::<StorageClass>::all(client.clone())
        .create(&pp, &class)
        .await
        .context("cannot create the StorageClass")?;
    Ok(())
}

fn claim_name(i: usize) -> String {
    format!("bench-claim-{i}")
}

/// Messages of the PV watch task.
enum Seen {
    /// The initial list is done: PVs from now on are new.
    Ready,
    /// A PV bound to this claim (of [`NAMESPACE`]) was delivered at this time.
    Pv(String, Instant),
    /// The watch failed.
    Error(String),
}

/// Watches every PV and reports the claim each one is for.
fn watch_pvs(client: Client) -> (mpsc::UnboundedReceiver<Seen>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(
            Api::<PersistentVolume>::all(client),
            watcher::Config::default()
        ));
        while let Some(event) = stream.next().await {
            let now = Instant::now();
            let message = match event {
                Ok(watcher::Event::InitDone) => Seen::Ready,
                Ok(watcher::Event::Apply(pv) | watcher::Event::InitApply(pv)) => {
                    let Some(claim) = pv
                        .spec
                        .and_then(|s| s.claim_ref)
                        .filter(|r| r.namespace.as_deref() == Some(NAMESPACE))
                        .and_then(|r| r.name)
                    else {
                        continue;
                    };
                    Seen::Pv(claim, now)
                }
                Ok(watcher::Event::Init | watcher::Event::Delete(_)) => continue,
                Err(err) => Seen::Error(err.to_string()),
            };
            if tx.send(message).is_err() {
                return;
            }
        }
    });
    (rx, task)
}

/// Creates the claims at once, waits for their PVs and fills the burst measurements.
async fn burst(
    client: &Client,
    provisioner: &ChildProcess,
    pid: u32,
    claims: usize,
    timeout: Duration,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let (mut seen_rx, watch_task) = watch_pvs(client.clone());
    let result = async {
        // Bounded wait for the watch to be established, so no PV is missed.
        loop {
            match tokio::time::timeout(Duration::from_secs(30), seen_rx.recv()).await {
                Ok(Some(Seen::Ready)) => break,
                Ok(Some(Seen::Pv(..))) => {}
                Ok(Some(Seen::Error(e))) => bail!("the PV watch failed: {e}"),
                Ok(None) | Err(_) => bail!("the PV watch did not start within 30 s"),
            }
        }
        let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
        let cpu_before = cpu_time(pid)?;
        let bench_cpu_before = cpu_time(std::process::id())?;
        m.load_before = load_average();
        let started = Instant::now();
        let created: HashMap<String, Instant> = futures::stream::iter(1..=claims)
            .map(|i| {
                let api = api.clone();
                async move {
                    let name = claim_name(i);
                    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                        "metadata": {"name": name, "namespace": NAMESPACE},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                            "storageClassName": STORAGE_CLASS,
                        },
                    }))?;
                    api.create(&PostParams::default(), &claim)
                        .await
                        .with_context(|| format!("cannot create claim {name}"))?;
                    anyhow::Ok((name, Instant::now()))
                }
            })
            .buffer_unordered(CLIENT_CONCURRENCY)
            .try_collect()
            .await?;

        let deadline = started + timeout;
        let mut pv_at: HashMap<String, Instant> = HashMap::new();
        while pv_at.len() < claims {
            match tokio::time::timeout_at(deadline, seen_rx.recv()).await {
                Ok(Some(Seen::Pv(claim, at))) => {
                    pv_at.entry(claim).or_insert(at);
                }
                Ok(Some(Seen::Ready)) => {}
                Ok(Some(Seen::Error(e))) => {
                    // The watcher re-lists by itself; note it but keep going.
                    tracing::warn!(error = %e, "PV watch error");
                }
                Ok(None) => bail!("the PV watch ended"),
                Err(_) => break,
            }
        }
        let cpu_after = cpu_time(pid)?;
        m.cpu_burst = Some(cpu_after.saturating_sub(cpu_before));
        m.bench_cpu_burst = Some(cpu_time(std::process::id())?.saturating_sub(bench_cpu_before));
        m.load_after = load_average();
        m.latencies = pv_at
            .iter()
            .filter_map(|(claim, at)| {
                created
                    .get(claim)
                    .map(|c| at.checked_duration_since(*c).unwrap_or_default())
            })
            .collect();
        if let Some(last) = pv_at.values().max() {
            m.burst_wall = Some(last.duration_since(started));
        }
        if pv_at.len() < claims {
            bail!(
                "only {} of {claims} PVs appeared within {timeout:?} (log: {})",
                pv_at.len(),
                provisioner.log().display()
            );
        }
        Ok(())
    }
    .await;
    watch_task.abort();
    result
}

/// Deletes the claims (their PVs go by reclaimPolicy Delete) and waits until no PV or claim
/// of the bench is left.
async fn delete_all(client: &Client, claims: usize, timeout: Duration) -> anyhow::Result<Duration> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    futures::stream::iter(1..=claims)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = claim_name(i);
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => anyhow::Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 404 => anyhow::Ok(()),
                    Err(e) => Err(e).with_context(|| format!("cannot delete claim {name}")),
                }
            }
        })
        .buffer_unordered(CLIENT_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let deadline = started + timeout;
    loop {
        let left_claims = api.list(&ListParams::default()).await?.items.len();
        let left_pvs = pvs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|pv| {
                pv.spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .is_some_and(|r| r.namespace.as_deref() == Some(NAMESPACE))
            })
            .count();
        if left_claims == 0 && left_pvs == 0 {
            return Ok(started.elapsed());
        }
        if Instant::now() >= deadline {
            bail!("{left_claims} claims and {left_pvs} PVs still exist after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn delete_fixtures(client: &Client) -> anyhow::Result<()> {
    let dp = DeleteParams::default();
    Api::<StorageClass>::all(client.clone())
        .delete(STORAGE_CLASS, &dp)
        .await
        .context("cannot delete the StorageClass")?;
    Api::<CSINode>::all(client.clone())
        .delete(DEFAULT_NODE_ID, &dp)
        .await
        .context("cannot delete the CSINode")?;
    Api::<Node>::all(client.clone())
        .delete(DEFAULT_NODE_ID, &dp)
        .await
        .context("cannot delete the Node")?;
    Ok(())
}

/// Measures with a running provisioner; every failure lands in `m.failures`.
async fn measure(
    client: &Client,
    provisioner: &ChildProcess,
    args: &Args,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let pid = provisioner
        .pid()
        .context("the provisioner exited right after start-up")?;
    let settle = Duration::from_secs(args.settle_secs);
    let timeout = Duration::from_secs(args.timeout_secs);
    tokio::time::sleep(settle).await;
    m.rss_idle_kib = Some(rss_kib(pid)?);
    let burst_result = burst(client, provisioner, pid, args.claims, timeout, m).await;
    if let Err(e) = &burst_result {
        m.failures.push(format!("{e:#}"));
    } else {
        tokio::time::sleep(settle).await;
        match rss_kib(pid) {
            Ok(v) => m.rss_loaded_kib = Some(v),
            Err(e) => m.failures.push(format!("{e:#}")),
        }
    }
    match delete_all(client, args.claims, timeout).await {
        Ok(d) => m.delete_wall = Some(d),
        Err(e) => m.failures.push(format!("cleanup: {e:#}")),
    }
    Ok(())
}

async fn run(args: Args, argv: Vec<String>) -> anyhow::Result<Report> {
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()
            .context("cannot find this binary")?
            .parent()
            .context("this binary has no parent directory")?
            .to_owned(),
    };
    let binary = testbed_sandbox::sidecars::locate(&bin_dir, PROVISIONER)
        .with_context(|| format!("{PROVISIONER} not found in {}", bin_dir.display()))?;
    let work_dir = match &args.work_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).context("cannot create the work dir")?;
            dir.clone()
        }
        None => tempfile::Builder::new()
            .prefix("csi-bench-")
            .tempdir()
            .context("cannot create the work dir")?
            .keep(),
    };

    let server = ApiServer::new();
    let listening = server
        .listen()
        .await
        .context("cannot start the API server")?;
    let kubeconfig = work_dir.join("kubeconfig");
    listening
        .write_kubeconfig(&kubeconfig)
        .context("cannot write the kubeconfig")?;
    let client = server.client();
    let kcm = ControllerManager::start(client.clone(), kcm::Config::default());
    let driver = MockDriver::start(MockDriverConfig::default(), work_dir.join("csi.sock"))
        .await
        .context("cannot start the mock driver")?;
    register_node(&server, DEFAULT_DRIVER_NAME)?;
    create_fixtures(&client, DEFAULT_DRIVER_NAME).await?;

    let http = process::free_port().context("no free port")?;
    let provisioner_args = vec![
        format!("--csi-address={}", driver.socket_path().display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--http-endpoint={http}"),
        format!("--kube-api-qps={}", args.kube_api_qps),
        format!("--kube-api-burst={}", args.kube_api_burst),
        format!("--worker-threads={}", args.worker_threads),
    ];
    let log = work_dir.join(format!("{PROVISIONER}.log"));
    let mut provisioner = ChildProcess::spawn(PROVISIONER, &binary, &provisioner_args, &log)?;
    let mut measured = Measured::default();
    match provisioner
        .wait_ready(Duration::from_secs(30), || process::accepts_tcp(http))
        .await
    {
        Ok(()) => {
            if let Err(e) = measure(&client, &provisioner, &args, &mut measured).await {
                measured.failures.push(format!("{e:#}"));
            }
        }
        Err(e) => measured.failures.push(format!(
            "{e}; last log lines:\n{}",
            process::log_tail(&log, 10)
        )),
    }
    if let Err(e) = delete_fixtures(&client).await {
        measured.failures.push(format!("cleanup: {e:#}"));
    }
    match provisioner.exit_status() {
        Ok(Some(status)) => measured
            .failures
            .push(format!("the provisioner exited early with {status}")),
        Ok(None) => {}
        Err(e) => measured.failures.push(e.to_string()),
    }
    let command = provisioner.command_line();
    if let Err(e) = provisioner.terminate().await {
        measured
            .failures
            .push(format!("cannot stop the provisioner: {e}"));
    }
    if let Err(e) = driver.stop().await {
        measured
            .failures
            .push(format!("cannot stop the mock driver: {e}"));
    }
    kcm.stop().await;
    listening.shutdown().await;
    Ok(Report {
        args: argv,
        claims: args.claims,
        provisioner_command: command,
        provisioner_log: log,
        measured,
    })
}

fn write_report(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[tokio::main]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .init();
    let report_path = args.report.clone();
    match run(args, argv).await {
        Ok(report) => {
            let text = report.render();
            out(&text);
            if let Some(path) = &report_path
                && let Err(e) = write_report(path, &text)
            {
                eprintln!("bench: {e:#}");
                return ExitCode::from(EXIT_MEASUREMENT_FAILED);
            }
            if report.failed() {
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
