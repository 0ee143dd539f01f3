//! The csi-resizer bench: the real `csi-resizer` binary against the in-memory API server and
//! the mock CSI driver (both in this process; the bench plays the user who raises a claim's
//! request).
//!
//! Phases, in order: RSS at idle; a cache load of `--cached` bound PVC+PV pairs and `--pods`
//! pods (each pod mounting one of those claims), stored directly in the API server's store, then
//! the RSS with them present (upstream's resizer watches every Pod in the cluster, so its memory
//! grows with them; ours should not); a burst of `--expansions` bound claims whose request is
//! raised from 1Gi to 2Gi at once (expansion latency, wall time, CPU, API requests per
//! expansion). The mock driver answers like csi-driver-host-path (`node_expansion_required`),
//! so an expansion is done when the claim's `allocatedResourceStatuses` says
//! `NodeResizePending`, as in the golden traffic capture. Last, with every claim still stored,
//! a second csi-resizer is started and timed to ready (a fresh start with N objects:
//! start-to-ready, RSS, the start's API requests). docs/bench.md has the numbers.

mod report;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_mock_csi::{DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID, MockDriverHandle, MockVolume};
use testbed_sandbox::fixtures::Binding;
use testbed_support::process;
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::report::Measured;
pub(crate) use self::report::Report;
use crate::burst::Burst;
use crate::procfs::{load_average, rss_kib};
use crate::setup::{self, Cluster};
use crate::startup::{self, Restart};
use crate::{Args, cache, queue, watch};

const RESIZER: &str = "csi-resizer";
const NAMESPACE: &str = "bench";
/// Name prefix of the burst's claims (the cached ones use `cached-`).
const BURST: &str = "burst-";
const CACHED: &str = "cached-";
const GI: i64 = 1 << 30;

/// The resizer's work queue (upstream's name, `<driver>-pvc`); its adds and depth tell that the
/// cache load is done.
fn resize_queue() -> String {
    format!("{DEFAULT_DRIVER_NAME}-pvc")
}

fn claim_name(prefix: &str, i: usize) -> String {
    format!("{prefix}claim-{i}")
}

fn pv_name(prefix: &str, i: usize) -> String {
    format!("{prefix}pv-{i}")
}

/// The bound claim and PV named `names` (claim, PV).
fn binding(names: &(String, String)) -> Binding<'_> {
    Binding {
        namespace: NAMESPACE,
        claim: &names.0,
        volume: &names.1,
        class: "bench",
        driver: DEFAULT_DRIVER_NAME,
    }
}

/// A running pod on the bench node that mounts claim `i` of the cache load.
fn pod(i: usize) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("pod-{i}"), "namespace": NAMESPACE, "labels": {"app": "bench"}},
        "spec": {
            "nodeName": DEFAULT_NODE_ID,
            "containers": [{
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name(CACHED, i)}}],
        },
        "status": {"phase": "Running"},
    }))?)
}

/// Stores `count` bound claims with their PVs (and their volumes in the driver). Directly in
/// the store: no request is counted. The claim first: its PV's `claimRef` carries the uid the
/// API server gave it (the resizer, as upstream, skips a PV bound to another claim).
fn store_claims(
    server: &ApiServer,
    driver: &MockDriverHandle,
    prefix: &str,
    count: usize,
) -> anyhow::Result<()> {
    for i in 1..=count {
        driver.insert_volume(MockVolume::new(pv_name(prefix, i), GI));
        let names = (claim_name(prefix, i), pv_name(prefix, i));
        let stored = server
            .put_object(&binding(&names).claim()?)
            .context("cannot store a claim")?;
        let uid = stored.metadata.uid.unwrap_or_default();
        server
            .put_object(&binding(&names).volume(&uid)?)
            .context("cannot store a PV")?;
    }
    Ok(())
}

fn store_pods(server: &ApiServer, count: usize) -> anyhow::Result<()> {
    for i in 1..=count {
        server.put_object(&pod(i)?).context("cannot store a Pod")?;
    }
    Ok(())
}

/// What the claim watch reports about the burst's claims.
enum Seen {
    /// Delivered with the controller's part of the expansion done (`NodeResizePending`, or
    /// no allocated status left with a capacity of 2Gi) at this time.
    Expanded(String, Instant),
    /// Delivered with a `ControllerResizeError` condition.
    Failed(String),
}

/// Whether the resizer has finished its part of expanding `claim` to 2Gi.
fn expanded(claim: &PersistentVolumeClaim) -> bool {
    let Some(status) = claim.status.as_ref() else {
        return false;
    };
    let node_pending = status
        .allocated_resource_statuses
        .as_ref()
        .and_then(|s| s.get("storage"))
        .is_some_and(|s| s == "NodeResizePending");
    let grown = status
        .capacity
        .as_ref()
        .and_then(|c| c.get("storage"))
        .is_some_and(|q| q.0 == "2Gi");
    node_pending || grown
}

fn failed(claim: &PersistentVolumeClaim) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "ControllerResizeError"))
}

fn seen(event: watcher::Event<PersistentVolumeClaim>, now: Instant) -> Option<Seen> {
    match event {
        watcher::Event::Init | watcher::Event::InitDone | watcher::Event::Delete(_) => None,
        watcher::Event::Apply(claim) | watcher::Event::InitApply(claim) => {
            let name = claim
                .metadata
                .name
                .clone()
                .filter(|name| name.starts_with(BURST))?;
            if expanded(&claim) {
                Some(Seen::Expanded(name, now))
            } else if failed(&claim) {
                Some(Seen::Failed(name))
            } else {
                None
            }
        }
    }
}

/// Everything a phase needs.
struct Bench<'a> {
    server: &'a ApiServer,
    client: Client,
    pid: u32,
    http: SocketAddr,
    expansions: usize,
    timeout: Duration,
    settle: Duration,
}

impl Bench<'_> {
    /// Stores the burst's claims, the cached claims and the pods; waits until the resizer has
    /// queued and synced every claim.
    async fn load_cache(
        &self,
        driver: &MockDriverHandle,
        cached: usize,
        pods: usize,
        m: &mut Measured,
    ) -> anyhow::Result<()> {
        let queue = resize_queue();
        let adds_before = queue::adds(self.http, &queue).await?;
        let load = async {
            store_claims(self.server, driver, BURST, self.expansions)?;
            store_claims(self.server, driver, CACHED, cached)?;
            store_pods(self.server, pods)?;
            queue::wait_drained(
                self.http,
                &queue,
                adds_before,
                self.expansions + cached,
                self.timeout,
            )
            .await
        };
        m.cache = Some(cache::measure(self.server, self.pid, self.settle, load).await?);
        Ok(())
    }

    /// Raises every burst claim's request to 2Gi at once and waits until each is expanded.
    async fn expand(
        &self,
        seen_rx: &mut mpsc::UnboundedReceiver<watch::Seen<Seen>>,
        m: &mut Measured,
    ) -> anyhow::Result<()> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), NAMESPACE);
        m.load_before = load_average();
        let raise = |i| {
            let api = api.clone();
            async move {
                let name = claim_name(BURST, i);
                let body = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(body))
                    .await
                    .with_context(|| format!("cannot raise the request of {name}"))?;
                Ok(name)
            }
        };
        let mut failures = HashSet::new();
        let done = |seen| match seen {
            Seen::Expanded(name, at) => Some((name, at)),
            Seen::Failed(name) => {
                failures.insert(name);
                None
            }
        };
        let burst = Burst {
            server: self.server,
            pid: self.pid,
            count: self.expansions,
            timeout: self.timeout,
            settle: self.settle,
        };
        let result = burst
            .run(seen_rx, ("patch", "persistentvolumeclaims"), raise, done)
            .await;
        m.expand_errors = failures.len();
        m.expand = result?;
        m.load_after = load_average();
        if m.expand.latencies.len() < self.expansions {
            bail!(
                "only {} of {} claims were expanded within {:?}",
                m.expand.latencies.len(),
                self.expansions,
                self.timeout
            );
        }
        m.rss_expanded_kib = Some(rss_kib(self.pid)?);
        Ok(())
    }
}

/// Runs the phases with a running resizer; the first failure ends them and lands in
/// `m.failures`.
async fn measure(
    bench: &Bench<'_>,
    driver: &MockDriverHandle,
    args: &Args,
    m: &mut Measured,
) -> anyhow::Result<()> {
    tokio::time::sleep(bench.settle).await;
    m.rss_idle_kib = Some(rss_kib(bench.pid)?);
    bench.load_cache(driver, args.cached, args.pods, m).await?;
    let (mut seen_rx, watch_task) = watch::start(
        bench.server,
        "persistentvolumeclaims",
        Api::<PersistentVolumeClaim>::namespaced(bench.client.clone(), NAMESPACE),
        seen,
    )
    .await?;
    let result = bench.expand(&mut seen_rx, m).await;
    watch_task.abort();
    result
}

pub(crate) async fn run(args: &Args, argv: Vec<String>) -> anyhow::Result<Report> {
    let bin_dir = setup::bin_dir(args.bin_dir.as_deref())?;
    let binary = testbed_sandbox::sidecars::locate(&bin_dir, RESIZER)
        .with_context(|| format!("{RESIZER} not found in {}", bin_dir.display()))?;
    let work_dir = setup::work_dir(args.work_dir.as_deref())?;
    let cluster = Cluster::start(&work_dir).await?;
    setup::create_namespace(&cluster.server.client(), NAMESPACE).await?;
    let http = process::free_port().context("no free port")?;
    let resizer_args = setup::sidecar_args(&cluster, http, args.client_flags(), "--workers");
    let log = work_dir.join(format!("{RESIZER}.log"));
    let before = cluster.server.requests().snapshot_of(RESIZER);
    let spawned = startup::Spawned::now();
    let (mut resizer, ready) =
        setup::start_sidecar(RESIZER, &binary, &resizer_args, &log, http).await?;
    let mut measured = Measured::default();
    let timeout = Duration::from_secs(args.timeout_secs);
    match (ready, resizer.pid()) {
        (Ok(()), Some(pid)) => {
            measured.startup.http = Some(spawned.at.elapsed());
            // An empty cluster: no queue has stored objects to wait for.
            let synced = startup::milestones(
                &cluster.server,
                &mut resizer,
                (RESIZER, http),
                (spawned, &before),
                &[],
                timeout,
                &mut measured.startup,
            )
            .await;
            let bench = Bench {
                server: &cluster.server,
                client: cluster.server.client(),
                pid,
                http,
                expansions: args.expansions,
                timeout,
                settle: Duration::from_secs(args.settle_secs),
            };
            if let Err(e) = synced {
                measured.failures.push(format!("{e:#}"));
            } else if let Err(e) = measure(&bench, &cluster.driver, args, &mut measured).await {
                measured.failures.push(format!("{e:#}"));
            }
        }
        (Ok(()), None) => measured
            .failures
            .push("the resizer exited right after start-up".to_owned()),
        (Err(e), _) => measured.failures.push(e),
    }
    let command = setup::stop_sidecar(resizer, &mut measured.failures).await;
    if measured.failures.is_empty() && args.cached + args.expansions > 0 {
        let restart = Restart::new((RESIZER, &binary), "--workers", args, &work_dir);
        let queue = resize_queue();
        let queues = [(queue.as_str(), args.cached + args.expansions)];
        measured.fresh_start =
            startup::fresh_start(&cluster, &restart, &queues, &mut measured.failures).await;
    }
    cluster.stop(&mut measured.failures).await;
    Ok(Report {
        args: argv,
        expansions: args.expansions,
        cached: args.cached,
        pods: args.pods,
        resizer_command: command,
        resizer_log: log,
        measured,
    })
}
