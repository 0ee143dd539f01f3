//! The cluster of the whole-binary tests: the in-memory API server listening on 127.0.0.1 with a
//! kubeconfig, the mock CSI driver on a temp-dir socket (with `vol-1`, PV `pv-1` and a CSINode
//! for [`DEFAULT_NODE_ID`]), and the real `csi-attacher` binary as a child process whose log is
//! printed if a test fails. VolumeAttachments come from the controller-manager stand-in's
//! attach-detach helper, or are written by hand where a test needs one kube-controller-manager
//! would not make.

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

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Event, PersistentVolume, PersistentVolumeSpec, Secret,
    SecretReference,
};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeDriver, CSINodeSpec, VolumeAttachment, VolumeAttachmentSource,
    VolumeAttachmentSpec, VolumeError,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use proto::csi::v1::{ControllerPublishVolumeRequest, ControllerUnpublishVolumeRequest};
use testbed_cluster::apiserver::{ApiServer, Listening};
use testbed_cluster::kcm::attach_detach;
use testbed_mock_csi::{
    DEFAULT_NODE_ID, Method, MockDriver, MockDriverConfig, MockDriverHandle, MockVolume,
};
use testbed_support::process::{ChildProcess, CommandLine};
use testbed_support::wait::eventually;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_csi-attacher");
pub(crate) const DRIVER: &str = "hostpath.csi.k8s.io";
pub(crate) const FINALIZER: &str = "external-attacher/hostpath-csi-k8s-io";
/// How long a test waits for a positive signal before it fails; a passing test never waits
/// it out. 60 s, not 20: on a loaded 2-core machine (a build beside the tests, 30-40 % steal)
/// eight publish retries of `contention.rs` took 20 s.
pub(crate) const TIMEOUT: Duration = Duration::from_mins(1);

/// API server, mock driver (with `vol-1` and a CSINode for `DEFAULT_NODE_ID`), one attacher.
pub(crate) struct Cluster {
    _listening: Listening,
    pub(crate) server: ApiServer,
    pub(crate) client: Client,
    pub(crate) driver: MockDriverHandle,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) dir: tempfile::TempDir,
    /// The mock driver's name: the VolumeAttachments' attacher and the CSINode's entry.
    pub(crate) driver_name: String,
}

impl Cluster {
    pub(crate) async fn start(config: MockDriverConfig) -> Self {
        Self::start_named(DRIVER, config).await
    }

    /// As [`Cluster::start`], with the driver named `driver_name` (PV `pv-1` stays one of
    /// [`DRIVER`]).
    pub(crate) async fn start_named(driver_name: &str, config: MockDriverConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = ApiServer::new();
        let listening = server.listen().await.unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        listening.write_kubeconfig(&kubeconfig).unwrap();
        let client = server.client();
        let driver = MockDriver::start(
            MockDriverConfig {
                driver_name: driver_name.into(),
                ..config
            },
            dir.path().join("csi.sock"),
        )
        .await
        .unwrap();
        driver.insert_volume(MockVolume::new("vol-1", 1 << 30));
        server.put_object(&csi_node(&[driver_name])).unwrap();
        Api::<PersistentVolume>::all(client.clone())
            .create(&PostParams::default(), &pv("pv-1", "vol-1"))
            .await
            .unwrap();
        Self {
            _listening: listening,
            server,
            client,
            driver,
            kubeconfig,
            dir,
            driver_name: driver_name.to_owned(),
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
        self.add_pv(pv(pv_name, handle)).await;
    }

    /// `pv` and, when it is a CSI volume, its volume in the driver.
    pub(crate) async fn add_pv(&self, pv: PersistentVolume) {
        if let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) {
            self.driver
                .insert_volume(MockVolume::new(&csi.volume_handle, 1 << 30));
        }
        Api::<PersistentVolume>::all(self.client.clone())
            .create(&PostParams::default(), &pv)
            .await
            .unwrap();
    }

    /// A VolumeAttachment of this driver for `source` on [`DEFAULT_NODE_ID`], written directly
    /// (for sources the attach-detach helper does not make: inline volumes, PVs that are
    /// missing or not CSI).
    pub(crate) async fn create_va(&self, name: &str, source: VolumeAttachmentSource) -> String {
        let va = VolumeAttachment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: VolumeAttachmentSpec {
                attacher: self.driver_name.clone(),
                node_name: DEFAULT_NODE_ID.into(),
                source,
            },
            status: None,
        };
        Api::<VolumeAttachment>::all(self.client.clone())
            .create(&PostParams::default(), &va)
            .await
            .unwrap();
        name.to_owned()
    }

    /// The Secret [`pv_with_publish_secret`] names, with `password: s3cret`.
    pub(crate) async fn create_publish_secret(&self) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(PUBLISH_SECRET.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "password".to_owned(),
                ByteString(b"s3cret".to_vec()),
            )])),
            ..Default::default()
        };
        Api::<Secret>::namespaced(self.client.clone(), "default")
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    pub(crate) fn attachments(&self) -> Api<VolumeAttachment> {
        Api::all(self.client.clone())
    }

    pub(crate) fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    pub(crate) async fn attached(&self) -> VolumeAttachment {
        self.attached_pv("pv-1").await
    }

    /// Asks for `pv_name` on [`DEFAULT_NODE_ID`] and waits until it is attached.
    pub(crate) async fn attached_pv(&self, pv_name: &str) -> VolumeAttachment {
        let name = self.request_attach(pv_name).await;
        attach_detach::wait_attached(&self.client, &name, TIMEOUT)
            .await
            .unwrap()
    }

    /// Asks for `pv_name` on [`DEFAULT_NODE_ID`] (the VA kube-controller-manager would create)
    /// without waiting; returns the VA name.
    pub(crate) async fn request_attach(&self, pv_name: &str) -> String {
        attach_detach::attach(&self.client, pv_name, DEFAULT_NODE_ID)
            .await
            .unwrap()
    }

    /// Deletes the VolumeAttachment `name` without waiting (our finalizer keeps it until the
    /// attacher detaches).
    pub(crate) async fn request_delete(&self, name: &str) {
        self.attachments()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// Deletes the VolumeAttachment `name` and waits until it is gone.
    pub(crate) async fn delete_va(&self, name: &str) {
        self.request_delete(name).await;
        attach_detach::wait_detached(&self.client, name, TIMEOUT)
            .await
            .unwrap();
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
        self.published_volume("vol-1")
    }

    pub(crate) fn published_volume(&self, handle: &str) -> bool {
        self.driver
            .volume(handle)
            .unwrap()
            .published_nodes
            .contains_key(DEFAULT_NODE_ID)
    }

    /// The ControllerPublishVolume requests the driver received, decoded.
    pub(crate) fn publish_requests(&self) -> Vec<ControllerPublishVolumeRequest> {
        self.driver.requests(Method::ControllerPublishVolume)
    }

    /// The ControllerUnpublishVolume requests the driver received, decoded.
    pub(crate) fn unpublish_requests(&self) -> Vec<ControllerUnpublishVolumeRequest> {
        self.driver.requests(Method::ControllerUnpublishVolume)
    }

    /// The last ControllerPublishVolume request for `handle`.
    pub(crate) fn last_publish_of(&self, handle: &str) -> ControllerPublishVolumeRequest {
        self.publish_requests()
            .into_iter()
            .rfind(|r| r.volume_id == handle)
            .unwrap_or_else(|| panic!("no ControllerPublishVolume for {handle}"))
    }

    /// Waits for `status.attachError` of `name` and returns it.
    pub(crate) async fn attach_error(&self, name: &str) -> VolumeError {
        let vas = self.attachments();
        eventually("status.attachError", TIMEOUT, async || {
            vas.get(name).await.ok()?.status?.attach_error
        })
        .await
    }

    /// Waits until VA `name`'s `status.attachError` says `message`. The attacher's informers
    /// see related changes (a PV or CSINode deleted) in no fixed order, so an earlier retry may
    /// fail for another reason first.
    pub(crate) async fn attach_error_becomes(&self, name: &str, message: &str) {
        let vas = self.attachments();
        eventually(&format!("attachError {message:?}"), TIMEOUT, async || {
            let error = vas.get(name).await.ok()?.status?.attach_error?;
            (error.message.as_deref() == Some(message)).then_some(())
        })
        .await;
    }

    /// Waits for an event with `reason` about the object `name` and returns it.
    pub(crate) async fn event_about(&self, name: &str, reason: &str) -> Event {
        eventually(
            &format!("a {reason} event about {name}"),
            TIMEOUT,
            async || {
                self.events(reason)
                    .await
                    .into_iter()
                    .find(|e| e.involved_object.name.as_deref() == Some(name))
            },
        )
        .await
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

/// A VolumeAttachment source naming the PV `name`.
pub(crate) fn pv_source(name: &str) -> VolumeAttachmentSource {
    VolumeAttachmentSource {
        persistent_volume_name: Some(name.into()),
        inline_volume_spec: None,
    }
}

/// The node's CSINode with an entry for each of `drivers`.
pub(crate) fn csi_node(drivers: &[&str]) -> CSINode {
    CSINode {
        metadata: ObjectMeta {
            name: Some(DEFAULT_NODE_ID.into()),
            ..Default::default()
        },
        spec: CSINodeSpec {
            drivers: drivers
                .iter()
                .map(|name| CSINodeDriver {
                    name: (*name).into(),
                    node_id: DEFAULT_NODE_ID.into(),
                    ..Default::default()
                })
                .collect(),
        },
    }
}

/// A 1Gi ReadWriteOnce ext4 CSI PV of this driver.
pub(crate) fn pv(name: &str, handle: &str) -> PersistentVolume {
    pv_with_spec(
        name,
        PersistentVolumeSpec {
            csi: Some(csi_source(handle)),
            ..Default::default()
        },
    )
}

/// The name of the publish Secret (namespace `default`).
pub(crate) const PUBLISH_SECRET: &str = "publish-secret";

/// [`pv`] with `spec.csi.controllerPublishSecretRef` = `default/publish-secret`.
pub(crate) fn pv_with_publish_secret(name: &str, handle: &str) -> PersistentVolume {
    let mut pv = pv(name, handle);
    if let Some(csi) = pv.spec.as_mut().and_then(|s| s.csi.as_mut()) {
        csi.controller_publish_secret_ref = Some(SecretReference {
            name: Some(PUBLISH_SECRET.into()),
            namespace: Some("default".into()),
        });
    }
    pv
}

/// A 1Gi ReadWriteOnce PV with `spec` (its volume source, modes, options) on top.
pub(crate) fn pv_with_spec(name: &str, spec: PersistentVolumeSpec) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: spec
                .access_modes
                .clone()
                .or_else(|| Some(vec!["ReadWriteOnce".into()])),
            capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
            ..spec
        }),
        ..Default::default()
    }
}

/// The CSI source of this driver for `handle`, fsType ext4.
pub(crate) fn csi_source(handle: &str) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: DRIVER.into(),
        volume_handle: handle.into(),
        fs_type: Some("ext4".into()),
        ..Default::default()
    }
}

/// Whether an object carries this attacher's finalizer (PVs also get `kubernetes.io/pv-protection`
/// from admission).
pub(crate) fn has_our_finalizer(meta: &ObjectMeta) -> bool {
    finalizers(meta).iter().any(|f| f == FINALIZER)
}

/// The finalizers of an object's metadata.
pub(crate) fn finalizers(meta: &ObjectMeta) -> Vec<String> {
    meta.finalizers.clone().unwrap_or_default()
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

/// The Lease of `DRIVER` (`external-attacher-leader-<sanitized driver>`).
pub(crate) const LEASE: &str = "external-attacher-leader-hostpath-csi-k8s-io";

impl Cluster {
    /// The holder identity written in the Lease, if the Lease exists.
    pub(crate) async fn lease_holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.client.clone(), "default")
            .get_opt(LEASE)
            .await
            .ok()??
            .spec?
            .holder_identity
    }

    /// Waits until `name` holds the Lease.
    pub(crate) async fn wait_leading(&self, name: &str, timeout: Duration) {
        eventually(&format!("{name} holds the Lease"), timeout, async || {
            (self.lease_holder().await.as_deref() == Some(name)).then_some(())
        })
        .await;
    }
}
