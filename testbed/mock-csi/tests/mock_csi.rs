//! The mock CSI driver driven over its real unix socket with the generated tonic clients, and the
//! `mock-csi-driver` binary as a process.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use std::path::Path;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use proto::csi::v1 as csi;
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::identity_client::IdentityClient;
use proto::csi::v1::node_client::NodeClient;
use testbed_kubelet::grpc_dial::{self, Authority};
use testbed_mock_csi::{
    Action, ControllerRpc, Fault, Garbage, Method, MockDriver, MockDriverConfig, MockDriverHandle,
    MockVolume, When,
};
use testbed_support::process::{ChildProcess, Signal};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

const GI: i64 = 1 << 30;
const WAIT: Duration = Duration::from_secs(10);

/// A channel over the socket through an explicit connector (what csi-lib-utils does in Go), so
/// these tests do not depend on the driver's own `channel()` helper.
async fn connect(path: &Path) -> Channel {
    let path = path.to_owned();
    Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .expect("connect to the mock driver socket")
}

struct Clients {
    identity: IdentityClient<Channel>,
    controller: ControllerClient<Channel>,
    node: NodeClient<Channel>,
}

async fn clients(driver: &MockDriverHandle) -> Clients {
    let channel = connect(driver.socket_path()).await;
    Clients {
        identity: IdentityClient::new(channel.clone()),
        controller: ControllerClient::new(channel.clone()),
        node: NodeClient::new(channel),
    }
}

async fn start(config: MockDriverConfig) -> (MockDriverHandle, Clients) {
    let driver = MockDriver::start_in_temp_dir(config).await.expect("start");
    let c = clients(&driver).await;
    (driver, c)
}

fn mount_cap() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume::default(),
        )),
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeMultiWriter.into(),
        }),
    }
}

fn create_request(name: &str, required: i64) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.to_owned(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: required,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_cap()],
        ..Default::default()
    }
}

async fn create(c: &mut Clients, name: &str, required: i64) -> Result<csi::Volume, Status> {
    let resp = c
        .controller
        .create_volume(create_request(name, required))
        .await?;
    Ok(resp
        .into_inner()
        .volume
        .expect("CreateVolumeResponse.volume"))
}

#[tokio::test]
async fn identity_reports_the_configured_name_capabilities_and_absent_readiness() {
    let config = MockDriverConfig {
        driver_name: "x.csi.example.com".into(),
        vendor_version: "v9".into(),
        ..MockDriverConfig::default()
    };
    let (driver, mut c) = start(config).await;
    let info = c
        .identity
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (info.name.as_str(), info.vendor_version.as_str()),
        ("x.csi.example.com", "v9")
    );
    let caps = c
        .identity
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    assert_eq!(caps.len(), 3);
    let probe = c
        .identity
        .probe(csi::ProbeRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(probe.ready, None);
    assert_eq!(driver.call_count(Method::GetPluginInfo), 1);
    let paths: Vec<&str> = driver
        .calls()
        .iter()
        .map(testbed_mock_csi::RecordedCall::path)
        .collect();
    assert_eq!(
        paths,
        [
            "/csi.v1.Identity/GetPluginInfo",
            "/csi.v1.Identity/GetPluginCapabilities",
            "/csi.v1.Identity/Probe"
        ]
    );
    assert!(
        driver
            .calls()
            .iter()
            .all(|call| call.code == Some(Code::Ok))
    );
}

/// Go tools dial drivers with `:authority` values h2 refuses (grpc-go's passthrough socket
/// path, empty): the mock driver answers every style, as a real driver must.
#[tokio::test]
async fn every_client_style_of_authority_reaches_the_driver() {
    let (driver, _) = start(MockDriverConfig::default()).await;
    for authority in Authority::ALL {
        let channel = grpc_dial::dial(driver.socket_path(), authority)
            .await
            .unwrap();
        let mut identity = IdentityClient::new(channel);
        // Twice: the second request uses the dynamic table entries the first added.
        for _ in 0..2 {
            identity
                .probe(csi::ProbeRequest {})
                .await
                .unwrap_or_else(|status| panic!("{authority:?}: {status:?}"));
        }
    }
    assert_eq!(driver.call_count(Method::Probe), 2 * Authority::ALL.len());
}

#[tokio::test]
async fn probe_reports_not_ready_and_ready_as_set_by_the_test() {
    let (driver, mut c) = start(MockDriverConfig {
        probe_ready: Some(false),
        ..MockDriverConfig::default()
    })
    .await;
    let ready = |r: csi::ProbeResponse| r.ready;
    assert_eq!(
        ready(
            c.identity
                .probe(csi::ProbeRequest {})
                .await
                .unwrap()
                .into_inner()
        ),
        Some(false)
    );
    driver.set_ready(Some(true));
    assert_eq!(
        ready(
            c.identity
                .probe(csi::ProbeRequest {})
                .await
                .unwrap()
                .into_inner()
        ),
        Some(true)
    );
    driver.set_ready(None);
    assert_eq!(
        ready(
            c.identity
                .probe(csi::ProbeRequest {})
                .await
                .unwrap()
                .into_inner()
        ),
        None
    );
}

#[tokio::test]
async fn create_volume_is_idempotent_and_a_size_conflict_is_already_exists() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    let first = create(&mut c, "pvc-1", GI).await.unwrap();
    let again = create(&mut c, "pvc-1", GI).await.unwrap();
    assert_eq!(first, again);
    let err = create(&mut c, "pvc-1", 2 * GI).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    assert_eq!(driver.volumes().len(), 1);
    assert_eq!(driver.volumes()[0].volume_id, first.volume_id);

    let requests: Vec<csi::CreateVolumeRequest> = driver.requests(Method::CreateVolume);
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[2].capacity_range.as_ref().unwrap().required_bytes,
        2 * GI
    );
    let codes: Vec<_> = driver
        .calls_of(Method::CreateVolume)
        .iter()
        .map(|c| c.code)
        .collect();
    assert_eq!(
        codes,
        [Some(Code::Ok), Some(Code::Ok), Some(Code::AlreadyExists)]
    );
}

#[tokio::test]
async fn create_volume_checks_arguments_and_the_maximum_size() {
    let (_driver, mut c) = start(MockDriverConfig::default()).await;
    assert_eq!(
        create(&mut c, "", GI).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let no_caps = csi::CreateVolumeRequest {
        volume_capabilities: vec![],
        ..create_request("a", GI)
    };
    assert_eq!(
        c.controller
            .create_volume(no_caps)
            .await
            .unwrap_err()
            .code(),
        Code::InvalidArgument
    );
    let err = create(&mut c, "big", 2 << 40).await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange);
    assert_eq!(
        err.message(),
        "Requested capacity 2199023255552 exceeds maximum allowed 1099511627776"
    );
}

#[tokio::test]
async fn publish_expand_capacity_and_delete_follow_the_volume_table() {
    let (driver, mut c) = start(MockDriverConfig {
        total_capacity: Some(10 * GI),
        ..MockDriverConfig::default()
    })
    .await;
    let vol = create(&mut c, "pvc-1", 2 * GI).await.unwrap();

    let publish = |volume_id: &str, node_id: &str| csi::ControllerPublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    };
    let err = c
        .controller
        .controller_publish_volume(publish("fx-no-such-volume", "mock-node"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = c
        .controller
        .controller_publish_volume(publish(&vol.volume_id, "stranger"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    c.controller
        .controller_publish_volume(publish(&vol.volume_id, "mock-node"))
        .await
        .unwrap();
    assert!(
        driver
            .volume(&vol.volume_id)
            .unwrap()
            .published_nodes
            .contains_key("mock-node")
    );

    let expanded = c
        .controller
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: vol.volume_id.clone(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 3 * GI,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (expanded.capacity_bytes, expanded.node_expansion_required),
        (3 * GI, true)
    );

    let capacity = c
        .controller
        .get_capacity(csi::GetCapacityRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(capacity.available_capacity, 7 * GI);

    let info = c
        .node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, "mock-node");
    assert_eq!(
        info.accessible_topology
            .unwrap()
            .segments
            .get("topology.mock.csi.k8s.io/node")
            .map(String::as_str),
        Some("mock-node")
    );

    for _ in 0..2 {
        c.controller
            .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
                volume_id: vol.volume_id.clone(),
                node_id: "mock-node".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        c.controller
            .delete_volume(csi::DeleteVolumeRequest {
                volume_id: vol.volume_id.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    assert!(driver.volumes().is_empty());
}

#[tokio::test]
async fn a_missing_controller_capability_makes_its_rpc_unimplemented() {
    let mut config = MockDriverConfig::default();
    config
        .controller_capabilities
        .retain(|c| *c != ControllerRpc::PublishUnpublishVolume);
    let (driver, mut c) = start(config).await;
    driver.insert_volume(MockVolume::new("static-1", GI));
    let err = c
        .controller
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: "static-1".into(),
            node_id: "mock-node".into(),
            volume_capability: Some(mount_cap()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    let caps = c
        .controller
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    assert_eq!(caps.len(), driver.config().controller_capabilities.len());
}

#[tokio::test]
async fn list_volumes_pages_through_every_volume_once() {
    let (_driver, mut c) = start(MockDriverConfig::default()).await;
    let mut created = Vec::new();
    for i in 0..5 {
        created.push(
            create(&mut c, &format!("pvc-{i}"), GI)
                .await
                .unwrap()
                .volume_id,
        );
    }
    let mut listed = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let resp = c
            .controller
            .list_volumes(csi::ListVolumesRequest {
                max_entries: 2,
                starting_token: token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(resp.entries.len() <= 2);
        listed.extend(
            resp.entries
                .into_iter()
                .map(|e| e.volume.unwrap().volume_id),
        );
        if resp.next_token.is_empty() {
            break;
        }
        token = resp.next_token;
    }
    assert_eq!(pages, 3);
    assert_eq!(listed, created);
    let err = c
        .controller
        .list_volumes(csi::ListVolumesRequest {
            max_entries: 2,
            starting_token: "not-a-token".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
}

#[tokio::test]
async fn an_nth_call_fault_fails_only_that_call_and_leaves_the_table_alone() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    driver.inject(
        Fault::error(Method::CreateVolume, Code::ResourceExhausted, "no space").on(When::Nth(2)),
    );
    create(&mut c, "a", GI).await.unwrap();
    let err = create(&mut c, "b", GI).await.unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::ResourceExhausted, "no space")
    );
    create(&mut c, "c", GI).await.unwrap();
    let names: Vec<String> = driver.volumes().into_iter().map(|v| v.name).collect();
    assert_eq!(names, ["a", "c"]);
    // Other methods are not affected.
    c.identity.probe(csi::ProbeRequest {}).await.unwrap();
    let codes: Vec<_> = driver
        .calls_of(Method::CreateVolume)
        .iter()
        .map(|c| c.code)
        .collect();
    assert_eq!(
        codes,
        [
            Some(Code::Ok),
            Some(Code::ResourceExhausted),
            Some(Code::Ok)
        ]
    );
}

#[tokio::test]
async fn an_every_call_fault_fails_until_cleared() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    driver.inject(Fault::error(Method::Probe, Code::Unavailable, "down"));
    for _ in 0..3 {
        let err = c.identity.probe(csi::ProbeRequest {}).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable);
    }
    driver.clear_faults();
    c.identity.probe(csi::ProbeRequest {}).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_every_call_delay_holds_each_answer_on_the_tokio_clock() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    driver.inject(Fault::delay(Method::GetPluginInfo, Duration::from_secs(30)));
    for _ in 0..2 {
        let started = Instant::now();
        c.identity
            .get_plugin_info(csi::GetPluginInfoRequest {})
            .await
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
    }
    // Undelayed methods answer at once.
    let started = Instant::now();
    c.identity.probe(csi::ProbeRequest {}).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn a_call_whose_client_gave_up_is_still_carried_out_like_a_real_driver_would() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    driver.inject(Fault {
        method: Method::CreateVolume,
        when: When::Nth(1),
        action: Action::Delay(Duration::from_millis(500)),
    });
    let mut req = tonic::Request::new(create_request("slow", GI));
    req.set_timeout(Duration::from_millis(100));
    let err = c.controller.create_volume(req).await.unwrap_err();
    // tonic's server enforces the grpc-timeout header and answers Cancelled; a Go client would
    // report DeadlineExceeded. Either way the caller must treat the call as maybe in progress.
    assert!(
        matches!(err.code(), Code::Cancelled | Code::DeadlineExceeded),
        "{err}"
    );
    assert!(driver.volumes().is_empty(), "still being delayed");
    let calls = driver
        .wait_for_answers(Method::CreateVolume, 1, WAIT)
        .await
        .unwrap();
    assert_eq!(calls[0].code, Some(Code::Ok));
    assert_eq!(
        calls[0].decode::<csi::CreateVolumeRequest>().unwrap().name,
        "slow"
    );
    // tonic dropped the handler with the cancelled call: the answer reached nobody, and the
    // record says so (the chaos suite does not count it as a success the caller held).
    assert!(!calls[0].delivered);
    assert!(calls[0].answered.is_some());
    // The retry (second call, not delayed) finds the volume the first call created.
    let vol = create(&mut c, "slow", GI).await.unwrap();
    assert_eq!(driver.volumes().len(), 1);
    assert_eq!(driver.volumes()[0].volume_id, vol.volume_id);
    let retry = &driver.calls_of(Method::CreateVolume)[1];
    assert!(retry.delivered, "its caller waited for it");
    assert!(!retry.garbled);
}

#[tokio::test]
async fn a_garbled_answer_is_recorded_as_garbled() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    driver.inject(Fault {
        method: Method::CreateVolume,
        when: When::Nth(1),
        action: Action::Garbage(Garbage::EmptyVolumeId),
    });
    assert_eq!(create(&mut c, "pvc-1", GI).await.unwrap().volume_id, "");
    assert_ne!(create(&mut c, "pvc-1", GI).await.unwrap().volume_id, "");
    let calls = driver.calls_of(Method::CreateVolume);
    let garbled: Vec<bool> = calls.iter().map(|c| c.garbled).collect();
    assert_eq!(garbled, [true, false]);
    assert!(
        calls
            .iter()
            .all(|c| c.delivered && c.code == Some(Code::Ok))
    );
}

#[tokio::test]
async fn a_call_for_a_volume_with_a_call_in_progress_is_aborted_as_the_spec_allows() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    // Long enough that the retry below arrives while the first call is being carried out.
    driver.inject(Fault {
        method: Method::CreateVolume,
        when: When::Nth(1),
        action: Action::Delay(Duration::from_secs(2)),
    });
    let mut req = tonic::Request::new(create_request("slow", GI));
    req.set_timeout(Duration::from_millis(100));
    c.controller.create_volume(req).await.unwrap_err();
    // CSI spec, CreateVolume errors: "Operation pending for volume", ABORTED.
    let err = create(&mut c, "slow", GI).await.unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err}");
    // Another volume is not held up.
    create(&mut c, "other", GI).await.unwrap();
    // Once the first call is answered, the volume is free again and the retry finds it.
    let calls = driver
        .wait_for_answers(Method::CreateVolume, 3, WAIT)
        .await
        .unwrap();
    let codes: Vec<_> = calls.iter().map(|c| c.code).collect();
    assert!(codes.contains(&Some(Code::Aborted)), "{codes:?}");
    let slow = create(&mut c, "slow", GI).await.unwrap();
    assert_eq!(driver.volumes().len(), 2);

    // DeleteVolume of a volume with a call in progress likewise.
    driver.inject(Fault {
        method: Method::DeleteVolume,
        when: When::Nth(1),
        action: Action::Delay(Duration::from_secs(2)),
    });
    let delete = |timeout: Option<Duration>| {
        let mut req = tonic::Request::new(csi::DeleteVolumeRequest {
            volume_id: slow.volume_id.clone(),
            ..Default::default()
        });
        if let Some(timeout) = timeout {
            req.set_timeout(timeout);
        }
        req
    };
    c.controller
        .delete_volume(delete(Some(Duration::from_millis(100))))
        .await
        .unwrap_err();
    let err = c.controller.delete_volume(delete(None)).await.unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err}");
    driver
        .wait_for_answers(Method::DeleteVolume, 2, WAIT)
        .await
        .unwrap();
    c.controller.delete_volume(delete(None)).await.unwrap();
    assert_eq!(driver.volumes().len(), 1, "only `other` is left");
}

#[tokio::test]
async fn wait_for_calls_times_out_when_too_few_calls_arrive() {
    let (driver, _c) = start(MockDriverConfig::default()).await;
    let err = driver
        .wait_for_calls(Method::DeleteVolume, 1, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("DeleteVolume"), "{err}");
}

#[tokio::test]
async fn stop_cuts_connections_and_removes_the_socket_and_restart_serves_the_same_state() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    let vol = create(&mut c, "pvc-1", GI).await.unwrap();
    let path = driver.socket_path().to_owned();
    assert!(path.exists());

    driver.stop().await.unwrap();
    assert!(!path.exists(), "socket file left behind");
    assert!(!driver.is_running());
    // The open connection was cut (the first call sees that), and reconnecting fails.
    assert!(c.identity.probe(csi::ProbeRequest {}).await.is_err());
    let err = c.identity.probe(csi::ProbeRequest {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");

    driver.restart().await.unwrap();
    assert!(path.exists());
    let mut c = clients(&driver).await;
    c.identity.probe(csi::ProbeRequest {}).await.unwrap();
    // The volume table survived the "crash".
    assert_eq!(create(&mut c, "pvc-1", GI).await.unwrap(), vol);
}

#[tokio::test]
async fn stop_ends_a_call_that_is_still_being_delayed() {
    let (driver, mut c) = start(MockDriverConfig::default()).await;
    driver.inject(Fault::delay(Method::CreateVolume, Duration::from_mins(1)));
    let pending = tokio::spawn(async move { create(&mut c, "never", GI).await });
    driver
        .wait_for_calls(Method::CreateVolume, 1, WAIT)
        .await
        .unwrap();
    tokio::time::timeout(WAIT, driver.stop())
        .await
        .expect("stop in time")
        .unwrap();
    let result = tokio::time::timeout(WAIT, pending)
        .await
        .expect("the pending call ends when the driver stops")
        .unwrap();
    // A crashed driver sends no status: the caller sees the connection drop.
    let err = result.unwrap_err();
    assert!(!err.message().contains("mock CSI driver stopped"), "{err}");
    // Let the injected delay run out on the (now paused) clock and let every woken task run:
    // an erroneously surviving handler would create the volume now.
    tokio::time::pause();
    tokio::time::advance(Duration::from_mins(2)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        driver.volumes().is_empty(),
        "a stopped driver must not finish the call"
    );
    assert_eq!(driver.calls_of(Method::CreateVolume)[0].code, None);
}

#[tokio::test]
async fn a_stale_socket_file_is_replaced_but_a_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(stale);
    let driver = MockDriver::start(MockDriverConfig::default(), &path)
        .await
        .unwrap();
    let mut c = clients(&driver).await;
    c.identity.probe(csi::ProbeRequest {}).await.unwrap();
    drop(driver);
    assert!(!path.exists(), "dropping the handle removes the socket");

    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, b"keep me").unwrap();
    let err = MockDriver::start(MockDriverConfig::default(), &file)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}

#[tokio::test]
async fn the_handle_channel_helper_reaches_the_driver() {
    let driver = MockDriver::start_in_temp_dir(MockDriverConfig::default())
        .await
        .unwrap();
    let mut identity = IdentityClient::new(driver.channel().unwrap());
    let info = identity
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "mock.csi.k8s.io");
    assert!(driver.endpoint().starts_with("unix:///"));
}

#[tokio::test]
async fn the_binary_serves_the_configured_name_and_exits_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("csi.sock");
    let endpoint = format!("unix://{}", path.display());
    let args = [
        "--endpoint",
        &endpoint,
        "--name",
        "bin.csi.example.com",
        "--log-calls",
        "--fail",
        "CreateVolume:RESOURCE_EXHAUSTED:1",
    ]
    .map(str::to_owned);
    let mut child = ChildProcess::spawn(
        "mock-csi-driver",
        Path::new(env!("CARGO_BIN_EXE_mock-csi-driver")),
        &args,
        &dir.path().join("driver.log"),
    )
    .unwrap();
    child.wait_logged("listening on ", WAIT).await.unwrap();
    let log = child.log_text();
    let listening = log
        .lines()
        .find(|line| line.starts_with("listening on "))
        .unwrap();
    assert_eq!(listening, format!("listening on unix://{}", path.display()));

    let channel = connect(&path).await;
    let info = IdentityClient::new(channel.clone())
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "bin.csi.example.com");
    let mut controller = ControllerClient::new(channel);
    let err = controller
        .create_volume(create_request("a", GI))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    controller
        .create_volume(create_request("a", GI))
        .await
        .unwrap();

    child.signal(Signal::TERM).unwrap();
    let status = child.wait_exit(WAIT).await.unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(!path.exists(), "socket removed on exit");
}

#[tokio::test]
async fn modify_volume_is_advertised_only_when_configured_and_keeps_the_mutable_parameters() {
    use csi::controller_service_capability::{Type as CapType, rpc::Type as Rpc};
    let advertises_modify = async |c: &mut Clients| {
        c.controller
            .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
            .await
            .unwrap()
            .into_inner()
            .capabilities
            .iter()
            .any(|cap| {
                matches!(&cap.r#type, Some(CapType::Rpc(rpc)) if rpc.r#type == Rpc::ModifyVolume as i32)
            })
    };
    let request = |parameters: &[(&str, &str)]| csi::ControllerModifyVolumeRequest {
        volume_id: "static-1".into(),
        mutable_parameters: parameters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    };

    let (_plain, mut c) = start(MockDriverConfig::default()).await;
    assert!(!advertises_modify(&mut c).await);
    let err = c
        .controller
        .controller_modify_volume(request(&[("iops", "3000")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);

    let mut config = MockDriverConfig::default();
    config
        .controller_capabilities
        .push(ControllerRpc::ModifyVolume);
    let (driver, mut c) = start(config).await;
    assert!(advertises_modify(&mut c).await);
    driver.insert_volume(MockVolume::new("static-1", GI));
    c.controller
        .controller_modify_volume(request(&[("iops", "3000")]))
        .await
        .unwrap();
    assert_eq!(
        driver.volume("static-1").unwrap().mutable_parameters,
        [("iops".to_owned(), "3000".to_owned())].into()
    );
    // CSI spec: mutable_parameters is REQUIRED.
    let err = c
        .controller
        .controller_modify_volume(request(&[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}
