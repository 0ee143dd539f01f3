//! Builds the `kube::Client` a sidecar talks to the API server with: from `--kubeconfig` (or
//! `KUBECONFIG`) or the in-cluster service account, with client-go's client-side rate limit
//! (`--kube-api-qps`, `--kube-api-burst`) and the sidecar's User-Agent.
//!
//! Rust counterpart of csi-lib-utils `config.BuildConfig` plus client-go's `rest.Config` QPS and
//! Burst handling. Every [`client`] call has its own token bucket, so a second client for leader
//! election is not starved by the main client's throttling (upstream builds a dedicated
//! clientset for the same reason).

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderValue;
use http::header::{InvalidHeaderValue, USER_AGENT};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{ClientBuilder, ConfigExt as _, DynBody};
use kube::config::{InClusterError, KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::fence::{Fence, NotLeading};
use tokio::time::Instant;
use tower::ServiceBuilder;
use tower::buffer::Buffer;
use tower::retry::RetryLayer;
use tower::util::BoxService;
use tower::{BoxError, Layer, Service};

/// client-go's QPS when `--kube-api-qps` is 0 (`rest.DefaultQPS`).
pub const DEFAULT_QPS: f32 = 5.0;
/// client-go's burst when `--kube-api-burst` is 0 (`rest.DefaultBurst`).
pub const DEFAULT_BURST: u32 = 10;

/// Errors building a Kubernetes client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig file could not be read or parsed.
    #[error("cannot read kubeconfig {}", path.display())]
    ReadKubeconfig {
        /// The file that failed.
        path: PathBuf,
        /// Why.
        #[source]
        source: KubeconfigError,
    },
    /// The kubeconfig was read but does not yield a usable configuration (no current context,
    /// missing cluster, unreadable certificate files, ...).
    #[error("cannot use kubeconfig {}", path.display())]
    UseKubeconfig {
        /// The file that failed.
        path: PathBuf,
        /// Why.
        #[source]
        source: KubeconfigError,
    },
    /// No kubeconfig was given and the in-cluster configuration (service-account token,
    /// `KUBERNETES_SERVICE_HOST`) is not available.
    #[error("cannot load the in-cluster configuration (no --kubeconfig given)")]
    InCluster(#[source] InClusterError),
    /// The User-Agent is not a valid HTTP header value.
    #[error("invalid user agent {user_agent:?}")]
    UserAgent {
        /// The rejected value.
        user_agent: String,
        /// Why.
        #[source]
        source: InvalidHeaderValue,
    },
    /// QPS is positive but burst is 0 (client-go `NewForConfig` refuses this too).
    #[error("kube API burst must be greater than 0 when QPS ({qps}) is greater than 0")]
    ZeroBurst {
        /// The configured QPS.
        qps: f32,
    },
    /// QPS is not a number.
    #[error("kube API QPS must be a number")]
    QpsNotANumber,
    /// The HTTP client stack (TLS, authentication) could not be built.
    #[error("cannot build the Kubernetes client")]
    Build(#[source] kube::Error),
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed Kubernetes API request, displayed the way client-go prints it.
///
/// Event and condition messages quote API errors, and alert rules match upstream's text. For an
/// error the API server answered with a `Status`, client-go's `StatusError.Error()` is the
/// Status message alone (`secrets "x" not found`), while `kube::Error`'s own `Display` adds
/// `ApiError:`, the reason and a `Debug` dump of the whole Status. Any other error (transport,
/// TLS, a response that does not decode) is shown with its causes joined by `": "`, as Go's
/// wrapped errors read. The text is complete, so [`std::error::Error::source`] is `None` and a
/// chain reporter does not repeat it.
#[derive(Debug)]
pub struct KubeError(pub kube::Error);

impl KubeError {
    /// The HTTP status code the API server answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match &self.0 {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        }
    }
}

impl From<kube::Error> for KubeError {
    fn from(err: kube::Error) -> Self {
        Self(err)
    }
}

impl fmt::Display for KubeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&error_text(&self.0))
    }
}

/// The text of [`KubeError`] for a borrowed error (for logging errors that wrap a
/// `kube::Error`, such as kube-runtime's watcher errors).
pub fn error_text(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status_text(status),
        other => crate::logging::error_chain(other),
    }
}

/// Whether a request that failed with `err` may still have been carried out: it left this
/// process and its answer never came (the connection broke or the request timed out on its
/// way). kube-apiserver commits a write before it answers, so such a write may be stored. An
/// answer from the server, a connection that could not be opened, a request that could not
/// be built, and a write the fence held back ([`NotLeading`]) were
/// not carried out.
pub fn may_have_been_applied(err: &kube::Error) -> bool {
    if matches!(
        err,
        kube::Error::Api(_) | kube::Error::BuildRequest(_) | kube::Error::Auth(_)
    ) {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(hyper_util::client::legacy::Error::is_connect)
            || cause.is::<crate::fence::NotLeading>()
        {
            return false;
        }
        source = cause.source();
    }
    true
}

/// What client-go prints for an error `Status` the API server sent: its message, or for a
/// Status without one, client-go `NewGenericServerResponse`'s fallback.
pub fn status_text(status: &kube::core::Status) -> String {
    if status.message.is_empty() {
        format!(
            "the server responded with the status code {} but did not return more information",
            status.code
        )
    } else {
        status.message.clone()
    }
}

impl std::error::Error for KubeError {}

/// Where to find the API server and how fast to talk to it.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeClientConfig {
    /// `--kubeconfig`; `None` or empty means in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// Value of the `KUBECONFIG` environment variable, read by `main`. When non-empty it
    /// overrides `--kubeconfig` (external-provisioner behaviour, provisioner.md 1b); sidecars
    /// that ignore `KUBECONFIG` upstream pass `None`. It is used as one file path, as upstream
    /// does (no `:`-separated merging).
    pub kubeconfig_env: Option<PathBuf>,
    /// `--kube-api-qps`: sustained requests per second. 0 means client-go's default (5),
    /// negative or infinite means no client-side limit.
    pub qps: f32,
    /// `--kube-api-burst`: requests allowed at once before QPS applies. 0 means client-go's
    /// default (10) when QPS is also 0, and is an error when QPS is positive.
    pub burst: u32,
    /// `User-Agent` of every request, `<binary>/<version>`; the API server records it in audit
    /// logs and as the `managedFields` manager name.
    pub user_agent: String,
}

impl KubeClientConfig {
    /// The kubeconfig file to use, if any: a non-empty `KUBECONFIG` wins over a non-empty
    /// `--kubeconfig`; `None` means in-cluster.
    pub fn kubeconfig_path(&self) -> Option<&Path> {
        non_empty(self.kubeconfig_env.as_deref()).or_else(|| non_empty(self.kubeconfig.as_deref()))
    }
}

fn non_empty(path: Option<&Path>) -> Option<&Path> {
    path.filter(|p| !p.as_os_str().is_empty())
}

/// Loads the connection settings (`kube::Config`) from the kubeconfig file chosen by
/// [`KubeClientConfig::kubeconfig_path`] (its current context) or from the in-cluster service
/// account, and adds the User-Agent header.
pub async fn rest_config(config: &KubeClientConfig) -> Result<kube::Config> {
    let user_agent =
        HeaderValue::from_str(&config.user_agent).map_err(|source| Error::UserAgent {
            user_agent: config.user_agent.clone(),
            source,
        })?;
    let mut kube_config = match config.kubeconfig_path() {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| Error::ReadKubeconfig {
                    path: path.to_owned(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| Error::UseKubeconfig {
                    path: path.to_owned(),
                    source,
                })?
        }
        None => kube::Config::incluster().map_err(Error::InCluster)?,
    };
    kube_config.headers.push((USER_AGENT, user_agent));
    Ok(kube_config)
}

/// Builds a client for `config`: kube's default stack (TLS, authentication, retries of
/// 429/503/504) behind a fresh [`RateLimitLayer`], so every request but a watch takes a token
/// first, as client-go's rate limiter does; with a `fence`, writes stop when it closes (the
/// main client of a sidecar under leader election, see [`layered`]).
///
/// Each call has its own token bucket; call it again for the leader-election client.
pub async fn client(config: &KubeClientConfig, fence: Option<&Fence>) -> Result<kube::Client> {
    let rate_limit = RateLimitLayer::new(config.qps, config.burst)?;
    let kube_config = rest_config(config).await?;
    Ok(layered(client_builder(kube_config)?, &rate_limit, fence))
}

/// The client of `builder` behind `rate_limit` and, when given, a [`FenceLayer`] below the
/// bucket: the fence is checked when a request leaves the bucket, so a write that waited for
/// its token is not sent after leadership ended.
pub fn layered(
    builder: ClientBuilder<GenericService>,
    rate_limit: &RateLimitLayer,
    fence: Option<&Fence>,
) -> kube::Client {
    match fence {
        Some(fence) => builder
            .with_layer(&FenceLayer::new(fence.clone()))
            .with_layer(rate_limit)
            .build(),
        None => builder.with_layer(rate_limit).build(),
    }
}

/// How long an idle connection to the API server stays in the pool: client-go's
/// `IdleConnTimeout` (`utilnet.SetTransportDefaults`).
pub const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per API server: client-go's `MaxIdleConnsPerHost`.
const MAX_IDLE_CONNECTIONS_PER_HOST: usize = 25;

/// hyper's cap on the size of the reads a connection makes, which bounds how far its read
/// buffer grows.
///
/// With hyper's default (408 KiB) each watch that streamed a large initial list grew its buffer
/// to about 0.8 MiB and kept it for the life of the watch: a fresh csi-attacher with 5,000
/// VolumeAttachments and PVs held 1.6 MiB more than one that saw the same objects arrive one by
/// one (docs/bench.md, "The watches' read buffers"). Bodies of any size still pass, read in
/// pieces.
pub const MAX_READ_BUFFER: usize = 64 * 1024;

/// kube's default stack (TLS, timeouts, retries of 429/503/504, authentication, extra headers)
/// over a connection pool that closes idle connections after [`IDLE_CONNECTION_TIMEOUT`] and
/// whose connections size their reads up to [`MAX_READ_BUFFER`].
///
/// kube builds hyper's pool without a timer, and hyper only expires idle connections when it has
/// one: a sidecar kept every connection its busiest moment ever opened (the HTTP/1.1 client opens
/// one per concurrent request), found by the churn run of `chaos`. A proxy setting keeps kube's
/// own stack, which knows the proxy protocols.
///
/// # Errors
/// [`Error::Build`] when the TLS or authentication settings cannot be used.
pub fn client_builder(config: kube::Config) -> Result<ClientBuilder<GenericService>> {
    client_builder_with_idle_timeout(config, IDLE_CONNECTION_TIMEOUT)
}

/// [`client_builder`] with another idle timeout (tests use a short one).
#[doc(hidden)]
pub fn client_builder_with_idle_timeout(
    config: kube::Config,
    idle_timeout: Duration,
) -> Result<ClientBuilder<GenericService>> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config).map_err(Error::Build);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // client-go dials with Go's defaults, Nagle's algorithm off (net.TCPConn); hyper's
    // connector leaves it on, so a request written in pieces would wait for the server's
    // delayed ACK.
    http.set_nodelay(true);
    let https = config
        .rustls_https_connector_with_connector(http)
        .map_err(Error::Build)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let pool = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle_timeout)
        .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS_PER_HOST)
        .http1_max_buf_size(MAX_READ_BUFFER)
        .build::<_, kube::client::Body>(connector);
    let auth = config.auth_layer().map_err(Error::Build)?;
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(auth)
        .layer(config.extra_headers_layer().map_err(Error::Build)?)
        .map_response(|response: http::Response<Incoming>| {
            response.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>)
        })
        .map_err(BoxError::from)
        .service(pool);
    Ok(ClientBuilder::new(
        BoxService::new(service),
        config.default_namespace,
    ))
}

/// The service type kube's own builder produces (`kube::client::builder::GenericService`, not
/// re-exported), so both builders give one type.
pub type GenericService =
    BoxService<http::Request<kube::client::Body>, http::Response<Box<DynBody>>, BoxError>;

/// Refuses every request but a GET (reads, lists and watches) once its [`Fence`] has
/// closed, with [`NotLeading`]; see the fence's documentation for why the check is made
/// here, when the request leaves, and not by the controllers.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    fence: Fence,
}

impl FenceLayer {
    /// A layer checking `fence`.
    pub fn new(fence: Fence) -> Self {
        Self { fence }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Fenced {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// The service built by [`FenceLayer`].
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

impl<S, B> Service<http::Request<B>> for Fenced<S>
where
    S: Service<http::Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.method() != http::Method::GET && !self.fence.is_open() {
            return Box::pin(std::future::ready(Err(Box::new(NotLeading) as BoxError)));
        }
        let response = self.inner.call(request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

/// The share of the burst a request counts as spare only above: a background writer that
/// takes only spare tokens leaves nine tenths of the burst to the controllers, and with the
/// default burst of 10 finds a token spare only in a full bucket (client-go's one Event writer
/// holds one token at most).
const SPARE_SHARE: f64 = 0.9;

/// A token bucket in the reservation style of Go's `golang.org/x/time/rate` (which client-go's
/// `flowcontrol.NewTokenBucketRateLimiter` wraps): it starts full, refills at `qps` tokens per
/// second up to `burst`, and a request that finds no token reserves the next one and waits for
/// it, so waiting requests go out in order, `1/qps` apart.
#[derive(Debug)]
struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// The tokens the bucket holds at `now`: the last count refilled at `qps` up to `burst`
    /// (negative while reservations are ahead).
    fn tokens_at(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        (self.tokens + elapsed * self.qps).min(self.burst)
    }

    /// Takes one token and returns when the request may be sent.
    fn reserve(&mut self, now: Instant) -> Instant {
        self.tokens = self.tokens_at(now);
        self.last = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            return now;
        }
        let wait = Duration::try_from_secs_f64(-self.tokens / self.qps).unwrap_or(Duration::MAX);
        now.checked_add(wait).unwrap_or(now)
    }

    /// Whether a request reserving at `now` would leave [`SPARE_SHARE`] of the burst in the
    /// bucket (takes nothing).
    fn has_spare_token(&self, now: Instant) -> bool {
        self.tokens_at(now) - 1.0 >= self.burst * SPARE_SHARE
    }
}

/// A tower layer that rate-limits requests with a token bucket of client-go's semantics
/// (burst at once, then `qps` per second). Every service wrapped by one layer value draws from
/// the same bucket; build one layer per client.
///
/// tower's own `RateLimit` allows `n` requests per fixed window, which is not the same as a
/// bucket with a burst capacity refilled continuously.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Option<Arc<Mutex<Bucket>>>,
}

impl RateLimitLayer {
    /// A bucket for `--kube-api-qps` / `--kube-api-burst` with client-go's rules: QPS 0 means
    /// 5 (and then burst 0 means 10), negative or infinite QPS disables the limit, positive QPS
    /// with burst 0 is an error.
    pub fn new(qps: f32, burst: u32) -> Result<Self> {
        if qps.is_nan() {
            return Err(Error::QpsNotANumber);
        }
        if qps > 0.0 && burst == 0 {
            return Err(Error::ZeroBurst { qps });
        }
        let (qps, burst) = if qps == 0.0 {
            (DEFAULT_QPS, if burst == 0 { DEFAULT_BURST } else { burst })
        } else {
            (qps, burst)
        };
        if qps < 0.0 || qps.is_infinite() {
            return Ok(Self::unlimited());
        }
        let burst = f64::from(burst);
        Ok(Self {
            bucket: Some(Arc::new(Mutex::new(Bucket {
                qps: f64::from(qps),
                burst,
                tokens: burst,
                last: Instant::now(),
            }))),
        })
    }

    /// A layer that lets every request through at once.
    pub fn unlimited() -> Self {
        Self { bucket: None }
    }

    /// Takes a token for a request the caller sends later, marked [`Reserved`], and returns
    /// when it may be sent (now when a token was free), as every other request would in the
    /// layer. A caller that decides by [`RateLimitLayer::has_spare_token`] whether to make another
    /// request reserves with this, so the next answer already counts that request.
    pub fn reserve(&self) -> Instant {
        let now = Instant::now();
        self.bucket.as_ref().map_or(now, |bucket| {
            bucket
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .reserve(now)
        })
    }

    /// Whether a request made now would leave nine tenths of the burst in the bucket (always,
    /// without a limit): whether a background writer may add a request without taking a token
    /// the controllers are likely to want. Nothing is taken.
    pub fn has_spare_token(&self) -> bool {
        self.bucket.as_ref().is_none_or(|bucket| {
            bucket
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .has_spare_token(Instant::now())
        })
    }
}

impl<S> Layer<S> for RateLimitLayer
where
    S: Service<http::Request<kube::client::Body>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
{
    type Service = RateLimit<Buffer<http::Request<kube::client::Body>, S::Future>>;

    /// Must run inside a tokio runtime: the buffer that lets a throttled request wait without
    /// holding the stack below (see [`RateLimit`]) runs as a task.
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner: Buffer::new(inner, BUFFER_CAPACITY),
            bucket: self.bucket.clone(),
        }
    }
}

/// The extension of a request whose token was taken with [`RateLimitLayer::reserve`]: the
/// layer sends it without taking another.
#[derive(Clone, Copy, Debug)]
pub struct Reserved;

/// Requests queued in front of kube's stack by [`RateLimitLayer`], as many as kube's own client
/// buffer holds.
const BUFFER_CAPACITY: usize = 1024;

/// The service built by [`RateLimitLayer`]: every request except a watch and one marked
/// [`Reserved`] takes a token from the bucket and waits for it before it is sent.
///
/// Watches are let through at once because client-go does so (`rest.Request.Watch` skips the
/// rate limiter: a watch is one long-lived request, and throttling it only delays the stream an
/// informer waits on). Taking tokens for them cost up to a fixed second at start-up: six informers
/// opening LIST + WATCH at the default `--kube-api-qps=5 --kube-api-burst=10` overflow the burst
/// by a handful of requests, each worth 200 ms (issue 13's constant start-to-ready).
///
/// The token is taken in `call`, where the request is known, not in `poll_ready`: kube's client
/// drives this service from one `Buffer` worker, and a `poll_ready` that waited for a token would
/// also hold back the watches queued behind a throttled request. A throttled request's future
/// waits for its reserved instant and then calls the service instance `poll_ready` prepared
/// (tower's clone-and-swap pattern; the layer puts a `Buffer` below so the instance can be
/// cloned), so reservations, and therefore sends, stay in call order.
pub struct RateLimit<S> {
    inner: S,
    bucket: Option<Arc<Mutex<Bucket>>>,
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limited", &self.bucket.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: Clone> Clone for RateLimit<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            bucket: self.bucket.clone(),
        }
    }
}

/// Whether a request is a watch, which client-go never throttles: its query has `watch=true`
/// (what client-go and kube send; kube-apiserver also accepts `1`).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

impl<S, B> Service<http::Request<B>> for RateLimit<S>
where
    S: Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::Either<
        S::Future,
        Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        use futures::future::Either;

        let Some(bucket) = self.bucket.as_ref().filter(|_| {
            !is_watch(request.uri()) && request.extensions().get::<Reserved>().is_none()
        }) else {
            return Either::Left(self.inner.call(request));
        };
        let now = Instant::now();
        let at = bucket
            .lock()
            // The bucket is three numbers updated together; a panic elsewhere cannot leave it
            // half-written.
            .unwrap_or_else(PoisonError::into_inner)
            .reserve(now);
        if at <= now {
            return Either::Left(self.inner.call(request));
        }
        // The instance poll_ready made ready goes into the future; this one keeps a fresh clone
        // for the next poll_ready.
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        Either::Right(Box::pin(async move {
            tokio::time::sleep_until(at).await;
            ready.call(request).await
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn only_the_top_tenth_of_the_burst_is_spare_and_asking_takes_nothing() {
        let layer = RateLimitLayer::new(10.0, 10).unwrap();
        let bucket = layer.bucket.clone().unwrap();
        let take = || bucket.lock().unwrap().reserve(Instant::now());
        assert!(layer.has_spare_token(), "a full bucket");
        assert!(layer.has_spare_token(), "asking takes no token");
        take();
        assert!(
            !layer.has_spare_token(),
            "9 of 10 left: a request would leave 8"
        );
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(!layer.has_spare_token());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(layer.has_spare_token(), "full again 1/qps later");
        for _ in 0..12 {
            take();
        }
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(!layer.has_spare_token(), "a debt of 2 and 5 back: 3");
        tokio::time::advance(Duration::from_millis(700)).await;
        assert!(layer.has_spare_token());
        // With the default burst a spare token needs a full bucket of 10; with burst 1 none
        // is ever spare.
        let small = RateLimitLayer::new(1.0, 1).unwrap();
        assert!(!small.has_spare_token());
        assert!(RateLimitLayer::unlimited().has_spare_token());
    }

    /// A GET of a Secret through a plain kube client at `url`: the error it ends with.
    async fn get_error(url: &str) -> kube::Error {
        let config = kube::Config::new(url.parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client, "default");
        api.get("x").await.expect_err("no API server answers")
    }

    #[tokio::test]
    async fn a_request_is_taken_as_maybe_applied_only_when_it_left_and_no_answer_came() {
        // Nobody listens: the connection is refused, nothing was sent.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let refused = get_error(&format!("http://127.0.0.1:{port}")).await;
        assert!(!may_have_been_applied(&refused), "{refused:?}");

        // The server reads the request and closes the connection without an answer, as a
        // kube-apiserver that stops (or a cut connection) after committing a write.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            use tokio::io::AsyncReadExt as _;
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0_u8; 1024];
            let _ = socket.read(&mut buf).await;
        });
        let cut = get_error(&format!("http://{addr}")).await;
        server.await.unwrap();
        assert!(may_have_been_applied(&cut), "{cut:?}");

        // An answer, and a write the fence held back, were not carried out.
        let answered = kube::Error::Api(Box::new(kube::core::Status {
            code: 500,
            ..kube::core::Status::default()
        }));
        assert!(!may_have_been_applied(&answered));
        let fenced = kube::Error::Service(Box::new(NotLeading));
        assert!(!may_have_been_applied(&fenced));
    }

    #[test]
    fn kube_errors_read_as_client_go_prints_them() {
        let status = |code: u16, message: &str| {
            KubeError(kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: message.to_owned(),
                reason: "NotFound".to_owned(),
                ..kube::core::Status::default()
            })))
        };
        let cases = [
            (
                status(404, r#"secrets "x" not found"#),
                r#"secrets "x" not found"#,
            ),
            (
                status(500, ""),
                "the server responded with the status code 500 but did not return more information",
            ),
            (
                KubeError(kube::Error::LinesCodecMaxLineLengthExceeded),
                "Error finding newline character",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(crate::logging::error_chain(&err), want);
            assert!(!err.to_string().contains("Status {"), "{err}");
        }
        assert_eq!(status(404, "gone").code(), Some(404));
        assert_eq!(
            KubeError(kube::Error::LinesCodecMaxLineLengthExceeded).code(),
            None
        );
    }

    fn config(kubeconfig: Option<&str>, env: Option<&str>) -> KubeClientConfig {
        KubeClientConfig {
            kubeconfig: kubeconfig.map(PathBuf::from),
            kubeconfig_env: env.map(PathBuf::from),
            qps: 5.0,
            burst: 10,
            user_agent: "csi-test/v0".into(),
        }
    }

    #[test]
    fn kubeconfig_env_overrides_the_flag_and_empty_values_count_as_unset() {
        let cases = [
            (None, None, None),
            (Some("/flag"), None, Some("/flag")),
            (None, Some("/env"), Some("/env")),
            (Some("/flag"), Some("/env"), Some("/env")),
            (Some("/flag"), Some(""), Some("/flag")),
            (Some(""), None, None),
            (Some(""), Some(""), None),
        ];
        for (flag, env, expected) in cases {
            assert_eq!(
                config(flag, env).kubeconfig_path(),
                expected.map(Path::new),
                "flag {flag:?}, env {env:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_closed_fence_refuses_writes_and_lets_reads_and_watches_through() {
        use tower::ServiceExt as _;
        let fence = Fence::new();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&sent);
        let inner = tower::service_fn(move |request: http::Request<()>| {
            log.lock().unwrap().push(request.method().clone());
            std::future::ready(Ok::<_, BoxError>(http::Response::new(())))
        });
        let mut service = FenceLayer::new(fence.clone()).layer(inner);
        let request = |method: http::Method, uri: &str| {
            http::Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap()
        };
        let put = || request(http::Method::PUT, "/api/v1/namespaces/ns/pods/p");
        service.ready().await.unwrap().call(put()).await.unwrap();

        fence.close();
        for method in [
            http::Method::PUT,
            http::Method::POST,
            http::Method::PATCH,
            http::Method::DELETE,
        ] {
            let err = service
                .ready()
                .await
                .unwrap()
                .call(request(method.clone(), "/api/v1/namespaces/ns/pods/p"))
                .await
                .unwrap_err();
            assert!(err.is::<NotLeading>(), "{method}: {err}");
        }
        let watch = request(http::Method::GET, "/api/v1/pods?watch=true");
        service.ready().await.unwrap().call(watch).await.unwrap();
        let get = request(http::Method::GET, "/api/v1/namespaces/ns/pods/p");
        service.ready().await.unwrap().call(get).await.unwrap();
        assert_eq!(
            *sent.lock().unwrap(),
            [http::Method::PUT, http::Method::GET, http::Method::GET]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_reserves_tokens_one_over_qps_apart_after_the_burst() {
        let start = Instant::now();
        let mut bucket = Bucket {
            qps: 4.0,
            burst: 2.0,
            tokens: 2.0,
            last: start,
        };
        assert_eq!(bucket.reserve(start), start);
        assert_eq!(bucket.reserve(start), start);
        assert_eq!(bucket.reserve(start), start + Duration::from_millis(250));
        assert_eq!(bucket.reserve(start), start + Duration::from_millis(500));
        // Idle time refills, but never beyond the burst.
        let later = start + Duration::from_mins(1);
        assert_eq!(bucket.reserve(later), later);
        assert_eq!(bucket.reserve(later), later);
        assert_eq!(bucket.reserve(later), later + Duration::from_millis(250));
    }
}
