//! csi-provisioner: watches PersistentVolumeClaims whose StorageClass names this CSI driver,
//! calls CreateVolume and writes the PersistentVolume; when a Released PV with reclaim policy
//! Delete is ours, calls DeleteVolume and removes the PV; with `--enable-capacity` publishes
//! GetCapacity as CSIStorageCapacity objects ([`capacity`]). A drop-in replacement for
//! kubernetes-csi/external-provisioner (spec provisioner.md §1-5, §6.1-6.4, §6.6, §7-9).
//!
//! [`run`] is the whole process after flag parsing, on [`csi_common::sidecar`]: connect to the
//! driver and wait until it is ready, learn its name and capabilities, refuse a driver that
//! cannot provision, in node deployment ask `NodeGetInfo` which node this is, serve
//! diagnostics, optionally win the Lease, then run the claim and volume controllers until
//! shutdown, a lost driver connection or a lost Lease. Claims may be cloned from a claim or
//! restored from a VolumeSnapshot (`source`, `controller::protection`).

mod annotations;
pub mod args;
pub mod capacity;
mod controller;
mod csi;
mod decide;
mod metrics;
mod naming;
mod node;
mod params;
mod plan_error;
#[cfg(test)]
mod properties;
mod pv;
mod request;
mod secrets;
mod source;
mod topology;
mod vac;

use std::future::Future;

use csi_common::metrics::{ProcessMetrics, ScrapeMetrics};
use csi_common::sidecar::{self, CommonSettings, KLOG_FATAL_EXIT_CODE, Sidecar, SidecarConfig};
use k8s_openapi::jiff::Timestamp;

use crate::args::Config;
use crate::controller::{ControllerDeps, Settings};
use crate::csi::TonicDriver;
use crate::metrics::ControllerMetrics;
use crate::node::NodeDeployment;

pub use csi_common::sidecar::Environment;

/// Why [`run`] ended; [`RunError::exit_code`] gives upstream's exit code.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Start-up (client, driver connection and identity, diagnostics server, leader election)
    /// failed, or the driver connection or the Lease was lost.
    #[error(transparent)]
    Sidecar(#[from] sidecar::Error),
    /// The driver cannot create volumes at all, so running would only produce errors (exit 1).
    #[error(
        "CSI driver {driver} does not support dynamic provisioning: plugin capability CONTROLLER_SERVICE and controller capability CREATE_DELETE_VOLUME are required"
    )]
    NotAProvisioner {
        /// The driver name.
        driver: String,
    },
    /// The provisioner's metrics could not be registered (a programming error).
    #[error("cannot set up metrics")]
    Metrics(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The controllers stopped with an error.
    #[error("controllers failed")]
    Controller(#[source] controller::Error),
    /// `--node-deployment`: `NodeGetInfo` failed (upstream: klog.Fatal, exit 255).
    #[error("failed to get node info from CSI driver")]
    NodeInfo(#[source] csi_common::status::CsiError),
    /// Capacity tracking could not start (v1 probe, owner lookup; upstream `klog.Fatal`).
    #[error(transparent)]
    Capacity(#[from] capacity::StartError),
}

impl RunError {
    /// The start-up or run-loop error, if that is what ended the run (for the termination
    /// message of a lost driver connection).
    pub fn sidecar(&self) -> Option<&sidecar::Error> {
        match self {
            Self::Sidecar(err) => Some(err),
            _ => None,
        }
    }

    /// Upstream's exit code for this failure (spec §8): 255 for klog.Fatal cases, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Sidecar(err) => err.exit_code(KLOG_FATAL_EXIT_CODE),
            Self::Controller(_) | Self::NodeInfo(_) | Self::Capacity(_) => KLOG_FATAL_EXIT_CODE,
            Self::NotAProvisioner { .. } | Self::Metrics(_) => 1,
        }
    }
}

/// Runs csi-provisioner until `shutdown` resolves (then returns `Ok` after releasing the
/// Lease) or something fatal happens.
pub async fn run(
    config: Config,
    environment: Environment,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let Some(sidecar) = Sidecar::start(sidecar_config(&config), environment, shutdown).await?
    else {
        return Ok(());
    };
    let driver = &sidecar.driver;
    if !driver.plugin.has_controller_service() || !driver.controller.has_create_delete_volume() {
        return Err(RunError::NotAProvisioner {
            driver: driver.name.clone(),
        });
    }
    let controller_metrics = ControllerMetrics::register(sidecar.metrics.registry())
        .map_err(|err| RunError::Metrics(Box::new(err)))?;
    let node = match &config.node_deployment {
        Some(settings) => {
            let info = node::node_info(&sidecar.connection, config.timeout)
                .await
                .map_err(RunError::NodeInfo)?;
            tracing::info!(node = %settings.node_name, node_id = %info.node_id, topology = ?info.topology, "node deployment");
            Some(NodeDeployment::new(
                &driver.name,
                settings.clone(),
                info,
                Box::new(capacity::csi::TonicCapacity::new(
                    sidecar.connection.clone(),
                    config.timeout,
                )),
            ))
        }
        None => None,
    };
    let mut identity = provisioner_identity(&driver.name);
    if let Some(node) = &node {
        identity = node::node_identity(&identity, &node.settings.node_name);
    }
    let mut settings = Settings::new(&config, &driver.plugin, &driver.controller);
    // Upstream turns the gate off at start when it was not given and the API server does not
    // serve storage.k8s.io/v1 VolumeAttributesClass.
    settings.vac_gate = Some(
        csi_common::vac_discovery::volume_attributes_class(
            &sidecar.client,
            config.provisioning.volume_attributes_class_gate,
        )
        .await,
    );

    let component = format!(
        "{}_{}_{}",
        driver.name,
        sidecar.environment().hostname,
        uuid_v4()
    );
    let (recorder, writer) = sidecar.event_recorder(component);
    tokio::spawn(writer);
    let deps = ControllerDeps {
        client: sidecar.client.clone(),
        driver: TonicDriver::new(sidecar.connection.clone(), config.timeout),
        options: controller::provision_options(
            &config,
            &driver.name,
            &driver.plugin,
            &driver.controller,
            &identity,
        ),
        settings,
        recorder,
        metrics: controller_metrics,
        workqueue_metrics: sidecar.workqueue_metrics.clone(),
        node,
    };
    let capacity = match &config.capacity {
        Some(settings) => {
            Some(capacity_deps(&sidecar, &config, settings.clone(), deps.node.as_ref()).await?)
        }
        None => None,
    };
    sidecar
        .run(|stop| async move {
            let Some(capacity) = capacity else {
                return controller::run(deps, stop)
                    .await
                    .map_err(RunError::Controller);
            };
            let stop = futures::FutureExt::shared(stop);
            let (provisioning, tracking) = tokio::join!(
                controller::run(deps, stop.clone()),
                capacity::controller::run(capacity, stop)
            );
            provisioning.and(tracking).map_err(RunError::Controller)
        })
        .await
}

/// Capacity tracking's start-up, before leader election as upstream: its own rate-limited
/// client, the version probe (storage.k8s.io/v1, else v1beta1), the owner of the objects, the
/// gauges. In node
/// deployment (spec §6.2) the objects are this node's segment's only, labelled
/// `managed-by=external-provisioner-<node>`.
async fn capacity_deps(
    sidecar: &Sidecar,
    config: &Config,
    settings: capacity::CapacitySettings,
    node: Option<&NodeDeployment>,
) -> Result<capacity::controller::Deps<capacity::csi::TonicCapacity>, RunError> {
    let capacity_client = sidecar
        .client_with_limits(settings.qps, settings.burst)
        .await?;
    let version = capacity::owner::probe(&capacity_client, &settings.namespace).await?;
    let owner = capacity::owner::resolve(
        &capacity_client,
        &settings.namespace,
        &settings.pod_name,
        settings.ownerref_level,
    )
    .await?;
    tracing::info!(owner = ?owner.as_ref().map(|o| format!("{}/{}", o.kind, o.name)), version = version.as_str(), "storage capacity tracking enabled");
    let metrics = capacity::metrics::CapacityMetrics::register(sidecar.metrics.registry())
        .map_err(|err| RunError::Metrics(Box::new(err)))?;
    Ok(capacity::controller::Deps {
        client: sidecar.client.clone(),
        capacity_client,
        version,
        driver: capacity::csi::TonicCapacity::new(sidecar.connection.clone(), config.timeout),
        template: capacity::decide::Template {
            namespace: settings.namespace.clone(),
            driver: sidecar.driver.name.clone(),
            owner,
            managed_by: capacity::decide::managed_by(node.map(|n| n.settings.node_name.as_str())),
        },
        segments: node.map_or(capacity::decide::SegmentSource::Cluster, |n| {
            capacity::decide::SegmentSource::Node(n.info.topology.clone())
        }),
        settings,
        retry: config.retry,
        metrics,
        workqueue_metrics: sidecar.workqueue_metrics.clone(),
    })
}

/// csi-provisioner's start-up: the Lease is named after the driver alone, and `/metrics` has
/// the plain process start-time help and promhttp's scrape counters (docs/compatibility.md).
fn sidecar_config(config: &Config) -> SidecarConfig {
    let settings = CommonSettings {
        csi_address: config.csi_address.clone(),
        kube: config.kube.clone(),
        leader_election: config.leader_election.clone(),
        http: config.http.clone(),
        log_grpc_calls: config.log_grpc_calls,
    };
    let mut sidecar = SidecarConfig::new("csi-provisioner", settings, config.timeout);
    sidecar.process_metrics = ProcessMetrics::FullPlainStartTime;
    sidecar.scrape_metrics = ScrapeMetrics::Promhttp;
    sidecar
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
        assert_eq!(
            RunError::from(sidecar::Error::ConnectionLost).exit_code(),
            1
        );
        assert_eq!(
            RunError::NotAProvisioner { driver: "d".into() }.exit_code(),
            1
        );
        assert_eq!(
            RunError::from(sidecar::Error::Master("x".into())).exit_code(),
            255
        );
    }
}
