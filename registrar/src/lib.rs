//! node-driver-registrar: the node sidecar through which kubelet learns about a CSI driver.
//!
//! It asks the driver for its name (CSI `GetPluginInfo`), then serves kubelet's plugin
//! registration API on `<--plugin-registration-path>/<driver>-reg.sock`. Kubelet's plugin
//! watcher finds that socket, calls `GetInfo` (answered with the driver name, the
//! `--kubelet-registration-path` endpoint and the supported versions), dials the driver itself
//! for `NodeGetInfo`, updates the `CSINode` object, and reports back with
//! `NotifyRegistrationStatus`. The registrar talks to no API server and needs no RBAC.
//!
//! [`run`] follows upstream v2.17 (sidecars.md §3.2): wait up to 30 s for the driver socket,
//! `GetPluginInfo` within `--timeout` (no retry), clear a stale registration socket, bind it
//! privately, serve until a shutdown signal (then remove the socket) or until kubelet reports a
//! failed registration (then return [`Error::RegistrationFailed`], which `main` turns into exit
//! code 1, upstream's "restarting registration container"). The driver connection stays open
//! and unused until exit, as upstream's does.
//!
//! Differences from upstream, all deliberate: a deleted registration socket is re-created
//! every `--registration-socket-check-interval` (upstream never does, issue #57); the HTTP
//! server starts before waiting for the driver, so a bad `--http-endpoint` fails at once and
//! `/healthz` answers 404 (not "connection refused") until the registration socket exists;
//! SIGINT is handled like SIGTERM; at shutdown the socket is removed only if it is still ours;
//! invalid driver names and a missing registration directory are reported before anything is
//! bound; `--enable-pprof` is accepted but serves nothing (Go's pprof does not exist here).

pub mod args;
mod health;
mod service;
mod socket;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use csi_common::connection::{self, ConnectOptions, CsiAddress};
use csi_common::h2_authority::RepairAuthority;
use csi_common::http::{self as diag, Listener};
use csi_common::identity;
use csi_common::metrics::{CsiMetrics, ProcessMetrics};
use proto::pluginregistration::v1::registration_server::RegistrationServer;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

use crate::health::{HealthCheck, SharedHealthCheck};
use crate::service::RegistrationService;
use crate::socket::{CheckOutcome, RegistrationSocket};

/// Everything the registrar needs to run, validated from the flags by [`args`].
#[derive(Clone, Debug)]
pub struct Config {
    /// The driver socket inside the container (`--csi-address`).
    pub(crate) csi_address: CsiAddress,
    /// The driver socket on the host (`--kubelet-registration-path`), returned to kubelet as
    /// the endpoint. Only echoed, never opened.
    pub(crate) kubelet_registration_path: String,
    /// Where the registration socket goes (`--plugin-registration-path`).
    pub(crate) plugin_registration_dir: PathBuf,
    /// `--timeout`: budget of the start-up GetPluginInfo and of the `/healthz` self-check.
    pub(crate) timeout: Duration,
    /// How long to wait for the driver socket (upstream: csi-lib-utils' fixed 30 s).
    pub(crate) driver_connect_timeout: Duration,
    /// Address of the `/healthz` server, if any (`--http-endpoint` or `:<--health-port>`).
    pub(crate) http_address: Option<String>,
    /// How often to check for a deleted registration socket; `None` never re-creates it.
    pub(crate) socket_check_interval: Option<Duration>,
    /// Log CSI calls with their messages (`-v=5`).
    pub(crate) log_grpc_calls: bool,
}

/// Why the registrar stopped with an error; `main` exits 1 for every one of them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The diagnostics HTTP server could not listen or failed.
    #[error("HTTP server failed")]
    Http(#[source] diag::Error),
    /// The plugin registration directory is unusable.
    #[error("invalid plugin registration directory")]
    RegistrationDirectory(#[source] socket::Error),
    /// The driver socket did not answer within the connect timeout.
    #[error("error connecting to CSI driver")]
    Connect(#[source] connection::Error),
    /// GetPluginInfo failed, timed out or returned an empty name.
    #[error("error retrieving CSI driver name")]
    DriverName(#[source] identity::Error),
    /// The registration socket could not be named, cleared or bound.
    #[error("cannot create the registration socket")]
    Socket(#[source] socket::Error),
    /// The registration gRPC server stopped.
    #[error("registration server stopped serving")]
    Serve(#[source] Option<tonic::transport::Error>),
    /// Kubelet reported `plugin_registered: false`.
    #[error("registration process failed with error: {0}, restarting registration container")]
    RegistrationFailed(String),
    /// The metrics registry the driver connection needs could not be built.
    #[error("cannot build the metrics registry")]
    Metrics(#[source] csi_common::metrics::Error),
}

/// Runs the registrar until `shutdown` resolves (then it removes the registration socket and
/// returns `Ok`) or a fatal error happens.
///
/// # Errors
/// See [`Error`].
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
    tokio::pin!(shutdown);
    let (stopping, stopping_rx) = watch::channel(false);

    // Dropping the set (on any early return) stops the HTTP server.
    let mut http = JoinSet::new();
    let health_check = SharedHealthCheck::default();
    if let Some(address) = &config.http_address {
        let listener = Listener::bind(address).await.map_err(Error::Http)?;
        tracing::info!(endpoint = %address, "Starting HTTP server");
        let mut stop = stopping.subscribe();
        http.spawn(
            listener.serve(health::router(Arc::clone(&health_check)), async move {
                let _ = stop.wait_for(|stopping| *stopping).await;
            }),
        );
    } else {
        tracing::info!("Skipping HTTP server");
    }
    socket::check_directory(&config.plugin_registration_dir)
        .map_err(Error::RegistrationDirectory)?;

    let discovered = tokio::select! {
        discovered = discover_driver(&config) => discovered?,
        () = &mut shutdown => return Ok(()),
    };
    // Kept open until exit like upstream's; a lost connection only reconnects (no callback).
    let (driver, driver_name) = discovered;

    let socket_path = socket::socket_path(&config.plugin_registration_dir, &driver_name)
        .map_err(Error::Socket)?;
    socket::remove_stale(&socket_path).map_err(Error::Socket)?;
    tracing::info!(socket_path = %socket_path.display(), "Starting Registration Server");
    let (connections, incoming) = mpsc::channel::<UnixStream>(16);
    let registration =
        RegistrationSocket::bind(socket_path.clone(), connections).map_err(Error::Socket)?;
    tracing::info!(socket_path = %socket_path.display(), "Registration Server started");

    let (failures, failed) = mpsc::channel(1);
    let service = RegistrationService::new(
        &driver_name,
        &config.kubelet_registration_path,
        failures,
        stopping_rx,
    );
    // Kubelet's plugin manager dials with grpc-go's passthrough resolver, so its requests carry
    // `:authority` = the socket path, which h2 refuses (RST_STREAM PROTOCOL_ERROR): repair it
    // before tonic sees it (see csi_common::h2_authority).
    let incoming = ReceiverStream::new(incoming)
        .map(|stream| Ok::<_, std::io::Error>(RepairAuthority::new(stream)));
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(service))
            .serve_with_incoming(incoming),
    );
    // Set once: `/healthz` checks this socket from now on.
    let _ = health_check.set(HealthCheck::new(socket_path, driver_name, config.timeout));

    let running = Running {
        registration,
        server,
        http,
        failed,
        stopping,
    };
    let outcome = running.wait(config.socket_check_interval, shutdown).await;
    drop(driver);
    outcome
}

/// Connects to the driver (upstream: `ConnectWithoutMetrics`, 30 s) and asks its name within
/// `--timeout`, without retries (upstream #405/#497 ask for retries; not done upstream either).
async fn discover_driver(config: &Config) -> Result<(connection::Connection, String), Error> {
    // Upstream connects "without metrics"; this registry is never served.
    let metrics = CsiMetrics::new(ProcessMetrics::StartTimeOnly).map_err(Error::Metrics)?;
    tracing::debug!(csi_address = %config.csi_address, "Attempting to open a gRPC connection");
    let options = ConnectOptions::default()
        .with_connect_timeout(Some(config.driver_connect_timeout))
        .with_call_logging(config.log_grpc_calls);
    let (driver, loss) = connection::connect(&config.csi_address, options, metrics)
        .await
        .map_err(Error::Connect)?;
    // The connection serves this one call; after it the registrar never uses it (upstream keeps
    // it open and never acts on its loss). A driver that stops — typically with the pod, just
    // before our own SIGTERM arrives — is therefore not a "Lost connection" error here.
    loss.expect_close();
    tracing::debug!("Calling CSI driver to discover driver name");
    let name = identity::driver_name(&driver, config.timeout)
        .await
        .map_err(Error::DriverName)?;
    tracing::info!(csi_driver_name = %name, "CSI driver name");
    Ok((driver, name))
}

/// The serving registrar.
struct Running {
    registration: RegistrationSocket,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    http: JoinSet<diag::Result<()>>,
    failed: mpsc::Receiver<String>,
    stopping: watch::Sender<bool>,
}

impl Running {
    /// Serves until shutdown or a fatal error, keeping the socket in place every
    /// `check_interval`; then stops everything and removes the socket after a clean shutdown.
    async fn wait(
        mut self,
        check_interval: Option<Duration>,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), Error> {
        let mut ticker = check_interval.map(|period| {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
        let mut replaced = false;
        let outcome = loop {
            tokio::select! {
                () = &mut shutdown => break Ok(()),
                Some(error) = self.failed.recv() => break Err(Error::RegistrationFailed(error)),
                served = &mut self.server => break Err(Error::Serve(match served {
                    Ok(Err(err)) => Some(err),
                    // The stream only ends when every sender is gone, which `registration`
                    // prevents; a panic is the other way out.
                    Ok(Ok(())) | Err(_) => None,
                })),
                Some(served) = self.http.join_next() => break Err(Error::Http(match served {
                    Ok(Err(err)) => err,
                    Ok(Ok(())) => diag::Error::Serve(std::io::Error::other("HTTP server stopped")),
                    Err(join) => diag::Error::Serve(std::io::Error::other(join)),
                })),
                () = tick(&mut ticker) => replaced = self.check_socket(replaced),
            }
        };

        self.stopping.send_replace(true);
        self.server.abort();
        self.http.abort_all();
        let path = self.registration.path().to_owned();
        if outcome.is_ok()
            && let Err(err) = self.registration.remove()
        {
            tracing::error!(socket = %path.display(), error = %err, "Failed to remove socket with error");
        }
        // After an error upstream exits without touching the socket; the next start removes it.
        outcome
    }

    /// One socket check; returns whether the socket is (still) someone else's, to log that
    /// only once.
    fn check_socket(&mut self, was_replaced: bool) -> bool {
        let path = self.registration.path().display().to_string();
        match self.registration.check() {
            Ok(CheckOutcome::Present) => false,
            Ok(CheckOutcome::Recreated) => {
                tracing::warn!(socket_path = %path, "Registration socket was deleted; re-created it");
                false
            }
            Ok(CheckOutcome::Replaced) => {
                if !was_replaced {
                    tracing::warn!(socket_path = %path, "Registration socket was replaced by another process; leaving it alone");
                }
                true
            }
            Err(err) => {
                tracing::error!(error = %csi_common::logging::error_chain(&err), "Cannot check the registration socket");
                was_replaced
            }
        }
    }
}

/// Waits for the next tick, or forever when re-creation is off.
async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending().await,
    }
}
