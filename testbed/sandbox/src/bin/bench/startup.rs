//! A sidecar's start-up, measured from spawning its process: diagnostics served, caches synced
//! (its log line), every stored object through its work queues, and the API requests it sent
//! meanwhile. csi-provisioner's bench measures its one start so (the cached objects are stored
//! before it); the csi-attacher and csi-resizer benches start their sidecar a second time once
//! their cached objects are stored ([`fresh_start`]), since their first start is the idle one.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

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

/// What the first line of every controller sidecar's log holds (`csi_common::sidecar::prepare`
/// logs `<binary> starting version=...` before anything else).
const FIRST_LINE: &str = "starting version=";

/// When a sidecar was spawned: by the bench's monotonic clock, which the polled milestones are
/// measured with, and by the wall clock, which its log's timestamps are read against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spawned {
    pub(crate) at: Instant,
    wall: SystemTime,
}

impl Spawned {
    pub(crate) fn now() -> Self {
        Self {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }
}

/// How long a start-up took, from spawning the process.
#[derive(Debug, Default)]
pub(crate) struct StartUp {
    /// Until `--http-endpoint` accepted a connection (the driver was probed and named).
    pub(crate) http: Option<Duration>,
    /// Until the bench saw the log say the caches synced (it reads the log every 50 ms).
    pub(crate) synced: Option<Duration>,
    /// Until the sidecar wrote its first log line, by its log's own timestamp: the process's
    /// exec, loading and runtime start.
    pub(crate) first_line_logged: Option<Duration>,
    /// Until the sidecar wrote the synced line, by its log's own timestamp (microseconds, not
    /// the bench's 50 ms polls).
    pub(crate) synced_logged: Option<Duration>,
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
    (spawned, before): (Spawned, &Counts),
    queues: &[Queue<'_>],
    timeout: Duration,
    up: &mut StartUp,
) -> anyhow::Result<()> {
    sidecar
        .wait_logged(SYNCED_LINE, timeout)
        .await
        .context("the caches did not sync")?;
    up.synced = Some(spawned.at.elapsed());
    let log = sidecar.log_text();
    up.first_line_logged = logged_after(&log, FIRST_LINE, spawned.wall);
    up.synced_logged = logged_after(&log, SYNCED_LINE, spawned.wall);
    if queues.iter().any(|(_, n)| *n > 0) {
        for (name, n) in queues {
            queue::wait_drained(http, name, 0.0, *n, timeout).await?;
        }
        up.drained = Some(spawned.at.elapsed());
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
    let spawned = Spawned::now();
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
        up.http = Some(spawned.at.elapsed());
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
        &format!("{prefix}start to its first log line, by its log's clock"),
        or_na(up.first_line_logged.map(ms)),
    );
    row(
        &format!("{prefix}start to caches synced, by its log's clock"),
        or_na(up.synced_logged.map(ms)),
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

/// How long after `spawned` the first line of `log` holding `needle` was written, by the
/// timestamp that begins each line of `--logging-format=text` (RFC 3339, UTC, microseconds);
/// `None` when no line holds it, its timestamp does not parse, or it reads before `spawned`.
fn logged_after(log: &str, needle: &str, spawned: SystemTime) -> Option<Duration> {
    let line = log.lines().find(|line| line.contains(needle))?;
    let stamp: jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
    let spawned = jiff::Timestamp::try_from(spawned).ok()?;
    Duration::try_from(stamp.duration_since(spawned)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
2026-12-07T01:53:32.704384Z  INFO csi_common::sidecar::prepare: csi-provisioner starting version=\"v0.1.0\"
2026-12-07T01:53:32.720281Z  INFO csi_common::sidecar: serving diagnostics address=\"127.0.0.1:43077\"
2026-12-07T01:53:32.751000Z  INFO csi_common::sidecar: caches synced, starting controllers
";

    fn at(stamp: &str) -> SystemTime {
        SystemTime::from(stamp.parse::<jiff::Timestamp>().unwrap())
    }

    #[test]
    fn a_line_is_timed_by_its_own_timestamp_from_the_spawn() {
        let spawned = at("2026-12-07T01:53:32.700000Z");
        let cases = [
            (FIRST_LINE, Some(Duration::from_micros(4_384))),
            (SYNCED_LINE, Some(Duration::from_millis(51))),
            ("never logged", None),
        ];
        for (needle, expected) in cases {
            assert_eq!(logged_after(LOG, needle, spawned), expected, "{needle}");
        }
    }

    #[test]
    fn a_line_without_a_timestamp_or_before_the_spawn_is_not_timed() {
        let spawned = at("2026-12-07T01:53:32.710000Z");
        assert_eq!(
            logged_after(LOG, FIRST_LINE, spawned),
            None,
            "before the spawn"
        );
        assert_eq!(
            logged_after(
                "caches synced, starting controllers\n",
                SYNCED_LINE,
                spawned
            ),
            None,
            "no timestamp"
        );
    }
}
