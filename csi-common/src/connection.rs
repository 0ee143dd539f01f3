//! The connection to the CSI driver: `--csi-address` parsing, connecting with upstream's timing,
//! the connection-loss signal, and the channel type the generated clients run on.
//!
//! Rust counterpart of csi-lib-utils `connection.Connect` (v0.24):
//!
//! - Only unix sockets are supported. Upstream sends other targets to gRPC's resolver, but every
//!   controller sidecar registers a connection-loss callback, which upstream only allows for
//!   `unix://` addresses, so in practice only sockets work; rejecting the rest at start-up gives
//!   one clear error instead of a late one.
//! - [`connect`] waits for the socket: it retries with a backoff capped at 1 s (grpc-go
//!   `MaxDelay`), logs "Still connecting" with the address every 10 s, and gives up after
//!   [`ConnectOptions::connect_timeout`] (upstream: 30 s; livenessprobe: none) with an error that
//!   reads "context deadline exceeded", like Go's.
//! - No TLS, HTTP/2 over the socket, no idle timeout: the connection stays open between calls.
//! - Connection loss: the dialer notices a *re*-dial after a successful connection, logs
//!   "Lost connection" (error, with the address) and resolves [`ConnectionLoss`]. Whether that
//!   ends the process (controller sidecars: exit 1 after writing `/dev/termination-log`) or is
//!   ignored (livenessprobe, registrar: the channel simply reconnects) is the binary's decision.
//!   tonic re-dials when the next call needs the connection, so a loss is noticed by the first
//!   call after the driver went away.
//! - A shutdown is not a loss: once the binary calls [`ConnectionLoss::expect_close`] (on
//!   SIGTERM, which kubelet sends the driver container at the same moment, or at once for a
//!   single-use connection), the connection ending is logged at debug level only and the loss
//!   signal stays unresolved.
//! - Every call runs through [`crate::rpc_log`]: deadline, metrics and `-v=5` call logging.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};
use tower::Layer as _;

use crate::fence::Fence;
use crate::metrics::CsiMetrics;
use crate::rpc_log::{CallLogging, MAX_GRPC_TIMEOUT, RpcLog, RpcLogLayer};

/// How often a pending [`connect`] logs "Still connecting" (csi-lib-utils
/// `connectionLoggingInterval`).
pub const STILL_CONNECTING_INTERVAL: Duration = Duration::from_secs(10);

/// The longest wait between two connection attempts (csi-lib-utils sets grpc-go's backoff
/// `MaxDelay` to one second).
pub const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(1);

/// The first wait between connection attempts; it doubles up to [`MAX_CONNECT_BACKOFF`]. Shorter
/// than grpc-go's 1 s base delay so that a driver starting next to the sidecar is found quickly.
const INITIAL_CONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// Bound on one connection attempt (dial plus HTTP/2 handshake), grpc-go's minimum connect
/// timeout: a socket whose owner accepts but never answers must not stall the retries.
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);

const UNIX_SCHEME: &str = "unix://";

/// The largest header block (the driver's response headers and trailers, `grpc-message`
/// included) the client accepts: grpc-go's client default (`defaultClientMaxHeaderListSize`,
/// 16 MiB). hyper's own default is 16 KiB, and a driver error message longer than that broke
/// the whole connection, so the sidecar exited on "Lost connection" and, restarted, met the
/// same error again; upstream's client takes such a message as the call's error.
const MAX_HEADER_LIST_SIZE: u32 = 16 << 20;

/// The endpoint every driver connection is made from. Its URI only supplies :authority (the
/// connector ignores it); grpc-go uses "localhost" for unix targets.
fn endpoint() -> Endpoint {
    Endpoint::from_static("http://localhost").http2_max_header_list_size(MAX_HEADER_LIST_SIZE)
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--csi-address` is not an absolute socket path or `unix:///absolute/path`.
    #[error("invalid CSI address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No connection was established within the connect timeout. The text is Go's
    /// `context.DeadlineExceeded` message, which livenessprobe serves as its `/healthz` body.
    #[error("context deadline exceeded")]
    ConnectTimeout {
        /// The address that could not be reached.
        address: CsiAddress,
        /// The connect timeout that passed.
        timeout: Duration,
    },
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The driver's unix socket, parsed from `--csi-address`.
///
/// Accepted forms: an absolute path (`/run/csi/socket`) or `unix://` followed by one
/// (`unix:///run/csi/socket`). Displayed as `unix:///path`, the form upstream logs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CsiAddress {
    path: PathBuf,
}

impl CsiAddress {
    /// Parses a `--csi-address` value.
    ///
    /// # Errors
    /// [`Error::InvalidAddress`] for an empty value, a relative path, `unix://` with a relative
    /// or empty path, and any other scheme (`tcp://`, `dns:`, `unix:` without `//`, ...).
    pub fn parse(address: &str) -> Result<Self> {
        let invalid = |reason| Error::InvalidAddress {
            address: address.to_owned(),
            reason,
        };
        let path = if let Some(path) = address.strip_prefix(UNIX_SCHEME) {
            if path.is_empty() {
                return Err(invalid("unix:// address without a socket path"));
            }
            if !path.starts_with('/') {
                return Err(invalid(
                    "unix:// address with a relative path; use unix:///absolute/path",
                ));
            }
            path
        } else if address.starts_with('/') {
            address
        } else if address.is_empty() {
            return Err(invalid("empty address"));
        } else if address.contains(':') {
            return Err(invalid(
                "only unix sockets are supported (an absolute path or unix:///absolute/path)",
            ));
        } else {
            return Err(invalid(
                "relative socket path; use an absolute path or unix:///absolute/path",
            ));
        };
        Ok(Self {
            path: PathBuf::from(path),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl FromStr for CsiAddress {
    type Err = Error;

    fn from_str(address: &str) -> Result<Self> {
        Self::parse(address)
    }
}

impl fmt::Display for CsiAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{UNIX_SCHEME}{}", self.path.display())
    }
}

/// How [`connect`] connects and how the resulting channel behaves.
///
/// `Default` gives upstream's defaults: a 30 s connect timeout, no per-call deadline beyond what
/// callers set on each request, no call logging.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// How long to wait for the driver socket; `None` waits forever (livenessprobe at start-up).
    /// Upstream default: 30 s ([`ConnectOptions::DEFAULT_CONNECT_TIMEOUT`]).
    pub connect_timeout: Option<Duration>,
    /// Deadline of every call (sidecars pass `--timeout`). A caller's smaller
    /// `tonic::Request::set_timeout` wins. Values above the gRPC maximum
    /// ([`ConnectOptions::NO_CALL_TIMEOUT`]) mean no deadline.
    pub call_timeout: Duration,
    /// Cap on logged responses (csi-lib-utils `SetMaxGRPCLogLength`); `None` or `Some(0)`:
    /// unlimited.
    pub max_grpc_log_length: Option<usize>,
    /// Log every call and response, secrets stripped (upstream does at `-v=5` and above).
    pub log_calls: bool,
    /// The leader's fence: calls that change volumes are not sent once it has closed (see
    /// [`crate::rpc_log`]). `None` for sidecars that elect no leader.
    pub fence: Option<Fence>,
}

impl ConnectOptions {
    /// csi-lib-utils' connect timeout (`WithTimeout(30s)` in `Connect`).
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

    /// A call timeout meaning "no deadline" (upstream's connection adds none of its own).
    pub const NO_CALL_TIMEOUT: Duration = Duration::MAX;

    /// Sets [`ConnectOptions::connect_timeout`].
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`ConnectOptions::call_timeout`].
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets [`ConnectOptions::max_grpc_log_length`].
    #[must_use]
    pub fn with_max_grpc_log_length(mut self, length: Option<usize>) -> Self {
        self.max_grpc_log_length = length;
        self
    }

    /// Sets [`ConnectOptions::log_calls`]; `verbosity >= 5` is upstream's rule.
    #[must_use]
    pub fn with_call_logging(mut self, log_calls: bool) -> Self {
        self.log_calls = log_calls;
        self
    }

    /// Sets [`ConnectOptions::fence`].
    #[must_use]
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    fn call_logging(&self) -> CallLogging {
        if self.log_calls {
            CallLogging::On {
                max_response_length: self.max_grpc_log_length,
            }
        } else {
            CallLogging::Off
        }
    }

    fn call_deadline(&self) -> Option<Duration> {
        (self.call_timeout <= MAX_GRPC_TIMEOUT).then_some(self.call_timeout)
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Some(Self::DEFAULT_CONNECT_TIMEOUT),
            call_timeout: Self::NO_CALL_TIMEOUT,
            max_grpc_log_length: None,
            log_calls: false,
            fence: None,
        }
    }
}

/// The channel every CSI client runs on: tonic's channel behind the [`crate::rpc_log`] layer.
///
/// ```no_run
/// # async fn example(conn: csi_common::connection::Connection) {
/// use proto::csi::v1::identity_client::IdentityClient;
/// let mut client = IdentityClient::new(conn.channel());
/// # }
/// ```
pub type CsiChannel = RpcLog<Channel>;

/// An established connection to the driver. Cheap to clone; all clones share one HTTP/2
/// connection.
#[derive(Clone, Debug)]
pub struct Connection {
    channel: CsiChannel,
    address: CsiAddress,
    /// While any clone of the connection lives, a closed socket is a loss; once the caller
    /// dropped every clone, the socket closing is just the end of the connection.
    _in_use: Arc<()>,
}

impl Connection {
    /// A channel for a generated client (`IdentityClient::new(conn.channel())`).
    pub fn channel(&self) -> CsiChannel {
        self.channel.clone()
    }

    /// The driver's address.
    pub fn address(&self) -> &CsiAddress {
        &self.address
    }
}

/// Resolves once the connection to the driver was lost (the first re-dial after a successful
/// connection), and stays resolved.
///
/// It never resolves if every [`Connection`] clone is dropped before a loss. Clones observe the
/// same loss.
pub struct ConnectionLoss {
    lost: watch::Receiver<bool>,
    close_expected: Arc<AtomicBool>,
    wait: Option<BoxFuture<'static, ()>>,
}

impl ConnectionLoss {
    fn new(lost: watch::Receiver<bool>, close_expected: Arc<AtomicBool>) -> Self {
        Self {
            lost,
            close_expected,
            wait: None,
        }
    }

    /// Whether the connection has been lost by now.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Declares that from now on the connection ending is expected, not a loss: the process is
    /// shutting down (the driver stops with us), or the connection serves one call whose own
    /// failure is the report. The end is logged at debug level, not as the "Lost connection"
    /// error, and this signal (and every clone) stays unresolved. A loss reported before this
    /// call stays reported.
    pub fn expect_close(&self) {
        self.close_expected.store(true, Ordering::SeqCst);
    }
}

impl Clone for ConnectionLoss {
    fn clone(&self) -> Self {
        Self::new(self.lost.clone(), Arc::clone(&self.close_expected))
    }
}

impl fmt::Debug for ConnectionLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionLoss")
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Future for ConnectionLoss {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let lost = &this.lost;
        let wait = this.wait.get_or_insert_with(|| {
            let mut lost = lost.clone();
            Box::pin(async move {
                if lost.wait_for(|lost| *lost).await.is_err() {
                    // The dialer is gone together with the connection: no loss can happen.
                    std::future::pending::<()>().await;
                }
            })
        });
        let poll = wait.as_mut().poll(cx);
        if poll.is_ready() {
            // A completed async block must not be polled again; a fresh one resolves at once.
            this.wait = None;
        }
        poll
    }
}

/// Connects to the driver at `address`, waiting for its socket as upstream does.
///
/// Returns the connection and its loss signal. The connection records every call in `metrics`.
///
/// # Errors
/// [`Error::ConnectTimeout`] when no connection could be made within
/// [`ConnectOptions::connect_timeout`]. Failed attempts in between are retried (socket missing,
/// connection refused, HTTP/2 handshake failure) and logged at debug level.
pub async fn connect(
    address: &CsiAddress,
    options: ConnectOptions,
    metrics: CsiMetrics,
) -> Result<(Connection, ConnectionLoss)> {
    let start = Instant::now();
    let (loss_sender, loss_receiver) = watch::channel(false);
    let loss = LossReport {
        sender: Arc::new(loss_sender),
        close_expected: Arc::new(AtomicBool::new(false)),
    };
    // klog V(5), TRACE here (crate::logging).
    tracing::trace!(address = %address, "Connecting");

    let in_use = Arc::new(());
    let watch_in_use = Arc::downgrade(&in_use);
    let dial = dial_until_connected(address, &loss, &watch_in_use);
    tokio::pin!(dial);
    let give_up = async {
        match options.connect_timeout.and_then(|t| start.checked_add(t)) {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(give_up);
    let mut still_connecting =
        tokio::time::interval_at(start + STILL_CONNECTING_INTERVAL, STILL_CONNECTING_INTERVAL);

    let channel = loop {
        tokio::select! {
            channel = &mut dial => break channel,
            _ = still_connecting.tick() => tracing::info!(address = %address, "Still connecting"),
            () = &mut give_up => {
                return Err(Error::ConnectTimeout {
                    address: address.clone(),
                    timeout: options.connect_timeout.unwrap_or_default(),
                });
            }
        }
    };

    let layer = RpcLogLayer::new(
        metrics,
        options.call_deadline(),
        options.call_logging(),
        options.fence.clone(),
    );
    let connection = Connection {
        channel: layer.layer(channel),
        address: address.clone(),
        _in_use: in_use,
    };
    Ok((
        connection,
        ConnectionLoss::new(loss_receiver, Arc::clone(&loss.close_expected)),
    ))
}

/// One plain connection to a local unix socket: no waiting, retries, metrics, call logging or
/// loss tracking.
///
/// For sockets that are not the CSI driver, such as the registrar checking its own kubelet
/// registration socket, where [`connect`]'s upstream timing would only get in the way.
///
/// # Errors
/// If the socket cannot be connected or the HTTP/2 handshake fails.
pub async fn dial_once(path: &Path) -> std::result::Result<Channel, tonic::transport::Error> {
    let path = path.to_owned();
    endpoint()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}

/// Attempts connections until one succeeds, sleeping with a capped exponential backoff between
/// attempts.
async fn dial_until_connected(
    address: &CsiAddress,
    loss: &LossReport,
    in_use: &Weak<()>,
) -> Channel {
    let endpoint = endpoint();
    let mut backoff = INITIAL_CONNECT_BACKOFF;
    loop {
        // A fresh dialer per attempt: a dial that succeeded during an attempt whose HTTP/2
        // handshake then failed must not count as "have connected" for the next attempt.
        let dialer = Arc::new(Dialer {
            address: address.clone(),
            loss: loss.clone(),
            in_use: in_use.clone(),
            state: Mutex::new(DialState::default()),
        });
        let connector = tower::service_fn(move |_: Uri| Arc::clone(&dialer).dial());
        let attempt = tokio::time::timeout(
            CONNECT_ATTEMPT_TIMEOUT,
            endpoint.connect_with_connector(connector),
        );
        match attempt.await {
            Ok(Ok(channel)) => return channel,
            Ok(Err(err)) => {
                tracing::debug!(address = %address, error = crate::logging::error_chain(&err), "Connection attempt failed");
            }
            Err(_elapsed) => {
                tracing::debug!(address = %address, "Connection attempt timed out");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_CONNECT_BACKOFF);
    }
}

/// Where a dialer reports a loss: the signal, and whether a close is expected by now.
#[derive(Clone)]
struct LossReport {
    sender: Arc<watch::Sender<bool>>,
    close_expected: Arc<AtomicBool>,
}

/// The unix-socket dialer behind one channel; it is where a connection loss shows (csi-lib-utils'
/// custom dialer with `haveConnected` / `lostConnection`).
struct Dialer {
    address: CsiAddress,
    loss: LossReport,
    in_use: Weak<()>,
    state: Mutex<DialState>,
}

#[derive(Default)]
struct DialState {
    have_connected: bool,
    lost: bool,
}

type DialFuture = Pin<Box<dyn Future<Output = io::Result<TokioIo<WatchedStream>>> + Send>>;

impl Dialer {
    fn dial(self: Arc<Self>) -> DialFuture {
        Box::pin(async move {
            {
                let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if state.have_connected {
                    // tonic only re-dials after the previous connection closed; normally the
                    // closed stream has already reported the loss (see `WatchedStream`).
                    drop(state);
                    self.report_loss();
                }
            }
            let stream = UnixStream::connect(self.address.path()).await?;
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.have_connected = true;
            state.lost = false;
            Ok(TokioIo::new(WatchedStream {
                inner: stream,
                dialer: Arc::clone(&self),
            }))
        })
    }

    /// Logs and signals a lost connection, once per established connection; after
    /// [`ConnectionLoss::expect_close`] only notes the close.
    fn report_loss(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.have_connected && !state.lost {
            state.lost = true;
            if self.loss.close_expected.load(Ordering::SeqCst) {
                tracing::debug!(address = %self.address, "Connection closed during shutdown");
                return;
            }
            tracing::error!(address = %self.address, "Lost connection");
            self.loss.sender.send_replace(true);
        }
    }
}

/// The driver socket, watched for the peer closing it.
///
/// grpc-go notices a closed transport at once (its connection goroutine is always reading)
/// and re-dials in the background, which is where csi-lib-utils reports the loss. tonic re-dials
/// lazily, on the next call, so an idle sidecar would not notice a dead driver. hyper's
/// connection task does keep reading the socket, so end-of-file or a read error here is the
/// same moment grpc-go would notice. A connection that hyper closes after the driver's GOAWAY
/// (a graceful server stop) ends without a read of end-of-file, so dropping the stream while the
/// caller still holds the [`Connection`] counts as a loss too.
struct WatchedStream {
    inner: UnixStream,
    dialer: Arc<Dialer>,
}

impl Drop for WatchedStream {
    fn drop(&mut self) {
        if self.dialer.in_use.strong_count() > 0 {
            self.dialer.report_loss();
        }
    }
}

impl tokio::io::AsyncRead for WatchedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let closed = match &polled {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if closed {
            self.dialer.report_loss();
        }
        polled
    }
}

impl tokio::io::AsyncWrite for WatchedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csi_address_accepts_only_absolute_unix_socket_paths() {
        let cases: [(&str, Option<&str>); 13] = [
            ("/run/csi/socket", Some("/run/csi/socket")),
            ("/csi/csi.sock", Some("/csi/csi.sock")),
            ("unix:///csi/csi.sock", Some("/csi/csi.sock")),
            ("unix:////double/slash.sock", Some("//double/slash.sock")),
            ("", None),
            ("csi.sock", None),
            ("./csi.sock", None),
            ("unix://csi.sock", None),
            ("unix://", None),
            ("unix:/csi/csi.sock", None),
            ("tcp://127.0.0.1:10000", None),
            ("dns:///driver.example.com:443", None),
            ("localhost:10000", None),
        ];
        for (input, want) in cases {
            match (CsiAddress::parse(input), want) {
                (Ok(address), Some(path)) => {
                    assert_eq!(address.path(), Path::new(path), "{input:?}");
                }
                (Err(Error::InvalidAddress { address, reason }), None) => {
                    assert_eq!(address, input);
                    assert!(!reason.is_empty());
                }
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn csi_address_displays_as_a_unix_url() {
        let address: CsiAddress = "/csi/csi.sock".parse().unwrap();
        assert_eq!(address.to_string(), "unix:///csi/csi.sock");
        let again: CsiAddress = address.to_string().parse().unwrap();
        assert_eq!(again, address);
    }

    #[test]
    fn invalid_address_error_names_the_value_and_the_problem() {
        let err = CsiAddress::parse("tcp://10.0.0.1:9000").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("tcp://10.0.0.1:9000"), "{text}");
        assert!(text.contains("only unix sockets"), "{text}");
        let err = CsiAddress::parse("unix://run/csi.sock").unwrap_err();
        assert!(err.to_string().contains("relative path"), "{err}");
    }

    #[test]
    fn default_options_are_upstreams() {
        let options = ConnectOptions::default();
        assert_eq!(options.connect_timeout, Some(Duration::from_secs(30)));
        assert_eq!(options.call_deadline(), None);
        assert_eq!(options.call_logging(), CallLogging::Off);
        let options = options
            .with_call_timeout(Duration::from_secs(15))
            .with_call_logging(true)
            .with_max_grpc_log_length(Some(100))
            .with_connect_timeout(None);
        assert_eq!(options.connect_timeout, None);
        assert_eq!(options.call_deadline(), Some(Duration::from_secs(15)));
        assert_eq!(
            options.call_logging(),
            CallLogging::On {
                max_response_length: Some(100)
            }
        );
    }
}
