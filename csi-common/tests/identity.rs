//! Identity calls against a real tonic server on a temp-dir unix socket (csi-lib-utils
//! `rpc/common_test.go` style): readiness probing, driver name and capability sets.

// Test helpers outside #[test] functions unwrap too: a failed set-up step should fail the test
// at the line that broke.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csi_common::capabilities::{ControllerCapability, NodeCapability, PluginServiceCapability};
use csi_common::connection::{self, ConnectOptions, Connection, CsiAddress};
use csi_common::identity::{self, Error, ProbeOutcome};
use csi_common::metrics::{CsiMetrics, ProcessMetrics};
use proto::csi::v1::controller_server::{Controller, ControllerServer};
use proto::csi::v1::identity_server::{Identity, IdentityServer};
use proto::csi::v1::node_server::{Node, NodeServer};
use proto::csi::v1::{
    ControllerGetCapabilitiesRequest, ControllerGetCapabilitiesResponse,
    ControllerServiceCapability, GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse,
    GetPluginInfoRequest, GetPluginInfoResponse, NodeGetCapabilitiesRequest,
    NodeGetCapabilitiesResponse, NodeServiceCapability, PluginCapability, ProbeRequest,
    ProbeResponse, controller_service_capability, node_service_capability, plugin_capability,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Code, Request, Response, Status};

/// One scripted answer to Probe.
#[derive(Clone)]
enum ProbeStep {
    Answer(Result<Option<bool>, Code>),
    /// Sleep this long, then answer ready (to make the caller's attempt time out).
    Slow(Duration),
}

#[derive(Default)]
struct FakeDriver {
    probes: Mutex<VecDeque<ProbeStep>>,
    probe_calls: AtomicUsize,
    name: String,
}

impl Fake {
    fn new(name: &str, probes: impl IntoIterator<Item = ProbeStep>) -> Self {
        Self(Arc::new(FakeDriver {
            probes: Mutex::new(probes.into_iter().collect()),
            probe_calls: AtomicUsize::new(0),
            name: name.to_owned(),
        }))
    }
}

/// The driver as the three tonic services see it.
#[derive(Clone)]
struct Fake(Arc<FakeDriver>);

#[tonic::async_trait]
impl Identity for Fake {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: self.0.name.clone(),
            vendor_version: "v1.2.3".to_owned(),
            manifest: [("commit".to_owned(), "abc".to_owned())]
                .into_iter()
                .collect(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        let service = |t: PluginServiceCapability| PluginCapability {
            r#type: Some(plugin_capability::Type::Service(
                plugin_capability::Service { r#type: t as i32 },
            )),
        };
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: vec![
                service(PluginServiceCapability::ControllerService),
                service(PluginServiceCapability::VolumeAccessibilityConstraints),
                // A capability from a newer spec: ignored, not an error.
                PluginCapability {
                    r#type: Some(plugin_capability::Type::Service(
                        plugin_capability::Service { r#type: 4242 },
                    )),
                },
            ],
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        self.0.probe_calls.fetch_add(1, Ordering::SeqCst);
        let step = self
            .0
            .probes
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(ProbeStep::Answer(Ok(Some(true))));
        match step {
            ProbeStep::Answer(Ok(ready)) => Ok(Response::new(ProbeResponse { ready })),
            ProbeStep::Answer(Err(code)) => Err(Status::new(code, "scripted failure")),
            ProbeStep::Slow(delay) => {
                tokio::time::sleep(delay).await;
                Ok(Response::new(ProbeResponse { ready: Some(true) }))
            }
        }
    }
}

#[tonic::async_trait]
impl Controller for Fake {
    async fn controller_get_capabilities(
        &self,
        _: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        let rpc = |t: i32| ControllerServiceCapability {
            r#type: Some(controller_service_capability::Type::Rpc(
                controller_service_capability::Rpc { r#type: t },
            )),
        };
        Ok(Response::new(ControllerGetCapabilitiesResponse {
            capabilities: vec![
                rpc(ControllerCapability::CreateDeleteVolume as i32),
                rpc(ControllerCapability::SingleNodeMultiWriter as i32),
                rpc(0),
            ],
        }))
    }
}

#[tonic::async_trait]
impl Node for Fake {
    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let rpc = |t: NodeCapability| NodeServiceCapability {
            r#type: Some(node_service_capability::Type::Rpc(
                node_service_capability::Rpc { r#type: t as i32 },
            )),
        };
        Ok(Response::new(NodeGetCapabilitiesResponse {
            capabilities: vec![rpc(NodeCapability::StageUnstageVolume)],
        }))
    }
}

/// A fake driver serving Identity, Controller and Node on a temp-dir socket.
struct Harness {
    _dir: tempfile::TempDir,
    driver: Fake,
    conn: Connection,
    metrics: CsiMetrics,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl Harness {
    async fn start(driver: Fake) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("csi.sock");
        let (stop, server) = serve(&path, &driver);
        let metrics = CsiMetrics::new(ProcessMetrics::StartTimeOnly).unwrap();
        let address = CsiAddress::parse(path.to_str().unwrap()).unwrap();
        let options = ConnectOptions::default().with_connect_timeout(Some(Duration::from_secs(5)));
        let (conn, _loss) = connection::connect(&address, options, metrics.clone())
            .await
            .unwrap();
        Self {
            _dir: dir,
            driver,
            conn,
            metrics,
            stop: Some(stop),
            server: Some(server),
        }
    }

    fn probe_calls(&self) -> usize {
        self.driver.0.probe_calls.load(Ordering::SeqCst)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

fn serve(path: &Path, driver: &Fake) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let router = tonic::transport::Server::builder()
        .add_service(IdentityServer::new(driver.clone()))
        .add_service(ControllerServer::new(driver.clone()))
        .add_service(NodeServer::new(driver.clone()));
    let server = tokio::spawn(async move {
        router
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (stop, server)
}

/// Bound on a whole readiness loop in these tests (probes come once per second).
const LOOP_BOUND: Duration = Duration::from_secs(10);

#[tokio::test]
async fn probe_until_ready_probes_at_once_and_then_once_per_interval() {
    let driver = Fake::new("fake.csi", [ProbeStep::Answer(Ok(Some(false)))]);
    let harness = Harness::start(driver).await;
    let started = tokio::time::Instant::now();

    identity::probe_until_ready(&harness.conn, Duration::from_secs(1))
        .await
        .expect("driver becomes ready");

    // csi-lib-utils `ProbeForever` probes before it waits for its ticker; the second probe (the
    // first said not ready) comes one interval after the first. Waiting a whole interval before
    // the first probe was most of a slow start-to-ready.
    let took = started.elapsed();
    assert_eq!(harness.probe_calls(), 2);
    assert!(
        took >= identity::PROBE_INTERVAL && took < 2 * identity::PROBE_INTERVAL,
        "{took:?}"
    );
}

#[tokio::test]
async fn probe_until_ready_retries_after_a_timed_out_probe() {
    let driver = Fake::new("fake.csi", [ProbeStep::Slow(Duration::from_millis(500))]);
    let harness = Harness::start(driver).await;

    tokio::time::timeout(
        LOOP_BOUND,
        identity::probe_until_ready(&harness.conn, Duration::from_millis(100)),
    )
    .await
    .expect("probing should finish")
    .expect("driver becomes ready");

    assert_eq!(harness.probe_calls(), 2);
    let text = harness.metrics.render().unwrap();
    assert!(
        text.contains(
            r#"csi_sidecar_operations_seconds_count{driver_name="unknown-driver",grpc_status_code="DeadlineExceeded",method_name="/csi.v1.Identity/Probe"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"csi_sidecar_operations_seconds_count{driver_name="unknown-driver",grpc_status_code="OK",method_name="/csi.v1.Identity/Probe"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn probe_until_ready_retries_while_the_driver_is_not_ready() {
    let driver = Fake::new(
        "fake.csi",
        [
            ProbeStep::Answer(Ok(Some(false))),
            ProbeStep::Answer(Ok(Some(true))),
        ],
    );
    let harness = Harness::start(driver).await;

    tokio::time::timeout(
        LOOP_BOUND,
        identity::probe_until_ready(&harness.conn, Duration::from_secs(1)),
    )
    .await
    .expect("probing should finish")
    .expect("driver becomes ready");

    assert_eq!(harness.probe_calls(), 2);
}

#[tokio::test]
async fn probe_until_ready_fails_on_any_other_code() {
    let driver = Fake::new(
        "fake.csi",
        [ProbeStep::Answer(Err(Code::FailedPrecondition))],
    );
    let harness = Harness::start(driver).await;

    let err = tokio::time::timeout(
        LOOP_BOUND,
        identity::probe_until_ready(&harness.conn, Duration::from_secs(1)),
    )
    .await
    .expect("probing should finish")
    .unwrap_err();

    assert_eq!(err.code(), Some(Code::FailedPrecondition));
    assert!(err.is_final());
    assert!(
        matches!(
            err,
            Error::Call {
                method: "Probe",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(harness.probe_calls(), 1);
}

#[tokio::test]
async fn absent_ready_field_counts_as_ready() {
    let driver = Fake::new("fake.csi", vec![ProbeStep::Answer(Ok(None)); 2]);
    let harness = Harness::start(driver).await;

    let outcome = identity::probe(&harness.conn, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(outcome, ProbeOutcome::Ready);

    tokio::time::timeout(
        LOOP_BOUND,
        identity::probe_until_ready(&harness.conn, Duration::from_secs(1)),
    )
    .await
    .expect("probing should finish")
    .unwrap();
    assert_eq!(harness.probe_calls(), 2);
}

#[tokio::test]
async fn single_probe_reports_not_ready_and_timeouts() {
    let driver = Fake::new(
        "fake.csi",
        [
            ProbeStep::Answer(Ok(Some(false))),
            ProbeStep::Slow(Duration::from_millis(500)),
        ],
    );
    let harness = Harness::start(driver).await;

    let outcome = identity::probe(&harness.conn, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(outcome, ProbeOutcome::NotReady);

    let err = identity::probe(&harness.conn, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::DeadlineExceeded));
    assert!(!err.is_final());
}

#[tokio::test]
async fn driver_name_and_plugin_info_come_from_get_plugin_info() {
    let harness = Harness::start(Fake::new("hostpath.csi.k8s.io", [])).await;

    let name = identity::driver_name(&harness.conn, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(name, "hostpath.csi.k8s.io");
    let info = identity::plugin_info(&harness.conn, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(info.vendor_version, "v1.2.3");
    assert_eq!(info.manifest.get("commit").map(String::as_str), Some("abc"));
}

#[tokio::test]
async fn empty_driver_name_is_a_final_error() {
    let harness = Harness::start(Fake::new("", [])).await;

    let err = identity::driver_name(&harness.conn, Duration::from_secs(1))
        .await
        .unwrap_err();

    assert!(matches!(err, Error::EmptyDriverName), "{err:?}");
    assert!(err.is_final());
    assert_eq!(err.to_string(), "driver name is empty");
}

#[tokio::test]
async fn capability_sets_are_built_from_the_driver_responses() {
    let harness = Harness::start(Fake::new("fake.csi", [])).await;
    let timeout = Duration::from_secs(1);

    let plugin = identity::plugin_capabilities(&harness.conn, timeout)
        .await
        .unwrap();
    assert!(plugin.has_controller_service());
    assert!(plugin.has_volume_accessibility_constraints());
    assert!(!plugin.has_group_controller_service());
    assert_eq!(plugin.services().count(), 2);

    let controller = identity::controller_capabilities(&harness.conn, timeout)
        .await
        .unwrap();
    assert!(controller.has_create_delete_volume());
    assert!(controller.has_single_node_multi_writer());
    assert!(!controller.has_publish_unpublish_volume());
    assert_eq!(controller.iter().count(), 2);

    let node = identity::node_capabilities(&harness.conn, timeout)
        .await
        .unwrap();
    assert_eq!(
        node.iter().collect::<Vec<_>>(),
        vec![NodeCapability::StageUnstageVolume]
    );
}

#[tokio::test]
async fn unimplemented_group_controller_service_is_reported_with_its_code() {
    let harness = Harness::start(Fake::new("fake.csi", [])).await;

    let err = identity::group_controller_capabilities(&harness.conn, Duration::from_secs(1))
        .await
        .unwrap_err();

    assert_eq!(err.code(), Some(Code::Unimplemented));
    assert!(matches!(
        err,
        Error::Call {
            method: "GroupControllerGetCapabilities",
            ..
        }
    ));
}
