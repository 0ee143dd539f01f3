//! The cluster of csi-attacher's whole-binary tests: the in-memory API server listening on
//! 127.0.0.1 with a kubeconfig, the mock CSI driver on a temp-dir socket with `vol-1`, the PV
//! `pv-1` for it and a CSINode for `DEFAULT_NODE_ID`; the real `csi-attacher` binary runs as a
//! child process. VolumeAttachments are made by the controller-manager stand-in's
//! attach-detach helper, as kube-controller-manager makes them.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc,
    reason = "test harness: a failure should panic; not every test uses every helper"
)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Event, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use testbed_cluster::apiserver::{ApiServer, Listening};
use testbed_cluster::kcm::attach_detach;
use testbed_mock_csi::{
    DEFAULT_NODE_ID, MockDriver, MockDriverConfig, MockDriverHandle, MockVolume,
};
use testbed_support::process::{ChildProcess, CommandLine};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_csi-attacher");
pub(crate) const DRIVER: &str = "hostpath.csi.k8s.io";
pub(crate) const FINALIZER: &str = "external-attacher/hostpath-csi-k8s-io";
pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

/// API server, mock driver (with `vol-1` and a CSINode for `DEFAULT_NODE_ID`), one attacher.
pub(crate) struct Cluster {
    _server: ApiServer,
    _listening: Listening,
    pub(crate) client: Client,
    pub(crate) driver: MockDriverHandle,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) dir: tempfile::TempDir,
}

impl Cluster {
    pub(crate) async fn start(config: MockDriverConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = ApiServer::new();
        let listening = server.listen().await.unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        listening.write_kubeconfig(&kubeconfig).unwrap();
        let client = server.client();
        let driver = MockDriver::start(
            MockDriverConfig {
                driver_name: DRIVER.into(),
                ..config
            },
            dir.path().join("csi.sock"),
        )
        .await
        .unwrap();
        driver.insert_volume(MockVolume::new("vol-1", 1 << 30));
        server.put_object(&csi_node()).unwrap();
        Api::<PersistentVolume>::all(client.clone())
            .create(&PostParams::default(), &pv("pv-1", "vol-1"))
            .await
            .unwrap();
        Self {
            _server: server,
            _listening: listening,
            client,
            driver,
            kubeconfig,
            dir,
        }
    }

    pub(crate) fn attacher(&self) -> ChildProcess {
        self.attacher_with(&[])
    }

    pub(crate) fn attacher_with(&self, extra: &[&str]) -> ChildProcess {
        self.replica("csi-attacher", extra)
    }

    /// An attacher whose log is `<name>.log` in the cluster's directory, with `HOSTNAME=<name>`:
    /// the leader-election identity is the host name (upstream `os.Hostname`), so two replicas
    /// on one machine need different ones.
    pub(crate) fn replica(&self, name: &str, extra: &[&str]) -> ChildProcess {
        let mut args = vec![
            format!("--csi-address={}", self.driver.socket_path().display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--retry-interval-start=100ms".to_owned(),
            "--retry-interval-max=1s".to_owned(),
            "-v=5".to_owned(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        ChildProcess::start(
            name,
            CommandLine::new(BIN, &args).env("HOSTNAME", name),
            &self.dir.path().join(format!("{name}.log")),
        )
        .unwrap()
    }

    /// Another PV with its volume in the driver.
    pub(crate) async fn add_volume(&self, pv_name: &str, handle: &str) {
        self.driver.insert_volume(MockVolume::new(handle, 1 << 30));
        Api::<PersistentVolume>::all(self.client.clone())
            .create(&PostParams::default(), &pv(pv_name, handle))
            .await
            .unwrap();
    }

    pub(crate) async fn attached(&self) -> VolumeAttachment {
        let name = attach_detach::attach(&self.client, "pv-1", DEFAULT_NODE_ID)
            .await
            .unwrap();
        attach_detach::wait_attached(&self.client, &name, TIMEOUT)
            .await
            .unwrap()
    }

    pub(crate) async fn detached(&self, name: &str) {
        attach_detach::detach(&self.client, "pv-1", DEFAULT_NODE_ID)
            .await
            .unwrap();
        attach_detach::wait_detached(&self.client, name, TIMEOUT)
            .await
            .unwrap();
    }

    pub(crate) fn published(&self) -> bool {
        self.driver
            .volume("vol-1")
            .unwrap()
            .published_nodes
            .contains_key(DEFAULT_NODE_ID)
    }

    pub(crate) async fn events(&self, reason: &str) -> Vec<Event> {
        Api::<Event>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }
}

pub(crate) fn csi_node() -> CSINode {
    CSINode {
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
    }
}

pub(crate) fn pv(name: &str, handle: &str) -> PersistentVolume {
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
            capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

pub(crate) async fn metrics(addr: std::net::SocketAddr) -> Option<String> {
    let response = testbed_support::http_client::get(addr, "/metrics", Duration::from_secs(5))
        .await
        .ok()?;
    (response.status == 200).then_some(response.body)
}
