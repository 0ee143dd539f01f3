//! Whole-binary tests of `csi-attacher` against the in-memory API server, the
//! controller-manager stand-in's attach-detach helper and the mock CSI driver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use testbed_cluster::apiserver::ApiServer;
use testbed_cluster::kcm::attach_detach;
use testbed_mock_csi::{DEFAULT_NODE_ID, MockDriver, MockDriverConfig, MockVolume};

const BIN: &str = env!("CARGO_BIN_EXE_csi-attacher");
const DRIVER: &str = "hostpath.csi.k8s.io";

fn pv(name: &str, handle: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: handle.into(),
                fs_type: Some("ext4".into()),
                ..Default::default()
            }),
            capacity: Some(BTreeMap::from([(
                "storage".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pv_volume_is_attached_and_detached() {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::new();
    let listening = server.listen().await.unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    listening.write_kubeconfig(&kubeconfig).unwrap();
    let client = server.client();
    let driver = MockDriver::start(
        MockDriverConfig {
            driver_name: DRIVER.into(),
            ..MockDriverConfig::default()
        },
        dir.path().join("csi.sock"),
    )
    .await
    .unwrap();
    driver.insert_volume(MockVolume::new("vol-1", 1 << 30));
    server
        .put_object(&CSINode {
            metadata: ObjectMeta {
                name: Some(DEFAULT_NODE_ID.into()),
                ..Default::default()
            },
            spec: CSINodeSpec {
                drivers: vec![CSINodeDriver {
                    name: DRIVER.into(),
                    node_id: DEFAULT_NODE_ID.into(),
                    ..Default::default()
                }],
            },
        })
        .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv("pv-1", "vol-1"))
        .await
        .unwrap();

    let log = dir.path().join("attacher.log");
    let mut child = tokio::process::Command::new(BIN)
        .args([
            format!("--csi-address={}", driver.socket_path().display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            "--retry-interval-start=100ms".to_owned(),
            "-v=5".to_owned(),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let name = attach_detach::attach(&client, "pv-1", DEFAULT_NODE_ID)
        .await
        .unwrap();
    let attached = attach_detach::wait_attached(&client, &name, Duration::from_secs(20))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", std::fs::read_to_string(&log).unwrap()));
    let finalizers = attached.metadata.finalizers.clone().unwrap_or_default();
    assert_eq!(finalizers, ["external-attacher/hostpath-csi-k8s-io"]);
    let annotations = attached.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("csi.alpha.kubernetes.io/node-id")
            .map(String::as_str),
        Some(DEFAULT_NODE_ID)
    );
    assert!(
        driver
            .volume("vol-1")
            .unwrap()
            .published_nodes
            .contains_key(DEFAULT_NODE_ID)
    );

    attach_detach::detach(&client, "pv-1", DEFAULT_NODE_ID)
        .await
        .unwrap();
    attach_detach::wait_detached(&client, &name, Duration::from_secs(20))
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", std::fs::read_to_string(&log).unwrap()));
    assert!(driver.volume("vol-1").unwrap().published_nodes.is_empty());
    child.start_kill().unwrap();
}
