//! Connection behaviour against real tonic servers on temp-dir unix sockets (csi-lib-utils
//! `connection_test.go` style): waiting for the socket, giving up, loss detection and reconnect,
//! per-call deadlines, and the metrics every call records.

// Test helpers outside #[test] functions unwrap too: a failed set-up step should fail the test
// at the line that broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csi_common::connection::{self, ConnectOptions, Connection, ConnectionLoss, CsiAddress};
use csi_common::metrics::{CsiMetrics, Migrated, ProcessMetrics};
use futures::FutureExt as _;
use proto::csi::v1::identity_client::IdentityClient;
use proto::csi::v1::identity_server::{Identity, IdentityServer};
use proto::csi::v1::{GetPluginInfoRequest, GetPluginInfoResponse, ProbeRequest, ProbeResponse};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Code, Request, Response, Status};

/// Probe answers after `delay` and remembers the `grpc-timeout` it was sent; GetPluginInfo
/// fails with NotFound.
#[derive(Clone, Default)]
struct Driver {
    delay: Duration,
    calls: Arc<AtomicUsize>,
    timeouts: Arc<Mutex<Vec<Option<String>>>>,
}

#[tonic::async_trait]
impl Identity for Driver {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Err(Status::not_found("nothing here"))
    }

    async fn probe(
        &self,
        request: Request<ProbeRequest>,
    ) -> Result<Response<ProbeResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let timeout = request
            .metadata()
            .get("grpc-timeout")
            .map(|v| v.to_str().unwrap().to_owned());
        self.timeouts.lock().unwrap().push(timeout);
        tokio::time::sleep(self.delay).await;
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}

/// A running server; stopping it removes the socket like a driver container going away.
struct Server {
    path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    fn start(path: &Path, driver: Driver) -> Self {
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(IdentityServer::new(driver))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            path: path.to_owned(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .expect("server stops")
                .unwrap();
        }
        std::fs::remove_file(&self.path).unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn socket() -> (tempfile::TempDir, PathBuf, CsiAddress) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let address = CsiAddress::parse(path.to_str().unwrap()).unwrap();
    (dir, path, address)
}

fn metrics() -> CsiMetrics {
    CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap()
}

fn quick() -> ConnectOptions {
    ConnectOptions::default().with_connect_timeout(Some(Duration::from_secs(5)))
}

async fn probe(conn: &Connection) -> Result<ProbeResponse, Status> {
    IdentityClient::new(conn.channel())
        .probe(ProbeRequest {})
        .await
        .map(Response::into_inner)
}

/// The `_count` sample of one series, exactly as upstream labels it.
fn count_line(method: &str, code: &str, count: u64) -> String {
    format!(
        "csi_sidecar_operations_seconds_count{{driver_name=\"unknown-driver\",grpc_status_code=\"{code}\",method_name=\"{method}\"}} {count}"
    )
}

#[tokio::test]
async fn connect_waits_for_a_socket_that_appears_later() {
    let (_dir, path, address) = socket();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        Server::start(&path, Driver::default())
    });
    let start = Instant::now();

    let (conn, _loss) = connection::connect(&address, quick(), metrics())
        .await
        .unwrap();

    assert!(start.elapsed() >= Duration::from_millis(400));
    let _server = late.await.unwrap();
    assert_eq!(probe(&conn).await.unwrap().ready, Some(true));
    assert_eq!(conn.address(), &address);
}

#[tokio::test(start_paused = true)]
async fn connect_gives_up_after_the_timeout_and_says_still_connecting_every_ten_seconds() {
    let (logs, _guard) = csi_common::test_support::logs::capture();
    let (_dir, _path, address) = socket();
    let options = ConnectOptions::default().with_connect_timeout(Some(Duration::from_secs(25)));
    let start = Instant::now();

    let err = connection::connect(&address, options, metrics())
        .await
        .unwrap_err();

    assert_eq!(start.elapsed(), Duration::from_secs(25));
    assert_eq!(err.to_string(), "context deadline exceeded");
    assert!(
        matches!(&err, connection::Error::ConnectTimeout { address: a, timeout }
            if *a == address && *timeout == Duration::from_secs(25)),
        "{err:?}"
    );
    let text = logs.text();
    let still: Vec<_> = text
        .lines()
        .filter(|l| l.contains("Still connecting"))
        .collect();
    assert_eq!(still.len(), 2, "{text}");
    assert!(still[0].contains(&address.to_string()), "{text}");
}

#[tokio::test(start_paused = true)]
async fn default_connect_timeout_is_thirty_seconds() {
    let (_dir, _path, address) = socket();
    let start = Instant::now();

    let err = connection::connect(&address, ConnectOptions::default(), metrics())
        .await
        .unwrap_err();

    assert!(
        matches!(err, connection::Error::ConnectTimeout { .. }),
        "{err:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn connect_without_timeout_keeps_waiting() {
    let (_dir, _path, address) = socket();
    let options = ConnectOptions::default().with_connect_timeout(None);

    let waited = tokio::time::timeout(
        Duration::from_mins(2),
        connection::connect(&address, options, metrics()),
    )
    .await;

    assert!(
        waited.is_err(),
        "connect returned although no socket exists"
    );
}

/// Calls until `loss` resolves, bounded; every call fails while the server is gone.
async fn call_until_lost(conn: &Connection, loss: &mut ConnectionLoss) {
    for _ in 0..20 {
        let status = probe(conn).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        if tokio::time::timeout(Duration::from_millis(100), &mut *loss)
            .await
            .is_ok()
        {
            return;
        }
    }
    panic!("connection loss was not signalled");
}

#[tokio::test]
async fn losing_the_driver_fires_the_loss_once_and_a_restarted_driver_is_reconnected() {
    let (logs, _guard) = csi_common::test_support::logs::capture();
    let (_dir, path, address) = socket();
    let server = Server::start(&path, Driver::default());
    let (conn, mut loss) = connection::connect(&address, quick(), metrics())
        .await
        .unwrap();
    probe(&conn).await.unwrap();
    assert!(!loss.is_lost());
    assert!((&mut loss).now_or_never().is_none());

    server.stop().await;
    call_until_lost(&conn, &mut loss).await;
    // More failing calls do not signal (or log) the loss again.
    for _ in 0..3 {
        assert_eq!(probe(&conn).await.unwrap_err().code(), Code::Unavailable);
    }
    assert!(loss.is_lost());
    assert!(
        loss.clone().now_or_never().is_some(),
        "a clone sees the loss too"
    );

    // Nothing stops the channel from reconnecting when the loss is ignored.
    let _server = Server::start(&path, Driver::default());
    let mut reconnected = false;
    for _ in 0..50 {
        if probe(&conn).await.is_ok() {
            reconnected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reconnected, "no call succeeded after the driver came back");

    let text = logs.text();
    let lost: Vec<_> = text
        .lines()
        .filter(|l| l.contains("Lost connection"))
        .collect();
    assert_eq!(lost.len(), 1, "{text}");
    assert!(lost[0].contains("ERROR"), "{text}");
    assert!(lost[0].contains(&address.to_string()), "{text}");
}

#[tokio::test]
async fn calls_are_recorded_with_method_and_code_labels() {
    let (_dir, path, address) = socket();
    let _server = Server::start(&path, Driver::default());
    let metrics = metrics();
    let (conn, _loss) = connection::connect(&address, quick(), metrics.clone())
        .await
        .unwrap();
    let mut client = IdentityClient::new(conn.channel());

    client.probe(ProbeRequest {}).await.unwrap();
    client.probe(ProbeRequest {}).await.unwrap();
    let status = client
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);

    let text = metrics.render().unwrap();
    assert!(
        text.contains(&count_line("/csi.v1.Identity/Probe", "OK", 2)),
        "{text}"
    );
    assert!(
        text.contains(&count_line("/csi.v1.Identity/GetPluginInfo", "NotFound", 1)),
        "{text}"
    );
    assert_eq!(
        text.matches("csi_sidecar_operations_seconds_count{")
            .count(),
        2,
        "{text}"
    );
}

#[tokio::test]
async fn a_call_marked_migrated_is_labelled_so_once_the_label_is_on() {
    let (_dir, path, address) = socket();
    let _server = Server::start(&path, Driver::default());
    let metrics = metrics();
    metrics.label_migrated().unwrap();
    let (conn, _loss) = connection::connect(&address, quick(), metrics.clone())
        .await
        .unwrap();
    let mut client = IdentityClient::new(conn.channel());
    let mut marked = tonic::Request::new(ProbeRequest {});
    marked.extensions_mut().insert(Migrated);
    client.probe(marked).await.unwrap();
    client.probe(ProbeRequest {}).await.unwrap();

    let text = metrics.render().unwrap();
    for migrated in ["true", "false"] {
        let line = format!(
            "csi_sidecar_operations_seconds_count{{driver_name=\"unknown-driver\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Identity/Probe\",migrated=\"{migrated}\"}} 1"
        );
        assert!(text.contains(&line), "{line} in {text}");
    }
}

#[tokio::test]
async fn call_timeout_ends_a_slow_call_with_deadline_exceeded() {
    let (_dir, path, address) = socket();
    let driver = Driver {
        delay: Duration::from_secs(3),
        ..Driver::default()
    };
    let _server = Server::start(&path, driver.clone());
    let metrics = metrics();
    let options = quick().with_call_timeout(Duration::from_millis(200));
    let (conn, _loss) = connection::connect(&address, options, metrics.clone())
        .await
        .unwrap();
    let start = Instant::now();

    let status = probe(&conn).await.unwrap_err();

    let elapsed = start.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_secs(2),
        "{elapsed:?}"
    );
    assert_eq!(
        driver.timeouts.lock().unwrap().as_slice(),
        [Some("200000u".to_owned())]
    );
    let text = metrics.render().unwrap();
    assert!(
        text.contains(&count_line("/csi.v1.Identity/Probe", "DeadlineExceeded", 1)),
        "{text}"
    );
}

#[tokio::test]
async fn calls_to_a_vanished_driver_are_recorded_as_unavailable() {
    let (_dir, path, address) = socket();
    let server = Server::start(&path, Driver::default());
    let metrics = metrics();
    let (conn, mut loss) = connection::connect(&address, quick(), metrics.clone())
        .await
        .unwrap();
    probe(&conn).await.unwrap();

    server.stop().await;
    call_until_lost(&conn, &mut loss).await;

    let text = metrics.render().unwrap();
    assert!(
        text.contains(&count_line("/csi.v1.Identity/Probe", "OK", 1)),
        "{text}"
    );
    assert!(
        text.contains("grpc_status_code=\"Unavailable\",method_name=\"/csi.v1.Identity/Probe\""),
        "{text}"
    );
    assert!(!text.contains("unknown-non-grpc"), "{text}");
}

/// A driver and a connection to it that has made one call.
async fn used_connection() -> (tempfile::TempDir, Server, Connection, ConnectionLoss) {
    let (dir, path, address) = socket();
    let server = Server::start(&path, Driver::default());
    let (conn, loss) = connection::connect(&address, quick(), metrics())
        .await
        .unwrap();
    probe(&conn).await.unwrap();
    (dir, server, conn, loss)
}

#[tokio::test]
async fn an_idle_connection_notices_the_driver_going_away_without_a_call() {
    let (_dir, server, _conn, loss) = used_connection().await;

    // No call after the driver stops: grpc-go would still notice the closed transport, and
    // a controller sidecar must exit even when it has no work.
    server.stop().await;
    tokio::time::timeout(Duration::from_secs(5), loss)
        .await
        .expect("the loss of an idle connection was not signalled");
}

#[tokio::test]
async fn after_expect_close_the_driver_going_away_is_not_a_loss() {
    let (logs, _guard) = csi_common::test_support::logs::capture();
    let (_dir, server, _conn, loss) = used_connection().await;

    loss.expect_close();
    server.stop().await;
    // The close was seen (positive signal), and reported as the end of a shutdown only.
    for _ in 0..100 {
        if logs.text().contains("Connection closed during shutdown") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = logs.text();
    assert!(text.contains("Connection closed during shutdown"), "{text}");
    assert!(!text.contains("Lost connection"), "{text}");
    assert!(!loss.is_lost());
    assert!(loss.clone().now_or_never().is_none());
}
