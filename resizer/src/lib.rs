//! csi-resizer: watches PersistentVolumeClaims of this CSI driver and calls
//! ControllerExpandVolume when a bound claim asks for more storage (or, after a failure, for
//! less again), then updates the PV capacity and the claim's status. A drop-in replacement for
//! kubernetes-csi/external-resizer (spec sidecars.md §2), with the expand-and-recover flow of
//! `RecoverVolumeExpansionFailure` (and the legacy flow without it), the in-use gate without a
//! cluster-wide Pod informer, and calls ControllerModifyVolume when a claim's
//! VolumeAttributesClass changes (the modify controller).
//!
//! Decisions are pure functions over cached objects (`mode`, `csi_common::vac_discovery`, `decide`,
//! `transition`, `patch`, `request`, `error`, `inuse`, `modify`); `controller` carries them
//! out. [`run`] is the whole process after flag
//! parsing, on csi-common's `Sidecar`.

pub mod args;
mod cached;
mod controller;
mod csi;
mod decide;
mod error;
mod inuse;
mod mode;
mod modify;
mod names;
mod patch;
mod request;
mod transition;

use std::future::Future;

use csi_common::sidecar::{self, Sidecar, SidecarConfig};
use futures::FutureExt;

pub use csi_common::sidecar::Environment;

use crate::args::Config;
use crate::controller::{Deps, Flow, Settings};
use crate::csi::TonicDriver;
use crate::mode::DriverCaps;
pub use crate::mode::ModeError;

/// Why [`run`] ended; [`RunError::exit_code`] gives the exit code.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Start-up failed, or the driver connection or the Lease was lost.
    #[error(transparent)]
    Sidecar(#[from] sidecar::Error),
    /// NodeGetCapabilities failed.
    #[error("cannot read the CSI driver's node capabilities")]
    NodeCapabilities(#[source] csi_common::identity::Error),
    /// The driver cannot be served.
    #[error(transparent)]
    Mode(#[from] ModeError),
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

    /// Upstream's exit code: csi-resizer exits 1 on every fatal error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Sidecar(err) => err.exit_code(1),
            Self::Mode(err) => err.exit_code(),
            Self::NodeCapabilities(_) | Self::Controller(_) => 1,
        }
    }
}

/// Runs csi-resizer until `shutdown` resolves (then returns `Ok` after releasing the Lease)
/// or something fatal happens.
pub async fn run(
    config: Config,
    environment: Environment,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let mut sidecar_config =
        SidecarConfig::new("csi-resizer", config.common.clone(), config.timeout);
    names::LEASE_PREFIX.clone_into(&mut sidecar_config.lease_prefix);
    let Some(sidecar) = Sidecar::start(sidecar_config, environment, shutdown).await? else {
        return Ok(());
    };
    let driver = &sidecar.driver;
    let node_expansion = if mode::needs_node_capabilities(&driver.plugin, &driver.controller) {
        let node = csi_common::identity::node_capabilities(&sidecar.connection, config.timeout)
            .await
            .map_err(RunError::NodeCapabilities)?;
        Some(node.has_expand_volume())
    } else {
        None
    };
    let volume_attributes_class = csi_common::vac_discovery::volume_attributes_class(
        &sidecar.client,
        config.gates.volume_attributes_class,
    )
    .await;
    let mode = mode::choose(
        DriverCaps {
            plugin: &driver.plugin,
            controller: &driver.controller,
            node_expansion,
        },
        volume_attributes_class,
    )?;
    tracing::info!(driver = driver.name, ?mode, "controllers starting");
    let (stores, informers, handlers) = controller::stores(&sidecar.client);
    let mut background = tokio::task::JoinSet::new();
    for informer in informers {
        background.spawn(informer);
    }
    let (recorder, writer) = sidecar.event_recorder(names::event_component(&driver.name));
    background.spawn(writer);
    let resize = mode.resizer.map(|resizer| Deps {
        client: sidecar.client.clone(),
        driver: TonicDriver::new(sidecar.connection.clone(), config.timeout),
        settings: resize_settings(&config, driver, resizer),
        stores: stores.clone(),
        recorder: recorder.clone(),
        metrics: sidecar.workqueue_metrics.clone(),
    });
    let modify = mode.modify.then(|| {
        let (classes, task) = controller::modify::classes(&sidecar.client, handlers.modify());
        background.spawn(task);
        controller::modify::Deps {
            client: sidecar.client.clone(),
            driver: TonicDriver::new(sidecar.connection.clone(), config.timeout),
            settings: controller::modify::Settings {
                driver: driver.name.clone(),
                extra_metadata: config.extra_modify_metadata,
                workers: config.workers,
                retry_start: config.retry_start,
                retry_max: config.retry_max,
                resync: config.resync,
            },
            stores,
            classes,
            recorder,
            metrics: sidecar.workqueue_metrics.clone(),
        }
    });
    let result = sidecar
        .run(|stop| async move {
            let stop = stop.boxed().shared();
            let resize = async {
                match resize {
                    Some(deps) => controller::run(deps, &handlers, stop.clone()).await,
                    None => Ok(()),
                }
            };
            let modify = async {
                match modify {
                    Some(deps) => {
                        controller::modify::run(deps, handlers.modify(), stop.clone()).await
                    }
                    None => Ok(()),
                }
            };
            // A failed controller ends the run (and the other with it), as a crashed
            // goroutine ends upstream's process.
            tokio::try_join!(resize, modify)
                .map(|((), ())| ())
                .map_err(RunError::Controller)
        })
        .await;
    background.shutdown().await;
    result
}

/// The resize controller's settings from the flags and the driver's capabilities.
fn resize_settings(config: &Config, driver: &sidecar::Driver, resizer: mode::Resizer) -> Settings {
    Settings {
        driver: driver.name.clone(),
        resizer,
        capabilities: driver.controller.clone(),
        workers: config.workers,
        retry_start: config.retry_start,
        retry_max: config.retry_max,
        resync: config.resync,
        annotate_fs_resize: config.gates.annotate_fs_resize,
        in_use: inuse::Gate::new(config.handle_volume_inuse_error, &driver.plugin),
        flow: if config.gates.recover_volume_expansion_failure {
            Flow::ExpandAndRecover
        } else {
            Flow::Legacy
        },
    }
}
