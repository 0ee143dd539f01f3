//! The node part of the suite: faults where they apply to the node sidecars,
//! csi-node-driver-registrar and livenessprobe, and their bounded-resources churn.
//!
//! Each row starts the sidecar binary as a child process next to the mock CSI driver and (for
//! the registrar) the kubelet stand-in, both in this process, injects one fault and checks the
//! positive signals that say the sidecar did what upstream does (sidecars.md §3, §4): an HTTP
//! status and body, a registration seen by the kubelet stand-in, an exit code and log line.
//! The churn rows repeat the faults for minutes and sample the sidecar's `/proc` entries
//! ([`procstat`]): memory, file descriptors, sockets and threads must come back to their
//! first-minute level.

mod flood;
mod probe;
mod procstat;
mod registrar;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed_mock_csi::{MockDriver, MockDriverConfig, MockDriverHandle};

/// The node sidecar a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeSidecar {
    Livenessprobe,
    Registrar,
}

impl NodeSidecar {
    /// Its binary name (upstream's).
    pub(crate) fn binary(self) -> &'static str {
        match self {
            NodeSidecar::Livenessprobe => "livenessprobe",
            NodeSidecar::Registrar => "csi-node-driver-registrar",
        }
    }
}

/// A fault of the node part; each applies to one sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum NodeFault {
    /// livenessprobe: the driver process crashes (its socket file stays, refusing
    /// connections) and comes back.
    DriverCrash,
    /// livenessprobe: every Probe hangs far past `--probe-timeout`.
    DriverHang,
    /// livenessprobe: the driver socket is deleted under a running driver, then re-created.
    SocketRecreated,
    /// livenessprobe: Probe answers `ready: false`, then ready again.
    NotReady,
    /// livenessprobe: thousands of concurrent `/healthz` requests.
    Flood,
    /// livenessprobe: minutes of probe cycles with the faults above in turn.
    ProbeChurn,
    /// registrar: kubelet restarts, once keeping and once wiping the plugins directory.
    KubeletRestart,
    /// registrar: kubelet answers `NotifyRegistrationStatus(registered=false)`.
    RegistrationRejected,
    /// registrar: the driver is not up at start, or crashes during GetPluginInfo.
    DriverLate,
    /// registrar: the registration socket path is taken by a stale socket or a regular file.
    StaleFile,
    /// registrar: the registration socket vanishes; `/healthz` (the `--health-port` server).
    SocketGone,
    /// registrar: minutes of kubelet re-dials, restarts and socket wipes.
    RegistrarChurn,
    /// registrar: thousands of concurrent `/healthz` requests on `--health-port`.
    RegistrarFlood,
}

/// Every node fault, in the table's order.
pub(crate) const ALL: [NodeFault; 13] = [
    NodeFault::DriverCrash,
    NodeFault::DriverHang,
    NodeFault::SocketRecreated,
    NodeFault::NotReady,
    NodeFault::Flood,
    NodeFault::ProbeChurn,
    NodeFault::KubeletRestart,
    NodeFault::RegistrationRejected,
    NodeFault::DriverLate,
    NodeFault::StaleFile,
    NodeFault::SocketGone,
    NodeFault::RegistrarChurn,
    NodeFault::RegistrarFlood,
];

impl NodeFault {
    /// The name in the table (the flag value).
    pub(crate) fn name(self) -> &'static str {
        match self {
            NodeFault::DriverCrash => "driver-crash",
            NodeFault::DriverHang => "driver-hang",
            NodeFault::SocketRecreated => "socket-recreated",
            NodeFault::NotReady => "not-ready",
            NodeFault::Flood => "flood",
            NodeFault::ProbeChurn => "probe-churn",
            NodeFault::KubeletRestart => "kubelet-restart",
            NodeFault::RegistrationRejected => "registration-rejected",
            NodeFault::DriverLate => "driver-late",
            NodeFault::StaleFile => "stale-file",
            NodeFault::SocketGone => "socket-gone",
            NodeFault::RegistrarChurn => "registrar-churn",
            NodeFault::RegistrarFlood => "registrar-flood",
        }
    }

    /// The sidecar it applies to.
    pub(crate) fn sidecar(self) -> NodeSidecar {
        match self {
            NodeFault::DriverCrash
            | NodeFault::DriverHang
            | NodeFault::SocketRecreated
            | NodeFault::NotReady
            | NodeFault::Flood
            | NodeFault::ProbeChurn => NodeSidecar::Livenessprobe,
            NodeFault::KubeletRestart
            | NodeFault::RegistrationRejected
            | NodeFault::DriverLate
            | NodeFault::StaleFile
            | NodeFault::SocketGone
            | NodeFault::RegistrarChurn
            | NodeFault::RegistrarFlood => NodeSidecar::Registrar,
        }
    }

    /// Upstream's behaviour for the same fault (sidecars.md §3.2, §3.4, §4.2, §4.4).
    pub(crate) fn upstream(self) -> &'static str {
        match self {
            NodeFault::DriverCrash => {
                "500 `context deadline exceeded` after --probe-timeout while down (fresh connection per probe, #68); 200 once back"
            }
            NodeFault::DriverHang => {
                "500 `rpc error: code = DeadlineExceeded desc = context deadline exceeded` at --probe-timeout; slow probes pile up (vsphere-csi-driver #2997)"
            }
            NodeFault::SocketRecreated => {
                "a cached connection once said healthy after the socket vanished (#68, fixed in v2.1)"
            }
            NodeFault::NotReady => "500 `driver responded but is not ready`",
            NodeFault::Flood | NodeFault::ProbeChurn => {
                "one fresh connection and goroutine per request, no limit (not recorded in the spec)"
            }
            NodeFault::KubeletRestart => {
                "kubelet re-registers an existing socket at start; a wiped socket is never re-created (#57): driver unregistered until /healthz 404 restarts the container"
            }
            NodeFault::RegistrationRejected => {
                "logs \"Registration process failed with error, restarting registration container\", exit 1 before replying; socket left behind (kubernetes #71487)"
            }
            NodeFault::DriverLate => {
                "waits 30 s for the driver socket, then exit 1; GetPluginInfo error: exit 1, no retry (#405, #497)"
            }
            NodeFault::StaleFile => {
                "stale socket removed at start; a non-socket file: exit 1 \"file exists in socketPath ... but it's not a socket.\"; kubelet's backoff on the path delays registration (#206)"
            }
            NodeFault::SocketGone => {
                "/healthz 404 `registration socket does not exist`; never re-created (#57)"
            }
            NodeFault::RegistrarChurn | NodeFault::RegistrarFlood => "not recorded in the spec",
        }
    }
}

/// Inputs of the node part.
#[derive(Debug, Clone)]
pub(crate) struct NodeSetup {
    /// Where the sidecar binaries are.
    pub(crate) bin_dir: PathBuf,
    /// Sockets and logs go under `<work_dir>/node-<fault>`.
    pub(crate) work_dir: PathBuf,
    /// How long a churn row runs.
    pub(crate) churn: Duration,
    /// Concurrent requests of the flood.
    pub(crate) flood: usize,
    /// Floods of the flood row (at least 3: the last third is compared with the rest).
    pub(crate) flood_rounds: usize,
}

/// What one node fault found.
#[derive(Debug)]
pub(crate) struct NodeRow {
    pub(crate) fault: NodeFault,
    /// What was seen (statuses, latencies, resource levels).
    pub(crate) observed: Vec<String>,
    /// Sidecar restarts (the container restarts a kubelet would do).
    pub(crate) restarts: usize,
    /// Why the row failed; empty when it passed.
    pub(crate) problems: Vec<String>,
    /// Wall time of the row.
    pub(crate) took: Duration,
}

/// Collects what a scenario observed and what went wrong.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) observed: Vec<String>,
    pub(crate) problems: Vec<String>,
    pub(crate) restarts: usize,
}

impl Findings {
    /// Notes an observation.
    pub(crate) fn saw(&mut self, what: impl Into<String>) {
        self.observed.push(what.into());
    }

    /// Records a problem unless `ok`.
    pub(crate) fn expect(&mut self, ok: bool, problem: impl FnOnce() -> String) {
        if !ok {
            self.problems.push(problem());
        }
    }
}

/// How long the end of a churn may take to come back to the first window's levels: the last
/// cycle's connections (a kubelet's dial, a `/healthz` the client has closed) are closed by the
/// sidecar only once it reads their EOF, a moment after the cycle. A leak never comes back.
const END_SETTLE: Duration = Duration::from_secs(10);

/// Checks that the levels of `pid` come back to the first window's peak among `samples`
/// ([`procstat::growth`]) within [`END_SETTLE`] after the churn that began at `started`, and
/// notes both.
pub(crate) async fn check_levels(
    f: &mut Findings,
    samples: &[procstat::Sample],
    window: Duration,
    pid: u32,
    started: tokio::time::Instant,
) -> anyhow::Result<()> {
    let peak = procstat::first_window_peak(samples, window)
        .ok_or_else(|| anyhow::anyhow!("no sample in the first {window:?}"))?;
    let settling = tokio::time::Instant::now();
    let (end, problems) = loop {
        let end = procstat::Sample::read(pid, started.elapsed())?;
        let problems = procstat::growth(&peak, &end);
        if problems.is_empty() || settling.elapsed() >= END_SETTLE {
            break (end, problems);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for problem in problems {
        f.expect(false, || format!("{problem} after waiting {END_SETTLE:?}"));
    }
    f.saw(format!(
        "first {:.0} s peak: {}; end: {} ({:.1} s after the last cycle)",
        window.as_secs_f64(),
        peak.describe(),
        end.describe(),
        settling.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The mock driver every node row runs (the sandbox's name and node).
pub(crate) async fn start_driver(socket: &Path) -> anyhow::Result<MockDriverHandle> {
    let config = MockDriverConfig {
        driver_name: DRIVER.to_owned(),
        node_id: "chaos-node".to_owned(),
        ..MockDriverConfig::default()
    };
    Ok(MockDriver::start(config, socket).await?)
}

/// The driver name of every node row.
pub(crate) const DRIVER: &str = "hostpath.csi.k8s.io";

/// Leaves a socket file at `path` that nobody listens on: what a driver (or registrar) killed
/// with SIGKILL leaves behind. Connections to it are refused.
pub(crate) fn leave_dead_socket(path: &Path) -> std::io::Result<()> {
    drop(std::os::unix::net::UnixListener::bind(path)?);
    Ok(())
}

/// Runs the given faults in order; an `Err` is a failure to set one up, not a finding.
pub(crate) async fn run(faults: &[NodeFault], setup: &NodeSetup) -> anyhow::Result<Vec<NodeRow>> {
    let mut rows = Vec::new();
    for &fault in faults {
        let binary = setup.bin_dir.join(fault.sidecar().binary());
        anyhow::ensure!(
            binary.is_file(),
            "{} is missing (build it with `cargo build --bins`)",
            binary.display()
        );
        let dir = setup.work_dir.join(format!("node-{}", fault.name()));
        std::fs::create_dir_all(&dir)?;
        eprintln!(
            "chaos: {} against {}",
            fault.name(),
            fault.sidecar().binary()
        );
        let started = tokio::time::Instant::now();
        let findings = match fault.sidecar() {
            NodeSidecar::Livenessprobe => probe::run(fault, &binary, &dir, setup).await,
            NodeSidecar::Registrar => registrar::run(fault, &binary, &dir, setup).await,
        };
        let findings = findings.map_err(|e| {
            e.context(format!(
                "{} against {}",
                fault.name(),
                fault.sidecar().binary()
            ))
        })?;
        let row = NodeRow {
            fault,
            observed: findings.observed,
            restarts: findings.restarts,
            problems: findings.problems,
            took: started.elapsed(),
        };
        eprintln!("{}", render_row(&row));
        rows.push(row);
    }
    Ok(rows)
}

/// The node table (docs/reliability.md, "Node sidecars").
pub(crate) fn render(rows: &[NodeRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| fault | sidecar | observed | restarts | took | result | upstream's behaviour |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for row in rows {
        let _ = writeln!(s, "{}", render_row(row));
    }
    s
}

/// One table line.
pub(crate) fn render_row(row: &NodeRow) -> String {
    let result = if row.problems.is_empty() {
        "pass".to_owned()
    } else {
        format!("FAIL: {}", row.problems.join("; "))
    };
    format!(
        "| {} | {} | {} | {} | {:.1} s | {} | {} |",
        row.fault.name(),
        row.fault.sidecar().binary(),
        row.observed.join("; "),
        row.restarts,
        row.took.as_secs_f64(),
        result,
        row.fault.upstream(),
    )
}

/// Whether any row failed.
pub(crate) fn failed(rows: &[NodeRow]) -> bool {
    rows.iter().any(|r| !r.problems.is_empty())
}
