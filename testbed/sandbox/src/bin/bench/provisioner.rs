//! The csi-provisioner bench: the real `csi-provisioner` binary against the in-memory API
//! server, the controller-manager stand-in and the mock CSI driver (all in this process).
//!
//! It reports the provisioner's RSS at idle after start-up; for N claims of an Immediate
//! StorageClass created at once, the claim-to-PV latency (p50/p90/p99/max), the wall time of
//! the burst and the provisioner CPU time per provision (utime+stime from /proc); the RSS with
//! those objects cached; and how long deleting them took (docs/bench.md).
//!
//! Before the provisioner starts, `--cached` bound claim+PV pairs are stored ([`preload`]), so
//! the start-up is a fresh start with that many objects: the report gives the start-to-ready
//! times (diagnostics served, caches synced, every stored object through its queue), the API
//! requests of the start-up, and the RSS with them cached.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_cluster::kcm::objects::{ANN_BETA_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER};
use testbed_cluster::kcm::{self, ControllerManager};
use testbed_mock_csi::{DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID};
use testbed_support::process::{self, ChildProcess};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::procfs::{cpu_time, load_average, rss_kib};
use crate::requests::{self, Counts};
use crate::setup::{self, Cluster};
use crate::startup::{self, StartUp};
use crate::stats::{kib, latencies, ms, percentile, preamble, result};
use crate::{Args, calls, preload, watch};

const NAMESPACE: &str = "bench";
const STORAGE_CLASS: &str = "bench-immediate";
const PROVISIONER: &str = "csi-provisioner";

/// What one run measured.
#[derive(Debug, Default)]
pub(crate) struct Measured {
    startup: StartUp,
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
    /// The provisioner's API requests from the first create to the settle time after the last
    /// PV (Events included).
    provision_requests: Option<Counts>,
    /// The same from the first claim deletion to the settle time after the last PV went.
    delete_requests: Option<Counts>,
    failures: Vec<String>,
}

/// Everything the report shows.
#[derive(Debug)]
pub(crate) struct Report {
    args: Vec<String>,
    claims: usize,
    claims_annotated: bool,
    cached: usize,
    provisioner_command: String,
    provisioner_log: PathBuf,
    measured: Measured,
}

impl Report {
    pub(crate) fn failed(&self) -> bool {
        !self.measured.failures.is_empty()
    }

    pub(crate) fn render(&self) -> String {
        use std::fmt::Write as _;
        let m = &self.measured;
        let na = || "n/a".to_owned();
        let mut sorted = m.latencies.clone();
        sorted.sort();
        let pct = |p| percentile(&sorted, p).map_or_else(na, ms);
        let mut s = preamble(
            PROVISIONER,
            &self.args,
            &self.provisioner_command,
            &self.provisioner_log,
        );
        let _ = writeln!(
            s,
            "- claims: {}{}\n- bound claim+PV pairs stored before the start: {}\n",
            self.claims,
            if self.claims_annotated {
                ", created with the storage-provisioner annotations (`--claims-annotated`)"
            } else {
                ""
            },
            self.cached
        );
        let _ = writeln!(s, "| measurement | value |");
        let _ = writeln!(s, "|---|---|");
        startup::rows(
            &mut |name, value| {
                let _ = writeln!(s, "| {name} | {value} |");
            },
            "",
            &m.startup,
        );
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
        self.render_requests(&mut s);
        let _ = writeln!(
            s,
            "\nCPU time comes from /proc in 10 ms ticks. Latency runs from the moment the \
             claim's create call returned to the moment a watch on PVs delivered the PV. \
             Start-up times are polled every 50 ms (drained: every 200 ms)."
        );
        s.push_str(&result(&m.failures));
        s
    }

    /// The request tables: per provision, per deletion, per start.
    fn render_requests(&self, s: &mut String) {
        use std::fmt::Write as _;
        let m = &self.measured;
        if let Some(counts) = &m.provision_requests {
            let _ = writeln!(s, "\nAPI requests of csi-provisioner per provision:\n");
            s.push_str(&requests::table(
                counts,
                m.latencies.len(),
                "per provision",
                &UPSTREAM_PROVISION,
            ));
        }
        if let Some(counts) = &m.delete_requests {
            let _ = writeln!(s, "\nAPI requests of csi-provisioner per deletion:\n");
            s.push_str(&requests::table(
                counts,
                self.claims,
                "per deletion",
                &UPSTREAM_DELETE,
            ));
        }
        if m.startup.requests.is_some() {
            let _ = writeln!(
                s,
                "\nAPI requests of csi-provisioner during the start-up:\n"
            );
            s.push_str(&startup::requests_table(&m.startup, &UPSTREAM_START));
        }
    }
}

async fn create_fixtures(client: &Client, driver: &str) -> anyhow::Result<()> {
    let pp = PostParams::default();
    setup::create_namespace(client, NAMESPACE).await?;
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
    watch::spawn(Api::<PersistentVolume>::all(client), |event, now| {
        Some(match event {
            Ok(watcher::Event::InitDone) => Seen::Ready,
            Ok(watcher::Event::Apply(pv) | watcher::Event::InitApply(pv)) => {
                let claim = pv
                    .spec
                    .and_then(|s| s.claim_ref)
                    .filter(|r| r.namespace.as_deref() == Some(NAMESPACE))
                    .and_then(|r| r.name)?;
                Seen::Pv(claim, now)
            }
            Ok(watcher::Event::Init | watcher::Event::Delete(_)) => return None,
            Err(err) => Seen::Error(err.to_string()),
        })
    })
}

/// Creates the claims at once, waits for their PVs and fills the burst measurements.
async fn burst(
    client: &Client,
    provisioner: &ChildProcess,
    pid: u32,
    claims: usize,
    annotated: bool,
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
        let created = calls::at_once(claims, |i| {
            let api = api.clone();
            async move {
                let name = claim_name(i);
                let mut metadata = json!({"name": name, "namespace": NAMESPACE});
                if annotated {
                    metadata["annotations"] = json!({
                        ANN_STORAGE_PROVISIONER: DEFAULT_DRIVER_NAME,
                        ANN_BETA_STORAGE_PROVISIONER: DEFAULT_DRIVER_NAME,
                    });
                }
                let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                    "metadata": metadata,
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                        "storageClassName": STORAGE_CLASS,
                    },
                }))?;
                api.create(&PostParams::default(), &claim)
                    .await
                    .with_context(|| format!("cannot create claim {name}"))?;
                Ok(name)
            }
        })
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
        m.latencies = latencies(&created, &pv_at);
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
    calls::at_once(claims, |i| {
        let api = api.clone();
        async move {
            let name = claim_name(i);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(name),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(name),
                Err(e) => Err(e).with_context(|| format!("cannot delete claim {name}")),
            }
        }
    })
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

/// What upstream v6.3 sends per provision (fixtures/traffic/go-sidecar-requests.txt,
/// 15:35:48): the `Provisioning` and `ProvisioningSucceeded` Events and the PV (its finalizer
/// included).
const UPSTREAM_PROVISION: [requests::Expected; 2] =
    [("create", "events", 2), ("create", "persistentvolumes", 1)];

/// What upstream v6.3 sends per deletion of a Delete-policy PV (same capture, 15:36:06): the
/// delete, then the patch that removes its finalizer.
const UPSTREAM_DELETE: [requests::Expected; 2] = [
    ("delete", "persistentvolumes", 1),
    ("patch", "persistentvolumes", 1),
];

/// The provisioner's requests since `before`.
fn provisioner_requests(server: &ApiServer, before: &Counts) -> Counts {
    requests::sent_by_others(
        before,
        &server.requests().snapshot_of(PROVISIONER),
        &Counts::new(),
    )
}

/// Measures with a running provisioner; every failure lands in `m.failures`.
async fn measure(
    server: &ApiServer,
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
    let before = server.requests().snapshot_of(PROVISIONER);
    let burst_result = burst(
        client,
        provisioner,
        pid,
        args.claims,
        args.claims_annotated,
        timeout,
        m,
    )
    .await;
    if let Err(e) = &burst_result {
        m.failures.push(format!("{e:#}"));
    } else {
        tokio::time::sleep(settle).await;
        m.provision_requests = Some(provisioner_requests(server, &before));
        match rss_kib(pid) {
            Ok(v) => m.rss_loaded_kib = Some(v),
            Err(e) => m.failures.push(format!("{e:#}")),
        }
    }
    let before = server.requests().snapshot_of(PROVISIONER);
    match delete_all(client, args.claims, timeout).await {
        Ok(d) => {
            m.delete_wall = Some(d);
            tokio::time::sleep(settle).await;
            m.delete_requests = Some(provisioner_requests(server, &before));
        }
        Err(e) => m.failures.push(format!("cleanup: {e:#}")),
    }
    Ok(())
}

/// What upstream v6.3 sends to start (fixtures/traffic/go-sidecar-requests.txt, 15:35:03):
/// one streaming-list watch per informer (`sendInitialEvents=true`), no list.
const UPSTREAM_START: [requests::Expected; 6] = [
    ("watch", "persistentvolumeclaims", 1),
    ("watch", "persistentvolumes", 1),
    ("watch", "storageclasses", 1),
    ("watch", "nodes", 1),
    ("watch", "csinodes", 1),
    ("watch", "volumeattachments", 1),
];

pub(crate) async fn run(args: &Args, argv: Vec<String>) -> anyhow::Result<Report> {
    let bin_dir = setup::bin_dir(args.bin_dir.as_deref())?;
    let binary = testbed_sandbox::sidecars::locate(&bin_dir, PROVISIONER)
        .with_context(|| format!("{PROVISIONER} not found in {}", bin_dir.display()))?;
    let work_dir = setup::work_dir(args.work_dir.as_deref())?;
    let cluster = Cluster::start(&work_dir).await?;
    let client = cluster.server.client();
    let kcm = ControllerManager::start(client.clone(), kcm::Config::default());
    create_fixtures(&client, DEFAULT_DRIVER_NAME).await?;
    setup::create_namespace(&client, preload::NAMESPACE).await?;
    preload::store(
        &cluster.server,
        args.cached,
        STORAGE_CLASS,
        DEFAULT_DRIVER_NAME,
    )?;

    let http = process::free_port().context("no free port")?;
    let provisioner_args =
        setup::sidecar_args(&cluster, http, args.client_flags(), "--worker-threads");
    let log = work_dir.join(format!("{PROVISIONER}.log"));
    let requests_before = cluster.server.requests().snapshot_of(PROVISIONER);
    let spawned = startup::Spawned::now();
    let (mut provisioner, ready) =
        setup::start_sidecar(PROVISIONER, &binary, &provisioner_args, &log, http).await?;
    let mut measured = Measured::default();
    match ready {
        Ok(()) => {
            measured.startup.http = Some(spawned.at.elapsed());
            let timeout = Duration::from_secs(args.timeout_secs);
            let queues = [("volumes", args.cached), ("claims", args.cached)];
            if let Err(e) = startup::milestones(
                &cluster.server,
                &mut provisioner,
                (PROVISIONER, http),
                (spawned, &requests_before),
                &queues,
                timeout,
                &mut measured.startup,
            )
            .await
            {
                measured.failures.push(format!("{e:#}"));
            } else if let Err(e) =
                measure(&cluster.server, &client, &provisioner, args, &mut measured).await
            {
                measured.failures.push(format!("{e:#}"));
            }
        }
        Err(e) => measured.failures.push(e),
    }
    if let Err(e) = delete_fixtures(&client).await {
        measured.failures.push(format!("cleanup: {e:#}"));
    }
    let command = setup::stop_sidecar(provisioner, &mut measured.failures).await;
    kcm.stop().await;
    cluster.stop(&mut measured.failures).await;
    Ok(Report {
        args: argv,
        claims: args.claims,
        claims_annotated: args.claims_annotated,
        cached: args.cached,
        provisioner_command: command,
        provisioner_log: log,
        measured,
    })
}
