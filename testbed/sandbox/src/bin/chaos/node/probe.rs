//! livenessprobe rows: the real binary serving `/healthz` for the mock driver, observed over
//! HTTP the way kubelet's liveness probe sees it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use testbed_mock_csi::{Fault, Method, MockDriverHandle, When};
use testbed_support::process::{self, ChildProcess};
use tokio::time::Instant;

use super::flood::{self, Answer, Flooded, SETTLE, slowest};
use super::procstat::{self, Sample};
use super::{Findings, NodeFault, NodeSetup, check_levels, leave_dead_socket, start_driver};

/// `--probe-timeout` of every row.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How late an answer may be on a loaded machine before the row fails: the timeout plus a
/// second of scheduling delay (debug builds, shared cores).
const LATENCY_LIMIT: Duration = Duration::from_secs(2);
/// Longest wait of the HTTP client; well past [`LATENCY_LIMIT`] so a late answer is measured.
const HTTP_TIMEOUT: Duration = Duration::from_mins(1);
/// A Probe that never answers within any row.
const HANG: Duration = Duration::from_hours(1);

/// Upstream's bodies (sidecars.md §4.2; livenessprobe `checkProbe`).
const OK: &str = "ok";
const CONNECT_DEADLINE: &str = "context deadline exceeded";
const CALL_DEADLINE: &str = "rpc error: code = DeadlineExceeded desc = context deadline exceeded";
const NOT_READY: &str = "driver responded but is not ready";
/// What the mock driver (a tonic server) answers when the client's `grpc-timeout` passes: tonic
/// ends the call with `Cancelled` "Timeout expired", racing the client's own deadline (seen once
/// in 1,475 probes). Upstream's grpc-go client passes that answer on the same way; a grpc-go
/// driver sends nothing and the client's DeadlineExceeded is the answer.
const SERVER_TIMEOUT: &str = "rpc error: code = Canceled desc = Timeout expired";

/// Whether `body` is the `expected` one (a hung call may end either way, see
/// [`SERVER_TIMEOUT`]).
fn body_matches(expected: &str, body: &str) -> bool {
    body == expected || (expected == CALL_DEADLINE && body == SERVER_TIMEOUT)
}

/// The driver and a running livenessprobe.
struct ProbeRig {
    driver: MockDriverHandle,
    process: ChildProcess,
    addr: SocketAddr,
    pid: u32,
}

impl ProbeRig {
    async fn start(binary: &Path, dir: &Path) -> anyhow::Result<Self> {
        let driver = start_driver(&dir.join("csi.sock")).await?;
        let addr = process::free_port()?;
        let args = vec![
            format!("--csi-address={}", driver.socket_path().display()),
            format!("--http-endpoint={addr}"),
            format!("--probe-timeout={}ms", PROBE_TIMEOUT.as_millis()),
        ];
        let mut process = ChildProcess::spawn(
            "livenessprobe",
            binary,
            &args,
            &dir.join("livenessprobe.log"),
        )?;
        process
            .wait_ready(Duration::from_secs(30), || process::accepts_tcp(addr))
            .await?;
        let pid = process.pid().context("livenessprobe exited at once")?;
        Ok(Self {
            driver,
            process,
            addr,
            pid,
        })
    }

    fn sample(&self, at: Duration) -> anyhow::Result<Sample> {
        Sample::read(self.pid, at)
    }

    /// The driver crashes: connections dropped, its socket file left refusing connections.
    async fn crash_driver(&self) -> anyhow::Result<()> {
        self.driver.stop().await?;
        leave_dead_socket(self.driver.socket_path())?;
        Ok(())
    }

    /// Checks that the same process still serves: no restart was needed.
    fn check_alive(&mut self, f: &mut Findings) -> anyhow::Result<()> {
        let status = self.process.exit_status()?;
        f.expect(status.is_none(), || {
            format!("livenessprobe exited: {status:?}")
        });
        f.expect(self.process.pid() == Some(self.pid), || {
            "livenessprobe's pid changed".to_owned()
        });
        Ok(())
    }
}

/// Checks one answer against the expected status and body, within [`LATENCY_LIMIT`].
fn expect_answer(f: &mut Findings, when: &str, answer: &Answer, status: u16, body: &str) {
    f.expect(
        answer.status == status && body_matches(body, &answer.body),
        || {
            format!(
                "{when}: {} {:?}, expected {status} {body:?}",
                answer.status, answer.body
            )
        },
    );
    f.expect(answer.took <= LATENCY_LIMIT, || {
        format!("{when}: answered after {:.2} s", answer.took.as_secs_f64())
    });
}

/// Runs one livenessprobe row.
pub(crate) async fn run(
    fault: NodeFault,
    binary: &Path,
    dir: &Path,
    setup: &NodeSetup,
) -> anyhow::Result<Findings> {
    let mut rig = ProbeRig::start(binary, dir).await?;
    let mut f = Findings::default();
    let healthy = rig.healthz().await?;
    expect_answer(&mut f, "before the fault", &healthy, 200, OK);
    match fault {
        NodeFault::DriverCrash => driver_crash(&rig, &mut f).await?,
        NodeFault::DriverHang => driver_hang(&rig, &mut f).await?,
        NodeFault::SocketRecreated => socket_recreated(&rig, &mut f).await?,
        NodeFault::NotReady => not_ready(&rig, &mut f).await?,
        NodeFault::Flood => flood::flood(&rig, &mut f, setup.flood, setup.flood_rounds).await?,
        NodeFault::ProbeChurn => churn(&rig, &mut f, setup.churn).await?,
        _ => anyhow::bail!("{} is not a livenessprobe fault", fault.name()),
    }
    rig.check_alive(&mut f)?;
    rig.process.terminate().await?;
    Ok(f)
}

/// Probes `n` times in a row, expecting `status` and `body` each time.
async fn probe_n(
    rig: &ProbeRig,
    f: &mut Findings,
    when: &str,
    n: usize,
    (status, body): (u16, &str),
) -> anyhow::Result<Vec<Answer>> {
    let mut answers = Vec::with_capacity(n);
    for _ in 0..n {
        let answer = rig.healthz().await?;
        expect_answer(f, when, &answer, status, body);
        answers.push(answer);
    }
    Ok(answers)
}

async fn driver_crash(rig: &ProbeRig, f: &mut Findings) -> anyhow::Result<()> {
    rig.crash_driver().await?;
    unreachable_then_back(rig, f, "driver crashed (socket file left)").await
}

/// With the driver unreachable, three probes fail as upstream's connect does; with the driver
/// back on its path, the first probe is healthy again and the probe was not restarted.
async fn unreachable_then_back(rig: &ProbeRig, f: &mut Findings, what: &str) -> anyhow::Result<()> {
    let down = probe_n(rig, f, what, 3, (500, CONNECT_DEADLINE)).await?;
    rig.driver.restart().await?;
    let back = rig.healthz().await?;
    expect_answer(f, &format!("{what}, then back"), &back, 200, OK);
    f.saw(format!(
        "{what}: 3 × 500 `{CONNECT_DEADLINE}`, slowest {:.2} s (--probe-timeout 1 s); back: first probe {} `{}`, same process",
        slowest(&down),
        back.status,
        back.body
    ));
    Ok(())
}

async fn driver_hang(rig: &ProbeRig, f: &mut Findings) -> anyhow::Result<()> {
    let before = rig.sample(Duration::ZERO)?;
    let calls_before = rig.driver.call_count(Method::Probe);
    rig.driver.inject(Fault::delay(Method::Probe, HANG));
    let sequential = probe_n(rig, f, "Probe hangs", 10, (500, CALL_DEADLINE)).await?;
    let concurrent = flood::concurrent(rig, 100).await;
    let concurrent: Vec<Answer> = concurrent.into_iter().collect::<anyhow::Result<_>>()?;
    for answer in &concurrent {
        expect_answer(f, "Probe hangs, 100 at once", answer, 500, CALL_DEADLINE);
    }
    // One call per request in a row; the 100 at once share one probe (two if the burst spreads
    // past the first probe's budget). Upstream would make 110 calls, all hanging.
    let calls = rig.driver.call_count(Method::Probe) - calls_before;
    f.expect((11..=12).contains(&calls), || {
        format!("{calls} Probe calls reached the driver for 10 requests in a row and 100 at once")
    });
    f.saw(format!(
        "10 in a row and 100 at once: 500 `{CALL_DEADLINE}`, slowest {:.2} s / {:.2} s; {calls} Probe calls reached the driver",
        slowest(&sequential),
        slowest(&concurrent)
    ));
    // The hung calls must not keep connections (or the tasks serving them) open.
    let settled = flood::settle_to(rig, before.fds).await?;
    let after = rig.sample(Duration::ZERO)?;
    f.expect(settled.is_some(), || {
        format!(
            "descriptors not back to {} within {SETTLE:?}: {}",
            before.fds,
            after.describe()
        )
    });
    f.expect(after.threads <= before.threads, || {
        format!("threads {} -> {}", before.threads, after.threads)
    });
    f.saw(format!(
        "before: {}; after: {}",
        before.describe(),
        after.describe()
    ));
    rig.driver.clear_faults();
    let back = rig.healthz().await?;
    expect_answer(f, "hang over", &back, 200, OK);
    Ok(())
}

async fn socket_recreated(rig: &ProbeRig, f: &mut Findings) -> anyhow::Result<()> {
    // The driver still runs and listens, but nobody can reach it through the path any more.
    std::fs::remove_file(rig.driver.socket_path())?;
    unreachable_then_back(rig, f, "socket deleted, driver running").await
}

async fn not_ready(rig: &ProbeRig, f: &mut Findings) -> anyhow::Result<()> {
    rig.driver.set_ready(Some(false));
    let answer = rig.healthz().await?;
    expect_answer(f, "ready=false", &answer, 500, NOT_READY);
    rig.driver.set_ready(Some(true));
    let ready = rig.healthz().await?;
    expect_answer(f, "ready=true", &ready, 200, OK);
    rig.driver.set_ready(None);
    let absent = rig.healthz().await?;
    expect_answer(f, "ready absent", &absent, 200, OK);
    f.saw(format!(
        "ready=false: {} `{}`; ready=true: {}; ready absent (CSI: ready): {}",
        answer.status, answer.body, ready.status, absent.status
    ));
    Ok(())
}

/// `n` requests at once, `rounds` times. Every flood's descriptors must be closed after it,
/// and memory must level off: the level after the last flood must not be above the peak of
/// the first two thirds (beyond [`procstat::rss_growth`]'s slack). The allocator
/// keeps some freed memory, so the level climbs over the first floods and then stays flat,
/// which a leak, growing by the same amount each flood, would not do. How soon it is flat
/// depends on the sidecar's threads: on livenessprobe's one thread, 12 floods of 500 left
/// 17–21 / 27 / 27 MiB after the 1st / 8th / 12th in each of four runs; on the two worker
/// threads it had before, one allocator arena each, the level still climbed after 12 (19.0 /
/// 23.4 / 26.2 MiB, a CI failure) and only levelled off after about 30 (docs/reliability.md).
impl Flooded for ProbeRig {
    async fn healthz(&self) -> anyhow::Result<Answer> {
        flood::get_healthz(self.addr, HTTP_TIMEOUT).await
    }

    fn pid(&self) -> u32 {
        self.pid
    }
}

/// What a churn cycle does to the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Healthy,
    Crash,
    Hang,
    NotReady,
    SocketRecreated,
}

/// The cycle's step: the faults in turn with healthy cycles between them.
fn step(cycle: usize) -> Step {
    match cycle % 6 {
        1 => Step::Crash,
        2 => Step::Hang,
        3 => Step::NotReady,
        4 => Step::SocketRecreated,
        _ => Step::Healthy,
    }
}

/// Requests per cycle: a few in a row and a burst at once.
const CYCLE_SEQUENTIAL: usize = 5;
const CYCLE_CONCURRENT: usize = 20;

async fn churn(rig: &ProbeRig, f: &mut Findings, duration: Duration) -> anyhow::Result<()> {
    let window = procstat::first_window(duration);
    let started = Instant::now();
    let mut samples = vec![rig.sample(Duration::ZERO)?];
    let mut requests = 0;
    let mut wrong = 0;
    let mut cycle = 0;
    while started.elapsed() < duration {
        let step = step(cycle);
        let expected = match step {
            Step::Healthy => (200, OK),
            Step::Crash => {
                rig.crash_driver().await?;
                (500, CONNECT_DEADLINE)
            }
            Step::Hang => {
                let n = u32::try_from(CYCLE_SEQUENTIAL + CYCLE_CONCURRENT)?;
                rig.driver
                    .inject(Fault::delay(Method::Probe, HANG).on(When::FirstN(n)));
                (500, CALL_DEADLINE)
            }
            Step::NotReady => {
                rig.driver.set_ready(Some(false));
                (500, NOT_READY)
            }
            Step::SocketRecreated => {
                std::fs::remove_file(rig.driver.socket_path())?;
                (500, CONNECT_DEADLINE)
            }
        };
        let mut answers = Vec::new();
        for _ in 0..CYCLE_SEQUENTIAL {
            answers.push(rig.healthz().await);
        }
        answers.extend(flood::concurrent(rig, CYCLE_CONCURRENT).await);
        for answer in answers {
            requests += 1;
            let right = answer.as_ref().is_ok_and(|a| {
                a.status == expected.0
                    && body_matches(expected.1, &a.body)
                    && a.took <= LATENCY_LIMIT
            });
            if !right {
                wrong += 1;
                if wrong <= 3 {
                    f.expect(false, || format!("cycle {cycle} ({step:?}): {answer:?}"));
                }
            }
        }
        match step {
            Step::Crash | Step::SocketRecreated => rig.driver.restart().await?,
            Step::Hang => rig.driver.clear_faults(),
            Step::NotReady => rig.driver.set_ready(Some(true)),
            Step::Healthy => {}
        }
        samples.push(rig.sample(started.elapsed())?);
        cycle += 1;
    }
    f.expect(wrong == 0, || {
        format!("{wrong} of {requests} answers were not upstream's")
    });
    f.saw(format!(
        "{requests} probes in {cycle} cycles over {:.0} s (healthy, crash, hang, not ready, socket re-created in turn)",
        started.elapsed().as_secs_f64()
    ));
    check_levels(f, &samples, window, rig.pid, started).await?;
    Ok(())
}
