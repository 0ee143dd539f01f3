//! csi-attacher: watches VolumeAttachments of this CSI driver and calls ControllerPublishVolume
//! / ControllerUnpublishVolume. A drop-in replacement for kubernetes-csi/external-attacher
//! (spec sidecars.md §1).
//!
//! Decisions are pure functions over cached objects (`decide`, `filter`, `source`, `node`,
//! `request`, `patch`, `reconcile`); `controller` carries them out. [`run`] is the whole process
//! after flag parsing, on csi-common's `Sidecar`.

pub mod args;
mod cached;
mod controller;
mod csi;
mod decide;
mod filter;
mod names;
mod node;
mod patch;
mod reconcile;
mod request;
mod source;

use std::future::Future;

use csi_common::sidecar::{self, Sidecar, SidecarConfig};

pub use csi_common::sidecar::Environment;

use crate::args::Config;
use crate::controller::{Backlog, Deps, Handler, Settings};
use crate::csi::TonicDriver;
use crate::request::PublishSettings;

/// Why [`run`] ended; [`RunError::exit_code`] gives upstream's exit code.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Start-up failed, or the driver connection or the Lease was lost.
    #[error(transparent)]
    Sidecar(#[from] sidecar::Error),
    /// The backlog metrics could not be registered (a programming error).
    #[error("cannot set up metrics")]
    Metrics(#[source] prometheus::Error),
    /// A controller worker stopped unexpectedly.
    #[error("controllers failed")]
    Controller(#[source] csi_common::controller::Error),
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

    /// Upstream's exit code: csi-attacher exits 1 on every fatal error (klog.Fatal's 255 is
    /// csi-provisioner's).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Sidecar(err) => err.exit_code(1),
            Self::Metrics(_) | Self::Controller(_) => 1,
        }
    }
}

/// Runs csi-attacher until `shutdown` resolves (then returns `Ok` after releasing the Lease)
/// or something fatal happens.
pub async fn run(
    config: Config,
    environment: Environment,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let mut sidecar_config =
        SidecarConfig::new("csi-attacher", config.common.clone(), config.timeout);
    names::LEASE_PREFIX.clone_into(&mut sidecar_config.lease_prefix);
    sidecar_config.max_grpc_log_length = config.max_grpc_log_length;
    let Some(sidecar) = Sidecar::start(sidecar_config, environment, shutdown).await? else {
        return Ok(());
    };
    let driver = &sidecar.driver;
    let handler = if driver.plugin.has_controller_service()
        && driver.controller.has_publish_unpublish_volume()
    {
        Handler::Csi {
            reconcile: driver.controller.has_list_volumes()
                && driver.controller.has_list_volumes_published_nodes(),
        }
    } else {
        tracing::info!(
            driver = driver.name,
            "the driver does not publish volumes: using the trivial handler"
        );
        Handler::Trivial
    };
    let settings = Settings {
        driver: driver.name.clone(),
        handler,
        publish: PublishSettings {
            capabilities: driver.controller.clone(),
            default_fs_type: config.default_fstype.clone(),
        },
        workers: config.workers,
        retry_start: config.retry_start,
        retry_max: config.retry_max,
        resync: config.resync,
        reconcile_every: config.reconcile_sync,
        timeout: config.timeout,
        max_entries: config.max_entries,
        error_codes: config.error_codes,
    };
    let (stores, informers, handlers) = controller::stores(&sidecar.client);
    let mut background = tokio::task::JoinSet::new();
    for informer in informers {
        background.spawn(informer);
    }
    let backlog = Backlog::new(stores.attachments(), &driver.name).map_err(RunError::Metrics)?;
    sidecar
        .metrics
        .registry()
        .register(Box::new(backlog))
        .map_err(RunError::Metrics)?;
    let (recorder, writer) = sidecar.event_recorder("csi-attacher".to_owned());
    background.spawn(writer);
    let deps = Deps {
        client: sidecar.client.clone(),
        driver: TonicDriver::new(sidecar.connection.clone(), config.timeout),
        settings,
        stores,
        recorder,
        metrics: sidecar.workqueue_metrics.clone(),
    };
    let result = sidecar
        .run(|stop| async move {
            controller::run(deps, &handlers, stop)
                .await
                .map_err(RunError::Controller)
        })
        .await;
    background.shutdown().await;
    result
}
