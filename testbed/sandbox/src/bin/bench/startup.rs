//! A sidecar's start-up, measured from spawning its process: diagnostics served, caches synced
//! (its log line), every stored object through its work queues, and the API requests it sent
//! meanwhile. csi-provisioner's bench measures its one start so (the cached objects are stored
//! before it); the csi-attacher and csi-resizer benches start their sidecar a second time once
//! their cached objects are stored ([`fresh_start`]), since their first start is the idle one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use testbed_cluster::apiserver::ApiServer;
use testbed_support::process::{self, ChildProcess};
use tokio::time::Instant;

use crate::procfs::rss_kib;
use crate::requests::{self, Counts, Expected};
use crate::setup::{self, Cluster};
use crate::stats::{kib, ms, or_na};
use crate::{Args, ClientFlags, queue};

/// The log line every controller sidecar writes when its informers have synced (upstream's
/// csi-provisioner: "Started provisioner controller"): the moment it is ready to work.
pub(crate) const SYNCED_LINE: &str = "caches synced, starting controllers";

/// How long a start-up took, from spawning the process.
#[derive(Debug, Default)]
pub(crate) struct StartUp {
    /// Until `--http-endpoint` accepted a connection (the driver was probed and named).
    pub(crate) http: Option<Duration>,
    /// Until the log said the caches synced.
    pub(crate) synced: Option<Duration>,
    /// Until every stored object went through its work queue (only with objects stored).
    pub(crate) drained: Option<Duration>,
    /// The sidecar's API requests from spawning to `drained` (or `synced`).
    pub(crate) requests: Option<Counts>,
    /// RSS the settle time after `drained` (only for [`fresh_start`]).
    pub(crate) rss_kib: Option<u64>,
}

/// A work queue and how many stored objects must go through it.
pub(crate) type Queue<'a> = (&'a str, usize);

/// Waits for the milestones after the diagnostics endpoint answered: the synced line, then
/// every queue's objects; then counts the requests `agent` sent since `before`.
pub(crate) async fn milestones(
    server: &ApiServer,
    sidecar: &mut ChildProcess,
    (agent, http): (&str, std::net::SocketAddr),
    (spawned, before): (Instant, &Counts),
    queues: &[Queue<'_>],
    timeout: Duration,
    up: &mut StartUp,
) -> anyhow::Result<()> {
    sidecar
        .wait_logged(SYNCED_LINE, timeout)
        .await
        .context("the caches did not sync")?;
    up.synced = Some(spawned.elapsed());
    if queues.iter().any(|(_, n)| *n > 0) {
        for (name, n) in queues {
            queue::wait_drained(http, name, 0.0, *n, timeout).await?;
        }
        up.drained = Some(spawned.elapsed());
    }
    let after = server.requests().snapshot_of(agent);
    up.requests = Some(requests::sent_by_others(before, &after, &Counts::new()));
    Ok(())
}

/// What a second start needs: the sidecar, its flags, and how long to wait.
pub(crate) struct Restart<'a> {
    name: &'a str,
    binary: &'a Path,
    workers_flag: &'a str,
    client: ClientFlags,
    log: PathBuf,
    timeout: Duration,
    settle: Duration,
}

impl<'a> Restart<'a> {
    /// `name` from `binary` with the run's flags (`workers_flag`: the sidecar's name for its
    /// worker count), logging to `<name>-fresh-start.log` in `work_dir`.
    pub(crate) fn new(
        (name, binary): (&'a str, &'a Path),
        workers_flag: &'a str,
        args: &Args,
        work_dir: &Path,
    ) -> Self {
        Self {
            name,
            binary,
            workers_flag,
            client: args.client_flags(),
            log: work_dir.join(format!("{name}-fresh-start.log")),
            timeout: Duration::from_secs(args.timeout_secs),
            settle: Duration::from_secs(args.settle_secs),
        }
    }
}

/// Starts the sidecar again with the objects the run stored (its first process stopped) and
/// measures that start: a fresh start with N objects. Every failure lands in `failures`.
pub(crate) async fn fresh_start(
    cluster: &Cluster,
    restart: &Restart<'_>,
    queues: &[Queue<'_>],
    failures: &mut Vec<String>,
) -> StartUp {
    let mut up = StartUp::default();
    let http = match process::free_port() {
        Ok(http) => http,
        Err(e) => {
            failures.push(format!("fresh start: no free port: {e}"));
            return up;
        }
    };
    let args = setup::sidecar_args(cluster, http, restart.client, restart.workers_flag);
    let before = cluster.server.requests().snapshot_of(restart.name);
    let spawned = Instant::now();
    let (mut sidecar, ready) =
        match setup::start_sidecar(restart.name, restart.binary, &args, &restart.log, http).await {
            Ok(started) => started,
            Err(e) => {
                failures.push(format!("fresh start: {e:#}"));
                return up;
            }
        };
    let measured = async {
        ready.map_err(|e| anyhow::anyhow!(e))?;
        up.http = Some(spawned.elapsed());
        milestones(
            &cluster.server,
            &mut sidecar,
            (restart.name, http),
            (spawned, &before),
            queues,
            restart.timeout,
            &mut up,
        )
        .await?;
        tokio::time::sleep(restart.settle).await;
        let pid = sidecar.pid().context("the sidecar exited")?;
        up.rss_kib = Some(rss_kib(pid)?);
        anyhow::Ok(())
    };
    if let Err(e) = measured.await {
        failures.push(format!("fresh start: {e:#}"));
    }
    setup::stop_sidecar(sidecar, failures).await;
    up
}

/// The start-up rows of a report's measurement table, each name after `prefix`.
pub(crate) fn rows(row: &mut impl FnMut(&str, String), prefix: &str, up: &StartUp) {
    row(
        &format!("{prefix}start to diagnostics served"),
        or_na(up.http.map(ms)),
    );
    row(
        &format!("{prefix}start to caches synced (ready)"),
        or_na(up.synced.map(ms)),
    );
    row(
        &format!("{prefix}start to every stored object through its queue"),
        or_na(up.drained.map(ms)),
    );
}

/// The start-up's request table, next to upstream's.
pub(crate) fn requests_table(up: &StartUp, upstream: &[Expected]) -> String {
    match &up.requests {
        Some(counts) => requests::table(counts, 1, "per start", upstream),
        None => "n/a\n".to_owned(),
    }
}

/// RSS of a fresh start, for the measurement table.
pub(crate) fn rss(up: &StartUp) -> String {
    or_na(up.rss_kib.map(kib))
}
