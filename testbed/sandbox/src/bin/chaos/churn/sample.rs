//! One reading of a sidecar process's resources, from /proc and its `/metrics`: resident
//! memory, open file descriptors, the sockets among them (and those connected to the API
//! server), threads, and the Tokio tasks alive (`tokio_alive_tasks`, an extra gauge of the
//! controller sidecars, docs/compatibility.md) plus its work queues' depth.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use testbed_sandbox::flows::metric_value;
use testbed_support::http_client;

/// What one sample saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Sample {
    /// Since the churn started.
    pub(crate) at: Duration,
    /// `VmRSS`.
    pub(crate) rss_kib: u64,
    /// Entries of `/proc/<pid>/fd`.
    pub(crate) fds: u64,
    /// Those that are sockets (`socket:[inode]`).
    pub(crate) sockets: u64,
    /// Of those, TCP connections established to the API server's port (the sidecar's
    /// connections as the API server counts them per client).
    pub(crate) api_connections: u64,
    /// Watches the API server is serving to the sidecar (its `User-Agent` product), as the
    /// in-memory API server counts them.
    pub(crate) api_watches: u64,
    /// `Threads` of `/proc/<pid>/status`.
    pub(crate) threads: u64,
    /// `tokio_alive_tasks` from `/metrics`.
    pub(crate) tasks: u64,
    /// The sum of `workqueue_depth` over the sidecar's queues.
    pub(crate) queued: u64,
}

/// `VmRSS` (KiB) and `Threads` of a `/proc/<pid>/status` text.
pub(crate) fn parse_status(text: &str) -> Option<(u64, u64)> {
    let field = |key: &str| -> Option<u64> {
        let value = text.lines().find_map(|l| l.strip_prefix(key))?;
        value.trim().trim_end_matches("kB").trim().parse().ok()
    };
    Some((field("VmRSS:")?, field("Threads:")?))
}

/// The inode of a socket descriptor's link target (`socket:[12345]`); `None` for anything
/// else (files, pipes, `anon_inode:[eventpoll]`).
pub(crate) fn socket_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// How many of `inodes` are ESTABLISHED TCP connections to remote port `port`, per a
/// `/proc/<pid>/net/tcp` or `tcp6` table (proc(5): `rem_address` is `HEXIP:HEXPORT`, `st` 01
/// is ESTABLISHED, the inode is the tenth column). The table lists every socket of the
/// network namespace, hence the match on the process's own inodes.
pub(crate) fn connections_to(table: &str, port: u16, inodes: &BTreeSet<u64>) -> u64 {
    let established = |line: &&str| {
        let columns: Vec<&str> = line.split_whitespace().collect();
        let (Some(remote), Some(state), Some(inode)) =
            (columns.get(2), columns.get(3), columns.get(9))
        else {
            return false;
        };
        let remote_port = remote
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        *state == "01"
            && remote_port == Some(port)
            && inode.parse().is_ok_and(|i| inodes.contains(&i))
    };
    table.lines().skip(1).filter(established).count() as u64
}

/// Reads `pid`'s resources now; `tasks` and `queued` come from its `/metrics` at `http`.
pub(crate) async fn take(
    pid: u32,
    http: SocketAddr,
    api_port: u16,
    api_watches: u64,
    at: Duration,
) -> anyhow::Result<Sample> {
    let proc_dir = format!("/proc/{pid}");
    let status = std::fs::read_to_string(format!("{proc_dir}/status"))
        .with_context(|| format!("cannot read {proc_dir}/status"))?;
    let (rss_kib, threads) =
        parse_status(&status).with_context(|| format!("no VmRSS or Threads in {status}"))?;
    let mut fds = 0;
    let mut inodes = BTreeSet::new();
    let entries = std::fs::read_dir(format!("{proc_dir}/fd"))
        .with_context(|| format!("cannot list {proc_dir}/fd"))?;
    for entry in entries.flatten() {
        fds += 1;
        // A descriptor closed between the listing and the readlink is simply not a socket.
        if let Ok(target) = std::fs::read_link(entry.path())
            && let Some(inode) = target.to_str().and_then(socket_inode)
        {
            inodes.insert(inode);
        }
    }
    let api_connections = ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("{proc_dir}/net/{t}")).ok())
        .map(|table| connections_to(&table, api_port, &inodes))
        .sum();
    let metrics = http_client::get(http, "/metrics", Duration::from_secs(5))
        .await
        .context("cannot scrape the sidecar's /metrics")?
        .body;
    let gauge = |name: &str| -> anyhow::Result<u64> {
        let value = metric_value(&metrics, name, &[])
            .with_context(|| format!("no {name} on the sidecar's /metrics"))?;
        // Gauges of counts: whole, non-negative numbers far below 2^52.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(value as u64)
    };
    Ok(Sample {
        at,
        rss_kib,
        fds,
        sockets: inodes.len() as u64,
        api_connections,
        api_watches,
        threads,
        tasks: gauge(csi_common::metrics::ALIVE_TASKS_METRIC)?,
        queued: gauge("workqueue_depth")?,
    })
}

/// The CSV's first line: the columns of [`csv_line`].
pub(crate) const CSV_HEADER: &str =
    "secs,rss_kib,fds,sockets,api_connections,api_watches,threads,tasks,queued\n";

/// One sample as a CSV line, newline included.
pub(crate) fn csv_line(s: &Sample) -> String {
    format!(
        "{:.1},{},{},{},{},{},{},{},{}\n",
        s.at.as_secs_f64(),
        s.rss_kib,
        s.fds,
        s.sockets,
        s.api_connections,
        s.api_watches,
        s.threads,
        s.tasks,
        s.queued
    )
}

/// The samples of a run, kept in memory for the verdict and appended to a CSV in the work
/// dir as each is taken, so a run cut short (the command or its session killed; not a power loss, as nothing is
/// synced to disk)
/// still leaves the trend it saw up to then.
pub(crate) struct SampleLog {
    samples: Vec<Sample>,
    file: std::fs::File,
    path: std::path::PathBuf,
}

impl SampleLog {
    /// Creates (or truncates) `path` and writes the header.
    pub(crate) fn create(path: std::path::PathBuf) -> anyhow::Result<Self> {
        let mut file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all(CSV_HEADER.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self {
            samples: Vec::new(),
            file,
            path,
        })
    }

    /// Keeps `sample` and appends its line to the file.
    pub(crate) fn push(&mut self, sample: Sample) -> anyhow::Result<()> {
        self.file
            .write_all(csv_line(&sample).as_bytes())
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        self.samples.push(sample);
        Ok(())
    }

    /// The samples taken so far, oldest first.
    pub(crate) fn samples(&self) -> &[Sample] {
        &self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_file_holds_every_sample_as_soon_as_it_is_pushed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut log = SampleLog::create(path.clone()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), CSV_HEADER);
        let first = Sample {
            at: Duration::from_millis(5_200),
            rss_kib: 20_480,
            fds: 31,
            sockets: 9,
            api_connections: 2,
            api_watches: 4,
            threads: 5,
            tasks: 40,
            queued: 1,
        };
        log.push(first).unwrap();
        // Read back while the log is still open: a run killed now keeps this line.
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{CSV_HEADER}5.2,20480,31,9,2,4,5,40,1\n")
        );
        log.push(Sample::default()).unwrap();
        assert_eq!(log.samples(), &[first, Sample::default()]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn status_gives_rss_and_threads() {
        let text = "Name:\tcsi-provisioner\nVmRSS:\t   23456 kB\nThreads:\t7\n";
        assert_eq!(parse_status(text), Some((23456, 7)));
        assert_eq!(parse_status("VmRSS:\t1 kB\n"), None);
        assert_eq!(parse_status("Threads:\t3\n"), None);
    }

    #[test]
    fn only_socket_links_have_an_inode() {
        for (target, inode) in [
            ("socket:[12345]", Some(12345)),
            ("pipe:[77]", None),
            ("anon_inode:[eventpoll]", None),
            ("/tmp/chaos/replica-a.log", None),
            ("socket:[]", None),
        ] {
            assert_eq!(socket_inode(target), inode, "{target}");
        }
    }

    #[test]
    fn connections_count_established_sockets_of_the_process_to_the_port() {
        // Remote port 0x1F90 = 8080. Lines: ours established, ours listening (0A), another
        // process's established, ours to another port, ours in TIME_WAIT (06).
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 111 1 0
   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 112 1 0
   2: 0100007F:9C41 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 999 1 0
   3: 0100007F:9C42 0100007F:1F91 01 00000000:00000000 00:00000000 00000000  1000        0 113 1 0
   4: 0100007F:9C43 0100007F:1F90 06 00000000:00000000 00:00000000 00000000  1000        0 114 1 0
";
        let ours = BTreeSet::from([111, 112, 113, 114]);
        assert_eq!(connections_to(table, 8080, &ours), 1);
        assert_eq!(connections_to(table, 8081, &ours), 1);
        assert_eq!(connections_to(table, 8080, &BTreeSet::new()), 0);
    }
}
