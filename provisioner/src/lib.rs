//! csi-provisioner: watches PersistentVolumeClaims whose StorageClass names this CSI driver,
//! calls CreateVolume and writes the PersistentVolume; when a Released PV with reclaim policy
//! Delete is ours, calls DeleteVolume and removes the PV. A drop-in replacement for
//! kubernetes-csi/external-provisioner (spec provisioner.md §1-5, §7-9).
//!
//! [`run`] is the whole process after flag parsing: connect to the driver and wait until it is
//! ready, learn its name and capabilities, serve diagnostics, optionally win the Lease, then run
//! the claim and volume controllers until shutdown, a lost driver connection or a lost Lease.

mod annotations;
pub mod args;
mod controller;
mod csi;
mod decide;
mod metrics;
mod naming;
mod params;
mod plan_error;
mod pv;
mod request;
mod secrets;
mod topology;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use csi_common::capabilities::{ControllerCapabilities, PluginCapabilities};
use csi_common::connection::{self, ConnectOptions, Connection, ConnectionLoss};
use csi_common::http::{self as diagnostics, HealthCheck};
use csi_common::kube_client::{self, KubeClientConfig, RateLimitLayer};
use csi_common::leader::{self, LeaderElectionConfig, LeaderElector};
use csi_common::metrics::{CsiMetrics, ProcessMetrics, ScrapeMetrics};
use csi_common::{identity, logging};
use k8s_openapi::jiff::Timestamp;

use crate::args::Config;
use crate::controller::{ControllerDeps, Settings};
use crate::csi::TonicDriver;
use crate::metrics::ControllerMetrics;
use csi_common::events::EventRecorder;
use csi_common::workqueue::metrics::WorkQueueMetrics;

/// What `main` reads from the process environment and passes in (nothing here reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// `os.Hostname()`: the Lease holder identity and part of the Event source component.
    pub hostname: String,
    /// `KUBECONFIG`; when set it overrides `--kubeconfig` (upstream behaviour).
    pub kubeconfig_env: Option<PathBuf>,
    /// The Lease namespace: `--leader-election-namespace`, `POD_NAMESPACE`, the service-account
    /// namespace file or `default`.
    pub lease_namespace: String,
}

/// Why [`run`] ended; [`RunError::exit_code`] gives upstream's exit code.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The kubeconfig / in-cluster config or the client could not be built (upstream: fatal, 255).
    #[error("cannot build the Kubernetes client")]
    KubeClient(#[source] kube_client::Error),
    /// `--master` is not a URL.
    #[error("invalid --master URL {0:?}")]
    Master(String),
    /// No connection to the driver within 30 s (exit 1).
    #[error("cannot connect to the CSI driver")]
    Connect(#[source] connection::Error),
    /// Probe failed with something other than a timeout (exit 1).
    #[error("CSI driver probe failed")]
    Probe(#[source] identity::Error),
    /// GetPluginInfo or a capability call failed (upstream: fatal, 255).
    #[error("cannot read the CSI driver's identity or capabilities")]
    Identity(#[source] identity::Error),
    /// The driver cannot create volumes at all, so running would only produce errors (exit 1).
    #[error(
        "CSI driver {driver} does not support dynamic provisioning: plugin capability CONTROLLER_SERVICE and controller capability CREATE_DELETE_VOLUME are required"
    )]
    NotAProvisioner {
        /// The driver name.
        driver: String,
    },
    /// Metrics could not be registered (a programming error).
    #[error("cannot set up metrics")]
    Metrics(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The diagnostics listener could not be bound (upstream: fatal, 255).
    #[error("cannot start the HTTP server")]
    Http(#[source] diagnostics::Error),
    /// Leader election could not be set up (invalid timings).
    #[error("cannot set up leader election")]
    Leader(#[source] leader::Error),
    /// The controllers stopped with an error (e.g. caches never synced).
    #[error("controllers failed")]
    Controller(#[source] controller::Error),
    /// The driver connection was lost after it had been established (exit 1; `main` writes
    /// `/dev/termination-log` first).
    #[error("Lost connection to CSI driver, exiting")]
    ConnectionLost,
    /// The Lease could not be renewed (exit 1: "Stopped leading").
    #[error("stopped leading")]
    LeadershipLost(#[source] leader::LeadershipLost),
}

impl RunError {
    /// Upstream's exit code for this failure (spec §8): 255 for klog.Fatal cases, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::KubeClient(_)
            | Self::Master(_)
            | Self::Identity(_)
            | Self::Http(_)
            | Self::Controller(_) => 255,
            Self::Connect(_)
            | Self::Probe(_)
            | Self::NotAProvisioner { .. }
            | Self::Metrics(_)
            | Self::Leader(_)
            | Self::ConnectionLost
            | Self::LeadershipLost(_) => 1,
        }
    }
}

/// The driver as learnt at start-up.
#[derive(Debug, Clone)]
struct Driver {
    name: String,
    plugin: PluginCapabilities,
    controller: ControllerCapabilities,
}

/// Runs csi-provisioner until `shutdown` resolves (then returns `Ok` after releasing the
/// Lease) or something fatal happens.
pub async fn run(
    config: Config,
    environment: Environment,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let client = kube_client(&config, &environment).await?;

    let metrics = CsiMetrics::with_scrape_metrics(
        ProcessMetrics::FullPlainStartTime,
        ScrapeMetrics::Promhttp,
    )
    .map_err(|e| RunError::Metrics(Box::new(e)))?;
    let options = ConnectOptions::default()
        .with_call_timeout(config.timeout)
        .with_call_logging(config.log_grpc_calls);
    let shutdown = futures::FutureExt::shared(Box::pin(shutdown));
    let (connection, loss) = tokio::select! {
        connected = connection::connect(&config.csi_address, options, metrics.clone()) => {
            connected.map_err(RunError::Connect)?
        }
        () = shutdown.clone() => return Ok(()),
    };
    // Kubelet stops the driver container together with ours: from SIGTERM on, the driver going
    // away is the shutdown, not a lost connection (no error, no exit 1).
    let shutdown = {
        let loss = loss.clone();
        futures::FutureExt::shared(Box::pin(async move {
            shutdown.await;
            loss.expect_close();
            tracing::debug!("shutting down: the CSI driver may stop with us");
        }))
    };
    let driver = tokio::select! {
        driver = discover(&connection, config.timeout, &metrics) => driver?,
        () = loss.clone() => return Err(RunError::ConnectionLost),
        () = shutdown.clone() => return Ok(()),
    };
    tracing::info!(driver = %driver.name, "Detected CSI driver");
    if !driver.plugin.has_controller_service() || !driver.controller.has_create_delete_volume() {
        return Err(RunError::NotAProvisioner {
            driver: driver.name,
        });
    }

    let controller_metrics = ControllerMetrics::register(metrics.registry())
        .map_err(|e| RunError::Metrics(Box::new(e)))?;
    let workqueue_metrics = WorkQueueMetrics::register(metrics.registry())
        .map_err(|e| RunError::Metrics(Box::new(e)))?;

    let elector = match &config.leader_election {
        Some(settings) => {
            Some(elector(&config, &environment, settings, &driver.name, &metrics).await?)
        }
        None => None,
    };
    if let Some((address, leader_health)) = config.http.listen_address() {
        let health = elector
            .as_ref()
            .filter(|_| leader_health)
            .map(LeaderElector::health);
        serve_diagnostics(address, &config.http.metrics_path, &metrics, health).await?;
    }

    let component = format!("{}_{}_{}", driver.name, environment.hostname, uuid_v4());
    let (recorder, writer) = EventRecorder::new(client.clone(), component);
    tokio::spawn(writer);
    let deps = ControllerDeps {
        client,
        driver: TonicDriver::new(connection, config.timeout),
        options: controller::provision_options(
            &config,
            &driver.name,
            &driver.plugin,
            &driver.controller,
            &provisioner_identity(&driver.name),
        ),
        settings: Settings::new(&config, &driver.plugin, &driver.controller),
        recorder,
        metrics: controller_metrics,
        workqueue_metrics,
    };

    let Some(elector) = elector else {
        return run_controllers(deps, shutdown, loss).await;
    };
    let mut leadership = tokio::select! {
        // A Lease won at the same moment as SIGTERM is still taken, so it is handed back below.
        biased;
        leadership = elector.acquire() => leadership,
        () = loss.clone() => return Err(RunError::ConnectionLost),
        () = shutdown.clone() => return Ok(()),
    };
    let result = tokio::select! {
        result = run_controllers(deps, shutdown, loss) => result,
        lost = leadership.lost() => return Err(RunError::LeadershipLost(lost)),
    };
    if let Err(err) = leadership.release().await {
        tracing::warn!(
            error = logging::error_chain(&err),
            "cannot release the leader lease"
        );
    }
    result
}

/// The Lease candidate: lock name = driver name (external-provisioner's choice), with its own
/// client so throttling of the main client cannot starve renewals.
async fn elector(
    config: &Config,
    environment: &Environment,
    settings: &args::LeaderElectionSettings,
    driver: &str,
    metrics: &CsiMetrics,
) -> Result<LeaderElector, RunError> {
    let client = kube_client(config, environment).await?;
    let mut le_config = LeaderElectionConfig::new(
        leader::lease_name(driver),
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
    let elector = LeaderElector::new(client, le_config).map_err(RunError::Leader)?;
    elector
        .register_metrics(metrics.registry())
        .map_err(RunError::Leader)?;
    Ok(elector)
}

/// Binds the diagnostics address (a failure is fatal, as upstream) and serves metrics and, with
/// `--http-endpoint` and leader election, `/healthz/leader-election` in the background.
async fn serve_diagnostics(
    address: &str,
    metrics_path: &str,
    metrics: &CsiMetrics,
    leader_health: Option<leader::LeaderHealth>,
) -> Result<(), RunError> {
    let listener = diagnostics::Listener::bind(address)
        .await
        .map_err(RunError::Http)?;
    let health: Option<HealthCheck> = leader_health.map(|health| {
        let check: HealthCheck = std::sync::Arc::new(move || health.check());
        check
    });
    let router = diagnostics::router(Some((metrics.clone(), metrics_path)), health);
    tracing::info!(address, "serving diagnostics");
    tokio::spawn(async move {
        if let Err(err) = listener.serve(router, std::future::pending()).await {
            tracing::error!(error = logging::error_chain(&err), "HTTP server stopped");
        }
    });
    Ok(())
}

/// Runs the controllers until shutdown (`Ok`) or connection loss.
async fn run_controllers(
    deps: ControllerDeps<TonicDriver>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    loss: ConnectionLoss,
) -> Result<(), RunError> {
    let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = {
        let lost = std::sync::Arc::clone(&lost);
        async move {
            tokio::select! {
                () = shutdown => {}
                () = loss => lost.store(true, std::sync::atomic::Ordering::SeqCst),
            }
        }
    };
    controller::run(deps, stop)
        .await
        .map_err(RunError::Controller)?;
    if lost.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(RunError::ConnectionLost);
    }
    Ok(())
}

/// Probe until ready, then GetPluginInfo and both capability sets (spec §8).
async fn discover(
    connection: &Connection,
    timeout: Duration,
    metrics: &CsiMetrics,
) -> Result<Driver, RunError> {
    identity::probe_until_ready(connection, timeout)
        .await
        .map_err(RunError::Probe)?;
    let name = identity::driver_name(connection, timeout)
        .await
        .map_err(RunError::Identity)?;
    metrics.set_driver_name(&name);
    let plugin = identity::plugin_capabilities(connection, timeout)
        .await
        .map_err(RunError::Identity)?;
    let controller = identity::controller_capabilities(connection, timeout)
        .await
        .map_err(RunError::Identity)?;
    Ok(Driver {
        name,
        plugin,
        controller,
    })
}

/// A client with the `--kube-api-qps` / `--kube-api-burst` bucket, honouring `KUBECONFIG`,
/// `--kubeconfig` and `--master` like client-go's `BuildConfigFromFlags`.
async fn kube_client(config: &Config, environment: &Environment) -> Result<kube::Client, RunError> {
    let client_config = KubeClientConfig {
        kubeconfig: Some(PathBuf::from(&config.kube.kubeconfig)),
        kubeconfig_env: environment.kubeconfig_env.clone(),
        qps: config.kube.qps,
        burst: config.kube.burst,
        user_agent: format!("csi-provisioner/{}", csi_common::version::version()),
    };
    let Some(master) = &config.kube.master else {
        return kube_client::client(&client_config)
            .await
            .map_err(RunError::KubeClient);
    };
    let url: http::Uri = master
        .parse()
        .map_err(|_| RunError::Master(master.clone()))?;
    let mut kube_config = if client_config.kubeconfig_path().is_some() {
        kube_client::rest_config(&client_config)
            .await
            .map_err(RunError::KubeClient)?
    } else {
        kube::Config::new(url.clone())
    };
    kube_config.cluster_url = url;
    let layer = RateLimitLayer::new(client_config.qps, client_config.burst)
        .map_err(RunError::KubeClient)?;
    let builder = kube::client::ClientBuilder::try_from(kube_config)
        .map_err(|e| RunError::KubeClient(kube_client::Error::Build(e)))?;
    Ok(builder.with_layer(&layer).build())
}

/// `<unix millis>-<random 0..9999>-<driver>`: upstream's per-process provisioner identity,
/// stored in every PV's `storage.kubernetes.io/csiProvisionerIdentity` volume attribute.
fn provisioner_identity(driver: &str) -> String {
    let millis = Timestamp::now().as_millisecond();
    format!("{millis}-{}-{driver}", fastrand::u32(0..10_000))
}

/// A random (version 4) UUID for the Event source component, as upstream's `uuid.NewUUID()`.
fn uuid_v4() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_have_the_version_4_layout() {
        let id = uuid_v4();
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'));
        assert!(matches!(
            parts[3].chars().next(),
            Some('8' | '9' | 'a' | 'b')
        ));
        assert_ne!(uuid_v4(), id);
    }

    #[test]
    fn provisioner_identity_is_millis_random_and_driver() {
        let id = provisioner_identity("hostpath.csi.k8s.io");
        let (millis, rest) = id.split_once('-').unwrap();
        let (random, driver) = rest.split_once('-').unwrap();
        assert!(millis.parse::<i64>().unwrap() > 1_700_000_000_000);
        assert!(random.parse::<u32>().unwrap() < 10_000);
        assert_eq!(driver, "hostpath.csi.k8s.io");
    }

    #[test]
    fn exit_codes_follow_upstream() {
        assert_eq!(RunError::ConnectionLost.exit_code(), 1);
        assert_eq!(
            RunError::NotAProvisioner { driver: "d".into() }.exit_code(),
            1
        );
        assert_eq!(RunError::Master("x".into()).exit_code(), 255);
    }
}
