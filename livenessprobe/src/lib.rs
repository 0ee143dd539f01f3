//! livenessprobe: serves `/healthz` for the kubelet liveness probe of the CSI driver container.
//!
//! A `/healthz` request is answered by a probe: a fresh connection to the driver socket and a
//! CSI `Identity/Probe` call, all within `--probe-timeout`: 200 `ok` when the driver is ready,
//! 500 with the reason otherwise. A fresh connection per probe is deliberate (upstream #68: a cached
//! connection reported "healthy" after the socket was gone). Requests that arrive while a
//! probe runs share its verdict instead of each dialing the driver (`csi_common::coalesce`;
//! upstream probes once per request). The HTTP port only opens once the driver answered
//! GetPluginInfo, so while the driver is missing kubelet sees "connection refused" instead of
//! a crash-looping probe (upstream #236/#240).

pub mod args;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::any;
use csi_common::connection::{self, ConnectOptions, CsiAddress};
use csi_common::http::{self as diag, Listener};
use csi_common::identity::{self, ProbeOutcome};
use csi_common::metrics::{CsiMetrics, ProcessMetrics};
use csi_common::status::CsiError;

use csi_common::coalesce::Coalesced;

/// Everything livenessprobe needs to run, validated from the flags by [`args`].
#[derive(Clone, Debug)]
pub struct Config {
    /// The driver socket.
    pub(crate) csi_address: CsiAddress,
    /// Budget of one `/healthz` request: connect plus Probe.
    pub(crate) probe_timeout: Duration,
    /// Where `/healthz` is served: `--http-endpoint`, else `:<--health-port>`.
    pub(crate) health_address: String,
    /// Whether metrics share the health server (only with `--http-endpoint`).
    pub(crate) serve_metrics_on_health: bool,
    /// The deprecated separate metrics listener (`--metrics-address`).
    pub(crate) metrics_address: Option<String>,
    /// `--metrics-path`.
    pub(crate) metrics_path: String,
    /// Log every CSI call with its (secret-stripped) messages (`-v=5`).
    pub(crate) log_grpc_calls: bool,
}

/// Why livenessprobe stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The start-up GetPluginInfo failed or returned an empty name.
    #[error("failed to get CSI driver name")]
    DriverName(#[source] identity::Error),
    /// The driver socket could not be connected (only with a bounded connect timeout).
    #[error("failed to connect to the CSI driver")]
    Connect(#[source] connection::Error),
    /// A listener could not be opened or failed while serving.
    #[error("diagnostics HTTP server failed")]
    Http(#[source] diag::Error),
    /// The metrics registry could not be built.
    #[error("cannot build the metrics registry")]
    Metrics(#[source] csi_common::metrics::Error),
}

/// Runs livenessprobe until `shutdown` resolves.
///
/// # Errors
/// See [`Error`]; `main` turns every one of them into exit code 1.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let metrics = CsiMetrics::new(ProcessMetrics::StartTimeOnly).map_err(Error::Metrics)?;
    let mut shutdown = Box::pin(shutdown);

    // The wait for the driver has no deadline, so a SIGTERM must end it: kubelet stops a pod
    // whose driver never came up, and upstream (no signal handler) exits at once.
    let driver = tokio::select! {
        driver = driver_name(&config, &metrics) => driver?,
        () = &mut shutdown => return Ok(()),
    };
    tracing::info!(%driver, "CSI driver name");
    metrics.set_driver_name(&driver);

    let prober = Arc::new(Prober {
        address: config.csi_address.clone(),
        timeout: config.probe_timeout,
        metrics: metrics.clone(),
        log_calls: config.log_grpc_calls,
        in_flight: Coalesced::new(config.probe_timeout),
    });
    let mut health = Router::new().route(
        "/healthz",
        any(move || {
            let prober = prober.clone();
            async move { prober.healthz().await }
        }),
    );
    if config.serve_metrics_on_health {
        health = health.merge(diag::router(
            Some((metrics.clone(), &config.metrics_path)),
            None,
        ));
    } else {
        health = health.fallback(|| std::future::ready(diag::not_found()));
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let mut servers = tokio::task::JoinSet::new();
    if let Some(address) = &config.metrics_address {
        let listener = Listener::bind(address).await.map_err(Error::Http)?;
        tracing::info!(%address, path = %config.metrics_path, "serving metrics");
        let router = diag::router(Some((metrics.clone(), &config.metrics_path)), None);
        servers.spawn(listener.serve(router, stopped()));
    }
    let listener = Listener::bind(&config.health_address)
        .await
        .map_err(Error::Http)?;
    tracing::info!(address = %config.health_address, "serving /healthz");
    servers.spawn(listener.serve(health, stopped()));

    tokio::select! {
        () = &mut shutdown => {
            let _ = stop_tx.send(true);
            while servers.join_next().await.is_some() {}
            Ok(())
        }
        Some(result) = servers.join_next() => {
            // A server only ends by itself on an I/O error.
            let _ = stop_tx.send(true);
            match result {
                Ok(served) => served.map_err(Error::Http),
                Err(join) => Err(Error::Http(diag::Error::Serve(std::io::Error::other(join)))),
            }
        }
    }
}

/// Connects and asks the driver's name. Upstream waits for the driver with no deadline and asks
/// its name with no deadline either: the probe must never crash-loop just because the driver
/// starts slowly.
async fn driver_name(config: &Config, metrics: &CsiMetrics) -> Result<String, Error> {
    let options = ConnectOptions::default()
        .with_connect_timeout(None)
        .with_call_timeout(ConnectOptions::NO_CALL_TIMEOUT)
        .with_call_logging(config.log_grpc_calls);
    let (conn, loss) = connection::connect(&config.csi_address, options, metrics.clone())
        .await
        .map_err(Error::Connect)?;
    // Used for this one call: a driver that goes away meanwhile fails the call, no more.
    loss.expect_close();
    let info = identity::plugin_info(&conn, ConnectOptions::NO_CALL_TIMEOUT)
        .await
        .map_err(Error::DriverName)?;
    Ok(info.name)
}

/// Answers `/healthz` requests.
#[derive(Debug)]
struct Prober {
    address: CsiAddress,
    timeout: Duration,
    metrics: CsiMetrics,
    log_calls: bool,
    /// The probe concurrent requests share (see [`csi_common::coalesce`]).
    in_flight: Coalesced<Verdict>,
}

/// What `/healthz` answers: the status and upstream's body.
type Verdict = (StatusCode, String);

/// The body upstream answers when Probe says `ready: false`.
pub(crate) const NOT_READY: &str = "driver responded but is not ready";

/// The body upstream answers when the probe timeout passed (Go's `context.DeadlineExceeded`).
pub(crate) const DEADLINE_EXCEEDED: &str = "context deadline exceeded";

/// How long after the probe deadline the whole request is cut off if a step overran its own
/// deadline (none should: connect and Probe each end at the deadline).
const BACKSTOP_GRACE: Duration = Duration::from_millis(100);

impl Prober {
    /// Answers one request with the verdict of the running probe or of a new one.
    async fn healthz(self: Arc<Self>) -> Response {
        let prober = Arc::clone(&self);
        let (status, body) = self
            .in_flight
            .run(move || async move { prober.check().await })
            .await
            .unwrap_or_else(|| {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the probe task failed".to_owned(),
                )
            });
        // Upstream writes the body without a trailing newline and lets Go sniff text/plain.
        let mut response = diag::text(status, body);
        response
            .headers_mut()
            .remove(axum::http::header::X_CONTENT_TYPE_OPTIONS);
        response
    }

    /// One probe of the driver, logged.
    async fn check(&self) -> Verdict {
        // One deadline for connect and Probe, as upstream's one context: a Probe that hangs ends
        // with the call's own `DeadlineExceeded` status at the deadline (upstream's body
        // `rpc error: code = DeadlineExceeded desc = context deadline exceeded`). The backstop a
        // little later only bounds a step that would ignore its deadline.
        let deadline = Instant::now() + self.timeout;
        let verdict =
            tokio::time::timeout_at(deadline + BACKSTOP_GRACE, self.probe(deadline)).await;
        let (status, body) = match verdict {
            Ok(Ok(ProbeOutcome::Ready)) => (StatusCode::OK, "ok".to_owned()),
            Ok(Ok(ProbeOutcome::NotReady)) => {
                (StatusCode::INTERNAL_SERVER_ERROR, NOT_READY.to_owned())
            }
            Ok(Err(reason)) => (StatusCode::INTERNAL_SERVER_ERROR, reason),
            Err(_elapsed) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                DEADLINE_EXCEEDED.to_owned(),
            ),
        };
        if status == StatusCode::OK {
            tracing::debug!("health check succeeded");
        } else {
            tracing::error!(reason = %body, "health check failed");
        }
        (status, body)
    }

    /// Connects afresh and calls Probe, both by `deadline` (the probe timeout from the
    /// request's arrival).
    async fn probe(&self, deadline: Instant) -> Result<ProbeOutcome, String> {
        let options = ConnectOptions::default()
            .with_connect_timeout(Some(deadline.saturating_duration_since(Instant::now())))
            .with_call_timeout(self.timeout)
            .with_call_logging(self.log_calls);
        let (conn, loss) = connection::connect(&self.address, options, self.metrics.clone())
            .await
            .map_err(|err| match err {
                connection::Error::ConnectTimeout { .. } => DEADLINE_EXCEEDED.to_owned(),
                connection::Error::InvalidAddress { .. } => csi_common::logging::error_chain(&err),
            })?;
        // A connection for one Probe: the driver going away during it is what the 500 reports,
        // not a "Lost connection" error (upstream's probe connection never re-dials, so it
        // never logs one).
        loss.expect_close();
        // What connecting left of the budget; zero fails the call at once with DeadlineExceeded,
        // as grpc-go does for a context that has already expired.
        let remaining = deadline.saturating_duration_since(Instant::now());
        identity::probe(&conn, remaining)
            .await
            .map_err(|err| match &err {
                identity::Error::Call { status, .. } => CsiError::from(&**status).to_string(),
                identity::Error::EmptyDriverName => csi_common::logging::error_chain(&err),
            })
    }
}
