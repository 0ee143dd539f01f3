//! The diagnostics HTTP server: Prometheus metrics on `--metrics-path` and the leader-election
//! health check on `/healthz/leader-election`, served on `--http-endpoint` (or the deprecated
//! `--metrics-address`, metrics only).
//!
//! Response bodies, status codes and headers follow what the upstream sidecars serve (Go's
//! `net/http` and component-base `healthz`), because kubelet probes and scrapers look at them:
//! health bodies are `ok` with no newline, a failed check is a 500 whose body starts with
//! `internal server error: `, and unknown paths get Go's `404 page not found`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt as _;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::metrics::{CsiMetrics, TEXT_CONTENT_TYPE};

/// Path of the leader-election health check (csi-lib-utils `leaderelection`).
pub const LEADER_ELECTION_HEALTH_PATH: &str = "/healthz/leader-election";

/// A health check: `Ok(())` when healthy, `Err(reason)` otherwise.
pub type HealthCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Errors of the diagnostics server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address is not `host:port` / `:port`.
    #[error("invalid HTTP address {address:?}: expected host:port or :port")]
    InvalidAddress {
        /// The address as given on the command line.
        address: String,
    },
    /// Listening on the address failed (in use, no permission, unknown host).
    #[error("cannot listen on {address}")]
    Listen {
        /// The address as given on the command line.
        address: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("HTTP server failed")]
    Serve(#[source] std::io::Error),
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Builds the routes of a diagnostics server.
///
/// `metrics` is served on `metrics_path` when given; `leader_election` on
/// [`LEADER_ELECTION_HEALTH_PATH`] when given. Every other path answers 404 like Go's mux.
pub fn router(metrics: Option<(CsiMetrics, &str)>, leader_election: Option<HealthCheck>) -> Router {
    let mut router = Router::new();
    if let Some((metrics, path)) = metrics {
        router = router.route(
            path,
            get(move || std::future::ready(render_metrics(&metrics))),
        );
    }
    if let Some(check) = leader_election {
        router = router.route(
            LEADER_ELECTION_HEALTH_PATH,
            get(move || std::future::ready(health_response(&check))),
        );
    }
    router.fallback(|| std::future::ready(not_found()))
}

fn render_metrics(metrics: &CsiMetrics) -> Response {
    match metrics.scrape() {
        Ok(body) => ([(header::CONTENT_TYPE, TEXT_CONTENT_TYPE)], body).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "cannot render metrics");
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n"))
        }
    }
}

/// component-base `healthz` adapter: `ok` (no newline), or 500 `internal server error: <reason>`
/// written with Go's `http.Error`, which appends a newline.
pub fn health_response(check: &HealthCheck) -> Response {
    match check() {
        Ok(()) => text(StatusCode::OK, "ok".to_owned()),
        Err(reason) => {
            tracing::info!(%reason, "health check failed");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {reason}\n"),
            )
        }
    }
}

/// Go's `http.NotFound`.
pub fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned())
}

/// A `text/plain` response as Go's `http.Error` writes it (with `X-Content-Type-Options:
/// nosniff` on errors).
pub fn text(status: StatusCode, body: String) -> Response {
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response();
    if !status.is_success() {
        response.headers_mut().insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
    }
    response
}

/// Backlog of the diagnostics listener: as large as the kernel allows (`listen(2)` caps it at
/// `net.core.somaxconn`), which is what Go's `net.Listen` asks for. tokio's
/// `TcpListener::bind` asks for 128 (mio copies Rust's standard library); 2,000 liveness
/// probes at once (`chaos --node-fault=flood`) overflowed it, and the connects left out waited
/// for the kernel's 1 s SYN retransmission: answers of up to 1.5 s from a healthy driver, 0.3 s
/// with this backlog.
const BACKLOG: u32 = 0x7fff_ffff;

/// Binds the first address `address` resolves to that can be bound, and listens with
/// [`BACKLOG`].
async fn listen_on(address: impl tokio::net::ToSocketAddrs) -> std::io::Result<TcpListener> {
    let mut last = None;
    // Every step can fail for one address and not the next (no IPv6 in the kernel, for one),
    // so, as `TcpListener::bind` does, each error only moves on to the next address.
    let listen_at = |addr: SocketAddr| -> std::io::Result<TcpListener> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // As `TcpListener::bind` does on Unix: a restarted sidecar binds its port again at
        // once, whatever connections of the old one are still in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(BACKLOG)
    };
    for addr in tokio::net::lookup_host(address).await? {
        match listen_at(addr) {
            Ok(listener) => return Ok(listener),
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "could not resolve to any address",
        )
    }))
}

/// A bound diagnostics listener, not yet serving.
///
/// Binding is separate from serving so that `main` can fail at start-up on a bad or busy
/// address before it connects to the driver, as upstream does.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
}

impl Listener {
    /// Binds a Go-style listen address: `host:port`, `[v6]:port`, or `:port` (all interfaces).
    ///
    /// # Errors
    /// [`Error::InvalidAddress`] if there is no port, [`Error::Listen`] if binding fails.
    pub async fn bind(address: &str) -> Result<Self> {
        let (host, port) = address
            .rsplit_once(':')
            .filter(|(_, port)| port.parse::<u16>().is_ok())
            .ok_or_else(|| Error::InvalidAddress {
                address: address.to_owned(),
            })?;
        let listen = |source| Error::Listen {
            address: address.to_owned(),
            source,
        };
        let listener = if host.is_empty() {
            // Go's ":port" listens on every address; prefer the dual-stack wildcard and fall
            // back to IPv4 where IPv6 is disabled (common in pods).
            match listen_on(format!("[::]:{port}")).await {
                Ok(l) => l,
                Err(_) => listen_on(format!("0.0.0.0:{port}")).await.map_err(listen)?,
            }
        } else {
            listen_on(address).await.map_err(listen)?
        };
        Ok(Self { listener })
    }

    /// The address actually bound (useful with port 0 in tests).
    ///
    /// # Errors
    /// If the socket has no local address (not expected for a bound TCP socket).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener.local_addr().map_err(Error::Serve)
    }

    /// Serves `router` until `shutdown` resolves.
    ///
    /// # Errors
    /// If the server fails with an I/O error.
    pub async fn serve(
        self,
        router: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        axum::serve(self.listener.tap_io(without_nagle), router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(Error::Serve)
    }
}

/// Turns Nagle's algorithm off on an accepted connection, as the Go HTTP server of the upstream
/// sidecars does on every TCP connection (net.TCPConn, SetNoDelay's default): with it on, a
/// response written in two pieces (headers, then a body) waits for the scraper's or kubelet's
/// delayed ACK of the first, up to 40 ms on Linux.
fn without_nagle(connection: &mut TcpStream) {
    if let Err(e) = connection.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::ProcessMetrics;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(router: Router, path: &str) -> (StatusCode, Option<String>, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    /// A listener that is not accepting yet still completes every connect its backlog holds;
    /// with tokio's 128, the 129th and later SYNs are dropped and the connects wait a second
    /// for their retransmission. Needs `net.core.somaxconn` above 300 (Linux's default has
    /// been 4096 since 5.4).
    #[tokio::test]
    async fn connects_beyond_128_are_held_in_the_backlog() {
        let listener = Listener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..300).map(|_| {
            tokio::time::timeout(
                std::time::Duration::from_millis(500),
                tokio::net::TcpStream::connect(addr),
            )
        });
        let results = futures::future::join_all(connects).await;
        let completed = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
        assert_eq!(completed, 300);
    }

    #[tokio::test]
    async fn metrics_are_served_on_the_configured_path_with_upstream_content_type() {
        let metrics = CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap();
        let router = router(Some((metrics, "/custom-metrics")), None);
        let (status, content_type, body) = get(router.clone(), "/custom-metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some(TEXT_CONTENT_TYPE));
        assert!(body.contains("process_start_time_seconds"));
        let (status, _, body) = get(router, "/metrics").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body, "404 page not found\n");
    }

    #[tokio::test]
    async fn leader_election_health_reports_ok_or_a_go_style_500() {
        let healthy: HealthCheck = Arc::new(|| Ok(()));
        let (status, _, body) = get(router(None, Some(healthy)), LEADER_ELECTION_HEALTH_PATH).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));

        let wedged: HealthCheck =
            Arc::new(|| Err("failed election to renew leadership on lease x".into()));
        let (status, content_type, body) =
            get(router(None, Some(wedged)), LEADER_ELECTION_HEALTH_PATH).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(content_type.as_deref(), Some("text/plain; charset=utf-8"));
        assert_eq!(
            body,
            "internal server error: failed election to renew leadership on lease x\n"
        );
    }

    #[tokio::test]
    async fn leader_election_path_is_absent_without_leader_election() {
        let (status, _, _) = get(router(None, None), LEADER_ELECTION_HEALTH_PATH).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn bind_accepts_go_style_addresses_and_rejects_others() {
        let listener = Listener::bind("127.0.0.1:0").await.unwrap();
        assert!(listener.local_addr().unwrap().port() > 0);
        let listener = Listener::bind(":0").await.unwrap();
        assert!(listener.local_addr().unwrap().port() > 0);
        assert!(matches!(
            Listener::bind("localhost").await,
            Err(Error::InvalidAddress { .. })
        ));
        let taken = Listener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        assert!(matches!(
            Listener::bind(&addr.to_string()).await,
            Err(Error::Listen { .. })
        ));
    }

    #[tokio::test]
    async fn accepted_connections_have_nagles_algorithm_off_as_in_go() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, _client) = tokio::join!(listener.accept(), TcpStream::connect(addr));
        let (mut connection, _) = accepted.unwrap();
        assert!(!connection.nodelay().unwrap(), "tokio's default");
        without_nagle(&mut connection);
        assert!(connection.nodelay().unwrap());
    }
}
