//! `/healthz` on `--http-endpoint`: does the registration socket still answer?
//!
//! Upstream semantics (`httpServer` in `node_register.go`, sidecars.md §3.2 item 6), which
//! liveness probes in existing manifests rely on:
//!
//! * socket present → a **fresh** gRPC connection to it and `GetInfo` within `--timeout`; the
//!   answered name must be our driver's → `200 ok`, otherwise `500` with the error text;
//! * something that is not a socket, or stat failing → `500` with the error text;
//! * nothing there → `404 registration socket does not exist`; also before the driver name, and
//!   so the socket path, is known (upstream's port is still closed then; here the server
//!   starts first so a bad address fails at start-up).
//!
//! The driver itself is not checked (fixture `registrar-healthz-driver-down.txt`: 200 with the
//! driver stopped). Bodies carry no trailing newline and no `X-Content-Type-Options`, because
//! upstream writes them with `WriteHeader` + `Write` rather than `http.Error`. Every other path
//! is Go's `404 page not found` (no `/metrics`: the registrar has no metrics). Upstream bounds
//! only the `GetInfo` call by `--timeout` and the connect by its 30 s default; here the connect
//! is bounded by `--timeout` as well, so a wedged socket fails the probe promptly.
//!
//! Requests that arrive while a check runs share its verdict ([`csi_common::coalesce`]; upstream
//! checks once per request): kubelet, probing one at a time, sees no difference, and a flood of
//! requests no longer opens one connection to the registration socket each.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::Response;
use axum::routing::any;
use csi_common::coalesce::Coalesced;
use csi_common::status::CsiError;
use proto::pluginregistration::v1::InfoRequest;
use proto::pluginregistration::v1::registration_client::RegistrationClient;

use crate::socket::{self, PathState};

/// Body of the 404 when the socket is missing (upstream's text).
pub(crate) const SOCKET_MISSING: &str = "registration socket does not exist";

/// The verdict of one health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Health {
    /// The socket answered `GetInfo` with our driver name.
    Healthy,
    /// The socket file does not exist.
    SocketMissing,
    /// Anything else, with upstream's error text.
    Unhealthy(String),
}

/// Checks the registration socket the way upstream's `/healthz` does.
#[derive(Debug, Clone)]
pub(crate) struct HealthCheck {
    socket: PathBuf,
    driver_name: String,
    timeout: Duration,
    /// The check concurrent requests share.
    in_flight: Arc<Coalesced<Health>>,
}

impl HealthCheck {
    /// A check of `socket`, expecting `driver_name`, bounded by `timeout` (`--timeout`).
    pub(crate) fn new(socket: PathBuf, driver_name: String, timeout: Duration) -> Self {
        Self {
            socket,
            driver_name,
            timeout,
            in_flight: Arc::new(Coalesced::new(timeout)),
        }
    }

    /// The verdict of the check running now, or of a new one (see the module docs).
    pub(crate) async fn shared(&self) -> Health {
        let check = self.clone();
        self.in_flight
            .run(move || async move { check.check().await })
            .await
            .unwrap_or_else(|| Health::Unhealthy("the health check task failed".to_owned()))
    }

    /// Runs one check.
    pub(crate) async fn check(&self) -> Health {
        match socket::path_state(&self.socket) {
            Ok(PathState::Missing) => Health::SocketMissing,
            Ok(PathState::Socket) => match self.get_info().await {
                Ok(()) => Health::Healthy,
                Err(reason) => Health::Unhealthy(reason),
            },
            Err(err) => Health::Unhealthy(csi_common::logging::error_chain(&err)),
        }
    }

    async fn get_info(&self) -> Result<(), String> {
        tracing::debug!(socketfile = %self.socket.display(), "Attempting to open a gRPC connection");
        let channel = tokio::time::timeout(self.timeout, connect(&self.socket))
            .await
            .unwrap_or_else(|_| Err("context deadline exceeded".to_owned()))
            .map_err(|err| {
                format!(
                    "error connecting to node-registrar socket {}: {err}",
                    self.socket.display()
                )
            })?;
        tracing::debug!("Calling node registrar to check if it still responds");
        let mut request = tonic::Request::new(InfoRequest {});
        request.set_timeout(self.timeout);
        let mut client = RegistrationClient::new(channel);
        let info = match tokio::time::timeout(self.timeout, client.get_info(request)).await {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => {
                return Err(format!(
                    "error getting info from node-registrar socket: {}",
                    CsiError::from(status)
                ));
            }
            Err(_elapsed) => {
                let err =
                    CsiError::status(tonic::Code::DeadlineExceeded, "context deadline exceeded");
                return Err(format!(
                    "error getting info from node-registrar socket: {err}"
                ));
            }
        };
        if info.name == self.driver_name {
            Ok(())
        } else {
            Err(format!("invalid driver name {}", info.name))
        }
    }
}

/// One connection attempt to the unix socket at `path` (no retries: the socket is local).
async fn connect(path: &Path) -> Result<tonic::transport::Channel, String> {
    csi_common::connection::dial_once(path)
        .await
        .map_err(|err| csi_common::logging::error_chain(&err))
}

/// Where the `/healthz` handler finds its check: empty until the registration socket exists
/// (the server starts earlier, so a bad `--http-endpoint` fails at start-up).
pub(crate) type SharedHealthCheck = Arc<OnceLock<HealthCheck>>;

/// The routes of the registrar's HTTP server: `/healthz` (any method, as Go's mux) and Go's
/// 404 for everything else. Until `check` is set, `/healthz` answers the 404 of a missing
/// socket: the driver name, and so the socket path, is not known yet.
pub(crate) fn router(check: SharedHealthCheck) -> Router {
    Router::new()
        .route(
            "/healthz",
            any(move || {
                let check = Arc::clone(&check);
                async move {
                    let health = match check.get() {
                        Some(check) => check.shared().await,
                        None => Health::SocketMissing,
                    };
                    respond(&health)
                }
            }),
        )
        .fallback(|| std::future::ready(csi_common::http::not_found()))
}

fn respond(health: &Health) -> Response {
    let (status, body) = match health {
        Health::Healthy => {
            tracing::trace!("Health check succeeded");
            (StatusCode::OK, "ok".to_owned())
        }
        Health::SocketMissing => {
            tracing::error!("Health check failed, registration socket does not exist");
            (StatusCode::NOT_FOUND, SOCKET_MISSING.to_owned())
        }
        Health::Unhealthy(reason) => {
            tracing::error!(error = %reason, "Health check failed");
            (StatusCode::INTERNAL_SERVER_ERROR, reason.clone())
        }
    };
    let mut response = csi_common::http::text(status, body);
    response
        .headers_mut()
        .remove(header::X_CONTENT_TYPE_OPTIONS);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn shared(check: HealthCheck) -> SharedHealthCheck {
        Arc::new(OnceLock::from(check))
    }

    async fn get(router: Router, path: &str) -> (StatusCode, String, bool) {
        let response = router
            .oneshot(Request::post(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let nosniff = response
            .headers()
            .contains_key(header::X_CONTENT_TYPE_OPTIONS);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap(), nosniff)
    }

    #[tokio::test]
    async fn a_missing_socket_is_404_and_a_regular_file_500() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        let check = shared(HealthCheck::new(
            path.clone(),
            "x".to_owned(),
            Duration::from_secs(1),
        ));
        let (status, body, nosniff) = get(router(check.clone()), "/healthz").await;
        assert_eq!(
            (status, body.as_str(), nosniff),
            (StatusCode::NOT_FOUND, SOCKET_MISSING, false)
        );

        std::fs::write(&path, b"").unwrap();
        let (status, body, _) = get(router(check), "/healthz").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body,
            format!(
                "file exists in socketPath {} but it's not a socket.",
                path.display()
            )
        );
    }

    #[tokio::test]
    async fn a_socket_nobody_listens_on_is_500_with_the_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let check = HealthCheck::new(path.clone(), "x".to_owned(), Duration::from_secs(1));
        let health = check.check().await;
        let Health::Unhealthy(reason) = health else {
            panic!("{health:?}");
        };
        let prefix = format!(
            "error connecting to node-registrar socket {}: ",
            path.display()
        );
        assert!(reason.starts_with(&prefix), "{reason}");
    }

    #[tokio::test]
    async fn other_paths_are_gos_404() {
        let check = shared(HealthCheck::new(
            "/nonexistent".into(),
            "x".to_owned(),
            Duration::from_secs(1),
        ));
        for path in ["/metrics", "/", "/healthz/", "/debug/pprof/"] {
            let (status, body, nosniff) = get(router(check.clone()), path).await;
            assert_eq!(
                (status, body.as_str(), nosniff),
                (StatusCode::NOT_FOUND, "404 page not found\n", true),
                "{path}"
            );
        }
    }
    /// Serves the registration service for `name` on `path`, as the registrar does.
    fn serve(path: &Path, name: &str) -> tokio::task::JoinHandle<()> {
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        serve_incoming(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            name,
        )
    }

    /// Serves the registration service for `name` on the connections of `incoming`.
    fn serve_incoming(
        incoming: impl tokio_stream::Stream<Item = std::io::Result<tokio::net::UnixStream>>
        + Send
        + 'static,
        name: &str,
    ) -> tokio::task::JoinHandle<()> {
        use proto::pluginregistration::v1::registration_server::RegistrationServer;
        let (failures, _) = tokio::sync::mpsc::channel(1);
        let (_, stopping) = tokio::sync::watch::channel(false);
        let service =
            crate::service::RegistrationService::new(name, "/host/csi.sock", failures, stopping);
        let server = tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(service))
            .serve_with_incoming(incoming);
        tokio::spawn(async move {
            let _ = server.await;
        })
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_check_of_the_socket() {
        use tokio_stream::StreamExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(
            tokio::net::UnixListener::bind(&path).unwrap(),
        )
        .map({
            let accepted = Arc::clone(&accepted);
            move |connection| {
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                connection
            }
        });
        let server = serve_incoming(incoming, "x.example.com");
        let check = shared(HealthCheck::new(
            path,
            "x.example.com".to_owned(),
            Duration::from_secs(5),
        ));
        let requests: Vec<_> = (0..50)
            .map(|_| tokio::spawn(get(router(check.clone()), "/healthz")))
            .collect();
        for request in requests {
            assert_eq!(request.await.unwrap().0, StatusCode::OK);
        }
        // Upstream dials once per request: 50 connections.
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The check is done: the next request checks again.
        assert_eq!(get(router(check), "/healthz").await.0, StatusCode::OK);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
        server.abort();
    }

    #[tokio::test]
    async fn a_socket_answering_with_our_name_is_healthy_and_another_name_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        let server = serve(&path, "x.example.com");
        let ours = HealthCheck::new(
            path.clone(),
            "x.example.com".to_owned(),
            Duration::from_secs(1),
        );
        assert_eq!(ours.check().await, Health::Healthy);
        let theirs = HealthCheck::new(path, "y.example.com".to_owned(), Duration::from_secs(1));
        assert_eq!(
            theirs.check().await,
            Health::Unhealthy("invalid driver name x.example.com".to_owned())
        );
        server.abort();
    }

    #[tokio::test]
    async fn before_the_socket_exists_healthz_is_404() {
        let (status, body, _) = get(router(SharedHealthCheck::default()), "/healthz").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::NOT_FOUND, SOCKET_MISSING)
        );
    }
}
