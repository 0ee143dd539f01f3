//! Whole-binary tests: the real `livenessprobe` executable against the workspace's mock CSI
//! driver on a temp-dir unix socket, observed over real HTTP the way kubelet probes it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail the test loudly on any setup error"
)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use testbed_mock_csi::{Fault, Method, MockDriver, MockDriverConfig, MockDriverHandle};
use testbed_support::http_client::{self, HttpResponse};
use testbed_support::process::{ChildProcess, Signal};
use testbed_support::wait::eventually;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_livenessprobe");

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

fn driver_config() -> MockDriverConfig {
    MockDriverConfig {
        driver_name: "hostpath.csi.k8s.io".to_owned(),
        ..MockDriverConfig::default()
    }
}

/// A running `livenessprobe`; killed on drop, its log printed if the test is failing.
struct Probe {
    process: ChildProcess,
    addr: SocketAddr,
}

impl Probe {
    /// Starts the binary serving on `--http-endpoint` with `extra` flags; its log goes next to
    /// the driver socket, in the test's temp dir.
    fn spawn(socket: &Path, extra: &[&str]) -> Self {
        let addr = free_port();
        let mut args = vec![
            format!("--csi-address={}", socket.display()),
            format!("--http-endpoint={addr}"),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Self::spawn_args(addr, &args, &socket.with_file_name("livenessprobe.log"))
    }

    /// Starts the binary with exactly `args`, its log in `log`; it is expected to listen on
    /// `addr`.
    fn spawn_args(addr: SocketAddr, args: &[String], log: &Path) -> Self {
        let process = ChildProcess::spawn("livenessprobe", Path::new(BIN), args, log).unwrap();
        Self { process, addr }
    }

    /// Starts the binary at `-v=5`; returns it once its log shows `line`, the positive signal
    /// that start-up reached the stage under test.
    async fn spawn_until_logged(socket: &Path, line: &str) -> Self {
        let mut probe = Self::spawn(socket, &["-v=5"]);
        probe
            .process
            .wait_logged(line, Duration::from_secs(10))
            .await
            .unwrap();
        probe
    }

    async fn get(&self, path: &str) -> std::io::Result<HttpResponse> {
        http_client::get(self.addr, path, Duration::from_secs(10)).await
    }

    /// Polls until the HTTP port answers (it only opens once the driver answered
    /// GetPluginInfo).
    async fn wait_listening(&self) -> HttpResponse {
        eventually(
            &format!("livenessprobe listening on {}", self.addr),
            Duration::from_secs(10),
            async || self.get("/healthz").await.ok(),
        )
        .await
    }

    /// SIGTERM, as kubelet stops the container; returns the exit code, which must come at
    /// once.
    async fn terminate(mut self) -> Option<i32> {
        self.process.signal(Signal::TERM).unwrap();
        self.process
            .wait_exit(Duration::from_secs(5))
            .await
            .expect("exited at once after SIGTERM")
            .code()
    }
}

async fn start_driver(dir: &Path) -> MockDriverHandle {
    MockDriver::start(driver_config(), dir.join("csi.sock"))
        .await
        .unwrap()
}

#[tokio::test]
async fn healthy_not_ready_stopped_and_restarted_driver() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    let probe = Probe::spawn(driver.socket_path(), &["--probe-timeout=1s"]);

    // Healthy: 200 with exactly "ok" (no newline), as upstream.
    let response = probe.wait_listening().await;
    assert_eq!((response.status, response.body.as_str()), (200, "ok"));
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; charset=utf-8")
    );

    // Probe answers ready=false: 500 with upstream's text.
    driver.set_ready(Some(false));
    let response = probe.get("/healthz").await.unwrap();
    assert_eq!(response.status, 500);
    assert_eq!(response.body, "driver responded but is not ready");

    // An absent `ready` means ready (CSI spec).
    driver.set_ready(None);
    assert_eq!(probe.get("/healthz").await.unwrap().status, 200);

    // Driver stopped (socket gone): 500 within the probe timeout.
    driver.stop().await.unwrap();
    let started = tokio::time::Instant::now();
    let response = probe.get("/healthz").await.unwrap();
    let took = started.elapsed();
    assert_eq!(response.status, 500, "{}", response.body);
    assert!(!response.body.is_empty());
    assert!(took < Duration::from_millis(1800), "took {took:?}");

    // Driver back on the same socket: healthy again, without restarting the probe.
    driver.restart().await.unwrap();
    let response = probe.get("/healthz").await.unwrap();
    assert_eq!((response.status, response.body.as_str()), (200, "ok"));
}

#[tokio::test]
async fn a_probe_slower_than_the_timeout_answers_500_deadline_exceeded_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    let probe = Probe::spawn(driver.socket_path(), &["--probe-timeout=500ms"]);
    assert_eq!(probe.wait_listening().await.status, 200);

    driver.inject(Fault::delay(Method::Probe, Duration::from_secs(5)));
    let started = tokio::time::Instant::now();
    let response = probe.get("/healthz").await.unwrap();
    let took = started.elapsed();
    // Upstream's one context ends the Probe call itself: grpc-go's status text, not the bare
    // context error of a connect that timed out.
    assert_eq!(response.status, 500);
    assert_eq!(
        response.body,
        "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
    );
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    // ... and the call is recorded with that code, as upstream's metrics interceptor does.
    let metrics = probe.get("/metrics").await.unwrap().body;
    assert!(metrics.contains(
        "csi_sidecar_operations_seconds_count{driver_name=\"hostpath.csi.k8s.io\",grpc_status_code=\"DeadlineExceeded\",method_name=\"/csi.v1.Identity/Probe\"} 1"
    ), "{metrics}");
}

#[tokio::test]
async fn a_probe_error_is_reported_with_the_grpc_status() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    let probe = Probe::spawn(driver.socket_path(), &[]);
    assert_eq!(probe.wait_listening().await.status, 200);

    driver.inject(Fault::error(
        Method::Probe,
        tonic::Code::FailedPrecondition,
        "disk on fire",
    ));
    let response = probe.get("/healthz").await.unwrap();
    assert_eq!(response.status, 500);
    assert_eq!(
        response.body,
        "rpc error: code = FailedPrecondition desc = disk on fire"
    );
}

#[tokio::test]
async fn the_port_stays_closed_until_the_driver_socket_appears() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    // No driver: nothing listens, so kubelet sees connection refused (upstream #236/#240).
    // A failed dial proves start-up is past the point where the port would have opened.
    let probe = Probe::spawn_until_logged(&socket, "Connection attempt failed").await;
    let refused = probe.get("/healthz").await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    let _driver = start_driver(dir.path()).await;
    let response = probe.wait_listening().await;
    assert_eq!((response.status, response.body.as_str()), (200, "ok"));
}

#[tokio::test]
async fn metrics_record_get_plugin_info_and_probe_like_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    let probe = Probe::spawn(driver.socket_path(), &[]);
    assert_eq!(probe.wait_listening().await.status, 200);
    assert_eq!(probe.get("/healthz").await.unwrap().status, 200);

    let metrics = probe.get("/metrics").await.unwrap();
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8; escaping=underscores")
    );
    let body = metrics.body;
    // The start-up call happens before the name is known (upstream labels it unknown-driver).
    assert!(body.contains(
        "csi_sidecar_operations_seconds_count{driver_name=\"unknown-driver\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Identity/GetPluginInfo\"} 1"
    ), "{body}");
    assert!(body.contains(
        "csi_sidecar_operations_seconds_count{driver_name=\"hostpath.csi.k8s.io\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Identity/Probe\"} 2"
    ), "{body}");
    assert!(body.contains("# TYPE process_start_time_seconds gauge"));
}

#[tokio::test]
async fn only_the_deprecated_health_port_serves_no_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    let port = free_port().port();
    // Single-dash spellings, as many manifests in the wild write them.
    let probe = Probe::spawn_args(
        SocketAddr::from(([127, 0, 0, 1], port)),
        &[
            format!("-csi-address={}", driver.socket_path().display()),
            format!("-health-port={port}"),
        ],
        &dir.path().join("livenessprobe.log"),
    );
    assert_eq!(probe.wait_listening().await.status, 200);
    let metrics = probe.get("/metrics").await.unwrap();
    assert_eq!(
        (metrics.status, metrics.body.as_str()),
        (404, "404 page not found\n")
    );
}

#[tokio::test]
async fn sigterm_stops_the_probe_with_exit_code_0() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    let probe = Probe::spawn(driver.socket_path(), &[]);
    assert_eq!(probe.wait_listening().await.status, 200);
    assert_eq!(probe.terminate().await, Some(0));
}

#[tokio::test]
async fn sigterm_while_waiting_for_the_driver_socket_exits_0_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Probe::spawn_until_logged(&dir.path().join("csi.sock"), "Connecting").await;
    assert_eq!(probe.terminate().await, Some(0));
}

#[tokio::test]
async fn sigterm_while_the_driver_has_not_answered_get_plugin_info_exits_0_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    driver.inject(Fault::delay(Method::GetPluginInfo, Duration::from_mins(10)));
    let probe = Probe::spawn_until_logged(driver.socket_path(), "Connecting").await;
    driver
        .wait_for_calls(Method::GetPluginInfo, 1, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(probe.terminate().await, Some(0));
}

async fn exit_code(args: &[&str]) -> Option<i32> {
    let output = Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .output();
    tokio::time::timeout(Duration::from_secs(10), output)
        .await
        .unwrap()
        .unwrap()
        .status
        .code()
}

#[tokio::test]
async fn flag_errors_exit_2_and_fatal_combinations_exit_1() {
    for args in [
        &["--version"][..],
        &["--probe-timeout=fast"],
        &["--no-such-flag"],
        &["-leader-election"],
        &["--logging-format=xml"],
    ] {
        assert_eq!(exit_code(args).await, Some(2), "{args:?}");
    }
    assert_eq!(exit_code(&["--help"]).await, Some(0));
    for args in [
        &["--http-endpoint=:0", "--metrics-address=:0"][..],
        &["--http-endpoint=:0", "--health-port=1234"],
        &["--csi-address=relative.sock"],
    ] {
        assert_eq!(exit_code(args).await, Some(1), "{args:?}");
    }
}

#[tokio::test]
async fn a_driver_stopping_during_a_probe_is_not_a_lost_connection() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    let probe = Probe::spawn_until_logged(driver.socket_path(), "CSI driver name").await;
    driver.inject(Fault::delay(Method::Probe, Duration::from_mins(1)));
    let healthz = tokio::spawn(http_client::get(
        probe.addr,
        "/healthz",
        Duration::from_secs(30),
    ));
    driver
        .wait_for_calls(Method::Probe, 1, Duration::from_secs(10))
        .await
        .unwrap();
    // The driver container goes away (a restart, or the pod stopping) while kubelet probes.
    driver.stop().await.unwrap();
    let response = healthz.await.unwrap().unwrap();
    assert_eq!(response.status, 500, "{}", response.body);
    let log = probe.process.log().to_owned();
    assert_eq!(probe.terminate().await, Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    // The failed probe is the report; a single-use probe connection has nothing to lose.
    assert!(!text.contains("Lost connection"), "{text}");
}

/// Found by the `flood` fault of `chaos` (docs/reliability.md, "Node sidecars"): upstream
/// dials the driver once per request, so a burst of requests opened one driver connection each
/// and most answered 500 as their connects starved each other. Requests that arrive while a
/// probe runs now share it.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_requests_share_one_probe_of_the_driver() {
    let dir = tempfile::tempdir().unwrap();
    let driver = start_driver(dir.path()).await;
    let probe = Probe::spawn(driver.socket_path(), &["--probe-timeout=5s"]);
    assert_eq!(probe.wait_listening().await.status, 200);
    // Slow enough that the burst arrives while the first probe runs.
    driver.inject(Fault::delay(Method::Probe, Duration::from_millis(500)));
    let before = driver.call_count(Method::Probe);

    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let addr = probe.addr;
        requests.spawn(
            async move { http_client::get(addr, "/healthz", Duration::from_secs(10)).await },
        );
    }
    while let Some(answer) = requests.join_next().await {
        let answer = answer.unwrap().unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (200, "ok"));
    }
    let calls = driver.call_count(Method::Probe) - before;
    assert!(
        calls <= 5,
        "{calls} Probe calls for 200 concurrent requests"
    );
}
