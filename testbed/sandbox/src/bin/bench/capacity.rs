//! The csi-provisioner capacity-tracking bench (`--sidecar capacity`): the real
//! `csi-provisioner` against the in-memory API server and the mock CSI driver, with
//! `--nodes` Nodes (one topology segment each) and `--classes` WaitForFirstConsumer classes of
//! the driver, run twice: capacity tracking off, then on. It reports the RSS, the time until
//! every CSIStorageCapacity exists, and, after a warm-up of 8 poll intervals (when the
//! adaptive poll has reached its longest interval), the API requests and GetCapacity calls per
//! minute over `--window-secs`. docs/bench.md has the numbers.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde_json::json;
use testbed_mock_csi::{DEFAULT_DRIVER_NAME, DEFAULT_TOPOLOGY_KEY, Method};
use testbed_support::process::{self, ChildProcess, CommandLine};
use tokio::time::Instant;

use crate::procfs::{load_average, rss_kib};
use crate::requests::{Counts, sent_by_others};
use crate::setup::{self, Cluster};
use crate::stats::{kib, preamble, result};
use crate::{Args, ClientFlags};

const PROVISIONER: &str = "csi-provisioner";
/// Where the objects go (`NAMESPACE`).
const NAMESPACE: &str = "default";

/// One run (capacity off or on).
#[derive(Debug, Default)]
struct Run {
    command: String,
    rss_start_kib: Option<u64>,
    rss_end_kib: Option<u64>,
    objects_after: Option<Duration>,
    startup_requests: Counts,
    window_requests: Counts,
    window_get_capacity: usize,
}

/// Everything the report shows.
#[derive(Debug)]
pub(crate) struct Report {
    args: Vec<String>,
    log: std::path::PathBuf,
    nodes: usize,
    classes: usize,
    poll: Duration,
    window: Duration,
    load_before: Option<String>,
    load_after: Option<String>,
    off: Run,
    on: Run,
    failures: Vec<String>,
}

impl Report {
    pub(crate) fn failed(&self) -> bool {
        !self.failures.is_empty()
    }

    pub(crate) fn render(&self) -> String {
        let mut s = preamble(PROVISIONER, &self.args, &self.on.command, &self.log);
        let keys = self.nodes * self.classes;
        let per_minute = |n: usize| {
            #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
            let rate = n as f64 * 60.0 / self.window.as_secs_f64();
            format!("{rate:.1}")
        };
        let total = |c: &Counts| c.values().sum::<usize>();
        let _ = writeln!(
            s,
            "- {} nodes (one segment each) x {} WaitForFirstConsumer classes = {keys} keys; --capacity-poll-interval={}s; window {} s after a warm-up of 8 poll intervals\n- load average before: {}, after: {}\n",
            self.nodes,
            self.classes,
            self.poll.as_secs(),
            self.window.as_secs(),
            self.load_before.as_deref().unwrap_or("n/a"),
            self.load_after.as_deref().unwrap_or("n/a"),
        );
        let _ = writeln!(s, "| measurement | capacity off | capacity on |");
        let _ = writeln!(s, "|---|---|---|");
        let row = |s: &mut String, name: &str, off: String, on: String| {
            let _ = writeln!(s, "| {name} | {off} | {on} |");
        };
        let rss = |v: Option<u64>| v.map_or_else(|| "n/a".into(), kib);
        row(
            &mut s,
            "RSS after start-up",
            rss(self.off.rss_start_kib),
            rss(self.on.rss_start_kib),
        );
        row(
            &mut s,
            "RSS at the end of the window",
            rss(self.off.rss_end_kib),
            rss(self.on.rss_end_kib),
        );
        row(
            &mut s,
            "all objects exist after",
            "-".into(),
            self.on
                .objects_after
                .map_or_else(|| "n/a".into(), |d| format!("{} ms", d.as_millis())),
        );
        row(
            &mut s,
            "API requests until then",
            total(&self.off.startup_requests).to_string(),
            total(&self.on.startup_requests).to_string(),
        );
        row(
            &mut s,
            "API requests per minute (window)",
            per_minute(total(&self.off.window_requests)),
            per_minute(total(&self.on.window_requests)),
        );
        row(
            &mut s,
            "GetCapacity calls per minute (window)",
            per_minute(self.off.window_get_capacity),
            per_minute(self.on.window_get_capacity),
        );
        #[allow(clippy::cast_precision_loss, reason = "small counts")]
        let upstream = keys as f64 * 60.0 / self.poll.as_secs_f64();
        row(
            &mut s,
            "upstream GetCapacity calls per minute (every key every interval)",
            "0".into(),
            format!("{upstream:.1}"),
        );
        let _ = writeln!(
            s,
            "\nRequests in the window, capacity on (verb, resource, count):\n"
        );
        for ((verb, resource), n) in &self.on.window_requests {
            let _ = writeln!(s, "- {verb} {resource}: {n}");
        }
        s.push_str(&result(&self.failures));
        s
    }
}

/// Stores `nodes` Nodes with their CSINodes (the default node of [`Cluster::start`] counts as
/// the first) and `classes` WaitForFirstConsumer classes of the driver.
fn populate(cluster: &Cluster, nodes: usize, classes: usize) -> anyhow::Result<()> {
    for i in 1..nodes {
        let name = format!("bench-node-{i}");
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {DEFAULT_TOPOLOGY_KEY: name}},
        }))?;
        cluster
            .server
            .put_object(&node)
            .context("cannot store a Node")?;
        let csinode: CSINode = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"drivers": [{"name": DEFAULT_DRIVER_NAME, "nodeID": name, "topologyKeys": [DEFAULT_TOPOLOGY_KEY]}]},
        }))?;
        cluster
            .server
            .put_object(&csinode)
            .context("cannot store a CSINode")?;
    }
    for i in 0..classes {
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": format!("bench-late-{i}")},
            "provisioner": DEFAULT_DRIVER_NAME,
            "volumeBindingMode": "WaitForFirstConsumer",
        }))?;
        cluster
            .server
            .put_object(&class)
            .context("cannot store a StorageClass")?;
    }
    Ok(())
}

/// Runs the bench.
pub(crate) async fn run(args: &Args, argv: Vec<String>) -> anyhow::Result<Report> {
    let bin_dir = setup::bin_dir(args.bin_dir.as_deref())?;
    let binary = bin_dir.join(PROVISIONER);
    anyhow::ensure!(binary.exists(), "{} not found", binary.display());
    let work_dir = setup::work_dir(args.work_dir.as_deref())?;
    let poll = Duration::from_secs(args.capacity_poll_secs.max(1));
    let window = Duration::from_secs(args.window_secs.max(1));
    let mut failures = Vec::new();
    let load_before = load_average();
    let off = measure(args, &binary, &work_dir.join("off"), false, &mut failures).await?;
    let on = measure(args, &binary, &work_dir.join("on"), true, &mut failures).await?;
    Ok(Report {
        args: argv,
        log: work_dir.join("on").join("csi-provisioner.log"),
        nodes: args.nodes,
        classes: args.classes,
        poll,
        window,
        load_before,
        load_after: load_average(),
        off,
        on,
        failures,
    })
}

/// One run in its own cluster.
async fn measure(
    args: &Args,
    binary: &Path,
    dir: &Path,
    capacity: bool,
    failures: &mut Vec<String>,
) -> anyhow::Result<Run> {
    std::fs::create_dir_all(dir).context("cannot create the work dir")?;
    let cluster = Cluster::start(dir).await?;
    populate(&cluster, args.nodes, args.classes)?;
    let http = process::free_port()?;
    let client: ClientFlags = args.client_flags();
    let mut flags = setup::sidecar_args(&cluster, http, client, "--worker-threads");
    if capacity {
        flags.extend([
            "--enable-capacity".to_owned(),
            "--capacity-ownerref-level=-1".to_owned(),
            format!(
                "--capacity-poll-interval={}s",
                args.capacity_poll_secs.max(1)
            ),
            // Upstream's default (1 QPS) would take minutes to create the first objects.
            format!("--kube-api-capacity-qps={}", client.qps),
            format!("--kube-api-capacity-burst={}", client.burst),
        ]);
    }
    let log = dir.join("csi-provisioner.log");
    let command = CommandLine::new(binary, &flags).env("NAMESPACE", NAMESPACE);
    let mut child = ChildProcess::start(PROVISIONER, command, &log)?;
    let ready = child
        .wait_ready(Duration::from_secs(30), || process::accepts_tcp(http))
        .await;
    let mut run = Run::default();
    if let Err(e) = ready {
        failures.push(format!("csi-provisioner not ready: {e}"));
    } else {
        observe(args, &cluster, &child, http, capacity, &mut run, failures).await;
    }
    run.command = setup::stop_sidecar(child, failures).await;
    cluster.stop(failures).await;
    Ok(run)
}

/// Start-up, warm-up and the window of one run.
async fn observe(
    args: &Args,
    cluster: &Cluster,
    child: &ChildProcess,
    http: std::net::SocketAddr,
    capacity: bool,
    run: &mut Run,
    failures: &mut Vec<String>,
) {
    let Some(pid) = child.pid() else {
        failures.push("csi-provisioner has no pid".to_owned());
        return;
    };
    let start = Instant::now();
    let keys = args.nodes * args.classes;
    if capacity {
        let all = async {
            loop {
                let body =
                    testbed_support::http_client::get(http, "/metrics", Duration::from_secs(5))
                        .await
                        .map(|r| r.body)
                        .unwrap_or_default();
                let current = body
                    .lines()
                    .find_map(|l| l.strip_prefix("csistoragecapacities_desired_current "))
                    .and_then(|v| v.parse::<f64>().ok());
                #[allow(clippy::cast_precision_loss, reason = "small counts")]
                if current.is_some_and(|c| (c - keys as f64).abs() < 0.5) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        match tokio::time::timeout(Duration::from_mins(10), all).await {
            Ok(()) => run.objects_after = Some(start.elapsed()),
            Err(_) => failures.push(format!(
                "not all {keys} CSIStorageCapacity objects appeared within 10 min"
            )),
        }
    }
    let requests = cluster.server.requests();
    run.startup_requests = requests.snapshot();
    run.rss_start_kib = rss_kib(pid).ok();
    if capacity {
        tokio::time::sleep(Duration::from_secs(args.capacity_poll_secs.max(1)) * 8).await;
    }
    let before = requests.snapshot();
    let calls_before = cluster.driver.call_count(Method::GetCapacity);
    tokio::time::sleep(Duration::from_secs(args.window_secs.max(1))).await;
    run.window_requests = sent_by_others(&before, &requests.snapshot(), &Counts::new());
    run.window_get_capacity = cluster.driver.call_count(Method::GetCapacity) - calls_before;
    run.rss_end_kib = rss_kib(pid).ok();
}
