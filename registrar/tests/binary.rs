//! Whole-binary tests: the real `csi-node-driver-registrar` executable between the workspace's
//! mock CSI driver and the fake kubelet plugin watcher (`testbed_kubelet`), all on temp-dir
//! unix sockets, with `/healthz` observed over real HTTP as kubelet's liveness probe sees it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use testbed_kubelet::grpc_dial::Authority;
use testbed_kubelet::{FakeKubelet, KubeletConfig, KubeletEvent, NotifyOutcome, Verdict};
use testbed_mock_csi::{Fault, Method, MockDriver, MockDriverConfig, MockDriverHandle};
use testbed_support::http_client::{self, HttpResponse};
use testbed_support::process::{ChildProcess, Signal};
use testbed_support::wait::eventually;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_csi-node-driver-registrar");
const DRIVER: &str = "hostpath.csi.k8s.io";
const WAIT: Duration = Duration::from_secs(15);

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A node: the driver's socket directory, the plugins registry directory and the driver.
struct Node {
    dir: tempfile::TempDir,
    plugins: PathBuf,
    driver: MockDriverHandle,
}

impl Node {
    async fn new() -> Self {
        Self::with_driver(DRIVER).await
    }

    async fn with_driver(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins_registry");
        std::fs::create_dir(&plugins).unwrap();
        let config = MockDriverConfig {
            driver_name: name.to_owned(),
            node_id: "ref-node".to_owned(),
            ..MockDriverConfig::default()
        };
        let driver = MockDriver::start(config, dir.path().join("csi/csi.sock"))
            .await
            .unwrap();
        Self {
            dir,
            plugins,
            driver,
        }
    }

    fn socket(&self) -> PathBuf {
        self.plugins.join(format!("{DRIVER}-reg.sock"))
    }

    /// The registrar's log (stdout and stderr), replaced by each start.
    fn log(&self) -> PathBuf {
        self.dir.path().join("registrar.log")
    }

    fn kubelet(&self) -> FakeKubelet {
        self.kubelet_with(Verdict::Accept)
    }

    fn kubelet_with(&self, verdict: Verdict) -> FakeKubelet {
        self.kubelet_dialing(verdict, Authority::SocketPath)
    }

    /// A kubelet whose registration calls carry `authority` (kubelet's own: the socket path).
    fn kubelet_dialing(&self, verdict: Verdict, authority: Authority) -> FakeKubelet {
        FakeKubelet::start(KubeletConfig {
            verdict,
            dial_timeout: Duration::from_secs(1),
            initial_backoff: Duration::from_millis(100),
            registration_authority: authority,
            ..KubeletConfig::new(&self.plugins)
        })
        .unwrap()
    }

    /// The flags every test passes: this node's sockets; the host path is the same file here.
    fn args(&self) -> Vec<String> {
        vec![
            format!("--csi-address={}", self.driver.socket_path().display()),
            format!(
                "--kubelet-registration-path={}",
                self.driver.socket_path().display()
            ),
            format!("--plugin-registration-path={}", self.plugins.display()),
        ]
    }

    fn start(&self, extra: &[&str]) -> Registrar {
        let mut args = self.args();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Registrar::spawn(&args, None, &self.log())
    }

    fn start_with_http(&self, extra: &[&str]) -> Registrar {
        let addr = free_port();
        let mut args = self.args();
        args.push(format!("--http-endpoint={addr}"));
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Registrar::spawn(&args, Some(addr), &self.log())
    }
}

struct Registrar {
    process: ChildProcess,
    http: Option<SocketAddr>,
}

impl Registrar {
    fn spawn(args: &[String], http: Option<SocketAddr>, log: &Path) -> Self {
        let process = ChildProcess::spawn("registrar", Path::new(BIN), args, log).unwrap();
        Self { process, http }
    }

    async fn get(&self, path: &str) -> std::io::Result<HttpResponse> {
        http_client::get(self.http.unwrap(), path, Duration::from_secs(10)).await
    }

    fn signal(&self, signal: Signal) {
        self.process.signal(signal).unwrap();
    }

    /// Waits for the process to exit by itself and returns its exit code and log.
    async fn exit(self) -> (Option<i32>, String) {
        self.exit_within(WAIT).await
    }

    /// Like [`Registrar::exit`], failing unless it exits within `timeout`.
    async fn exit_within(mut self, timeout: Duration) -> (Option<i32>, String) {
        let status = self.process.wait_exit(timeout).await.unwrap();
        (status.code(), self.process.log_text())
    }
}

async fn wait_for_path(path: &Path, present: bool) {
    eventually(
        &format!("{} present={present}", path.display()),
        WAIT,
        async || (path.exists() == present).then_some(()),
    )
    .await;
}

fn assert_private_socket(path: &Path) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(
        meta.file_type().is_socket(),
        "{} is not a socket",
        path.display()
    );
    // srwx------, what upstream's umask 0077 produces.
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
}

#[tokio::test]
async fn registration_with_the_kubelet_succeeds() {
    let node = Node::new().await;
    let kubelet = node.kubelet();
    let registrar = node.start_with_http(&[]);

    let plugin = kubelet.wait_registered(DRIVER, WAIT).await.unwrap();
    assert_eq!(plugin.socket, node.socket());
    assert_eq!(
        plugin.endpoint,
        node.driver.socket_path().display().to_string()
    );
    assert_eq!(plugin.supported_versions, ["1.0.0"]);
    assert_eq!(plugin.notified, NotifyOutcome::Acknowledged);
    // Kubelet dialled the endpoint the registrar announced and got the node id.
    assert_eq!(plugin.node.unwrap().node_id, "ref-node");
    assert_private_socket(&node.socket());
    // The registrar itself only asks for the driver name (fixture
    // startup-csi-node-driver-registrar.txt); NodeGetInfo came from the kubelet.
    assert_eq!(node.driver.call_count(Method::GetPluginInfo), 1);
    assert_eq!(node.driver.call_count(Method::NodeGetInfo), 1);
    // Nothing else is left in the registry directory (no temporary files).
    let entries: Vec<_> = std::fs::read_dir(&node.plugins).unwrap().collect();
    assert_eq!(entries.len(), 1);

    let healthz = registrar.get("/healthz").await.unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));
    assert_eq!(
        healthz.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    // fixture registrar-metrics-404.txt: no metrics at all.
    let metrics = registrar.get("/metrics").await.unwrap();
    assert_eq!(
        (metrics.status, metrics.body.as_str()),
        (404, "404 page not found\n")
    );
    assert_eq!(metrics.header("x-content-type-options"), Some("nosniff"));
}

/// Kubelet's plugin manager sends `:authority` = the socket path (grpc-go, passthrough
/// resolver), which h2 alone resets with PROTOCOL_ERROR; other clients send an empty value,
/// `localhost` or none. Every style registers, and the registrar answers both calls.
#[tokio::test]
async fn every_client_style_of_authority_registers_including_the_socket_path_kubelet_sends() {
    for authority in Authority::ALL {
        let node = Node::new().await;
        let kubelet = node.kubelet_dialing(Verdict::Accept, authority);
        let registrar = node.start(&[]);
        let plugin = kubelet
            .wait_registered(DRIVER, WAIT)
            .await
            .unwrap_or_else(|err| panic!("{authority:?}: {err}"));
        assert_eq!(
            plugin.notified,
            NotifyOutcome::Acknowledged,
            "{authority:?}"
        );
        assert_eq!(plugin.node.unwrap().node_id, "ref-node", "{authority:?}");
        registrar.signal(Signal::TERM);
        let (code, stderr) = registrar.exit().await;
        assert_eq!(code, Some(0), "{authority:?}: {stderr}");
    }
}

#[tokio::test]
async fn a_failed_registration_reported_by_the_kubelet_ends_the_registrar_with_exit_code_1() {
    let node = Node::new().await;
    let kubelet = node.kubelet_with(Verdict::Reject("CSINode is not ready".to_owned()));
    let registrar = node.start(&[]);

    let (code, stderr) = registrar.exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr
            .contains("Registration process failed with error, restarting registration container"),
        "{stderr}"
    );
    assert!(stderr.contains("CSINode is not ready"), "{stderr}");
    // Upstream exits before answering: the kubelet's notification call fails.
    let event = kubelet
        .wait_event(0, WAIT, |e| {
            matches!(e, KubeletEvent::RegistrationFailed { .. })
        })
        .await
        .unwrap();
    let KubeletEvent::RegistrationFailed { notified, .. } = event else {
        unreachable!()
    };
    assert!(matches!(notified, NotifyOutcome::Failed(_)), "{notified:?}");
    // Upstream leaves the socket behind; the next start removes it.
    assert!(node.socket().exists());
    assert!(kubelet.registered().is_empty());

    // The restarted container registers once kubelet accepts.
    kubelet.set_verdict(Verdict::Accept);
    let _registrar = node.start(&[]);
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();
}

#[tokio::test]
async fn a_deleted_registration_socket_comes_back_and_the_driver_registers_again() {
    let node = Node::new().await;
    let kubelet = node.kubelet();
    let _registrar = node.start(&["--registration-socket-check-interval=200ms"]);
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();

    let before = kubelet.events().len();
    std::fs::remove_file(node.socket()).unwrap();
    kubelet
        .wait_event(before, WAIT, |e| {
            matches!(e, KubeletEvent::Deregistered { .. })
        })
        .await
        .unwrap();
    kubelet
        .wait_event(before, WAIT, |e| matches!(e, KubeletEvent::Registered(_)))
        .await
        .unwrap();
    assert_private_socket(&node.socket());
    assert_eq!(kubelet.registered().len(), 1);
}

#[tokio::test]
async fn the_default_check_interval_recreates_the_socket_within_seconds() {
    let node = Node::new().await;
    let kubelet = node.kubelet();
    let _registrar = node.start(&[]);
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();
    std::fs::remove_file(node.socket()).unwrap();
    wait_for_path(&node.socket(), false).await;
    wait_for_path(&node.socket(), true).await;
}

#[tokio::test]
async fn re_registration_after_a_kubelet_restart_works() {
    let node = Node::new().await;
    let kubelet = node.kubelet();
    let _registrar = node.start(&[]);
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();
    kubelet.stop().await;

    // A restarted kubelet finds the existing socket and registers the driver again.
    let restarted = node.kubelet();
    let plugin = restarted.wait_registered(DRIVER, WAIT).await.unwrap();
    assert_eq!(plugin.notified, NotifyOutcome::Acknowledged);
    assert_eq!(node.driver.call_count(Method::NodeGetInfo), 2);
}

#[tokio::test]
async fn healthz_is_ok_while_the_socket_answers_and_404_once_it_is_gone() {
    let node = Node::new().await;
    let kubelet = node.kubelet();
    let registrar = node.start_with_http(&["--registration-socket-check-interval=0"]);
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();
    let healthz = registrar.get("/healthz").await.unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));

    // fixture registrar-healthz-driver-down.txt: only the registration socket is checked.
    node.driver.stop().await.unwrap();
    let healthz = registrar.get("/healthz").await.unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));

    std::fs::remove_file(node.socket()).unwrap();
    let healthz = registrar.get("/healthz").await.unwrap();
    assert_eq!(
        (healthz.status, healthz.body.as_str()),
        (404, "registration socket does not exist")
    );
    assert_eq!(healthz.header("x-content-type-options"), None);
    kubelet.wait_deregistered(DRIVER, WAIT).await.unwrap();

    // Something that is not a socket: 500 with upstream's text.
    std::fs::write(node.socket(), b"").unwrap();
    let healthz = registrar.get("/healthz").await.unwrap();
    assert_eq!(healthz.status, 500);
    assert_eq!(
        healthz.body,
        format!(
            "file exists in socketPath {} but it's not a socket.",
            node.socket().display()
        )
    );
}

#[tokio::test]
async fn sigterm_removes_the_registration_socket_and_exits_0() {
    let node = Node::new().await;
    let kubelet = node.kubelet();
    let registrar = node.start(&[]);
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();

    registrar.signal(Signal::TERM);
    let (code, stderr) = registrar.exit().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!node.socket().exists());
    kubelet.wait_deregistered(DRIVER, WAIT).await.unwrap();
}

/// The driver container stops first when the pod goes away; the registrar, which used its
/// driver connection only for GetPluginInfo, must not log that as a lost connection.
#[tokio::test]
async fn a_driver_stopping_before_sigterm_is_not_a_lost_connection() {
    let node = Node::new().await;
    let kubelet = node.kubelet();
    let mut args = node.args();
    args.push("-v=5".to_owned());
    let mut registrar = Registrar::spawn(&args, None, &node.log());
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();
    node.driver.stop().await.unwrap();
    // Positive signal: the registrar saw the connection end (debug level at -v=5).
    registrar
        .process
        .wait_logged("Connection closed during shutdown", WAIT)
        .await
        .unwrap();
    registrar.signal(Signal::TERM);
    let (code, text) = registrar.exit().await;
    assert_eq!(code, Some(0));
    assert!(!text.contains("Lost connection"), "{text}");
}

#[tokio::test]
async fn sigint_also_removes_the_registration_socket_and_exits_0() {
    let node = Node::new().await;
    let registrar = node.start(&[]);
    wait_for_path(&node.socket(), true).await;
    registrar.signal(Signal::INT);
    let (code, stderr) = registrar.exit().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!node.socket().exists());
}

#[tokio::test]
async fn a_stale_socket_is_replaced_but_a_regular_file_is_a_fatal_error() {
    let node = Node::new().await;
    drop(std::os::unix::net::UnixListener::bind(node.socket()).unwrap());
    let kubelet = node.kubelet();
    let registrar = node.start(&[]);
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();
    registrar.signal(Signal::TERM);
    assert_eq!(registrar.exit().await.0, Some(0));

    std::fs::write(node.socket(), b"precious").unwrap();
    let (code, stderr) = node.start(&[]).exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("but it's not a socket"), "{stderr}");
    assert_eq!(std::fs::read(node.socket()).unwrap(), b"precious");
}

#[tokio::test]
async fn a_missing_registration_directory_is_a_clear_error_with_exit_code_1() {
    let node = Node::new().await;
    std::fs::remove_dir(&node.plugins).unwrap();
    let (code, stderr) = node.start(&[]).exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("plugin registration directory"), "{stderr}");
    assert!(
        stderr.contains(&node.plugins.display().to_string()),
        "{stderr}"
    );
}

#[tokio::test]
async fn driver_names_that_cannot_name_a_socket_file_exit_1() {
    for name in ["example.com/driver", ".hidden.example.com"] {
        let node = Node::with_driver(name).await;
        let (code, stderr) = node.start(&[]).exit().await;
        assert_eq!(code, Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("cannot form a registration socket file name"),
            "{name}: {stderr}"
        );
        assert_eq!(
            std::fs::read_dir(&node.plugins).unwrap().count(),
            0,
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_get_plugin_info_error_or_a_slow_answer_exits_1_without_retrying() {
    let node = Node::new().await;
    node.driver.inject(Fault::error(
        Method::GetPluginInfo,
        tonic::Code::Internal,
        "not initialised",
    ));
    let (code, stderr) = node.start(&[]).exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("not initialised"), "{stderr}");
    assert_eq!(node.driver.call_count(Method::GetPluginInfo), 1);

    node.driver.clear_faults();
    node.driver
        .inject(Fault::delay(Method::GetPluginInfo, Duration::from_secs(3)));
    let started = tokio::time::Instant::now();
    let (code, stderr) = node.start(&["--timeout=500ms"]).exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(started.elapsed() < Duration::from_millis(2500));
    assert_eq!(std::fs::read_dir(&node.plugins).unwrap().count(), 0);
}

/// Upstream gives up on a missing driver socket after csi-lib-utils' 30 s connect timeout.
#[tokio::test]
async fn an_unreachable_driver_exits_1_after_30_seconds() {
    let node = Node::new().await;
    node.driver.stop().await.unwrap();
    let started = tokio::time::Instant::now();
    let (code, stderr) = node.start(&[]).exit_within(Duration::from_mins(1)).await;
    let took = started.elapsed();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(took >= Duration::from_secs(29), "{took:?}");
    assert!(took < Duration::from_secs(45), "{took:?}");
    assert!(stderr.contains("context deadline exceeded"), "{stderr}");
}

#[tokio::test]
async fn while_waiting_for_the_driver_healthz_is_404_and_a_signal_exits_0() {
    let node = Node::new().await;
    node.driver.stop().await.unwrap();
    let registrar = node.start_with_http(&[]);
    let healthz = eventually("the HTTP server to answer", WAIT, async || {
        registrar.get("/healthz").await.ok()
    })
    .await;
    assert_eq!(
        (healthz.status, healthz.body.as_str()),
        (404, "registration socket does not exist")
    );
    registrar.signal(Signal::TERM);
    assert_eq!(registrar.exit().await.0, Some(0));
}

#[tokio::test]
async fn sigterm_while_the_driver_has_not_answered_get_plugin_info_exits_0_at_once() {
    let node = Node::new().await;
    node.driver
        .inject(Fault::delay(Method::GetPluginInfo, Duration::from_mins(10)));
    let registrar = node.start(&["--timeout=10m"]);
    node.driver
        .wait_for_calls(Method::GetPluginInfo, 1, WAIT)
        .await
        .unwrap();
    registrar.signal(Signal::TERM);
    let (code, stderr) = registrar.exit_within(Duration::from_secs(5)).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(std::fs::read_dir(&node.plugins).unwrap().count(), 0);
}

#[tokio::test]
async fn a_busy_http_endpoint_exits_1_before_anything_is_registered() {
    let node = Node::new().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = node.start(&["--http-endpoint", &addr]).exit().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(std::fs::read_dir(&node.plugins).unwrap().count(), 0);
}

async fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(BIN).args(args).stdin(Stdio::null()).output();
    let output = tokio::time::timeout(Duration::from_secs(10), output)
        .await
        .unwrap()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn version_prints_argv0_and_the_version_with_either_dash_form() {
    for flag in ["--version", "-version", "--version=true"] {
        let (code, stdout, _) = run(&[flag]).await;
        assert_eq!(code, Some(0), "{flag}");
        assert_eq!(
            stdout,
            format!(
                "{BIN} {}\n",
                testbed_support::version::expected(
                    Path::new(env!("CARGO_MANIFEST_DIR")),
                    env!("CARGO_PKG_VERSION")
                )
            ),
            "{flag}"
        );
    }
}

#[tokio::test]
async fn flag_errors_exit_2_and_help_exits_0() {
    for args in [
        &["--timeout=fast"][..],
        &["--health-port=port"],
        &["--no-such-flag"],
        &["--kubeconfig=/k"],
        &["--logtostderr"],
        &["--enable-pprof", "false"],
    ] {
        assert_eq!(run(args).await.0, Some(2), "{args:?}");
    }
    let (code, stdout, _) = run(&["--help"]).await;
    assert_eq!(code, Some(0));
    for flag in [
        "--csi-address",
        "--kubelet-registration-path",
        "--plugin-registration-path",
        "--timeout",
        "--health-port",
        "--http-endpoint",
        "--mode",
        "--enable-pprof",
        "--connection-timeout",
        "--version",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from --help");
    }
}

#[tokio::test]
async fn fatal_flag_combinations_exit_1() {
    const HOST: &str = "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock";
    for args in [
        &[][..],
        &["--mode=kubelet-registration-probe"],
        &["--kubelet-registration-path=relative/csi.sock"],
        &[HOST, "--health-port=9809", "--http-endpoint=:9810"],
        &[HOST, "--csi-address=tcp://127.0.0.1:1"],
        &[HOST, "--logging-format=json", "--vmodule=x=5"],
    ] {
        let (code, _, stderr) = run(args).await;
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
    }
    let (_, _, stderr) = run(&[]).await;
    assert!(
        stderr.contains("kubelet-registration-path is a required parameter"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_kubelet_registration_probe_mode_is_a_no_op_that_exits_0() {
    let (code, _, stderr) = run(&[
        "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock",
        "--mode=kubelet-registration-probe",
    ])
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    // Single-dash spelling, as exec probes in the wild write it.
    let (code, _, _) = run(&[
        "-kubelet-registration-path",
        "/var/lib/kubelet/plugins/x/csi.sock",
        "-mode",
        "kubelet-registration-probe",
    ])
    .await;
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn deprecated_flags_are_accepted_and_the_health_port_serves_healthz() {
    let node = Node::new().await;
    let kubelet = node.kubelet();
    let port = free_port().port();
    let mut args = node.args();
    args.extend([
        format!("-health-port={port}"),
        "-connection-timeout=30s".to_owned(),
        "-mode=registration".to_owned(),
        "-enable-pprof".to_owned(),
        "-v=5".to_owned(),
    ]);
    let registrar = Registrar::spawn(
        &args,
        Some(SocketAddr::from(([127, 0, 0, 1], port))),
        &node.log(),
    );
    kubelet.wait_registered(DRIVER, WAIT).await.unwrap();
    let healthz = registrar.get("/healthz").await.unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));
}
