//! Tests of the fake kubelet plugin watcher (`testbed_kubelet`) against scripted registration
//! servers on temp-dir sockets, the mock CSI driver (for `NodeGetInfo`) and the in-memory API
//! server (for the Node annotation and the CSINode).

// Helpers outside #[test] functions unwrap too: a failing set-up should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csi_common::h2_authority::RepairAuthority;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proto::pluginregistration::v1::registration_server::{Registration, RegistrationServer};
use proto::pluginregistration::v1::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use testbed_cluster::apiserver::ApiServer;
use testbed_kubelet::grpc_dial::Authority;
use testbed_kubelet::{
    FakeKubelet, KubeletConfig, KubeletEvent, NODE_ID_ANNOTATION, NodeApi, NotifyOutcome, Verdict,
};
use testbed_mock_csi::{MockDriver, MockDriverConfig, MockDriverHandle};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

const WAIT: Duration = Duration::from_secs(10);

/// A scripted plugin: answers GetInfo with `info` (failing the first `fail_get_info` calls)
/// and records every NotifyRegistrationStatus.
#[derive(Clone)]
struct Plugin {
    info: PluginInfo,
    fail_get_info: Arc<Mutex<usize>>,
    notified: Arc<Mutex<Vec<RegistrationStatus>>>,
}

#[tonic::async_trait]
impl Registration for Plugin {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        let mut failures = self.fail_get_info.lock().unwrap();
        if *failures > 0 {
            *failures -= 1;
            return Err(Status::unavailable("not yet"));
        }
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        self.notified.lock().unwrap().push(request.into_inner());
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

struct RunningPlugin {
    plugin: Plugin,
    socket: PathBuf,
    task: JoinHandle<()>,
}

impl RunningPlugin {
    fn notified(&self) -> Vec<RegistrationStatus> {
        self.plugin.notified.lock().unwrap().clone()
    }

    /// Stops serving and deletes the socket, as a plugin going away does.
    fn remove(self) {
        self.task.abort();
        std::fs::remove_file(&self.socket).unwrap();
    }
}

fn csi_info(name: &str, endpoint: &Path) -> PluginInfo {
    PluginInfo {
        r#type: "CSIPlugin".to_owned(),
        name: name.to_owned(),
        endpoint: endpoint.display().to_string(),
        supported_versions: vec!["1.0.0".to_owned()],
    }
}

/// Serves a scripted plugin behind the `:authority` repair layer, as our registrar does.
fn serve(socket: PathBuf, info: PluginInfo, fail_get_info: usize) -> RunningPlugin {
    serve_with(socket, info, fail_get_info, true)
}

/// [`serve`], or a plain tonic server when `repaired` is false.
fn serve_with(
    socket: PathBuf,
    info: PluginInfo,
    fail_get_info: usize,
    repaired: bool,
) -> RunningPlugin {
    let plugin = Plugin {
        info,
        fail_get_info: Arc::new(Mutex::new(fail_get_info)),
        notified: Arc::default(),
    };
    let incoming = UnixListenerStream::new(UnixListener::bind(&socket).unwrap());
    let router =
        tonic::transport::Server::builder().add_service(RegistrationServer::new(plugin.clone()));
    let task = if repaired {
        tokio::spawn(async move {
            let _ = router
                .serve_with_incoming(incoming.map(|s| s.map(RepairAuthority::new)))
                .await;
        })
    } else {
        tokio::spawn(async move {
            let _ = router.serve_with_incoming(incoming).await;
        })
    };
    RunningPlugin {
        plugin,
        socket,
        task,
    }
}

async fn driver() -> MockDriverHandle {
    let config = MockDriverConfig {
        driver_name: "hostpath.csi.k8s.io".to_owned(),
        node_id: "ref-node".to_owned(),
        max_volumes_per_node: 7,
        topology: BTreeMap::from([(
            "topology.hostpath.csi/node".to_owned(),
            "ref-node".to_owned(),
        )]),
        ..MockDriverConfig::default()
    };
    MockDriver::start_in_temp_dir(config).await.unwrap()
}

fn config(dir: &Path) -> KubeletConfig {
    KubeletConfig {
        dial_timeout: Duration::from_secs(1),
        initial_backoff: Duration::from_millis(50),
        ..KubeletConfig::new(dir)
    }
}

#[tokio::test]
async fn a_new_socket_is_registered_with_node_info_and_notified() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(config(dir.path())).unwrap();
    let plugin = serve(
        dir.path().join("hostpath.csi.k8s.io-reg.sock"),
        csi_info("hostpath.csi.k8s.io", driver.socket_path()),
        0,
    );

    let registered = kubelet
        .wait_registered("hostpath.csi.k8s.io", WAIT)
        .await
        .unwrap();
    assert_eq!(registered.socket, plugin.socket);
    assert_eq!(
        registered.endpoint,
        driver.socket_path().display().to_string()
    );
    assert_eq!(registered.supported_versions, ["1.0.0"]);
    assert_eq!(registered.notified, NotifyOutcome::Acknowledged);
    let node = registered.node.unwrap();
    assert_eq!(node.node_id, "ref-node");
    assert_eq!(node.max_volumes_per_node, 7);
    assert_eq!(
        node.topology,
        BTreeMap::from([(
            "topology.hostpath.csi/node".to_owned(),
            "ref-node".to_owned()
        )])
    );
    assert_eq!(
        plugin.notified(),
        [RegistrationStatus {
            plugin_registered: true,
            error: String::new()
        }]
    );
    assert_eq!(driver.call_count(testbed_mock_csi::Method::NodeGetInfo), 1);

    // Registered once: later polls leave a registered socket alone. The positive signal that
    // a later poll ran is that it found and registered a second plugin.
    let _later = serve(
        dir.path().join("later-reg.sock"),
        csi_info("later.example.com", driver.socket_path()),
        0,
    );
    kubelet
        .wait_registered("later.example.com", WAIT)
        .await
        .unwrap();
    assert_eq!(kubelet.events().len(), 2, "{:#?}", kubelet.events());
    assert_eq!(plugin.notified().len(), 1);
}

#[tokio::test]
async fn a_socket_already_there_at_start_up_is_registered() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let plugin = serve(
        dir.path().join("early-reg.sock"),
        csi_info("early.example.com", driver.socket_path()),
        0,
    );
    let kubelet = FakeKubelet::start(config(dir.path())).unwrap();
    kubelet
        .wait_registered("early.example.com", WAIT)
        .await
        .unwrap();
    assert_eq!(plugin.notified().len(), 1);
}

#[tokio::test]
async fn a_rejection_is_notified_with_kubelets_error_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(KubeletConfig {
        verdict: Verdict::Reject("CSINode update refused".to_owned()),
        ..config(dir.path())
    })
    .unwrap();
    let plugin = serve(
        dir.path().join("x-reg.sock"),
        csi_info("x.example.com", driver.socket_path()),
        0,
    );

    let event = kubelet
        .wait_event(0, WAIT, |e| {
            matches!(e, KubeletEvent::RegistrationFailed { .. })
        })
        .await
        .unwrap();
    let KubeletEvent::RegistrationFailed {
        error,
        notified,
        info,
        ..
    } = event
    else {
        unreachable!()
    };
    assert_eq!(
        error,
        "RegisterPlugin error -- plugin registration failed with err: CSINode update refused"
    );
    assert_eq!(notified, NotifyOutcome::Acknowledged);
    assert_eq!(info.unwrap().name, "x.example.com");
    assert_eq!(
        plugin.notified()[0],
        RegistrationStatus {
            plugin_registered: false,
            error
        }
    );

    // Kubelet retries failed registrations; once accepted, the plugin is registered.
    kubelet.set_verdict(Verdict::Accept);
    kubelet
        .wait_registered("x.example.com", WAIT)
        .await
        .unwrap();
    assert!(plugin.notified().last().unwrap().plugin_registered);
}

#[tokio::test]
async fn invalid_plugin_info_is_refused_like_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(config(dir.path())).unwrap();

    let device = serve(
        dir.path().join("device.sock"),
        PluginInfo {
            r#type: "DevicePlugin".to_owned(),
            ..csi_info("device.example.com", driver.socket_path())
        },
        0,
    );
    let old = serve(
        dir.path().join("old.sock"),
        PluginInfo {
            supported_versions: vec!["0.3.0".to_owned(), "2.0.0".to_owned()],
            ..csi_info("old.example.com", driver.socket_path())
        },
        0,
    );
    let none = serve(
        dir.path().join("none.sock"),
        PluginInfo {
            supported_versions: vec![],
            ..csi_info("none.example.com", driver.socket_path())
        },
        0,
    );

    for plugin in [&device, &old, &none] {
        kubelet
            .wait_until("a refusal", WAIT, |_| {
                (!plugin.notified().is_empty()).then_some(())
            })
            .await
            .unwrap();
        let status = &plugin.notified()[0];
        assert!(!status.plugin_registered);
        assert!(
            status.error.starts_with("RegisterPlugin error -- "),
            "{}",
            status.error
        );
    }
    assert!(
        device.notified()[0]
            .error
            .contains("no handler registered for plugin type: DevicePlugin")
    );
    assert!(old.notified()[0].error.contains("plugin validation failed"));
    assert!(
        none.notified()[0]
            .error
            .contains("Plugin returned an empty list for supported versions")
    );
    assert!(kubelet.registered().is_empty());
}

#[tokio::test]
async fn hidden_files_and_plain_files_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(config(dir.path())).unwrap();
    let hidden = serve(
        dir.path().join(".hidden-reg.sock"),
        csi_info("hidden.example.com", driver.socket_path()),
        0,
    );
    std::fs::write(dir.path().join("plain-reg.sock"), b"").unwrap();
    // Positive signal: a poll after both files appeared registered a visible plugin.
    let _visible = serve(
        dir.path().join("visible-reg.sock"),
        csi_info("visible.example.com", driver.socket_path()),
        0,
    );
    kubelet
        .wait_registered("visible.example.com", WAIT)
        .await
        .unwrap();
    assert_eq!(kubelet.events().len(), 1, "{:#?}", kubelet.events());
    assert!(hidden.notified().is_empty());
}

#[tokio::test]
async fn removing_the_socket_deregisters_and_a_new_socket_registers_again() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(config(dir.path())).unwrap();
    let socket = dir.path().join("x-reg.sock");
    let plugin = serve(
        socket.clone(),
        csi_info("x.example.com", driver.socket_path()),
        0,
    );
    kubelet
        .wait_registered("x.example.com", WAIT)
        .await
        .unwrap();

    plugin.remove();
    kubelet
        .wait_deregistered("x.example.com", WAIT)
        .await
        .unwrap();
    let events = kubelet.events();
    assert!(matches!(
        events.last(),
        Some(KubeletEvent::Deregistered { name, error: None, .. }) if name == "x.example.com"
    ));

    let again = serve(socket, csi_info("x.example.com", driver.socket_path()), 0);
    kubelet
        .wait_registered("x.example.com", WAIT)
        .await
        .unwrap();
    assert_eq!(again.notified().len(), 1);
}

#[tokio::test]
async fn a_plugin_that_fails_get_info_is_retried_with_backoff_without_notification() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(config(dir.path())).unwrap();
    let plugin = serve(
        dir.path().join("slow-reg.sock"),
        csi_info("slow.example.com", driver.socket_path()),
        2,
    );
    kubelet
        .wait_registered("slow.example.com", WAIT)
        .await
        .unwrap();
    let failures: Vec<_> = kubelet
        .events()
        .into_iter()
        .filter(|e| matches!(e, KubeletEvent::RegistrationFailed { .. }))
        .collect();
    assert_eq!(failures.len(), 2, "{failures:#?}");
    for failure in failures {
        let KubeletEvent::RegistrationFailed {
            error, notified, ..
        } = failure
        else {
            unreachable!()
        };
        assert!(
            error.contains("failed to get plugin info using RPC GetInfo"),
            "{error}"
        );
        assert_eq!(notified, NotifyOutcome::NotSent);
    }
    assert_eq!(plugin.notified().len(), 1);
}

/// What a real kubelet does to a plugin whose plain h2 server refuses the socket path as
/// `:authority`: GetInfo fails with grpc-go's RST_STREAM text, the plugin is never notified,
/// and kubelet retries for ever.
#[tokio::test]
async fn a_plugin_that_refuses_the_socket_path_authority_never_registers_like_on_a_real_node() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(config(dir.path())).unwrap();
    let socket = dir.path().join("plain-reg.sock");
    let plugin = serve_with(
        socket.clone(),
        csi_info("plain.example.com", driver.socket_path()),
        0,
        false,
    );
    // Two failed attempts: the first and a retry after the backoff.
    let second = kubelet
        .wait_until("two failed attempts", WAIT, |s| {
            let failures: Vec<KubeletEvent> = s
                .events
                .iter()
                .filter(|e| matches!(e, KubeletEvent::RegistrationFailed { .. }))
                .cloned()
                .collect();
            (failures.len() >= 2).then_some(failures)
        })
        .await
        .unwrap();
    for failure in second {
        let KubeletEvent::RegistrationFailed {
            error,
            notified,
            info,
            ..
        } = failure
        else {
            unreachable!()
        };
        assert_eq!(
            error,
            format!(
                "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {}, err: rpc error: code = Internal desc = stream terminated by RST_STREAM with error code: PROTOCOL_ERROR",
                socket.display()
            )
        );
        assert_eq!(info, None);
        assert_eq!(notified, NotifyOutcome::NotSent);
    }
    assert!(plugin.notified().is_empty());
    assert_eq!(driver.call_count(testbed_mock_csi::Method::NodeGetInfo), 0);
}

/// The same plugin behind the repair layer registers with every client style.
#[tokio::test]
async fn a_repaired_plugin_registers_whatever_authority_the_client_sends() {
    for authority in Authority::ALL {
        let dir = tempfile::tempdir().unwrap();
        let driver = driver().await;
        let kubelet = FakeKubelet::start(KubeletConfig {
            registration_authority: authority,
            ..config(dir.path())
        })
        .unwrap();
        let plugin = serve(
            dir.path().join("r-reg.sock"),
            csi_info("r.example.com", driver.socket_path()),
            0,
        );
        kubelet
            .wait_registered("r.example.com", WAIT)
            .await
            .unwrap();
        assert_eq!(plugin.notified().len(), 1, "{authority:?}");
    }
}

#[tokio::test]
async fn a_second_socket_for_an_already_registered_driver_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(config(dir.path())).unwrap();
    let _first = serve(
        dir.path().join("a-reg.sock"),
        csi_info("x.example.com", driver.socket_path()),
        0,
    );
    kubelet
        .wait_registered("x.example.com", WAIT)
        .await
        .unwrap();
    let second = serve(
        dir.path().join("b-reg.sock"),
        csi_info("x.example.com", driver.socket_path()),
        0,
    );
    kubelet
        .wait_until("the refusal", WAIT, |_| {
            (!second.notified().is_empty()).then_some(())
        })
        .await
        .unwrap();
    let status = &second.notified()[0];
    assert!(!status.plugin_registered);
    assert!(
        status
            .error
            .contains("Another driver with the same name is already registered"),
        "{}",
        status.error
    );
}

#[tokio::test]
async fn registration_writes_the_node_annotation_and_csinode_and_deregistration_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let api = ApiServer::new();
    api.put_object(&Node {
        metadata: ObjectMeta {
            name: Some("ref-node".to_owned()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    })
    .unwrap();
    let kubelet = FakeKubelet::start(KubeletConfig {
        node_api: Some(NodeApi {
            client: api.client(),
            node_name: "ref-node".to_owned(),
        }),
        ..config(dir.path())
    })
    .unwrap();
    let plugin = serve(
        dir.path().join("hostpath.csi.k8s.io-reg.sock"),
        csi_info("hostpath.csi.k8s.io", driver.socket_path()),
        0,
    );
    kubelet
        .wait_registered("hostpath.csi.k8s.io", WAIT)
        .await
        .unwrap();

    let node: Node = api.get_object(None, "ref-node").unwrap().unwrap();
    let annotations = node.metadata.annotations.unwrap();
    assert_eq!(
        annotations[NODE_ID_ANNOTATION],
        r#"{"hostpath.csi.k8s.io":"ref-node"}"#
    );
    assert_eq!(
        node.metadata.labels.unwrap()["topology.hostpath.csi/node"],
        "ref-node"
    );
    let csinode: CSINode = api.get_object(None, "ref-node").unwrap().unwrap();
    let owner = &csinode.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", "ref-node")
    );
    assert_eq!(Some(&owner.uid), node.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));
    let drivers = &csinode.spec.drivers;
    assert_eq!(drivers.len(), 1);
    assert_eq!(drivers[0].name, "hostpath.csi.k8s.io");
    assert_eq!(drivers[0].node_id, "ref-node");
    assert_eq!(
        drivers[0].topology_keys.as_deref(),
        Some(&["topology.hostpath.csi/node".to_owned()][..])
    );
    assert_eq!(drivers[0].allocatable.as_ref().unwrap().count, Some(7));

    plugin.remove();
    kubelet
        .wait_deregistered("hostpath.csi.k8s.io", WAIT)
        .await
        .unwrap();
    let csinode: CSINode = api.get_object(None, "ref-node").unwrap().unwrap();
    assert!(csinode.spec.drivers.is_empty());
    let node: Node = api.get_object(None, "ref-node").unwrap().unwrap();
    assert!(
        !node
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(NODE_ID_ANNOTATION)
    );
}

#[tokio::test]
async fn a_missing_node_fails_the_registration_like_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let api = ApiServer::new();
    let kubelet = FakeKubelet::start(KubeletConfig {
        node_api: Some(NodeApi {
            client: api.client(),
            node_name: "no-such-node".to_owned(),
        }),
        ..config(dir.path())
    })
    .unwrap();
    let plugin = serve(
        dir.path().join("x-reg.sock"),
        csi_info("x.example.com", driver.socket_path()),
        0,
    );
    kubelet
        .wait_until("the refusal", WAIT, |_| {
            (!plugin.notified().is_empty()).then_some(())
        })
        .await
        .unwrap();
    let status = &plugin.notified()[0];
    assert!(!status.plugin_registered);
    assert!(
        status.error.contains("error getting node"),
        "{}",
        status.error
    );
}

/// Kubelet keeps the backoff of a failed registration per socket *path* (its operation
/// executor's `goroutinemap`, keyed by the path, until an operation there succeeds): a good
/// socket that replaces a stale one waits for what is left of the path's backoff (upstream
/// registrar issue #206), it is not tried at once as a new file.
#[tokio::test]
async fn a_socket_replacing_a_failed_one_waits_for_the_backoff_of_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver().await;
    let kubelet = FakeKubelet::start(KubeletConfig {
        dial_timeout: Duration::from_millis(200),
        initial_backoff: Duration::from_millis(400),
        ..KubeletConfig::new(dir.path())
    })
    .unwrap();
    // A stale socket: the file is there, nobody listens (a registrar killed with SIGKILL).
    let socket = dir.path().join("stale.example.com-reg.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());

    // Two failures: the path's next delay is 800 ms.
    kubelet
        .wait_until("two failed attempts", WAIT, |s| {
            let failures = s
                .events
                .iter()
                .filter(|e| matches!(e, KubeletEvent::RegistrationFailed { .. }))
                .count();
            (failures >= 2).then_some(())
        })
        .await
        .unwrap();
    let second_failure = tokio::time::Instant::now();
    std::fs::remove_file(&socket).unwrap();
    let _plugin = serve(
        socket.clone(),
        csi_info("stale.example.com", driver.socket_path()),
        0,
    );

    kubelet
        .wait_registered("stale.example.com", WAIT)
        .await
        .unwrap();
    let waited = second_failure.elapsed();
    // 800 ms from the failure, less the moment it took to see it; a new file starting afresh
    // registers within one poll (100 ms).
    assert!(
        waited >= Duration::from_millis(600),
        "registered {waited:?} after the second failure"
    );
}
