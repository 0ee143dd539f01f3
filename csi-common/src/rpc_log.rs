//! The tower layer every CSI call goes through: the per-call deadline, the
//! `csi_sidecar_operations_seconds` observation, and (at `-v=5`) the sanitized call log.
//!
//! Rust counterpart of csi-lib-utils `connection.LogGRPC` and
//! `ExtendedCSIMetricsManager.RecordMetricsClientInterceptor`, plus the Go context deadline the
//! upstream sidecars put on every call:
//!
//! - **Deadline.** A call ends at the smaller of the connection's call timeout and a `grpc-timeout`
//!   the caller set with `tonic::Request::set_timeout`. The remaining budget is sent to the driver
//!   as `grpc-timeout` (the driver's gRPC server cancels its handler then, as with a Go client), and
//!   when it passes the layer itself answers `DeadlineExceeded` "context deadline exceeded", the
//!   status grpc-go reports for an expired context. tonic alone would report `Cancelled`.
//! - **Metrics.** Exactly one observation per call, labelled with the full method path
//!   (`/csi.v1.Identity/Probe`) and the gRPC code: from a trailers-only response's headers, from the
//!   trailers at the end of the body, `DeadlineExceeded` when the deadline passed, or `Cancelled`
//!   when the caller dropped the call before the status arrived (Go: context canceled). Transport
//!   failures that carry no gRPC status (socket gone, connection refused) are reported and recorded
//!   as `Unavailable`: grpc-go's invoker returns every failure as a status error and turns
//!   connection errors into `codes.Unavailable`, so upstream's interceptor never records
//!   `unknown-non-grpc` for them either.
//! - **Logging.** With call logging on, "GRPC call" (method, request) before the call and
//!   "GRPC response" (response, err) after it. Messages are rendered by
//!   [`proto::sanitize::sanitized_json_by_name`], which replaces every field marked `csi_secret`
//!   with `***stripped***`; a message that cannot be decoded is never logged raw. Bodies are only
//!   buffered while logging is on (CSI calls are unary, so that is one small message each way).
//! - **Fence.** With a [`Fence`] (controller sidecars under leader election), a call that
//!   changes the driver's volumes or snapshots is not sent once the fence has closed: it fails
//!   with `Unavailable` (retryable, never final, so no controller takes it for the driver's
//!   answer) and the [`NotLeading`] text, is logged, and is not observed in the metrics, since
//!   the driver never saw it. Reads (capabilities, capacity, listings) and Identity calls go
//!   on. The check is made after the wait for the connection, when the call would leave; see
//!   the [fence](crate::fence) for why. Upstream has no such check: a leader thawed after a
//!   freeze can still send a call from work scheduled before its renewal task runs.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt as _;
use prost::bytes::Bytes;
use tokio::time::{Instant, Sleep};
use tonic::body::Body;
use tonic::{Code, Status};
use tower::{Layer, Service, ServiceExt as _};

use crate::fence::{Fence, NotLeading};
use crate::metrics::{CsiMetrics, Migrated};

/// The gRPC deadline header (gRPC over HTTP/2 spec: `grpc-timeout`).
pub const GRPC_TIMEOUT_HEADER: &str = "grpc-timeout";

/// The longest deadline the `grpc-timeout` header can carry (8 digits of hours). Call timeouts
/// above it mean "no deadline".
pub const MAX_GRPC_TIMEOUT: Duration = Duration::from_hours(99_999_999);

/// Message of the `DeadlineExceeded` status the layer answers with (Go's `context.DeadlineExceeded`
/// text, which is what upstream sidecars log and put into object status).
pub const DEADLINE_EXCEEDED_MESSAGE: &str = "context deadline exceeded";

const CANCELED_MESSAGE: &str = "context canceled";
const MISSING_STATUS_MESSAGE: &str = "server closed the stream without a grpc-status";
const UNDECODABLE_MESSAGE: &str = "<message cannot be decoded for logging>";

/// The Controller and GroupController methods that only read (CSI spec, "Controller Service
/// RPC" and "Group Controller Service RPC"): the only ones of those two services a replica
/// whose fence has closed still sends. Every other method of theirs creates, deletes,
/// publishes, expands or modifies something, and so does any method a later CSI version adds
/// until it is listed here (a test checks this list against the descriptors in `proto`).
const READ_ONLY_METHODS: [&str; 9] = [
    "/csi.v1.Controller/ValidateVolumeCapabilities",
    "/csi.v1.Controller/ListVolumes",
    "/csi.v1.Controller/GetCapacity",
    "/csi.v1.Controller/ControllerGetCapabilities",
    "/csi.v1.Controller/ListSnapshots",
    "/csi.v1.Controller/GetSnapshot",
    "/csi.v1.Controller/ControllerGetVolume",
    "/csi.v1.GroupController/GroupControllerGetCapabilities",
    "/csi.v1.GroupController/GetVolumeGroupSnapshot",
];

/// Whether a call to `path` changes what the driver holds, so that only the leader may send it.
/// Identity calls (the probes) and Node calls (node sidecars elect no leader) never do.
fn changes_volumes(path: &str) -> bool {
    (path.starts_with("/csi.v1.Controller/") || path.starts_with("/csi.v1.GroupController/"))
        && !READ_ONLY_METHODS.contains(&path)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Whether CSI calls are logged, and how long a logged response may be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallLogging {
    /// No call logging and no body buffering (upstream below `-v=5`).
    #[default]
    Off,
    /// Log every call and response (upstream at `-v=5`).
    On {
        /// Cap on the logged response length (csi-lib-utils `SetMaxGRPCLogLength`); `None` or
        /// `Some(0)` means unlimited, as upstream treats values `<= 0`.
        max_response_length: Option<usize>,
    },
}

/// Builds [`RpcLog`] services; see the module docs.
#[derive(Clone, Debug)]
pub struct RpcLogLayer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    metrics: CsiMetrics,
    call_timeout: Option<Duration>,
    /// `None` when call logging is off.
    log: Option<CallLog>,
    /// `None` when this replica never stops leading (no leader election).
    fence: Option<Fence>,
}

#[derive(Debug)]
struct CallLog {
    max_response_length: Option<usize>,
    types: MessageTypes,
}

impl RpcLogLayer {
    /// A layer recording into `metrics`, ending each call after `call_timeout` (`None`: only the
    /// caller's `grpc-timeout`, if any), logging as `logging` says, and sending the calls that
    /// change volumes only while `fence`, if any, is open.
    pub fn new(
        metrics: CsiMetrics,
        call_timeout: Option<Duration>,
        logging: CallLogging,
        fence: Option<Fence>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                metrics,
                call_timeout,
                fence,
                log: match logging {
                    CallLogging::Off => None,
                    CallLogging::On {
                        max_response_length,
                    } => Some(CallLog {
                        max_response_length,
                        types: MessageTypes::csi(),
                    }),
                },
            }),
        }
    }
}

impl<S> Layer<S> for RpcLogLayer {
    type Service = RpcLog<S>;

    fn layer(&self, inner: S) -> RpcLog<S> {
        RpcLog {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// A gRPC client service with deadline, metrics and logging around `S` (a tonic `Channel` in
/// production). Cheap to clone when `S` is.
#[derive(Clone, Debug)]
pub struct RpcLog<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Service<http::Request<Body>> for RpcLog<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
{
    type Response = http::Response<RpcBody>;
    type Error = Status;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness of the inner service (waiting for a connection) is awaited inside the call,
        // so it counts against the call's deadline and shows up in its duration, as in grpc-go.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let shared = Arc::clone(&self.shared);
        ResponseFuture {
            inner: Box::pin(call(inner, shared, request)),
        }
    }
}

/// The response future of [`RpcLog`].
pub struct ResponseFuture {
    inner: Pin<Box<dyn Future<Output = Result<http::Response<RpcBody>, Status>> + Send>>,
}

impl Future for ResponseFuture {
    type Output = Result<http::Response<RpcBody>, Status>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

async fn call<S>(
    mut inner: S,
    shared: Arc<Shared>,
    mut request: http::Request<Body>,
) -> Result<http::Response<RpcBody>, Status>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Error: Into<BoxError>,
{
    let start = Instant::now();
    let timeout = effective_timeout(shared.call_timeout, request.headers());
    let deadline = timeout.and_then(|timeout| start.checked_add(timeout));
    if let Some(value) = timeout.and_then(encode_grpc_timeout) {
        request.headers_mut().insert(GRPC_TIMEOUT_HEADER, value);
    }
    // tonic hands a `tonic::Request`'s extensions over to the HTTP request.
    let migrated = request.extensions().get::<Migrated>().is_some();
    let mut record = CallRecord::new(
        Arc::clone(&shared),
        request.uri().path().to_owned(),
        start,
        migrated,
    );

    if let Some(log) = &shared.log {
        request = match log_request(&log.types, &record.method, request).await {
            Ok(request) => request,
            Err(status) => {
                record.finish(status.code(), status.message());
                return Err(status);
            }
        };
    }

    let fence = shared
        .fence
        .as_ref()
        .filter(|_| changes_volumes(&record.method));
    let exchange = async {
        inner.ready().await.map_err(transport_status)?;
        if fence.is_some_and(|fence| !fence.is_open()) {
            return Ok(None);
        }
        inner
            .call(request)
            .await
            .map(Some)
            .map_err(transport_status)
    };
    let outcome = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, exchange)
            .await
            .unwrap_or_else(|_elapsed| Err(deadline_exceeded())),
        None => exchange.await,
    };
    let response = match outcome {
        Ok(Some(response)) => response,
        Ok(None) => {
            let status = Status::unavailable(NotLeading.to_string());
            tracing::debug!(method = %record.method, "CSI call not sent: no longer the leader");
            record.finish_unsent(status.code(), status.message());
            return Err(status);
        }
        Err(status) => {
            record.finish(status.code(), status.message());
            return Err(status);
        }
    };

    let (parts, body) = response.into_parts();
    if let Some(status) = Status::from_header_map(&parts.headers) {
        // Trailers-only response: the status is all there is.
        record.finish(status.code(), status.message());
    } else if parts.status != StatusCode::OK {
        let message = format!("unexpected HTTP status {}", parts.status);
        record.finish(code_from_http_status(parts.status), &message);
    }
    let body = RpcBody {
        inner: body,
        record,
        deadline: deadline.map(|deadline| Box::pin(tokio::time::sleep_until(deadline))),
        expired: false,
    };
    Ok(http::Response::from_parts(parts, body))
}

/// Buffers the (unary) request body, logs it, and rebuilds the request.
async fn log_request(
    types: &MessageTypes,
    method: &str,
    request: http::Request<Body>,
) -> Result<http::Request<Body>, Status> {
    let (parts, body) = request.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let rendered = render_message(types.get(method, Direction::Request), &bytes);
    // klog V(5) is TRACE in this workspace (crate::logging).
    tracing::trace!(method = %method, request = %rendered, "GRPC call");
    let body = Body::new(http_body_util::Full::new(bytes));
    Ok(http::Request::from_parts(parts, body))
}

/// The response body of [`RpcLog`]: passes the driver's frames through, finishes the call's
/// record when the status arrives, and ends the call at its deadline.
pub struct RpcBody {
    inner: Body,
    record: CallRecord,
    deadline: Option<Pin<Box<Sleep>>>,
    expired: bool,
}

impl fmt::Debug for RpcBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RpcBody")
            .field("method", &self.record.method)
            .field("expired", &self.expired)
            .finish_non_exhaustive()
    }
}

impl HttpBody for RpcBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.record.observe_data(data);
                } else if let Some(trailers) = frame.trailers_ref() {
                    match Status::from_header_map(trailers) {
                        Some(status) => this.record.finish(status.code(), status.message()),
                        None => this.record.finish(Code::Unknown, MISSING_STATUS_MESSAGE),
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(status))) => {
                this.record.finish(status.code(), status.message());
                Poll::Ready(Some(Err(status)))
            }
            Poll::Ready(None) => {
                // A no-op when the status already came (trailers or trailers-only headers).
                this.record.finish(Code::Unknown, MISSING_STATUS_MESSAGE);
                Poll::Ready(None)
            }
            Poll::Pending => {
                let Some(deadline) = this.deadline.as_mut() else {
                    return Poll::Pending;
                };
                if deadline.as_mut().poll(cx).is_pending() || this.record.finished {
                    return Poll::Pending;
                }
                this.expired = true;
                let status = deadline_exceeded();
                this.record.finish(status.code(), status.message());
                Poll::Ready(Some(Err(status)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.expired {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        }
    }
}

/// One call's metric observation and response log, made exactly once: when the status is known,
/// or on drop (the caller gave up: `Cancelled`, like a cancelled Go context).
struct CallRecord {
    shared: Arc<Shared>,
    method: String,
    start: Instant,
    /// The call was marked [`Migrated`] (its metric's `migrated` label).
    migrated: bool,
    finished: bool,
    /// The gRPC-framed response bytes seen so far; only filled while logging.
    response: Vec<u8>,
}

impl CallRecord {
    fn new(shared: Arc<Shared>, method: String, start: Instant, migrated: bool) -> Self {
        Self {
            shared,
            method,
            start,
            migrated,
            finished: false,
            response: Vec::new(),
        }
    }

    fn observe_data(&mut self, data: &Bytes) {
        if !self.finished && self.shared.log.is_some() {
            self.response.extend_from_slice(data);
        }
    }

    fn finish(&mut self, code: Code, message: &str) {
        if self.finished {
            return;
        }
        self.shared.metrics.record_operation(
            &self.method,
            Some(code),
            self.start.elapsed(),
            self.migrated,
        );
        self.end(code, message);
    }

    /// Ends a call the driver never saw: logged like any other, but not observed (upstream's
    /// interceptor observes only what it sent).
    fn finish_unsent(&mut self, code: Code, message: &str) {
        if !self.finished {
            self.end(code, message);
        }
    }

    fn end(&mut self, code: Code, message: &str) {
        self.finished = true;
        if let Some(log) = &self.shared.log {
            let message_type = log.types.get(&self.method, Direction::Response);
            let rendered = render_message(message_type, &self.response);
            let response = cap_log_length(rendered, log.max_response_length);
            let err = go_error_text(code, message);
            tracing::trace!(method = %self.method, response = %response, err = %err, "GRPC response");
        }
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        self.finish(Code::Cancelled, CANCELED_MESSAGE);
    }
}

/// The status for a call whose deadline passed.
fn deadline_exceeded() -> Status {
    Status::deadline_exceeded(DEADLINE_EXCEEDED_MESSAGE)
}

/// Maps an error of the inner service (tonic transport) to the status the caller sees.
fn transport_status(err: impl Into<BoxError>) -> Status {
    let err = err.into();
    // tonic's own grpc-timeout handling fires at the same instant as ours and reports
    // `Cancelled`; the call ran out of time, which grpc-go reports as DeadlineExceeded.
    if error_chain_has::<tonic::TimeoutExpired>(&*err) {
        return deadline_exceeded();
    }
    // grpc-go returns connection-level failures as codes.Unavailable; tonic does too for failed
    // dials (ConnectError) but leaves some closed-connection errors without a code.
    Status::try_from_error(err).unwrap_or_else(|err| Status::unavailable(err.to_string()))
}

fn error_chain_has<E: std::error::Error + 'static>(
    err: &(dyn std::error::Error + 'static),
) -> bool {
    let mut current = Some(err);
    while let Some(err) = current {
        if err.is::<E>() {
            return true;
        }
        current = err.source();
    }
    false
}

/// gRPC code for a non-200 HTTP response without grpc-status (gRPC's
/// `http-grpc-status-mapping.md`).
fn code_from_http_status(status: StatusCode) -> Code {
    match status {
        StatusCode::BAD_REQUEST => Code::Internal,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::Unimplemented,
        StatusCode::TOO_MANY_REQUESTS
        | StatusCode::BAD_GATEWAY
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// How grpc-go prints a status error (`status.Error.Error()`), which upstream's log shows as
/// `err`; `<nil>` for success.
fn go_error_text(code: Code, message: &str) -> String {
    if code == Code::Ok {
        "<nil>".to_owned()
    } else {
        crate::status::CsiError::status(code, message).to_string()
    }
}

/// The smaller of the connection's call timeout and a valid `grpc-timeout` the caller set.
fn effective_timeout(call_timeout: Option<Duration>, headers: &HeaderMap) -> Option<Duration> {
    let requested = headers
        .get(GRPC_TIMEOUT_HEADER)
        .and_then(parse_grpc_timeout);
    match (call_timeout, requested) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parses a `grpc-timeout` value: 1 to 8 ASCII digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
fn parse_grpc_timeout(value: &HeaderValue) -> Option<Duration> {
    let value = value.to_str().ok()?;
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Encodes a timeout in the most precise unit that fits the header's 8 digits (as grpc-go and
/// tonic do); `None` when it exceeds [`MAX_GRPC_TIMEOUT`].
fn encode_grpc_timeout(timeout: Duration) -> Option<HeaderValue> {
    const MAX_DIGITS: u128 = 99_999_999;
    let units: [(u128, char); 6] = [
        (timeout.as_nanos(), 'n'),
        (timeout.as_micros(), 'u'),
        (timeout.as_millis(), 'm'),
        (u128::from(timeout.as_secs()), 'S'),
        (u128::from(timeout.as_secs() / 60), 'M'),
        (u128::from(timeout.as_secs() / 3600), 'H'),
    ];
    let (amount, unit) = units
        .into_iter()
        .find(|(amount, _)| *amount <= MAX_DIGITS)?;
    HeaderValue::from_str(&format!("{amount}{unit}")).ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Request,
    Response,
}

/// Renders the first gRPC message in `framed`, of protobuf type `message_type`, as sanitized
/// JSON. An absent message renders as `{}` (upstream logs the empty reply of a failed call that
/// way).
fn render_message(message_type: Option<&str>, framed: &[u8]) -> String {
    let Some(payload) = first_message(framed) else {
        return if framed.is_empty() {
            "{}".to_owned()
        } else {
            UNDECODABLE_MESSAGE.to_owned()
        };
    };
    message_type
        .and_then(|name| proto::sanitize::sanitized_json_by_name(name, payload))
        .unwrap_or_else(|| UNDECODABLE_MESSAGE.to_owned())
}

/// The payload of the first length-prefixed gRPC message, if complete and uncompressed (the
/// channel never enables compression).
fn first_message(framed: &[u8]) -> Option<&[u8]> {
    let (&compressed, rest) = framed.split_first()?;
    let (length, rest) = rest.split_first_chunk::<4>()?;
    let length = usize::try_from(u32::from_be_bytes(*length)).ok()?;
    if compressed != 0 {
        return None;
    }
    rest.get(..length)
}

/// Full protobuf names of each gRPC method's input and output messages, keyed by path
/// (`/csi.v1.Identity/Probe` -> `csi.v1.ProbeRequest`, `csi.v1.ProbeResponse`).
#[derive(Debug, Default)]
struct MessageTypes {
    by_path: HashMap<String, (String, String)>,
}

impl MessageTypes {
    /// The table for every service in proto's descriptor set (CSI and plugin registration).
    fn csi() -> Self {
        let Ok(pool) = prost_reflect::DescriptorPool::decode(proto::FILE_DESCRIPTOR_SET) else {
            // Only a broken build of `proto` gets here; calls are then logged without bodies.
            tracing::warn!("CSI descriptors cannot be decoded; gRPC messages will not be logged");
            return Self::default();
        };
        let by_path = pool
            .services()
            .flat_map(|service| {
                let prefix = format!("/{}/", service.full_name());
                service
                    .methods()
                    .map(|method| {
                        (
                            format!("{prefix}{}", method.name()),
                            (
                                method.input().full_name().to_owned(),
                                method.output().full_name().to_owned(),
                            ),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        Self { by_path }
    }

    fn get(&self, path: &str, direction: Direction) -> Option<&str> {
        let (input, output) = self.by_path.get(path)?;
        Some(match direction {
            Direction::Request => input,
            Direction::Response => output,
        })
    }
}

/// Caps a logged response like csi-lib-utils' `LogGRPC`: the first `max` bytes (cut back to a
/// character boundary) and a note saying so.
fn cap_log_length(rendered: String, max: Option<usize>) -> String {
    match max {
        Some(max) if max > 0 && rendered.len() > max => {
            let mut cut = max;
            while !rendered.is_char_boundary(cut) {
                cut -= 1;
            }
            format!(
                "{} [response body too large, log capped to {max} chars]",
                &rendered[..cut]
            )
        }
        _ => rendered,
    }
}

#[cfg(test)]
mod tests;
