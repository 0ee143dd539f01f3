//! The Kubernetes client builder: client-go's token-bucket rate limit inside a real
//! `kube::Client` stack (paused clock, in-process server), and `client()` end to end against a
//! local HTTP server named by a kubeconfig file.

// Helpers outside #[test] functions, where clippy's allow-unwrap-in-tests does not reach.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::USER_AGENT;
use csi_common::kube_client::{self, Error, KubeClientConfig, RateLimitLayer};
use futures::future::join_all;
use kube::client::ClientBuilder;
use tokio::time::{Instant, sleep};

/// When a request arrived, the User-Agent values it carried and its path and query.
type Arrival = (Instant, Vec<String>, String);

/// Records every request the server sees.
#[derive(Clone, Default)]
struct Recorder {
    arrivals: Arc<Mutex<Vec<Arrival>>>,
}

impl Recorder {
    fn router(&self) -> Router {
        Router::new().fallback(record).with_state(self.clone())
    }

    /// Arrival offsets from `start`, in milliseconds, in arrival order.
    fn offsets_ms(&self, start: Instant) -> Vec<u128> {
        self.arrivals
            .lock()
            .unwrap()
            .iter()
            .map(|(at, _, _)| (*at - start).as_millis())
            .collect()
    }

    /// Arrival offsets from `start` in milliseconds, with each request's path and query, in
    /// arrival order.
    fn arrivals_ms(&self, start: Instant) -> Vec<(u128, String)> {
        self.arrivals
            .lock()
            .unwrap()
            .iter()
            .map(|(at, _, uri)| ((*at - start).as_millis(), uri.clone()))
            .collect()
    }

    fn user_agents(&self) -> Vec<Vec<String>> {
        self.arrivals
            .lock()
            .unwrap()
            .iter()
            .map(|(_, ua, _)| ua.clone())
            .collect()
    }

    fn clear(&self) {
        self.arrivals.lock().unwrap().clear();
    }
}

async fn record(State(recorder): State<Recorder>, request: Request) -> &'static str {
    let uri = request.uri().to_string();
    let agents = request
        .headers()
        .get_all(USER_AGENT)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    recorder
        .arrivals
        .lock()
        .unwrap()
        .push((Instant::now(), agents, uri));
    "ok"
}

/// A kube client over the in-process router behind `layer`.
fn limited_client(recorder: &Recorder, layer: &RateLimitLayer) -> kube::Client {
    ClientBuilder::new(recorder.router(), "default")
        .with_layer(layer)
        .build()
}

async fn get(client: &kube::Client) {
    let request = http::Request::get("/healthz").body(Vec::new()).unwrap();
    assert_eq!(client.request_text(request).await.unwrap(), "ok");
}

async fn get_many(client: &kube::Client, n: usize) {
    join_all((0..n).map(|_| get(client))).await;
}

#[tokio::test(start_paused = true)]
async fn a_burst_passes_at_once_and_later_requests_wait_one_over_qps() {
    let recorder = Recorder::default();
    let client = limited_client(&recorder, &RateLimitLayer::new(2.0, 3).unwrap());
    let start = Instant::now();
    get_many(&client, 6).await;
    assert_eq!(recorder.offsets_ms(start), [0, 0, 0, 500, 1000, 1500]);

    // Idle time refills the bucket, never beyond the burst.
    sleep(Duration::from_secs(10)).await;
    recorder.clear();
    let start = Instant::now();
    get_many(&client, 4).await;
    assert_eq!(recorder.offsets_ms(start), [0, 0, 0, 500]);
}

#[tokio::test(start_paused = true)]
async fn a_request_whose_token_was_reserved_takes_no_other() {
    let recorder = Recorder::default();
    let layer = RateLimitLayer::new(2.0, 1).unwrap();
    let client = limited_client(&recorder, &layer);
    let start = Instant::now();
    // The caller takes the only token, then sends its request marked as reserved.
    assert_eq!(layer.reserve(), start);
    let mut request = http::Request::get("/reserved").body(Vec::new()).unwrap();
    request.extensions_mut().insert(kube_client::Reserved);
    assert_eq!(client.request_text(request).await.unwrap(), "ok");
    // Had the layer taken a second token for it, the next would come 1 s in, not 0.5 s.
    assert_eq!(layer.reserve() - start, Duration::from_millis(500));
    // An unmarked request queues behind that reservation.
    get(&client).await;
    assert_eq!(
        recorder.arrivals_ms(start),
        [(0, "/reserved".to_owned()), (1000, "/healthz".to_owned())]
    );
}

#[tokio::test(start_paused = true)]
async fn zero_qps_means_client_go_defaults_of_five_per_second_and_burst_ten() {
    let recorder = Recorder::default();
    let client = limited_client(&recorder, &RateLimitLayer::new(0.0, 0).unwrap());
    let start = Instant::now();
    get_many(&client, 12).await;
    let mut expected = vec![0; 10];
    expected.extend([200, 400]);
    assert_eq!(recorder.offsets_ms(start), expected);

    // QPS 0 with an explicit burst keeps that burst.
    let recorder = Recorder::default();
    let client = limited_client(&recorder, &RateLimitLayer::new(0.0, 2).unwrap());
    let start = Instant::now();
    get_many(&client, 3).await;
    assert_eq!(recorder.offsets_ms(start), [0, 0, 200]);
}

#[tokio::test(start_paused = true)]
async fn negative_or_infinite_qps_disables_the_limit() {
    for layer in [
        RateLimitLayer::new(-1.0, 0).unwrap(),
        RateLimitLayer::new(f32::INFINITY, 1).unwrap(),
        RateLimitLayer::unlimited(),
    ] {
        let recorder = Recorder::default();
        let client = limited_client(&recorder, &layer);
        let start = Instant::now();
        get_many(&client, 50).await;
        assert_eq!(recorder.offsets_ms(start), vec![0; 50]);
    }
}

#[tokio::test(start_paused = true)]
async fn clients_built_from_one_layer_share_its_bucket_and_separate_layers_do_not() {
    let recorder = Recorder::default();
    let shared = RateLimitLayer::new(1.0, 1).unwrap();
    let first = limited_client(&recorder, &shared);
    let second = limited_client(&recorder, &shared);
    let start = Instant::now();
    get(&first).await;
    get(&second).await;
    assert_eq!(recorder.offsets_ms(start), [0, 1000]);

    let recorder = Recorder::default();
    let first = limited_client(&recorder, &RateLimitLayer::new(1.0, 1).unwrap());
    let second = limited_client(&recorder, &RateLimitLayer::new(1.0, 1).unwrap());
    let start = Instant::now();
    get(&first).await;
    get(&second).await;
    assert_eq!(recorder.offsets_ms(start), [0, 0]);
}

async fn send(client: &kube::Client, uri: &str) {
    let request = http::Request::get(uri).body(Vec::new()).unwrap();
    assert_eq!(client.request_text(request).await.unwrap(), "ok");
}

/// client-go's `Request.Watch` skips the rate limiter ("We specifically don't want to rate limit
/// watches"): a watch goes out at once even when the bucket is empty, takes no token from the
/// requests after it, and is not held back by a throttled request queued before it.
#[tokio::test(start_paused = true)]
async fn watches_pass_at_once_and_take_no_token_as_in_client_go() {
    let recorder = Recorder::default();
    let client = limited_client(&recorder, &RateLimitLayer::new(2.0, 2).unwrap());
    let start = Instant::now();
    // Requests are sent in this order (join_all polls them in order); the third GET finds the
    // bucket empty and waits 500 ms, the watches after it do not wait for it.
    join_all([
        send(&client, "/api/v1/nodes"),
        send(&client, "/api/v1/nodes"),
        send(&client, "/api/v1/persistentvolumes"),
        send(
            &client,
            "/api/v1/persistentvolumes?watch=true&sendInitialEvents=true",
        ),
        send(
            &client,
            "/api/v1/persistentvolumeclaims?resourceVersion=5&watch=1",
        ),
        send(&client, "/api/v1/pods"),
    ])
    .await;
    let mut arrivals = recorder.arrivals_ms(start);
    arrivals.sort();
    assert_eq!(
        arrivals,
        [
            (0, "/api/v1/nodes".to_owned()),
            (0, "/api/v1/nodes".to_owned()),
            (
                0,
                "/api/v1/persistentvolumeclaims?resourceVersion=5&watch=1".to_owned()
            ),
            (
                0,
                "/api/v1/persistentvolumes?watch=true&sendInitialEvents=true".to_owned()
            ),
            (500, "/api/v1/persistentvolumes".to_owned()),
            (1000, "/api/v1/pods".to_owned()),
        ]
    );

    // A query that only mentions watch in another parameter is throttled like any request.
    recorder.clear();
    let start = Instant::now();
    send(&client, "/api/v1/pods?labelSelector=watch%3Dtrue").await;
    assert_eq!(recorder.offsets_ms(start), [500]);
}

#[test]
fn invalid_rate_limits_are_rejected_like_client_go() {
    let err = RateLimitLayer::new(5.0, 0).unwrap_err();
    assert!(matches!(err, Error::ZeroBurst { .. }));
    assert_eq!(
        err.to_string(),
        "kube API burst must be greater than 0 when QPS (5) is greater than 0"
    );
    assert!(matches!(
        RateLimitLayer::new(f32::NAN, 10).unwrap_err(),
        Error::QpsNotANumber
    ));
}

/// A local API server on a real TCP port and a kubeconfig file pointing at it.
struct LocalServer {
    recorder: Recorder,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl LocalServer {
    async fn start() -> Self {
        let recorder = Recorder::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = recorder.router();
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubeconfig_yaml(&format!("http://{addr}"), true),
        )
        .unwrap();
        Self {
            recorder,
            kubeconfig,
            _dir: dir,
            task,
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn kubeconfig_yaml(server: &str, with_current_context: bool) -> String {
    let current = if with_current_context {
        "current-context: test\n"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n{current}users:\n- name: test\n  user: {{}}\n"
    )
}

/// The error `client()` returns (kube::Client has no Debug, so no `unwrap_err`).
async fn client_error(config: &KubeClientConfig) -> Error {
    match kube_client::client(config, None).await {
        Ok(_) => panic!("client() unexpectedly succeeded"),
        Err(err) => err,
    }
}

fn config(kubeconfig: Option<&Path>, env: Option<&Path>) -> KubeClientConfig {
    KubeClientConfig {
        kubeconfig: kubeconfig.map(Path::to_owned),
        kubeconfig_env: env.map(Path::to_owned),
        qps: 100.0,
        burst: 100,
        user_agent: "csi-resizer/v2.2.1".to_owned(),
    }
}

#[tokio::test]
async fn client_talks_to_the_kubeconfig_server_with_the_user_agent() {
    let server = LocalServer::start().await;
    let client = kube_client::client(&config(Some(&server.kubeconfig), None), None)
        .await
        .unwrap();
    get(&client).await;
    get(&client).await;
    assert_eq!(
        server.recorder.user_agents(),
        [["csi-resizer/v2.2.1"], ["csi-resizer/v2.2.1"]]
    );
}

#[tokio::test]
async fn kubeconfig_env_overrides_the_flag() {
    let server = LocalServer::start().await;
    let missing = server.kubeconfig.with_file_name("missing");

    // The flag names a missing file, KUBECONFIG the good one: KUBECONFIG wins.
    let client = kube_client::client(&config(Some(&missing), Some(&server.kubeconfig)), None)
        .await
        .unwrap();
    get(&client).await;

    // And the other way round: the missing KUBECONFIG file is the one reported.
    let err = client_error(&config(Some(&server.kubeconfig), Some(&missing))).await;
    assert!(matches!(err, Error::ReadKubeconfig { ref path, .. } if *path == missing));
    assert_eq!(
        err.to_string(),
        format!("cannot read kubeconfig {}", missing.display())
    );
}

#[tokio::test]
async fn a_kubeconfig_without_current_context_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-context");
    std::fs::write(&path, kubeconfig_yaml("http://127.0.0.1:1", false)).unwrap();
    let err = client_error(&config(Some(&path), None)).await;
    assert!(matches!(err, Error::UseKubeconfig { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("cannot use kubeconfig {}", path.display())
    );
}

#[tokio::test]
async fn an_invalid_user_agent_is_rejected() {
    let server = LocalServer::start().await;
    let mut bad = config(Some(&server.kubeconfig), None);
    bad.user_agent = "csi\nagent".to_owned();
    let err = client_error(&bad).await;
    assert!(matches!(err, Error::UserAgent { .. }), "{err:?}");
}

#[tokio::test]
async fn each_client_call_gets_its_own_token_bucket() {
    let server = LocalServer::start().await;
    let slow = KubeClientConfig {
        qps: 2.0,
        burst: 1,
        ..config(Some(&server.kubeconfig), None)
    };
    let main = kube_client::client(&slow, None).await.unwrap();
    let leader_election = kube_client::client(&slow, None).await.unwrap();

    get(&main).await;
    // The main client's bucket is empty now; the second client's is not.
    let start = Instant::now();
    get(&leader_election).await;
    let unthrottled = start.elapsed();
    let start = Instant::now();
    get(&main).await;
    let throttled = start.elapsed();
    assert!(
        throttled >= Duration::from_millis(400),
        "main client waited only {throttled:?}"
    );
    assert!(
        unthrottled < Duration::from_millis(400),
        "second client waited {unthrottled:?}"
    );
}

/// A keep-alive HTTP/1.1 server on a real port that answers every request "ok" and reports each
/// connection the client closes, as kube-apiserver sees an idle client connection go.
async fn closing_observer() -> (String, tokio::sync::mpsc::UnboundedReceiver<()>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (closed_tx, closed_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0_u8; 1024];
                loop {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        let _ = closed_tx.send(());
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    if request.windows(4).any(|w| w == b"\r\n\r\n") {
                        request.clear();
                        stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await
                            .unwrap();
                    }
                }
            });
        }
    });
    (url, closed_rx)
}

/// client-go's transport closes a connection idle for 90 s (`IdleConnTimeout`); kube's own pool
/// has no timer and keeps it forever. Ours closes it once idle for the timeout (shortened here).
#[tokio::test]
async fn an_idle_connection_to_the_api_server_is_closed_after_the_idle_timeout() {
    let (url, mut closed) = closing_observer().await;
    let config = kube::Config::new(url.parse().unwrap());
    let client = kube_client::client_builder_with_idle_timeout(config, Duration::from_millis(200))
        .unwrap()
        .build();
    let request = http::Request::get("/healthz").body(Vec::new()).unwrap();
    assert_eq!(client.request_text(request).await.unwrap(), "ok");
    tokio::time::timeout(Duration::from_secs(30), closed.recv())
        .await
        .expect("the idle connection is still open 30 s later")
        .unwrap();
    // The client still works after the pool let its connection go.
    let request = http::Request::get("/healthz").body(Vec::new()).unwrap();
    assert_eq!(client.request_text(request).await.unwrap(), "ok");
    assert_eq!(
        kube_client::IDLE_CONNECTION_TIMEOUT,
        Duration::from_secs(90)
    );
}

/// A one-shot HTTP/1.1 server on a real port that answers its first request with `response`,
/// written in one piece, as kube-apiserver writes a watch's initial events as fast as the socket
/// takes them.
async fn answering(response: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0_u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert_ne!(n, 0, "the client closed before its request was complete");
            request.extend_from_slice(&buf[..n]);
        }
        // The client may close first when it refuses the answer.
        let _ = stream.write_all(&response).await;
        let _ = stream.shutdown().await;
    });
    url
}

async fn get_text(url: &str) -> Result<String, kube::Error> {
    let client = kube_client::client_builder(kube::Config::new(url.parse().unwrap()))
        .unwrap()
        .build();
    let request = http::Request::get("/apis/x").body(Vec::new()).unwrap();
    client.request_text(request).await
}

/// The read buffer's cap bounds each read, not what a body may hold: one line of 1 MiB (a watch
/// event of an object with a large annotation) in a single chunk, 16 times the cap, arrives whole.
#[tokio::test]
async fn a_body_far_larger_than_the_read_buffer_arrives_whole() {
    let line = format!("{}\n", "x".repeat(16 * kube_client::MAX_READ_BUFFER - 1));
    let mut response =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    response.extend_from_slice(format!("{:x}\r\n{line}\r\n0\r\n\r\n", line.len()).as_bytes());
    let url = answering(response).await;
    assert_eq!(get_text(&url).await.unwrap(), line);
}
