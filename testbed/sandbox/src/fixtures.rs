//! What the `bench` and `chaos` binaries start and store directly (no request counted): the
//! in-memory API server listening with a kubeconfig and the mock driver, both in-process; the
//! node kubelet and the registrar would have registered; claims already bound to their CSI PVs
//! as the PV controller leaves them.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::CSINode;
use serde_json::json;
use testbed_cluster::apiserver::{ApiServer, Listening, StoreError};
use testbed_mock_csi::{
    DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY, MockDriver, MockDriverConfig,
    MockDriverHandle,
};

/// Why [`Backends::start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The API server could not listen, or its kubeconfig could not be written.
    #[error("cannot start the API server or write its kubeconfig")]
    ApiServer(#[source] std::io::Error),
    /// The mock driver could not start.
    #[error("cannot start the mock driver")]
    Driver(#[source] testbed_mock_csi::Error),
    /// The Node or CSINode was refused.
    #[error("cannot store the Node or its CSINode")]
    Node(#[source] StoreError),
}

/// The API server (listening, with a kubeconfig) and the mock driver, both in this process.
#[derive(Debug)]
pub struct Backends {
    /// The API server.
    pub server: ApiServer,
    /// Its listener.
    pub listening: Listening,
    /// A kubeconfig for it, in the work dir.
    pub kubeconfig: PathBuf,
    /// The mock driver, serving `csi.sock` in the work dir.
    pub driver: MockDriverHandle,
}

impl Backends {
    /// Starts both, the driver with its default configuration (CONTROLLER_SERVICE with
    /// CREATE_DELETE_VOLUME, PUBLISH_UNPUBLISH_VOLUME and EXPAND_VOLUME), and stores the
    /// driver's Node and CSINode ([`register_node`]).
    ///
    /// # Errors
    /// See [`StartError`].
    pub async fn start(work_dir: &Path) -> Result<Self, StartError> {
        Self::start_with(work_dir, testbed_cluster::apiserver::Config::default()).await
    }

    /// As [`Backends::start`], with the API server configured by `config` (e.g. recording
    /// `managedFields` for the bench).
    ///
    /// # Errors
    /// As [`Backends::start`].
    pub async fn start_with(
        work_dir: &Path,
        config: testbed_cluster::apiserver::Config,
    ) -> Result<Self, StartError> {
        let server = ApiServer::with_config(config);
        let listening = server.listen().await.map_err(StartError::ApiServer)?;
        let kubeconfig = work_dir.join("kubeconfig");
        listening
            .write_kubeconfig(&kubeconfig)
            .map_err(StartError::ApiServer)?;
        let driver = MockDriver::start(MockDriverConfig::default(), work_dir.join("csi.sock"))
            .await
            .map_err(StartError::Driver)?;
        register_node(&server, DEFAULT_DRIVER_NAME).map_err(StartError::Node)?;
        Ok(Self {
            server,
            listening,
            kubeconfig,
            driver,
        })
    }
}

/// Stores the mock driver's Node and its CSINode for `driver`, as kubelet and the registrar
/// would, so topology-aware provisioning has a node to pick and the attacher finds the node ID.
///
/// # Errors
/// When the store refuses an object.
pub fn register_node(server: &ApiServer, driver: &str) -> Result<(), StoreError> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": DEFAULT_NODE_ID, "labels": {DEFAULT_TOPOLOGY_KEY: DEFAULT_NODE_ID}},
    }))
    .map_err(StoreError::Json)?;
    server.put_object(&node)?;
    let csinode: CSINode = serde_json::from_value(json!({
        "metadata": {"name": DEFAULT_NODE_ID},
        "spec": {"drivers": [{
            "name": driver,
            "nodeID": DEFAULT_NODE_ID,
            "topologyKeys": [DEFAULT_TOPOLOGY_KEY],
        }]},
    }))
    .map_err(StoreError::Json)?;
    server.put_object(&csinode)?;
    Ok(())
}

/// Names of a bound claim and its PV.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// Namespace of the claim.
    pub namespace: &'a str,
    /// The claim.
    pub claim: &'a str,
    /// The PV, also the volume handle in the driver.
    pub volume: &'a str,
    /// The StorageClass of both.
    pub class: &'a str,
    /// The CSI driver (and provisioner) name.
    pub driver: &'a str,
}

impl Binding<'_> {
    /// The claim bound to its 1Gi PV, as the PV controller leaves it after binding.
    ///
    /// # Errors
    /// Never in practice (a fixed JSON shape).
    pub fn claim(&self) -> serde_json::Result<PersistentVolumeClaim> {
        serde_json::from_value(json!({
            "metadata": {
                "name": self.claim,
                "namespace": self.namespace,
                "annotations": {
                    "pv.kubernetes.io/bind-completed": "yes",
                    "pv.kubernetes.io/bound-by-controller": "yes",
                    "volume.kubernetes.io/storage-provisioner": self.driver,
                },
                "finalizers": ["kubernetes.io/pvc-protection"],
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": self.class,
                "volumeMode": "Filesystem",
                "volumeName": self.volume,
            },
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
            },
        }))
    }

    /// Its CSI PV, bound to the claim whose uid is `claim_uid` (the resizer, as upstream, skips
    /// a PV bound to another claim), as csi-provisioner and the PV controller leave it.
    ///
    /// # Errors
    /// Never in practice (a fixed JSON shape).
    pub fn volume(&self, claim_uid: &str) -> serde_json::Result<PersistentVolume> {
        serde_json::from_value(json!({
            "metadata": {
                "name": self.volume,
                "annotations": {"pv.kubernetes.io/provisioned-by": self.driver},
                "finalizers": ["kubernetes.io/pv-protection"],
            },
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": self.class,
                "volumeMode": "Filesystem",
                "claimRef": {
                    "kind": "PersistentVolumeClaim",
                    "apiVersion": "v1",
                    "namespace": self.namespace,
                    "name": self.claim,
                    "uid": claim_uid,
                },
                "csi": {"driver": self.driver, "volumeHandle": self.volume, "fsType": "ext4"},
            },
            "status": {"phase": "Bound"},
        }))
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`), colored on a terminal: the set-up
/// of the `bench` and `chaos` binaries.
pub fn init_tracing() {
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
}
