//! `Sidecar::start` and `Sidecar::run` against a driver on a temp-dir unix socket: how
//! shutdown, a lost driver connection and start-up failures end a sidecar. (Leader election
//! under `run` is covered by csi-provisioner's whole-binary tests.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use csi_common::sidecar::{
    CommonSettings, Environment, Error, HttpSettings, KLOG_FATAL_EXIT_CODE, KubeSettings, Sidecar,
    SidecarConfig,
};
use proto::csi::v1::controller_server::{Controller, ControllerServer};
use proto::csi::v1::identity_server::{Identity, IdentityServer};
use proto::csi::v1::{
    ControllerGetCapabilitiesRequest, ControllerGetCapabilitiesResponse,
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, ProbeRequest, ProbeResponse,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// A ready driver named `name`, without capabilities.
#[derive(Clone)]
struct Driver {
    name: &'static str,
}

#[tonic::async_trait]
impl Identity for Driver {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: self.name.to_owned(),
            ..GetPluginInfoResponse::default()
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse::default()))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}

#[tonic::async_trait]
impl Controller for Driver {
    async fn controller_get_capabilities(
        &self,
        _: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        Ok(Response::new(ControllerGetCapabilitiesResponse::default()))
    }
}

/// Serves `driver` on `path` until the returned sender fires.
fn serve(path: &Path, driver: Driver) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(IdentityServer::new(driver.clone()))
            .add_service(ControllerServer::new(driver))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (stop, server)
}

/// A sidecar of `socket` without leader election or diagnostics server; `--master` points
/// at an address nothing listens on, which nothing here calls.
fn config(socket: &Path) -> SidecarConfig {
    let settings = CommonSettings {
        csi_address: socket.to_str().unwrap().parse().unwrap(),
        kube: KubeSettings {
            kubeconfig: String::new(),
            master: Some("http://127.0.0.1:9".to_owned()),
            qps: 5.0,
            burst: 10,
        },
        leader_election: None,
        http: HttpSettings {
            endpoint: None,
            metrics_address: None,
            metrics_path: "/metrics".to_owned(),
        },
        log_grpc_calls: false,
    };
    SidecarConfig::new("csi-test", settings, Duration::from_secs(5))
}

fn environment() -> Environment {
    Environment::from_lookup(None, &|_| None, &|_| None)
}

/// Bound on anything these tests wait for.
const BOUND: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_shutdown_while_waiting_for_the_driver_socket_ends_start_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let started = Sidecar::start(config(&dir.path().join("csi.sock")), environment(), async {
    });
    let started = tokio::time::timeout(BOUND, started).await.unwrap().unwrap();
    assert!(started.is_none());
}

#[tokio::test]
async fn controllers_run_until_shutdown_and_the_driver_closing_then_is_no_loss() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let (stop_driver, server) = serve(&socket, Driver { name: "fake.csi" });
    let (shut_down, shutdown) = oneshot::channel::<()>();
    let sidecar = Sidecar::start(config(&socket), environment(), async {
        let _ = shutdown.await;
    })
    .await
    .unwrap()
    .expect("the driver is ready");
    assert_eq!(sidecar.driver.name, "fake.csi");
    let metrics = sidecar.metrics.render().unwrap();
    assert!(
        metrics.contains(
            r#"driver_name="fake.csi",grpc_status_code="OK",method_name="/csi.v1.Identity/GetPluginCapabilities""#
        ),
        "{metrics}"
    );

    let (stopping, controllers_stopping) = oneshot::channel();
    let (driver_gone, wait_for_driver) = oneshot::channel::<()>();
    let run = tokio::spawn(sidecar.run(|stop| async move {
        stop.await;
        stopping.send(()).unwrap();
        // Still finishing the work in hand when the driver container stops.
        wait_for_driver.await.unwrap();
        Ok::<_, Error>(())
    }));
    // SIGTERM; kubelet stops the driver container at the same time.
    shut_down.send(()).unwrap();
    controllers_stopping.await.unwrap();
    stop_driver.send(()).unwrap();
    server.await.unwrap();
    driver_gone.send(()).unwrap();
    tokio::time::timeout(BOUND, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_lost_driver_connection_stops_the_controllers_and_ends_run_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let (stop_driver, _server) = serve(&socket, Driver { name: "fake.csi" });
    let sidecar = Sidecar::start(config(&socket), environment(), std::future::pending())
        .await
        .unwrap()
        .expect("the driver is ready");
    let (stopped, controllers_stopped) = oneshot::channel();
    let run = tokio::spawn(sidecar.run(|stop| async move {
        stop.await;
        stopped.send(()).unwrap();
        Ok::<_, Error>(())
    }));
    stop_driver.send(()).unwrap();
    let err = tokio::time::timeout(BOUND, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    controllers_stopped
        .await
        .expect("the controllers were stopped first");
    assert!(matches!(err, Error::ConnectionLost), "{err:?}");
    assert_eq!(err.exit_code(KLOG_FATAL_EXIT_CODE), 1);
    assert_eq!(
        err.termination_message(),
        Some("Lost connection to CSI driver, exiting")
    );
}

#[tokio::test]
async fn a_driver_without_a_name_fails_start_as_klog_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let (_stop_driver, _server) = serve(&socket, Driver { name: "" });
    let err = Sidecar::start(config(&socket), environment(), std::future::pending())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Identity(_)), "{err:?}");
    assert_eq!(err.exit_code(KLOG_FATAL_EXIT_CODE), KLOG_FATAL_EXIT_CODE);
    assert_eq!(err.exit_code(1), 1, "csi-attacher and csi-resizer exit 1");
}

#[tokio::test]
async fn a_busy_diagnostics_address_fails_run_before_the_controllers_start() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    let (_stop_driver, _server) = serve(&socket, Driver { name: "fake.csi" });
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut config = config(&socket);
    config.settings.http.endpoint = Some(busy.local_addr().unwrap().to_string());
    let sidecar = Sidecar::start(config, environment(), std::future::pending())
        .await
        .unwrap()
        .expect("the driver is ready");
    let err = sidecar
        .run(|_| async { panic!("the controllers must not start") })
        .await
        .map(|()| "ran")
        .unwrap_err();
    assert!(matches!(err, Error::Http(_)), "{err:?}");
}
