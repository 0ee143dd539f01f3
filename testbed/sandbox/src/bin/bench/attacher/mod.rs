//! The csi-attacher bench: the real `csi-attacher` binary against the in-memory API server and
//! the mock CSI driver (both in this process, no controller-manager stand-in: the bench plays
//! the attach-detach controller and creates and deletes the VolumeAttachments itself).
//!
//! Phases, in order: RSS at idle; a cache load of `--cached` PVs with one attached
//! VolumeAttachment each, stored directly in the API server's store as the attacher leaves them
//! after an attach (so loading them costs no attach), then the RSS with them cached; a burst of
//! `--attachments` new VolumeAttachments (attach latency, wall time, CPU, API requests per
//! attach); then all of them deleted at once (the same for detach); last, with the cached
//! objects still stored, a second csi-attacher is started and timed to ready (a fresh start
//! with N objects: start-to-ready, RSS, the start's API requests). docs/bench.md has the
//! numbers.

mod report;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_mock_csi::{DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID, MockDriverHandle, MockVolume};
use testbed_support::process;
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::report::Measured;
pub(crate) use self::report::Report;
use crate::burst::Burst;
use crate::procfs::{load_average, rss_kib};
use crate::setup::{self, Cluster};
use crate::startup::{self, Restart};
use crate::stats::Phase;
use crate::{Args, cache, queue, watch};

const ATTACHER: &str = "csi-attacher";
/// The attach queue (upstream's name); its adds and depth tell that the cache load is done.
const ATTACH_QUEUE: &str = "csi-attacher-va";
/// What the attacher writes on a VolumeAttachment it attached: upstream's node-ID annotation
/// and the volume-handle annotation this attacher adds (attacher/src/names.rs; the testbed
/// does not depend on sidecar crates, so the strings are repeated here).
const NODE_ID_ANNOTATION: &str = "csi.alpha.kubernetes.io/node-id";
const VOLUME_HANDLE_ANNOTATION: &str = "csi-attacher/volume-handle";
/// Name prefix of the burst's VolumeAttachments (the cached ones use `bench-cached-`).
const BURST: &str = "bench-burst-";
const GI: i64 = 1 << 30;

/// `external-attacher/<sanitized driver>`, the finalizer on attached VAs and their PVs.
fn finalizer() -> String {
    format!(
        "external-attacher/{}",
        csi_common::leader::sanitize(DEFAULT_DRIVER_NAME)
    )
}

fn pv_name(prefix: &str, i: usize) -> String {
    format!("{prefix}pv-{i}")
}

fn va_name(prefix: &str, i: usize) -> String {
    format!("{prefix}va-{i}")
}

fn handle(prefix: &str, i: usize) -> String {
    format!("{prefix}volume-{i}")
}

/// How the bench stores a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    /// A PV nobody attached yet (the burst's).
    Unattached,
    /// A PV with a VolumeAttachment, both as the attacher leaves them after an attach (the
    /// cache load's).
    Attached,
}

/// A CSI PV of the mock driver, with the attacher's finalizer when [`Stored::Attached`].
fn volume(prefix: &str, i: usize, stored: Stored) -> anyhow::Result<PersistentVolume> {
    let finalizers: Vec<String> = match stored {
        Stored::Attached => vec![finalizer()],
        Stored::Unattached => vec![],
    };
    Ok(serde_json::from_value(json!({
        "metadata": {"name": pv_name(prefix, i), "finalizers": finalizers},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "volumeMode": "Filesystem",
            "csi": {"driver": DEFAULT_DRIVER_NAME, "volumeHandle": handle(prefix, i), "fsType": "ext4"},
        },
        "status": {"phase": "Available"},
    }))?)
}

/// A VolumeAttachment of that PV on the bench node, as the attach-detach controller creates it.
fn attachment(prefix: &str, i: usize) -> anyhow::Result<VolumeAttachment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": va_name(prefix, i)},
        "spec": {
            "attacher": DEFAULT_DRIVER_NAME,
            "nodeName": DEFAULT_NODE_ID,
            "source": {"persistentVolumeName": pv_name(prefix, i)},
        },
    }))?)
}

/// The same VolumeAttachment as the attacher leaves it after a successful attach.
fn attached(prefix: &str, i: usize) -> anyhow::Result<VolumeAttachment> {
    let mut va = attachment(prefix, i)?;
    va.metadata.finalizers = Some(vec![finalizer()]);
    va.metadata.annotations = Some(BTreeMap::from([
        (NODE_ID_ANNOTATION.to_owned(), DEFAULT_NODE_ID.to_owned()),
        (VOLUME_HANDLE_ANNOTATION.to_owned(), handle(prefix, i)),
    ]));
    va.status = Some(serde_json::from_value(json!({"attached": true}))?);
    Ok(va)
}

/// Stores `count` PVs (and their volumes in the driver); when [`Stored::Attached`], also a VA
/// each. Directly in the store: no request is counted.
fn store_volumes(
    server: &ApiServer,
    driver: &MockDriverHandle,
    prefix: &str,
    count: usize,
    stored: Stored,
) -> anyhow::Result<()> {
    for i in 1..=count {
        let mut backing = MockVolume::new(handle(prefix, i), GI);
        if stored == Stored::Attached {
            backing
                .published_nodes
                .insert(DEFAULT_NODE_ID.to_owned(), false);
        }
        driver.insert_volume(backing);
        server
            .put_object(&volume(prefix, i, stored)?)
            .context("cannot store a PV")?;
        if stored == Stored::Attached {
            server
                .put_object(&attached(prefix, i)?)
                .context("cannot store a VolumeAttachment")?;
        }
    }
    Ok(())
}

/// What the VA watch reports about the burst's VolumeAttachments.
enum Seen {
    /// Delivered with `status.attached=true` at this time.
    Attached(String, Instant),
    /// Delivered with a `status.attachError`.
    AttachError(String),
    /// Delivered as deleted at this time.
    Gone(String, Instant),
}

fn seen(event: watcher::Event<VolumeAttachment>, now: Instant) -> Option<Seen> {
    let burst_name = |va: &VolumeAttachment| {
        va.metadata
            .name
            .clone()
            .filter(|name| name.starts_with(BURST))
    };
    match event {
        watcher::Event::Init | watcher::Event::InitDone => None,
        watcher::Event::Apply(va) | watcher::Event::InitApply(va) => {
            let name = burst_name(&va)?;
            let status = va.status.as_ref();
            if status.is_some_and(|s| s.attached) {
                Some(Seen::Attached(name, now))
            } else if status.is_some_and(|s| s.attach_error.is_some()) {
                Some(Seen::AttachError(name))
            } else {
                None
            }
        }
        watcher::Event::Delete(va) => Some(Seen::Gone(burst_name(&va)?, now)),
    }
}

/// Everything a phase needs.
struct Bench<'a> {
    server: &'a ApiServer,
    client: Client,
    pid: u32,
    http: SocketAddr,
    attachments: usize,
    timeout: Duration,
    settle: Duration,
}

impl Bench<'_> {
    /// Stores the cached objects and the burst's PVs, waits for the attacher to sync every VA.
    async fn load_cache(
        &self,
        driver: &MockDriverHandle,
        cached: usize,
        m: &mut Measured,
    ) -> anyhow::Result<()> {
        // The burst's PVs first, so they are in the attacher's cache before its VAs come.
        store_volumes(
            self.server,
            driver,
            BURST,
            self.attachments,
            Stored::Unattached,
        )?;
        let adds_before = queue::adds(self.http, ATTACH_QUEUE).await?;
        let load = async {
            store_volumes(
                self.server,
                driver,
                "bench-cached-",
                cached,
                Stored::Attached,
            )?;
            queue::wait_drained(self.http, ATTACH_QUEUE, adds_before, cached, self.timeout).await
        };
        m.cache = Some(cache::measure(self.server, self.pid, self.settle, load).await?);
        Ok(())
    }

    /// Creates the burst's VAs at once and waits until each is attached.
    async fn attach(
        &self,
        seen_rx: &mut mpsc::UnboundedReceiver<watch::Seen<Seen>>,
        m: &mut Measured,
    ) -> anyhow::Result<()> {
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        m.load_before = load_average();
        let mut errors = HashSet::new();
        let create = |i| {
            let api = api.clone();
            async move {
                let va = attachment(BURST, i)?;
                api.create(&PostParams::default(), &va)
                    .await
                    .with_context(|| format!("cannot create {}", va_name(BURST, i)))?;
                Ok(va_name(BURST, i))
            }
        };
        let attached = |message| match message {
            Seen::Attached(name, at) => Some((name, at)),
            Seen::AttachError(name) => {
                errors.insert(name);
                None
            }
            Seen::Gone(..) => None,
        };
        let result = self.burst(seen_rx, "create", create, attached).await;
        m.attach_errors = errors.len();
        m.attach = result?;
        if m.attach.latencies.len() < self.attachments {
            bail!(
                "only {} of {} VAs were attached within {:?}",
                m.attach.latencies.len(),
                self.attachments,
                self.timeout
            );
        }
        m.rss_attached_kib = Some(rss_kib(self.pid)?);
        Ok(())
    }

    /// Deletes the burst's VAs at once and waits until each is gone.
    async fn detach(
        &self,
        seen_rx: &mut mpsc::UnboundedReceiver<watch::Seen<Seen>>,
        m: &mut Measured,
    ) -> anyhow::Result<()> {
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        let delete = |i| {
            let api = api.clone();
            async move {
                let name = va_name(BURST, i);
                api.delete(&name, &DeleteParams::default())
                    .await
                    .with_context(|| format!("cannot delete {name}"))?;
                Ok(name)
            }
        };
        let gone = |message| match message {
            Seen::Gone(name, at) => Some((name, at)),
            _ => None,
        };
        m.detach = self.burst(seen_rx, "delete", delete, gone).await?;
        m.load_after = load_average();
        if m.detach.latencies.len() < self.attachments {
            bail!(
                "only {} of {} VAs went away within {:?}",
                m.detach.latencies.len(),
                self.attachments,
                self.timeout
            );
        }
        Ok(())
    }

    /// One `verb` call per burst VA at once, then the watch until `pick` has named each.
    async fn burst<F, Fut>(
        &self,
        seen_rx: &mut mpsc::UnboundedReceiver<watch::Seen<Seen>>,
        verb: &str,
        call: F,
        pick: impl FnMut(Seen) -> Option<(String, Instant)>,
    ) -> anyhow::Result<Phase>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = anyhow::Result<String>>,
    {
        let burst = Burst {
            server: self.server,
            pid: self.pid,
            count: self.attachments,
            timeout: self.timeout,
            settle: self.settle,
        };
        burst
            .run(seen_rx, (verb, "volumeattachments"), call, pick)
            .await
    }
}

/// Runs the phases with a running attacher; the first failure ends them and lands in
/// `m.failures`.
async fn measure(
    bench: &Bench<'_>,
    driver: &MockDriverHandle,
    cached: usize,
    m: &mut Measured,
) -> anyhow::Result<()> {
    tokio::time::sleep(bench.settle).await;
    m.rss_idle_kib = Some(rss_kib(bench.pid)?);
    bench.load_cache(driver, cached, m).await?;
    let (mut seen_rx, watch_task) = watch::start(
        bench.server,
        "volumeattachments",
        Api::<VolumeAttachment>::all(bench.client.clone()),
        seen,
    )
    .await?;
    let result = async {
        bench.attach(&mut seen_rx, m).await?;
        bench.detach(&mut seen_rx, m).await
    }
    .await;
    watch_task.abort();
    result
}

pub(crate) async fn run(args: &Args, argv: Vec<String>) -> anyhow::Result<Report> {
    let bin_dir = setup::bin_dir(args.bin_dir.as_deref())?;
    let binary = testbed_sandbox::sidecars::locate(&bin_dir, ATTACHER)
        .with_context(|| format!("{ATTACHER} not found in {}", bin_dir.display()))?;
    let work_dir = setup::work_dir(args.work_dir.as_deref())?;
    let cluster = Cluster::start(&work_dir).await?;
    let http = process::free_port().context("no free port")?;
    let attacher_args =
        setup::sidecar_args(&cluster, http, args.client_flags(), "--worker-threads");
    let log = work_dir.join(format!("{ATTACHER}.log"));
    let before = cluster.server.requests().snapshot_of(ATTACHER);
    let spawned = startup::Spawned::now();
    let (mut attacher, ready) =
        setup::start_sidecar(ATTACHER, &binary, &attacher_args, &log, http).await?;
    let mut measured = Measured::default();
    let timeout = Duration::from_secs(args.timeout_secs);
    match (ready, attacher.pid()) {
        (Ok(()), Some(pid)) => {
            measured.startup.http = Some(spawned.at.elapsed());
            // An empty cluster: no queue has stored objects to wait for.
            let synced = startup::milestones(
                &cluster.server,
                &mut attacher,
                (ATTACHER, http),
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
                attachments: args.attachments,
                timeout,
                settle: Duration::from_secs(args.settle_secs),
            };
            if let Err(e) = synced {
                measured.failures.push(format!("{e:#}"));
            } else if let Err(e) =
                measure(&bench, &cluster.driver, args.cached, &mut measured).await
            {
                measured.failures.push(format!("{e:#}"));
            }
        }
        (Ok(()), None) => measured
            .failures
            .push("the attacher exited right after start-up".to_owned()),
        (Err(e), _) => measured.failures.push(e),
    }
    let command = setup::stop_sidecar(attacher, &mut measured.failures).await;
    if measured.failures.is_empty() && args.cached > 0 {
        let restart = Restart::new((ATTACHER, &binary), "--worker-threads", args, &work_dir);
        let queues = [(ATTACH_QUEUE, args.cached)];
        measured.fresh_start =
            startup::fresh_start(&cluster, &restart, &queues, &mut measured.failures).await;
    }
    cluster.stop(&mut measured.failures).await;
    Ok(Report {
        args: argv,
        attachments: args.attachments,
        cached: args.cached,
        attacher_command: command,
        attacher_log: log,
        measured,
    })
}
