//! The sandbox: the whole volume stack on one machine, no cluster needed. It starts the
//! in-memory API server on 127.0.0.1 (and writes a kubeconfig for it), the controller-manager
//! stand-in ([`testbed_cluster::kcm`]) in-process, the `mock-csi-driver` and every sidecar binary found
//! in the bin dir as real child processes with their real flags, then creates Namespace
//! `sandbox`, a StorageClass for the mock driver and a set of claims, and walks them through
//! the [`flows`] the built sidecars support. The `sandbox` binary prints the [`report`].
//!
//! Lifecycle: [`Sandbox::start`] → [`Sandbox::run_flows`] → [`Sandbox::report`] →
//! [`Sandbox::shutdown`]. Child processes are stopped with SIGTERM (SIGKILL after a grace
//! period) and killed on drop; their logs stay in the work dir for inspection.

pub mod fixtures;
pub mod flows;
pub mod report;
pub mod sidecars;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use csi_common::logging::error_chain;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Mutex;

use flows::{Flow, FlowError};
use report::{FlowReport, Highlight, Outcome, Report, SidecarReport};
use sidecars::{LaunchContext, SidecarSpec};
use testbed_cluster::apiserver::{ApiServer, Listening};
use testbed_cluster::kcm::{self, ControllerManager};
use testbed_support::http_client;
use testbed_support::leader::FAST_LEADER_ELECTION;
use testbed_support::process::{self, ChildProcess};

/// Namespace the sandbox's claims live in.
pub const NAMESPACE: &str = "sandbox";
/// The StorageClass created for the mock driver (Immediate binding, reclaimPolicy Delete).
pub const STORAGE_CLASS: &str = "sandbox-mock";
/// Name of the mock driver binary.
pub const DRIVER_BINARY: &str = "mock-csi-driver";
/// Node id the mock driver reports.
pub const NODE_NAME: &str = "sandbox-node";

/// Longest time a single flow may take before it counts as failed.
pub const FLOW_TIMEOUT: Duration = Duration::from_mins(1);

/// Errors of setting the sandbox up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The work dir could not be created.
    #[error("cannot create the work dir")]
    WorkDir(#[source] std::io::Error),
    /// The API server could not listen or its kubeconfig could not be written.
    #[error("cannot start the API server listener or write {0}")]
    ApiServer(PathBuf, #[source] std::io::Error),
    /// The listener's URL does not parse (a bug).
    #[error("the API server URL does not parse")]
    ApiUrl(#[source] http::uri::InvalidUri),
    /// The client for the API server could not be built.
    #[error("cannot build a client for the API server")]
    Client(#[source] kube::Error),
    /// `mock-csi-driver` is not in the bin dir.
    #[error("{DRIVER_BINARY} not found in {0} (build it with `cargo build -p testbed-mock-csi`)")]
    DriverMissing(PathBuf),
    /// A child process failed.
    #[error(transparent)]
    Process(#[from] process::Error),
    /// Creating the sandbox objects failed.
    #[error("cannot create {what}")]
    Setup {
        /// Which object.
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How to run the sandbox.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where `mock-csi-driver` and the sidecar binaries are.
    pub bin_dir: PathBuf,
    /// Where to write the kubeconfig of the API server.
    pub kubeconfig_out: PathBuf,
    /// How many claims to create.
    pub claims: usize,
    /// Where sockets and logs go; a fresh directory under the system temp dir when `None`.
    pub work_dir: Option<PathBuf>,
    /// Driver name the mock driver reports (and the StorageClass provisioner).
    pub driver_name: String,
    /// Resync period of the controller-manager stand-in.
    pub resync_period: Duration,
    /// Start the sidecars that talk to the API server with leader election (a short Lease in
    /// `default`, [`testbed_support::leader::FAST_LEADER_ELECTION`]), as deployed; off by
    /// default, so a flow never waits for a Lease.
    pub leader_election: bool,
}

impl Options {
    /// Defaults for binaries in `bin_dir`: kubeconfig `./sandbox.kubeconfig`, 5 claims, a
    /// temp work dir, driver `mock.csi.k8s.io`.
    pub fn new(bin_dir: impl Into<PathBuf>) -> Self {
        Self {
            bin_dir: bin_dir.into(),
            kubeconfig_out: PathBuf::from("sandbox.kubeconfig"),
            claims: 5,
            work_dir: None,
            driver_name: testbed_mock_csi::DEFAULT_DRIVER_NAME.to_owned(),
            resync_period: kcm::Config::default().resync_period,
            leader_election: false,
        }
    }
}

/// A sidecar slot: started (possibly exited since), failed to start, or not built.
#[derive(Debug)]
enum SidecarState {
    NotBuilt,
    Failed(String),
    Started {
        process: Box<ChildProcess>,
        http: SocketAddr,
        restarts: u32,
    },
}

#[derive(Debug)]
struct Sidecar {
    spec: SidecarSpec,
    /// Its `--http-endpoint` when it started (kept across restarts).
    http: Option<SocketAddr>,
    state: Mutex<SidecarState>,
}

/// A running sandbox; flows get `&Sandbox`.
pub struct Sandbox {
    options: Options,
    api: ApiServer,
    listening: Listening,
    client: Client,
    kcm: ControllerManager,
    work_dir: PathBuf,
    kubeconfig: PathBuf,
    csi_socket: PathBuf,
    driver: Mutex<Option<ChildProcess>>,
    sidecars: Vec<Sidecar>,
    claims: Vec<String>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("api_server", &self.listening.url())
            .field("work_dir", &self.work_dir)
            .field("sidecars", &self.sidecars)
            .field("claims", &self.claims)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Starts everything and creates the sandbox objects.
    ///
    /// # Errors
    /// See [`Error`]. A sidecar that fails to start is not an error here: it is reported (and
    /// fails the run) by [`Sandbox::report`].
    pub async fn start(options: Options) -> Result<Self> {
        let work_dir = match &options.work_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(Error::WorkDir)?;
                dir.clone()
            }
            None => tempfile::Builder::new()
                .prefix("csi-sandbox-")
                .tempdir()
                .map_err(Error::WorkDir)?
                .keep(),
        };
        let api = ApiServer::new();
        let listening = api
            .listen()
            .await
            .map_err(|e| Error::ApiServer(options.kubeconfig_out.clone(), e))?;
        listening
            .write_kubeconfig(&options.kubeconfig_out)
            .map_err(|e| Error::ApiServer(options.kubeconfig_out.clone(), e))?;
        let kubeconfig = std::path::absolute(&options.kubeconfig_out)
            .map_err(|e| Error::ApiServer(options.kubeconfig_out.clone(), e))?;
        // Over real HTTP, as the sidecars and the real controller-manager talk.
        let url = listening.url().parse().map_err(Error::ApiUrl)?;
        let client = Client::try_from(kube::Config::new(url)).map_err(Error::Client)?;
        let kcm = ControllerManager::start(
            client.clone(),
            kcm::Config {
                resync_period: options.resync_period,
                ..kcm::Config::default()
            },
        );

        let csi_socket = work_dir.join("csi.sock");
        let mut sandbox = Self {
            options,
            api,
            listening,
            client,
            kcm,
            kubeconfig,
            csi_socket,
            driver: Mutex::new(None),
            sidecars: Vec::new(),
            claims: Vec::new(),
            work_dir,
        };
        sandbox.start_driver().await?;
        sandbox.start_sidecars().await?;
        sandbox.create_objects().await?;
        Ok(sandbox)
    }

    /// Where node-driver-registrar puts its registration socket (kubelet's
    /// `plugins_registry`).
    pub fn registration_dir(&self) -> PathBuf {
        self.work_dir.join("plugins_registry")
    }

    async fn start_sidecars(&mut self) -> Result<()> {
        std::fs::create_dir_all(self.registration_dir()).map_err(Error::WorkDir)?;
        for spec in sidecars::known() {
            let Some(binary) = sidecars::locate(&self.options.bin_dir, spec.binary) else {
                self.sidecars.push(Sidecar {
                    spec,
                    http: None,
                    state: Mutex::new(SidecarState::NotBuilt),
                });
                continue;
            };
            let (state, http) = match self.start_sidecar(&spec, &binary).await {
                Ok((process, http)) => (
                    SidecarState::Started {
                        process: Box::new(process),
                        http,
                        restarts: 0,
                    },
                    Some(http),
                ),
                Err(err) => (SidecarState::Failed(err), None),
            };
            self.sidecars.push(Sidecar {
                spec,
                http,
                state: Mutex::new(state),
            });
        }
        Ok(())
    }

    async fn start_sidecar(
        &self,
        spec: &SidecarSpec,
        binary: &Path,
    ) -> Result<(ChildProcess, SocketAddr), String> {
        let http = process::free_port().map_err(|e| format!("no free port: {e}"))?;
        let ctx = LaunchContext {
            csi_socket: self.csi_socket.clone(),
            kubeconfig: self.kubeconfig.clone(),
            http_endpoint: http,
            registration_dir: self.registration_dir(),
        };
        let log = self.work_dir.join(format!("{}.log", spec.binary));
        let mut args = (spec.args)(&ctx);
        if self.options.leader_election && args.iter().any(|a| a.starts_with("--kubeconfig=")) {
            args.extend(FAST_LEADER_ELECTION.map(str::to_owned));
        }
        let command = spec.env.iter().fold(
            process::CommandLine::new(binary, &args),
            |command, (key, value)| command.env(key, value),
        );
        let mut child =
            ChildProcess::start(spec.binary, command, &log).map_err(|e| error_chain(&e))?;
        let ready = child
            .wait_ready(Duration::from_secs(15), || process::accepts_tcp(http))
            .await;
        match ready {
            Ok(()) => Ok((child, http)),
            Err(err) => {
                let _ = child.terminate().await;
                Err(format!(
                    "{}; last log lines:\n{}",
                    error_chain(&err),
                    process::log_tail(&log, 5)
                ))
            }
        }
    }

    /// Starts the mock driver (again) and waits until its socket accepts connections.
    ///
    /// # Errors
    /// When the binary is missing, fails to start, or does not listen within 10 s.
    pub async fn start_driver(&self) -> Result<()> {
        let binary = sidecars::locate(&self.options.bin_dir, DRIVER_BINARY)
            .ok_or_else(|| Error::DriverMissing(self.options.bin_dir.clone()))?;
        let args = vec![
            format!("--endpoint=unix://{}", self.csi_socket.display()),
            format!("--name={}", self.options.driver_name),
            format!("--node-id={NODE_NAME}"),
            "--log-calls".to_owned(),
            // No kubelet runs NodeExpandVolume here: the expansion flow's claim is finished by
            // csi-resizer alone.
            "--node-expansion-required=false".to_owned(),
            // The mock's default controller capabilities plus MODIFY_VOLUME, so csi-resizer
            // runs its modify controller for the volume modification flow.
            // CLONE_VOLUME and CREATE_DELETE_SNAPSHOT for the clone and restore flows.
            "--controller-capabilities=CREATE_DELETE_VOLUME,PUBLISH_UNPUBLISH_VOLUME,LIST_VOLUMES,\
             GET_CAPACITY,EXPAND_VOLUME,SINGLE_NODE_MULTI_WRITER,MODIFY_VOLUME,CLONE_VOLUME,\
             CREATE_DELETE_SNAPSHOT"
                .to_owned(),
        ];
        let log = self.work_dir.join(format!("{DRIVER_BINARY}.log"));
        let mut child = ChildProcess::spawn(DRIVER_BINARY, &binary, &args, &log)?;
        let socket = self.csi_socket.clone();
        child
            .wait_ready(Duration::from_secs(10), || process::accepts_unix(&socket))
            .await?;
        *self.driver.lock().await = Some(child);
        Ok(())
    }

    /// Stops the mock driver with SIGTERM (it removes its socket, as a driver container being
    /// restarted does).
    ///
    /// # Errors
    /// When waiting for the process fails.
    pub async fn stop_driver(&self) -> Result<()> {
        if let Some(mut child) = self.driver.lock().await.take() {
            child.terminate().await?;
        }
        Ok(())
    }

    async fn create_objects(&mut self) -> Result<()> {
        let setup = |what: String| move |source| Error::Setup { what, source };
        let pp = PostParams::default();
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": NAMESPACE}
        }))
        .map_err(|e| setup("Namespace".into())(kube::Error::SerdeError(e)))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&pp, &namespace)
            .await
            .map_err(setup(format!("Namespace {NAMESPACE}")))?;
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": STORAGE_CLASS},
            "provisioner": self.options.driver_name,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": true,
        }))
        .map_err(|e| setup("StorageClass".into())(kube::Error::SerdeError(e)))?;
        Api::<StorageClass>::all(self.client.clone())
            .create(&pp, &class)
            .await
            .map_err(setup(format!("StorageClass {STORAGE_CLASS}")))?;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), NAMESPACE);
        for i in 1..=self.options.claims {
            let name = format!("sandbox-claim-{i}");
            let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                    "storageClassName": STORAGE_CLASS,
                },
            }))
            .map_err(|e| setup(name.clone())(kube::Error::SerdeError(e)))?;
            claims
                .create(&pp, &claim)
                .await
                .map_err(setup(format!("PersistentVolumeClaim {name}")))?;
            self.claims.push(name);
        }
        Ok(())
    }

    /// The client flows use (HTTP to the API server).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Direct access to the API server's store.
    pub fn api_server(&self) -> &ApiServer {
        &self.api
    }

    /// The controller-manager stand-in (node selection, attach/detach).
    pub fn kcm(&self) -> &ControllerManager {
        &self.kcm
    }

    /// Names of the claims created at start-up (namespace [`NAMESPACE`]).
    pub fn claims(&self) -> &[String] {
        &self.claims
    }

    /// The mock driver's socket.
    pub fn csi_socket(&self) -> &Path {
        &self.csi_socket
    }

    /// The driver name.
    pub fn driver_name(&self) -> &str {
        &self.options.driver_name
    }

    /// The absolute path of the kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The `--http-endpoint` of a sidecar that started.
    pub fn sidecar_endpoint(&self, binary: &str) -> Option<SocketAddr> {
        self.sidecars
            .iter()
            .find(|s| s.spec.binary == binary)
            .and_then(|s| s.http)
    }

    /// Starts again every sidecar that exited (as kubelet restarts a container; upstream
    /// sidecars exit when they lose the driver connection) with the same flags and port, and
    /// returns `name (how it had exited)` for each.
    ///
    /// # Errors
    /// The first sidecar that cannot be restarted (it is left exited).
    pub async fn restart_exited_sidecars(&self) -> Result<Vec<String>> {
        let mut restarted = Vec::new();
        for sidecar in &self.sidecars {
            let mut state = sidecar.state.lock().await;
            let SidecarState::Started {
                process: child,
                http,
                restarts,
            } = &mut *state
            else {
                continue;
            };
            let Some(status) = child.exit_status()? else {
                continue;
            };
            child.respawn()?;
            let http = *http;
            child
                .wait_ready(Duration::from_secs(15), || process::accepts_tcp(http))
                .await?;
            *restarts += 1;
            restarted.push(format!("{} ({status})", sidecar.spec.binary));
        }
        Ok(restarted)
    }

    /// Runs `flows` one after the other, each bounded by [`FLOW_TIMEOUT`].
    pub async fn run_flows(&self, flows: &[Flow]) -> Vec<FlowReport> {
        let mut reports = Vec::new();
        for flow in flows {
            tracing::info!(flow = flow.name, "running flow");
            let started = tokio::time::Instant::now();
            let result = tokio::time::timeout(FLOW_TIMEOUT, (flow.run)(self)).await;
            let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let (outcome, notes) = match result {
                Ok(Ok(notes)) => (Outcome::Passed, notes),
                Ok(Err(FlowError::Failed(why))) => (Outcome::Failed, vec![why]),
                Ok(Err(FlowError::Skipped(why))) => (Outcome::Skipped, vec![why]),
                Err(_) => (
                    Outcome::Failed,
                    vec![format!("did not finish within {FLOW_TIMEOUT:?}")],
                ),
            };
            reports.push(FlowReport {
                name: flow.name.to_owned(),
                outcome,
                duration_ms,
                notes,
            });
        }
        reports
    }

    /// `/healthz` and selected `/metrics` lines of every running sidecar.
    pub async fn highlights(&self) -> Vec<Highlight> {
        let mut out = Vec::new();
        for sidecar in &self.sidecars {
            let Some(http) = &sidecar.http else {
                continue;
            };
            let timeout = Duration::from_secs(3);
            let healthz = match http_client::get(*http, "/healthz", timeout).await {
                Ok(r) => format!("{} {:?}", r.status, r.body),
                Err(e) => format!("error: {e}"),
            };
            let metrics = match http_client::get(*http, "/metrics", timeout).await {
                Ok(r) if r.status == 200 => flows::metric_highlights(&r.body),
                Ok(r) => vec![format!("/metrics answered {}", r.status)],
                Err(e) => vec![format!("/metrics error: {e}")],
            };
            out.push(Highlight {
                sidecar: sidecar.spec.binary.to_owned(),
                healthz,
                metrics,
            });
        }
        out
    }

    /// The report for `flows`.
    pub async fn report(&self, flows: Vec<FlowReport>) -> Report {
        let mut sidecars = Vec::new();
        for s in &self.sidecars {
            let mut state = s.state.lock().await;
            let (state, failed, command, log) = match &mut *state {
                SidecarState::NotBuilt => ("not built yet, skipped".to_owned(), false, None, None),
                SidecarState::Failed(why) => (format!("failed to start: {why}"), true, None, None),
                SidecarState::Started {
                    process, restarts, ..
                } => {
                    let restarted = match restarts {
                        0 => String::new(),
                        n => format!(", restarted {n}x"),
                    };
                    let (state, failed) = match process.exit_status() {
                        Ok(None) => (
                            format!("running (pid {}{restarted})", process.pid().unwrap_or(0)),
                            false,
                        ),
                        Ok(Some(status)) => (format!("exited with {status}{restarted}"), true),
                        Err(err) => (format!("unknown: {err}"), true),
                    };
                    (
                        state,
                        failed,
                        Some(process.command_line()),
                        Some(process.log().display().to_string()),
                    )
                }
            };
            sidecars.push(SidecarReport {
                name: s.spec.binary.to_owned(),
                state,
                failed,
                http_endpoint: s.http.map(|h| h.to_string()),
                command,
                log,
            });
        }
        Report {
            api_server: self.listening.url(),
            kubeconfig: self.kubeconfig.display().to_string(),
            log_dir: self.work_dir.display().to_string(),
            sidecars,
            flows,
            highlights: self.highlights().await,
        }
    }

    /// Stops sidecars (last started first), the driver, the controller-manager stand-in and
    /// the API server.
    pub async fn shutdown(mut self) {
        for sidecar in self.sidecars.iter_mut().rev() {
            if let SidecarState::Started { process, .. } = sidecar.state.get_mut()
                && let Err(err) = process.terminate().await
            {
                tracing::warn!(error = %err, "cannot stop sidecar");
            }
        }
        if let Err(err) = self.stop_driver().await {
            tracing::warn!(error = %err, "cannot stop the driver");
        }
        self.kcm.stop().await;
        self.listening.shutdown().await;
    }
}
