//! csi-node-driver-registrar rows: the real binary between the mock driver and the kubelet
//! stand-in (`testbed_kubelet`, which dials and registers as kubelet's plugin manager does,
//! with kubelet's timings), `/healthz` on the deprecated `--health-port`.
//!
//! A registrar that exits is started again at once by this module, as kubelet restarts the
//! container (its first restart is not delayed by CrashLoopBackOff); each start counts as a
//! restart in the table.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use testbed_kubelet::{FakeKubelet, KubeletConfig, KubeletEvent, NotifyOutcome, Verdict};
use testbed_mock_csi::{Fault, Method, MockDriverHandle};
use testbed_support::http_client::{self, HttpResponse};
use testbed_support::process::{self, ChildProcess, Signal};
use tokio::time::Instant;

use super::flood::{self, Answer, Flooded};
use super::procstat::{self, Sample};
use super::{
    DRIVER, Findings, NodeFault, NodeSetup, check_levels, leave_dead_socket, start_driver,
};

/// Longest wait for a registration or an exit.
const WAIT: Duration = Duration::from_mins(1);
/// A call that never answers within any row.
const HANG: Duration = Duration::from_hours(1);
/// Upstream's texts (sidecars.md §3.2).
const REJECTED_LOG: &str =
    "Registration process failed with error, restarting registration container";
const SOCKET_MISSING: &str = "registration socket does not exist";
const NOT_A_SOCKET: &str = "but it's not a socket.";
/// The error the kubelet stand-in rejects with (kubelet's `RegisterPlugin` failing).
const REJECTION: &str = "error updating CSINode object: chaos says no";

/// A node: the driver, the plugins registry directory, the registrar and the kubelet.
struct Node {
    dir: PathBuf,
    plugins: PathBuf,
    driver: MockDriverHandle,
    binary: PathBuf,
    port: SocketAddr,
    registrar: Option<ChildProcess>,
    kubelet: Option<FakeKubelet>,
}

impl Node {
    async fn new(binary: &Path, dir: &Path) -> anyhow::Result<Self> {
        let plugins = dir.join("plugins_registry");
        std::fs::create_dir_all(&plugins)?;
        let driver = start_driver(&dir.join("csi/csi.sock")).await?;
        Ok(Self {
            dir: dir.to_owned(),
            plugins,
            driver,
            binary: binary.to_owned(),
            port: process::free_port()?,
            registrar: None,
            kubelet: None,
        })
    }

    fn socket(&self) -> PathBuf {
        self.plugins.join(format!("{DRIVER}-reg.sock"))
    }

    /// Starts the registrar (again); `extra` flags after the node's own.
    fn start_registrar(&mut self, extra: &[&str]) -> anyhow::Result<()> {
        let mut args = vec![
            format!("--csi-address={}", self.driver.socket_path().display()),
            format!(
                "--kubelet-registration-path={}",
                self.driver.socket_path().display()
            ),
            format!("--plugin-registration-path={}", self.plugins.display()),
            format!("--health-port={}", self.port.port()),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let log = self.dir.join("registrar.log");
        match &mut self.registrar {
            // A restart appends to the same log, as `kubectl logs --previous` keeps both.
            Some(running) if running.command_line().ends_with(&args.join(" ")) => {
                running.respawn()?;
            }
            _ => {
                self.registrar = Some(ChildProcess::spawn("registrar", &self.binary, &args, &log)?);
            }
        }
        Ok(())
    }

    fn registrar(&mut self) -> anyhow::Result<&mut ChildProcess> {
        self.registrar.as_mut().context("no registrar started")
    }

    /// Waits for the registrar to exit by itself; its exit code.
    async fn registrar_exit(&mut self) -> anyhow::Result<Option<i32>> {
        Ok(self.registrar()?.wait_exit(WAIT).await?.code())
    }

    fn registrar_log(&mut self) -> anyhow::Result<String> {
        Ok(self.registrar()?.log_text())
    }

    /// Starts a kubelet with kubelet's own timings, replacing (stopping) a running one.
    async fn restart_kubelet(&mut self, verdict: Verdict) -> anyhow::Result<()> {
        if let Some(old) = self.kubelet.take() {
            old.stop().await;
        }
        self.kubelet = Some(FakeKubelet::start(KubeletConfig {
            verdict,
            ..KubeletConfig::new(&self.plugins)
        })?);
        Ok(())
    }

    fn kubelet(&self) -> anyhow::Result<&FakeKubelet> {
        self.kubelet.as_ref().context("no kubelet started")
    }

    /// Waits until the kubelet has the driver registered; how long that took.
    async fn wait_registered(&self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let plugin = self.kubelet()?.wait_registered(DRIVER, WAIT).await?;
        anyhow::ensure!(
            plugin.notified == NotifyOutcome::Acknowledged,
            "registered but the notification went {:?}",
            plugin.notified
        );
        Ok(started.elapsed())
    }

    async fn healthz(&self) -> anyhow::Result<HttpResponse> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port.port()));
        Ok(http_client::get(addr, "/healthz", Duration::from_secs(10)).await?)
    }

    /// Waits until `/healthz` answers `status`.
    async fn wait_healthz(&self, status: u16) -> anyhow::Result<HttpResponse> {
        let started = Instant::now();
        loop {
            match self.healthz().await {
                Ok(response) if response.status == status => return Ok(response),
                other => anyhow::ensure!(
                    started.elapsed() < WAIT,
                    "/healthz never answered {status}: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn registrar_pid(&mut self) -> anyhow::Result<u32> {
        self.registrar()?
            .pid()
            .context("the registrar is not running")
    }

    /// Checks that the registrar still runs.
    fn check_running(&mut self, f: &mut Findings, when: &str) -> anyhow::Result<()> {
        let status = self.registrar()?.exit_status()?;
        f.expect(status.is_none(), || {
            format!("{when}: the registrar exited: {status:?}")
        });
        Ok(())
    }

    async fn stop(mut self) {
        if let Some(mut registrar) = self.registrar.take() {
            let _ = registrar.terminate().await;
        }
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.stop().await;
        }
    }
}

/// Runs one registrar row.
pub(crate) async fn run(
    fault: NodeFault,
    binary: &Path,
    dir: &Path,
    setup: &NodeSetup,
) -> anyhow::Result<Findings> {
    let mut node = Node::new(binary, dir).await?;
    let mut f = Findings::default();
    let outcome = match fault {
        NodeFault::KubeletRestart => kubelet_restart(&mut node, &mut f).await,
        NodeFault::RegistrationRejected => registration_rejected(&mut node, &mut f).await,
        NodeFault::DriverLate => driver_late(&mut node, &mut f).await,
        NodeFault::StaleFile => stale_file(&mut node, &mut f).await,
        NodeFault::SocketGone => socket_gone(&mut node, &mut f).await,
        NodeFault::RegistrarChurn => churn(&mut node, &mut f, setup.churn).await,
        NodeFault::RegistrarFlood => flood(&mut node, &mut f, setup).await,
        _ => Err(anyhow::anyhow!("{} is not a registrar fault", fault.name())),
    };
    node.stop().await;
    outcome.map(|()| f)
}

/// Removes every entry of the plugins directory, as `rm -rf plugins_registry/*` does. (The
/// directory itself stays: the registrar sees it through a hostPath mount, which a removed
/// and re-created host directory would no longer be.)
fn wipe(dir: &Path) -> anyhow::Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        std::fs::remove_file(entry?.path())?;
        removed += 1;
    }
    Ok(removed)
}

async fn kubelet_restart(node: &mut Node, f: &mut Findings) -> anyhow::Result<()> {
    node.restart_kubelet(Verdict::Accept).await?;
    node.start_registrar(&[])?;
    node.wait_registered().await?;
    let pid = node.registrar_pid()?;

    // A kubelet restart: the new kubelet walks the directory and registers the socket there.
    node.restart_kubelet(Verdict::Accept).await?;
    let kept = node.wait_registered().await?;
    f.saw(format!(
        "restart: re-registered from the existing socket in {:.1} s",
        kept.as_secs_f64()
    ));

    // A restart with the plugins directory wiped while kubelet was down.
    if let Some(old) = node.kubelet.take() {
        old.stop().await;
    }
    let removed = wipe(&node.plugins)?;
    f.expect(removed == 1, || format!("the wipe removed {removed} files"));
    let wiped = Instant::now();
    node.restart_kubelet(Verdict::Accept).await?;
    node.wait_registered().await?;
    let healthz = node.healthz().await?;
    f.expect(healthz.status == 200, || {
        format!("/healthz after the wipe: {healthz:?}")
    });
    f.saw(format!(
        "restart with the directory wiped: socket re-created and registered {:.1} s after the wipe, /healthz {}",
        wiped.elapsed().as_secs_f64(),
        healthz.status
    ));
    node.check_running(f, "after the kubelet restarts")?;
    f.expect(node.registrar_pid()? == pid, || {
        "the registrar was restarted".to_owned()
    });
    let node_get_info = node.driver.call_count(Method::NodeGetInfo);
    f.expect(node_get_info == 3, || {
        format!("{node_get_info} NodeGetInfo calls for 3 registrations")
    });
    Ok(())
}

async fn registration_rejected(node: &mut Node, f: &mut Findings) -> anyhow::Result<()> {
    node.restart_kubelet(Verdict::Reject(REJECTION.to_owned()))
        .await?;
    node.start_registrar(&[])?;
    let code = node.registrar_exit().await?;
    let log = node.registrar_log()?;
    f.expect(code == Some(1), || {
        format!("exit code {code:?}, expected 1")
    });
    f.expect(
        log.contains(REJECTED_LOG) && log.contains(REJECTION),
        || format!("no {REJECTED_LOG:?} with the kubelet's error in the log"),
    );
    let event = node
        .kubelet()?
        .wait_event(0, WAIT, |e| {
            matches!(e, KubeletEvent::RegistrationFailed { .. })
        })
        .await?;
    let KubeletEvent::RegistrationFailed { notified, .. } = event else {
        anyhow::bail!("not a failure: {event:?}");
    };
    f.expect(matches!(notified, NotifyOutcome::Failed(_)), || {
        format!("the notification went {notified:?}; upstream exits before answering")
    });
    let left_behind = node.socket().exists();
    f.expect(left_behind, || "the socket was removed on exit".to_owned());
    f.saw(format!(
        "exit {code:?} with \"{REJECTED_LOG}\"; kubelet's notification: {}; socket left behind: {left_behind}",
        match &notified {
            NotifyOutcome::Failed(_) => "failed (no answer)",
            NotifyOutcome::Acknowledged => "acknowledged",
            NotifyOutcome::NotSent => "not sent",
        }
    ));

    // The container restarts; kubelet accepts this time, after its backoff on the path.
    node.kubelet()?.set_verdict(Verdict::Accept);
    node.start_registrar(&[])?;
    f.restarts += 1;
    let registered = node.wait_registered().await?;
    f.saw(format!(
        "restarted: stale socket replaced, registered {:.1} s later",
        registered.as_secs_f64()
    ));
    Ok(())
}

async fn driver_late(node: &mut Node, f: &mut Findings) -> anyhow::Result<()> {
    // The driver crashed at start: no socket yet.
    node.driver.stop().await?;
    node.restart_kubelet(Verdict::Accept).await?;
    node.start_registrar(&["-v=5"])?;
    // Its HTTP server opens before the driver is awaited, and it logs each failed dial: the
    // positive signals that it waits.
    let waiting = node.wait_healthz(404).await?;
    f.expect(waiting.body == SOCKET_MISSING, || {
        format!("/healthz while waiting: {waiting:?}")
    });
    node.registrar()?
        .wait_logged("Connection attempt failed", WAIT)
        .await?;
    node.check_running(f, "driver down")?;
    node.driver.restart().await?;
    let registered = node.wait_registered().await?;
    node.check_running(f, "driver back")?;
    f.saw(format!(
        "driver socket missing at start: dial retried, registered {:.1} s after the driver came up, no restart",
        registered.as_secs_f64()
    ));

    // The driver crashes while the registrar asks its name: exit 1, no retry.
    node.registrar()?.signal(Signal::TERM)?;
    node.registrar_exit().await?;
    node.driver
        .inject(Fault::delay(Method::GetPluginInfo, HANG));
    let calls = node.driver.call_count(Method::GetPluginInfo);
    node.start_registrar(&[])?;
    f.restarts += 1;
    node.driver
        .wait_for_calls(Method::GetPluginInfo, calls + 1, WAIT)
        .await?;
    node.driver.stop().await?;
    let code = node.registrar_exit().await?;
    f.expect(code == Some(1), || {
        format!("crash during GetPluginInfo: exit code {code:?}, expected 1")
    });
    node.driver.clear_faults();

    // The driver stays away: upstream gives up after csi-lib-utils' 30 s.
    let started = Instant::now();
    node.start_registrar(&[])?;
    f.restarts += 1;
    let code = node.registrar_exit().await?;
    let gave_up = started.elapsed();
    f.expect(code == Some(1), || {
        format!("driver never up: exit code {code:?}, expected 1")
    });
    f.expect(
        gave_up >= Duration::from_secs(29) && gave_up <= Duration::from_secs(40),
        || {
            format!(
                "driver never up: exited after {:.1} s, expected about 30 s",
                gave_up.as_secs_f64()
            )
        },
    );
    f.saw(format!(
        "driver crash during GetPluginInfo: exit {code:?}; driver never up: exit 1 after {:.1} s",
        gave_up.as_secs_f64()
    ));
    node.driver.restart().await?;
    node.start_registrar(&[])?;
    f.restarts += 1;
    node.wait_registered().await?;
    Ok(())
}

async fn stale_file(node: &mut Node, f: &mut Findings) -> anyhow::Result<()> {
    // A registration socket left by a registrar killed with SIGKILL (or a node reboot):
    // kubelet fails on it first (its 10 s blocking dial), then backs off on the path.
    leave_dead_socket(&node.socket())?;
    node.restart_kubelet(Verdict::Accept).await?;
    node.kubelet()?
        .wait_event(0, WAIT, |e| {
            matches!(e, KubeletEvent::RegistrationFailed { .. })
        })
        .await?;
    let started = Instant::now();
    node.start_registrar(&[])?;
    node.wait_registered().await?;
    node.check_running(f, "stale socket")?;
    f.saw(format!(
        "stale socket (kubelet's first dial failed): replaced at start, registered {:.1} s after the registrar started",
        started.elapsed().as_secs_f64()
    ));

    // A regular file at the path: upstream's fatal error, the file left untouched.
    node.registrar()?.signal(Signal::TERM)?;
    let code = node.registrar_exit().await?;
    f.expect(code == Some(0), || format!("SIGTERM: exit code {code:?}"));
    std::fs::write(node.socket(), b"not a socket")?;
    node.start_registrar(&[])?;
    f.restarts += 1;
    let code = node.registrar_exit().await?;
    let log = node.registrar_log()?;
    f.expect(code == Some(1) && log.contains(NOT_A_SOCKET), || {
        format!("regular file: exit code {code:?}, log without {NOT_A_SOCKET:?}")
    });
    let kept = std::fs::read(node.socket())?;
    f.expect(kept == b"not a socket", || {
        "the regular file was changed".to_owned()
    });
    f.saw(format!(
        "regular file at the path: exit {code:?} \"file exists in socketPath ... {NOT_A_SOCKET}\", file kept"
    ));
    std::fs::remove_file(node.socket())?;
    node.start_registrar(&[])?;
    f.restarts += 1;
    node.wait_registered().await?;
    Ok(())
}

async fn socket_gone(node: &mut Node, f: &mut Findings) -> anyhow::Result<()> {
    // Upstream's behaviour (re-creation off): 404, and only a restart brings the driver back.
    node.restart_kubelet(Verdict::Accept).await?;
    node.start_registrar(&["--registration-socket-check-interval=0"])?;
    node.wait_registered().await?;
    let ok = node.wait_healthz(200).await?;
    f.expect(ok.body == "ok", || format!("/healthz: {ok:?}"));
    std::fs::remove_file(node.socket())?;
    let missing = node.healthz().await?;
    f.expect(
        (missing.status, missing.body.as_str()) == (404, SOCKET_MISSING),
        || format!("/healthz without the socket: {missing:?}"),
    );
    node.kubelet()?.wait_deregistered(DRIVER, WAIT).await?;
    f.saw(format!(
        "--registration-socket-check-interval=0 (upstream): /healthz {} `{}`, kubelet de-registered the driver",
        missing.status, missing.body
    ));
    // What the liveness probe on /healthz does: restart the container.
    node.registrar()?.signal(Signal::TERM)?;
    node.registrar_exit().await?;
    node.start_registrar(&["--registration-socket-check-interval=0"])?;
    f.restarts += 1;
    let registered = node.wait_registered().await?;
    f.saw(format!(
        "container restarted: registered {:.1} s later",
        registered.as_secs_f64()
    ));

    // The default: the socket comes back by itself.
    node.registrar()?.signal(Signal::TERM)?;
    node.registrar_exit().await?;
    node.kubelet()?.wait_deregistered(DRIVER, WAIT).await?;
    node.start_registrar(&[])?;
    node.wait_registered().await?;
    let pid = node.registrar_pid()?;
    let removed = Instant::now();
    std::fs::remove_file(node.socket())?;
    node.kubelet()?.wait_deregistered(DRIVER, WAIT).await?;
    node.wait_registered().await?;
    let back = removed.elapsed();
    let healthz = node.wait_healthz(200).await?;
    f.expect(healthz.body == "ok", || format!("/healthz: {healthz:?}"));
    node.check_running(f, "socket re-created")?;
    f.expect(node.registrar_pid()? == pid, || {
        "the registrar was restarted".to_owned()
    });
    f.saw(format!(
        "default (1 s check): socket re-created, de-registered and registered again {:.1} s after the delete, /healthz 200, no restart",
        back.as_secs_f64()
    ));
    Ok(())
}

/// Each churn cycle restarts the kubelet (a fresh dial, GetInfo, NodeGetInfo, notification),
/// every third one with the socket wiped first, and asks `/healthz` this often.
const CYCLE_HEALTHZ: usize = 10;

async fn churn(node: &mut Node, f: &mut Findings, duration: Duration) -> anyhow::Result<()> {
    node.restart_kubelet(Verdict::Accept).await?;
    node.start_registrar(&[])?;
    node.wait_registered().await?;
    let pid = node.registrar_pid()?;
    let window = procstat::first_window(duration);
    let started = Instant::now();
    let mut samples = vec![Sample::read(pid, Duration::ZERO)?];
    let mut cycle = 0;
    let mut wrong = 0;
    let mut slowest = Duration::ZERO;
    while started.elapsed() < duration {
        if let Some(old) = node.kubelet.take() {
            old.stop().await;
        }
        if cycle % 3 == 2 {
            wipe(&node.plugins)?;
        }
        node.restart_kubelet(Verdict::Accept).await?;
        slowest = slowest.max(node.wait_registered().await?);
        for _ in 0..CYCLE_HEALTHZ {
            let healthz = node.healthz().await?;
            if (healthz.status, healthz.body.as_str()) != (200, "ok") {
                wrong += 1;
            }
        }
        samples.push(Sample::read(pid, started.elapsed())?);
        cycle += 1;
    }
    node.check_running(f, "churn")?;
    f.expect(wrong == 0, || {
        format!("{wrong} /healthz answers were not 200 ok")
    });
    f.saw(format!(
        "{cycle} kubelet restarts ({} with the socket wiped) and {} /healthz over {:.0} s; slowest re-registration {:.1} s",
        cycle / 3,
        cycle * CYCLE_HEALTHZ,
        started.elapsed().as_secs_f64(),
        slowest.as_secs_f64()
    ));
    check_levels(f, &samples, window, pid, started).await?;
    Ok(())
}

/// The registrar's `/healthz` on `--health-port`, as kubelet's liveness probe asks it.
struct Health {
    addr: SocketAddr,
    pid: u32,
}

impl Flooded for Health {
    async fn healthz(&self) -> anyhow::Result<Answer> {
        flood::get_healthz(self.addr, WAIT).await
    }

    fn pid(&self) -> u32 {
        self.pid
    }
}

/// `--flood` requests at once on `/healthz`, `--flood-rounds` times, measured as livenessprobe's
/// `flood` row ([`flood::flood`]); the registrar must stay registered and running throughout.
async fn flood(node: &mut Node, f: &mut Findings, setup: &NodeSetup) -> anyhow::Result<()> {
    node.restart_kubelet(Verdict::Accept).await?;
    node.start_registrar(&[])?;
    node.wait_registered().await?;
    let health = Health {
        addr: SocketAddr::from(([127, 0, 0, 1], node.port.port())),
        pid: node.registrar_pid()?,
    };
    flood::flood(&health, f, setup.flood, setup.flood_rounds).await?;
    node.check_running(f, "after the floods")?;
    let healthz = node.healthz().await?;
    f.expect(
        (healthz.status, healthz.body.as_str()) == (200, "ok"),
        || {
            format!(
                "after the floods /healthz answered {} {:?}",
                healthz.status, healthz.body
            )
        },
    );
    Ok(())
}
