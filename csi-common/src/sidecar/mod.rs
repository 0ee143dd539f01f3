//! The start-up wiring and the run loop every controller sidecar (csi-provisioner,
//! csi-attacher, csi-resizer) shares: what each upstream `main.go` repeats between flag parsing
//! and its controllers.
//!
//! [`Sidecar::start`]:
//! 1. builds the Kubernetes client from `--kubeconfig` (or `KUBECONFIG`, when `main` passes
//!    it), `--master`, `--kube-api-qps` and `--kube-api-burst`;
//! 2. creates the metrics registry (`csi_sidecar_operations_seconds`, process and
//!    `workqueue_*` families);
//! 3. connects to `--csi-address` (30 s), probes until the driver is ready (each attempt
//!    bounded by `--timeout`), and reads the driver name and its plugin and controller
//!    capabilities.
//!
//! The sidecar then checks the capabilities, registers its own metrics and builds its
//! controllers, and hands them to [`Sidecar::run`], which:
//! 4. builds the leader elector with its own client (Lease named after the driver, with the
//!    sidecar's prefix) when `--leader-election` is on;
//! 5. serves `/metrics` (and with `--http-endpoint` and leader election,
//!    `/healthz/leader-election`) on `--http-endpoint` or `--metrics-address`;
//! 6. waits for the Lease, then runs the controllers until shutdown, a lost driver connection
//!    or lost leadership, and finally hands the Lease back.
//!
//! Nothing here reads the environment or exits: `main` reads an [`Environment`], and maps the
//! returned [`Error`] to upstream's exit code with [`Error::exit_code`] (and writes
//! [`Error::termination_message`] to [`TERMINATION_LOG`]). A shutdown before the driver is
//! ready ends [`Sidecar::start`] with `Ok(None)`; from then on the driver's connection closing
//! is part of the shutdown (kubelet stops the driver container together with ours), not a lost
//! connection.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use csi_common::controller::{self, Outcome, Workers};
//! use csi_common::flags::CommonArgs;
//! use csi_common::sidecar::{self, CommonSettings, Environment, Sidecar, SidecarConfig};
//!
//! /// Why csi-attacher's `run` ended; `main` turns it into an exit code.
//! #[derive(Debug, thiserror::Error)]
//! enum RunError {
//!     #[error(transparent)]
//!     Sidecar(#[from] sidecar::Error),
//!     #[error("controllers failed")]
//!     Controllers(#[from] controller::Error),
//! }
//!
//! async fn run(
//!     settings: CommonSettings, // CommonSettings::from_args(&args.common, None) in args.rs
//!     environment: Environment, // Environment::from_lookup(..) in main
//!     shutdown: impl Future<Output = ()> + Send + 'static,
//! ) -> Result<(), RunError> {
//!     let mut config = SidecarConfig::new("csi-attacher", settings, Duration::from_secs(15));
//!     config.lease_prefix = "external-attacher-leader-".to_owned();
//!     let Some(sidecar) = Sidecar::start(config, environment, shutdown).await? else {
//!         return Ok(()); // SIGTERM before the driver was ready
//!     };
//!     // The sidecar's own part: check sidecar.driver's capabilities, register its metrics,
//!     // build its context (caches, the CSI client over sidecar.connection, ...).
//!     let context = Arc::new(sidecar.client.clone());
//!     let mut workers = Workers::new(sidecar.workqueue_metrics.clone());
//!     sidecar
//!         .run(|stop| async move {
//!             let attachments = workers.queue::<String>(
//!                 "csi-attacher-va",
//!                 Duration::from_secs(1),
//!                 Duration::from_mins(5),
//!             );
//!             workers.spawn(&attachments, 10, &context, |_client, _name: String| async {
//!                 Outcome::Done
//!             });
//!             Ok(workers.run_until(stop).await?)
//!         })
//!         .await
//! }
//! ```

mod prepare;
mod settings;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::capabilities::{ControllerCapabilities, PluginCapabilities};
use crate::connection::{self, ConnectOptions, Connection, ConnectionLoss};
use crate::events::EventRecorder;
use crate::fence::Fence;
use crate::http::{self, HealthCheck};
use crate::kube_client::{self, KubeClientConfig, RateLimitLayer};
use crate::leader::{self, LeaderElectionConfig, LeaderElector, LeaderHealth};
use crate::metrics::{self, CsiMetrics, ProcessMetrics, ScrapeMetrics};
use crate::workqueue::metrics::WorkQueueMetrics;
use crate::{identity, logging, migration, workqueue};

pub use prepare::{Prepared, finish, prepare};
pub use settings::{
    CommonSettings, HttpSettings, KubeSettings, LeaderElectionSettings, SettingsError,
};

/// Where kubelet reads a container's last words; upstream writes
/// [`Error::termination_message`] there before exiting on a lost driver connection.
pub const TERMINATION_LOG: &str = "/dev/termination-log";

/// The exit code of klog's `Fatal`, which csi-provisioner uses for most start-up failures
/// (csi-attacher and csi-resizer exit 1 instead); see [`Error::exit_code`].
pub const KLOG_FATAL_EXIT_CODE: u8 = 255;

/// What `main` reads from the process environment and passes in (nothing here reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// `os.Hostname()`: the Lease holder identity (and, in csi-provisioner, part of the Event
    /// source component).
    pub hostname: String,
    /// `KUBECONFIG`; when set it overrides `--kubeconfig`. Only csi-provisioner reads it
    /// (upstream behaviour); the attacher and resizer leave it `None`.
    pub kubeconfig_env: Option<PathBuf>,
    /// The Lease namespace: `--leader-election-namespace`, `POD_NAMESPACE`, the service-account
    /// namespace file or `default`.
    pub lease_namespace: String,
}

impl Environment {
    /// The environment as `var` (environment variables) and `read_file` show it; `main` passes
    /// `std::env::var` and `std::fs::read_to_string`, tests pass fixed values.
    /// `kubeconfig_env` is left `None`.
    ///
    /// The host name is `HOSTNAME`, else the kernel's host name, else `localhost`. Go's
    /// `os.Hostname()` reads the kernel's; in a pod `HOSTNAME` holds the same value (the pod
    /// name), and preferring it lets two replicas on one machine have distinct Lease
    /// identities, as they would in a cluster.
    ///
    /// ```
    /// use csi_common::sidecar::Environment;
    ///
    /// let env = Environment::from_lookup(
    ///     None,
    ///     &|key| (key == "POD_NAMESPACE").then(|| "csi".to_owned()),
    ///     &|_| Some("node-1\n".to_owned()),
    /// );
    /// assert_eq!(env.hostname, "node-1");
    /// assert_eq!(env.lease_namespace, "csi");
    /// ```
    pub fn from_lookup(
        leader_election_namespace: Option<&str>,
        var: &dyn Fn(&str) -> Option<String>,
        read_file: &dyn Fn(&Path) -> Option<String>,
    ) -> Self {
        let hostname = var("HOSTNAME")
            .filter(|h| !h.is_empty())
            .or_else(|| {
                read_file(Path::new(KERNEL_HOSTNAME_FILE))
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(|| "localhost".to_owned());
        Self {
            hostname,
            kubeconfig_env: None,
            lease_namespace: leader::namespace_from(leader_election_namespace, var, read_file),
        }
    }
}

/// Where Linux keeps the host name `os.Hostname()` returns.
const KERNEL_HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// Why a sidecar could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig / in-cluster config or the client could not be built.
    #[error("cannot build the Kubernetes client")]
    KubeClient(#[source] kube_client::Error),
    /// `--master` is not a URL.
    #[error("invalid --master URL {0:?}")]
    Master(String),
    /// The metrics registry could not be set up (a programming error).
    #[error("cannot set up metrics")]
    Metrics(#[source] metrics::Error),
    /// The `workqueue_*` families could not be registered (a programming error).
    #[error("cannot set up metrics")]
    WorkQueueMetrics(#[source] workqueue::metrics::Error),
    /// No connection to the driver within 30 s.
    #[error("cannot connect to the CSI driver")]
    Connect(#[source] connection::Error),
    /// Probe failed with something other than a timeout.
    #[error("CSI driver probe failed")]
    Probe(#[source] identity::Error),
    /// GetPluginInfo or a capability call failed.
    #[error("cannot read the CSI driver's identity or capabilities")]
    Identity(#[source] identity::Error),
    /// The diagnostics listener could not be bound.
    #[error("cannot start the HTTP server")]
    Http(#[source] http::Error),
    /// Leader election could not be set up (invalid timings).
    #[error("cannot set up leader election")]
    Leader(#[source] leader::Error),
    /// The driver connection was lost after it had been established.
    #[error("Lost connection to CSI driver, exiting")]
    ConnectionLost,
    /// The Lease could not be renewed (upstream: "Stopped leading").
    #[error("stopped leading")]
    LeadershipLost(#[source] leader::LeadershipLost),
}

impl Error {
    /// Upstream's exit code: `fatal` for the failures the sidecar reports with klog's `Fatal`
    /// ([`KLOG_FATAL_EXIT_CODE`] in csi-provisioner; csi-attacher and csi-resizer pass 1), and
    /// 1 for the rest: connect timeout, probe failure, lost connection, lost Lease, and the
    /// set-up errors upstream cannot have (metrics) or panics on (leader election timings).
    pub fn exit_code(&self, fatal: u8) -> u8 {
        match self {
            Self::KubeClient(_) | Self::Master(_) | Self::Identity(_) | Self::Http(_) => fatal,
            Self::Metrics(_)
            | Self::WorkQueueMetrics(_)
            | Self::Connect(_)
            | Self::Probe(_)
            | Self::Leader(_)
            | Self::ConnectionLost
            | Self::LeadershipLost(_) => 1,
        }
    }

    /// What upstream writes to [`TERMINATION_LOG`] before exiting with this error.
    pub fn termination_message(&self) -> Option<&'static str> {
        matches!(self, Self::ConnectionLost).then_some("Lost connection to CSI driver, exiting")
    }
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How one sidecar starts: its shared settings and what differs between sidecars.
#[derive(Debug, Clone)]
pub struct SidecarConfig {
    /// The binary name (`csi-provisioner`): the User-Agent is `<component>/<version>`.
    pub component: String,
    /// The shared flags, validated.
    pub settings: CommonSettings,
    /// `--timeout`: the deadline of every CSI call, including each Probe attempt and the
    /// identity calls at start-up.
    pub timeout: Duration,
    /// What comes before the driver name in the Lease name: `""` for csi-provisioner,
    /// `external-attacher-leader-`, `external-resizer-`. The whole name is sanitized
    /// ([`leader::lease_name`]).
    pub lease_prefix: String,
    /// Which `process_*` families `/metrics` serves.
    pub process_metrics: ProcessMetrics,
    /// Whether scrapes are counted (csi-provisioner only).
    pub scrape_metrics: ScrapeMetrics,
    /// `--max-grpc-log-length` (csi-attacher): truncate logged CSI responses.
    pub max_grpc_log_length: Option<usize>,
}

impl SidecarConfig {
    /// A config with csi-attacher's and csi-resizer's defaults: no Lease prefix, the full
    /// process metrics, no scrape metrics, no log truncation.
    pub fn new(component: impl Into<String>, settings: CommonSettings, timeout: Duration) -> Self {
        Self {
            component: component.into(),
            settings,
            timeout,
            lease_prefix: String::new(),
            process_metrics: ProcessMetrics::Full,
            scrape_metrics: ScrapeMetrics::Off,
            max_grpc_log_length: None,
        }
    }
}

/// The driver as learnt at start-up.
#[derive(Debug, Clone)]
pub struct Driver {
    /// GetPluginInfo's name.
    pub name: String,
    /// GetPluginCapabilities.
    pub plugin: PluginCapabilities,
    /// ControllerGetCapabilities.
    pub controller: ControllerCapabilities,
}

type SharedShutdown = Shared<BoxFuture<'static, ()>>;

/// A started sidecar: connected to a ready driver whose name and capabilities are known.
/// Build the controllers from its public parts, then [`run`](Sidecar::run) them.
pub struct Sidecar {
    /// The main API client (rate limited by `--kube-api-qps` / `--kube-api-burst`).
    pub client: kube::Client,
    /// The token bucket of [`Sidecar::client`].
    rate_limit: RateLimitLayer,
    /// The driver connection; every call has `--timeout` as its deadline.
    pub connection: Connection,
    /// The driver's name and capabilities.
    pub driver: Driver,
    /// The registry `/metrics` serves; register the sidecar's own families here.
    pub metrics: CsiMetrics,
    /// The `workqueue_*` families, for [`crate::controller::Workers::new`].
    pub workqueue_metrics: WorkQueueMetrics,
    config: SidecarConfig,
    environment: Environment,
    /// What stops the writes of [`Sidecar::client`] (and of clients made with
    /// [`Sidecar::client_with_limits`]) when leadership ends.
    fence: Fence,
    loss: ConnectionLoss,
    shutdown: SharedShutdown,
}

impl std::fmt::Debug for Sidecar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sidecar")
            .field("driver", &self.driver)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Sidecar {
    /// Steps 1-3 of the [module](self) docs. `Ok(None)` when `shutdown` resolves before the
    /// driver is ready.
    ///
    /// # Errors
    /// [`Error::KubeClient`], [`Error::Master`], [`Error::Metrics`], [`Error::Connect`],
    /// [`Error::Probe`], [`Error::Identity`], or [`Error::ConnectionLost`] when the driver
    /// goes away while it is being asked.
    pub async fn start(
        config: SidecarConfig,
        environment: Environment,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Option<Self>> {
        // Open until the elector, if any, holds it (`run`).
        let fence = Fence::new();
        let (client, rate_limit) = kube_client(&config, &environment, Some(&fence)).await?;
        let metrics =
            CsiMetrics::with_scrape_metrics(config.process_metrics, config.scrape_metrics)
                .map_err(Error::Metrics)?;
        metrics
            .register_runtime(tokio::runtime::Handle::current())
            .map_err(Error::Metrics)?;
        let workqueue_metrics =
            WorkQueueMetrics::register(metrics.registry()).map_err(Error::WorkQueueMetrics)?;
        let options = ConnectOptions::default()
            .with_call_timeout(config.timeout)
            .with_call_logging(config.settings.log_grpc_calls)
            .with_max_grpc_log_length(config.max_grpc_log_length)
            .with_fence(fence.clone());
        let shutdown = shutdown.boxed().shared();
        let (connection, loss) = tokio::select! {
            connected = connection::connect(&config.settings.csi_address, options, metrics.clone()) => {
                connected.map_err(Error::Connect)?
            }
            () = shutdown.clone() => return Ok(None),
        };
        // Kubelet stops the driver container together with ours: from SIGTERM on, the driver
        // going away is the shutdown, not a lost connection (no error, no exit 1).
        let shutdown = {
            let loss = loss.clone();
            async move {
                shutdown.await;
                loss.expect_close();
                tracing::debug!("shutting down: the CSI driver may stop with us");
            }
            .boxed()
            .shared()
        };
        let driver = tokio::select! {
            driver = discover(&connection, config.timeout, &metrics) => driver?,
            () = loss.clone() => return Err(Error::ConnectionLost),
            () = shutdown.clone() => return Ok(None),
        };
        tracing::info!(driver = %driver.name, "Detected CSI driver");
        Ok(Some(Self {
            client,
            rate_limit,
            connection,
            driver,
            metrics,
            workqueue_metrics,
            config,
            environment,
            fence,
            loss,
            shutdown,
        }))
    }

    /// What `main` passed in.
    pub fn environment(&self) -> &Environment {
        &self.environment
    }

    /// An Event recorder writing with [`Sidecar::client`] as `component`, and its writer to
    /// spawn (see [`EventRecorder::with_bucket`]): the writer shares the client's token bucket.
    pub fn event_recorder(
        &self,
        component: String,
    ) -> (EventRecorder, impl Future<Output = ()> + Send + use<>) {
        EventRecorder::with_bucket(self.client.clone(), self.rate_limit.clone(), component)
    }

    /// Another client like [`Sidecar::client`] (same kubeconfig, `--master` and User-Agent)
    /// with its own token bucket of `qps` and `burst`: csi-provisioner's capacity client
    /// (`--kube-api-capacity-qps` / `--kube-api-capacity-burst`). The main and the
    /// leader-election clients keep their own limits.
    ///
    /// # Errors
    /// [`Error::KubeClient`] or [`Error::Master`], as for the main client.
    pub async fn client_with_limits(&self, qps: f32, burst: u32) -> Result<kube::Client> {
        let mut config = self.config.clone();
        config.settings.kube.qps = qps;
        config.settings.kube.burst = burst;
        let (client, _) = kube_client(&config, &self.environment, Some(&self.fence)).await?;
        Ok(client)
    }

    /// Steps 4-6 of the [module](self) docs: runs the future `controllers` makes from a
    /// [`Stop`] signal, under the Lease when leader election is on. `Ok` after a shutdown
    /// (the controllers returned `Ok` and the Lease was handed back).
    ///
    /// `controllers` must return once `stop` resolves, after finishing the work in hand. It
    /// is called only while this replica leads; if leadership is lost it is dropped where it
    /// stands, as upstream exits at once.
    ///
    /// # Errors
    /// The controllers' own error, or (converted into `E`) [`Error::Leader`], [`Error::Http`],
    /// [`Error::KubeClient`] for the elector's client, [`Error::ConnectionLost`] and
    /// [`Error::LeadershipLost`].
    pub async fn run<F, Fut, E>(self, controllers: F) -> Result<(), E>
    where
        F: FnOnce(Stop) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: From<Error>,
    {
        // Taken apart so that no borrow of the whole (not `Sync`) sidecar lives across an
        // await: the returned future stays `Send`.
        let Self {
            driver,
            metrics,
            config,
            environment,
            fence,
            loss,
            shutdown,
            ..
        } = self;
        let elector = match &config.settings.leader_election {
            Some(settings) => Some(
                elector(&config, &environment, settings, &driver.name, &metrics)
                    .await?
                    .with_fence(fence),
            ),
            None => None,
        };
        let http = &config.settings.http;
        if let Some((address, leader_health)) = http.listen_address() {
            let health = elector
                .as_ref()
                .filter(|_| leader_health)
                .map(LeaderElector::health);
            serve_diagnostics(address, &http.metrics_path, &metrics, health).await?;
        }

        let Some(elector) = elector else {
            return run_controllers(controllers, shutdown, loss).await;
        };
        let mut leadership = tokio::select! {
            // A Lease won at the same moment as SIGTERM is still taken, so it is handed back
            // below.
            biased;
            leadership = elector.acquire() => leadership,
            () = loss.clone() => return Err(Error::ConnectionLost.into()),
            () = shutdown.clone() => return Ok(()),
        };
        let result = tokio::select! {
            result = run_controllers(controllers, shutdown, loss) => result,
            lost = leadership.lost() => return Err(Error::LeadershipLost(lost).into()),
        };
        if let Err(err) = leadership.release().await {
            tracing::warn!(
                error = logging::error_chain(&err),
                "cannot release the leader lease"
            );
        }
        result
    }
}

/// The Lease candidate for `driver`, with its own client so throttling of the main client
/// cannot starve renewals.
async fn elector(
    config: &SidecarConfig,
    environment: &Environment,
    settings: &LeaderElectionSettings,
    driver: &str,
    metrics: &CsiMetrics,
) -> Result<LeaderElector> {
    // Not fenced: it must write the Lease to lead at all.
    let (client, _) = kube_client(config, environment, None).await?;
    let mut le_config = LeaderElectionConfig::new(
        leader::lease_name(&format!("{}{driver}", config.lease_prefix)),
        environment.lease_namespace.clone(),
        leader::identity(&environment.hostname),
    );
    le_config.lease_duration = settings.lease_duration;
    le_config.renew_deadline = settings.renew_deadline;
    le_config.retry_period = settings.retry_period;
    le_config.labels.clone_from(&settings.labels);
    // Team decision (docs/compatibility.md): hand the Lease back on SIGTERM so a standby takes
    // over at once.
    le_config.release_on_cancel = true;
    let elector = LeaderElector::new(client, le_config).map_err(Error::Leader)?;
    elector
        .register_metrics(metrics.registry())
        .map_err(Error::Leader)?;
    Ok(elector)
}

/// Resolves when the controllers should stop: on shutdown or a lost driver connection.
pub struct Stop(BoxFuture<'static, ()>);

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stop").finish_non_exhaustive()
    }
}

impl Future for Stop {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

/// Runs the controllers until shutdown (`Ok`) or connection loss.
async fn run_controllers<F, Fut, E>(
    controllers: F,
    shutdown: SharedShutdown,
    loss: ConnectionLoss,
) -> Result<(), E>
where
    F: FnOnce(Stop) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<Error>,
{
    let lost = Arc::new(AtomicBool::new(false));
    let stop = {
        let lost = Arc::clone(&lost);
        async move {
            tokio::select! {
                () = shutdown => {}
                () = loss => lost.store(true, Ordering::SeqCst),
            }
        }
    };
    controllers(Stop(stop.boxed())).await?;
    if lost.load(Ordering::SeqCst) {
        return Err(Error::ConnectionLost.into());
    }
    Ok(())
}

/// Probe until ready, then GetPluginInfo and both capability sets (csi-lib-utils
/// `rpc.ProbeForever`, `GetDriverName`, `GetPluginCapabilities`,
/// `GetControllerCapabilities`).
async fn discover(
    connection: &Connection,
    timeout: Duration,
    metrics: &CsiMetrics,
) -> Result<Driver> {
    identity::probe_until_ready(connection, timeout)
        .await
        .map_err(Error::Probe)?;
    let name = identity::driver_name(connection, timeout)
        .await
        .map_err(Error::Identity)?;
    metrics.set_driver_name(&name);
    if migration::is_migration_driver(&name) {
        // Upstream's main, for a driver in-tree volumes migrated to: a second metrics manager
        // with the `migrated` label and a second connection replace the first, which is
        // probed again (its Probe is the first sample served).
        metrics.label_migrated().map_err(Error::Metrics)?;
        identity::probe_until_ready(connection, timeout)
            .await
            .map_err(Error::Probe)?;
    }
    let plugin = identity::plugin_capabilities(connection, timeout)
        .await
        .map_err(Error::Identity)?;
    let controller = identity::controller_capabilities(connection, timeout)
        .await
        .map_err(Error::Identity)?;
    Ok(Driver {
        name,
        plugin,
        controller,
    })
}

/// Binds the diagnostics address (a failure is fatal, as upstream) and serves metrics and,
/// with `--http-endpoint` and leader election, `/healthz/leader-election` in the background.
async fn serve_diagnostics(
    address: &str,
    metrics_path: &str,
    metrics: &CsiMetrics,
    leader_health: Option<LeaderHealth>,
) -> Result<()> {
    let listener = http::Listener::bind(address).await.map_err(Error::Http)?;
    let health: Option<HealthCheck> = leader_health.map(|health| {
        let check: HealthCheck = Arc::new(move || health.check());
        check
    });
    let router = http::router(Some((metrics.clone(), metrics_path)), health);
    tracing::info!(address, "serving diagnostics");
    tokio::spawn(async move {
        if let Err(err) = listener.serve(router, std::future::pending()).await {
            tracing::error!(error = logging::error_chain(&err), "HTTP server stopped");
        }
    });
    Ok(())
}

/// A client with the `--kube-api-qps` / `--kube-api-burst` bucket, and that bucket, honouring
/// `KUBECONFIG` (when `main` passed it), `--kubeconfig` and `--master` like client-go's
/// `BuildConfigFromFlags`: `--master` replaces the server URL of the kubeconfig, or stands
/// alone without one.
async fn kube_client(
    config: &SidecarConfig,
    environment: &Environment,
    fence: Option<&Fence>,
) -> Result<(kube::Client, RateLimitLayer)> {
    let kube = &config.settings.kube;
    let client_config = KubeClientConfig {
        kubeconfig: Some(PathBuf::from(&kube.kubeconfig)),
        kubeconfig_env: environment.kubeconfig_env.clone(),
        qps: kube.qps,
        burst: kube.burst,
        user_agent: format!("{}/{}", config.component, crate::version::version()),
    };
    let layer =
        RateLimitLayer::new(client_config.qps, client_config.burst).map_err(Error::KubeClient)?;
    let kube_config = match &kube.master {
        None => kube_client::rest_config(&client_config)
            .await
            .map_err(Error::KubeClient)?,
        Some(master) => {
            let url: ::http::Uri = master.parse().map_err(|_| Error::Master(master.clone()))?;
            let mut kube_config = if client_config.kubeconfig_path().is_some() {
                kube_client::rest_config(&client_config)
                    .await
                    .map_err(Error::KubeClient)?
            } else {
                kube::Config::new(url.clone())
            };
            kube_config.cluster_url = url;
            kube_config
        }
    };
    let builder = kube_client::client_builder(kube_config).map_err(Error::KubeClient)?;
    Ok((kube_client::layered(builder, &layer, fence), layer))
}

#[cfg(test)]
mod tests;
