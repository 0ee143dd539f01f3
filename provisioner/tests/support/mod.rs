//! A small cluster for whole-binary tests: the in-memory API server listening on 127.0.0.1
//! with a kubeconfig, the controller-manager stand-in (PV binder, protection controllers), the
//! mock CSI driver on a temp-dir socket, one Node + CSINode for the driver's topology, and the
//! real `csi-provisioner` binary as a child process whose log is printed if a test fails.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc,
    reason = "test harness: a failure should panic; not every test uses every helper"
)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Event, Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use testbed_cluster::apiserver::{self, ApiServer, Listening};
use testbed_cluster::kcm::{self, ControllerManager};
use testbed_mock_csi::{
    DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY, Method, MockDriver, MockDriverConfig, MockDriverHandle,
};
use testbed_support::process::{ChildProcess, CommandLine, Signal};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_csi-provisioner");
pub(crate) const DRIVER: &str = "hostpath.csi.k8s.io";
pub(crate) const NAMESPACE: &str = "default";

/// Everything but the provisioner.
pub(crate) struct Cluster {
    pub(crate) server: ApiServer,
    _listening: Listening,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) client: Client,
    /// `None` while paused ([`Cluster::pause_kcm`]).
    kcm: Option<ControllerManager>,
    pub(crate) driver: MockDriverHandle,
}

impl Cluster {
    pub(crate) async fn start() -> Self {
        Self::with_driver(driver_config()).await
    }

    pub(crate) async fn with_driver(config: MockDriverConfig) -> Self {
        Self::with_server(config, apiserver::Config::default()).await
    }

    /// As [`Cluster::with_driver`], with an API server configured by `api` (e.g. an older
    /// Kubernetes' versions).
    pub(crate) async fn with_server(config: MockDriverConfig, api: apiserver::Config) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = ApiServer::with_config(api);
        let listening = server.listen().await.unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        listening.write_kubeconfig(&kubeconfig).unwrap();
        let client = server.client();
        let kcm = ControllerManager::start(client.clone(), kcm::Config::default());
        let driver = MockDriver::start(config, dir.path().join("csi.sock"))
            .await
            .unwrap();
        let cluster = Self {
            server,
            _listening: listening,
            kubeconfig,
            dir,
            client,
            kcm: Some(kcm),
            driver,
        };
        cluster.register_node();
        cluster
    }

    /// What kubelet and the registrar would have written: the Node's topology label and the
    /// CSINode entry with the driver's topology key.
    fn register_node(&self) {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(DEFAULT_NODE_ID.into()),
                labels: Some(BTreeMap::from([(
                    DEFAULT_TOPOLOGY_KEY.into(),
                    DEFAULT_NODE_ID.into(),
                )])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        self.server.put_object(&node).unwrap();
        let csinode = CSINode {
            metadata: ObjectMeta {
                name: Some(DEFAULT_NODE_ID.into()),
                ..ObjectMeta::default()
            },
            spec: CSINodeSpec {
                drivers: vec![CSINodeDriver {
                    name: DRIVER.into(),
                    node_id: DEFAULT_NODE_ID.into(),
                    topology_keys: Some(vec![DEFAULT_TOPOLOGY_KEY.into()]),
                    ..CSINodeDriver::default()
                }],
            },
        };
        self.server.put_object(&csinode).unwrap();
    }

    /// The controller-manager stand-in.
    pub(crate) fn kcm(&self) -> &ControllerManager {
        self.kcm.as_ref().expect("the controller-manager is paused")
    }

    /// Stops the controller-manager stand-in: nothing binds claims until [`Cluster::resume_kcm`],
    /// as while a real kube-controller-manager is down or lagging.
    pub(crate) async fn pause_kcm(&mut self) {
        if let Some(kcm) = self.kcm.take() {
            kcm.stop().await;
        }
    }

    /// Starts a fresh controller-manager stand-in, which syncs everything as a restarted one does.
    pub(crate) fn resume_kcm(&mut self) {
        if self.kcm.is_none() {
            self.kcm = Some(ControllerManager::start(
                self.client.clone(),
                kcm::Config::default(),
            ));
        }
    }

    pub(crate) fn socket(&self) -> PathBuf {
        self.driver.socket_path().to_owned()
    }

    /// Starts `csi-provisioner` with the standard flags plus `extra`.
    pub(crate) fn provisioner(&self, name: &str, extra: &[&str]) -> Provisioner {
        self.provisioner_with(name, &self.socket(), &[], extra)
    }

    /// As [`Cluster::provisioner`], with extra environment variables (`NAMESPACE`,
    /// `POD_NAME`, ...).
    pub(crate) fn provisioner_env(
        &self,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Provisioner {
        self.provisioner_with(name, &self.socket(), env, extra)
    }

    /// Starts `csi-provisioner` with the standard flags plus `extra` against the driver at
    /// `socket`, with the environment variables `env` (e.g. a node deployment's `NODE_NAME`).
    pub(crate) fn provisioner_with(
        &self,
        name: &str,
        socket: &Path,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Provisioner {
        let http = free_port();
        let mut args = vec![
            format!("--csi-address={}", socket.display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--http-endpoint={http}"),
            "--retry-interval-start=100ms".to_owned(),
            "--retry-interval-max=2s".to_owned(),
            "--kube-api-qps=100".to_owned(),
            "--kube-api-burst=200".to_owned(),
            "-v=2".to_owned(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Provisioner::spawn(
            &self.dir.path().join(format!("{name}.log")),
            name,
            &args,
            env,
            http,
        )
    }

    pub(crate) fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    pub(crate) fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    pub(crate) async fn create_class(&self, class: StorageClass) {
        Api::<StorageClass>::all(self.client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }

    pub(crate) async fn create_claim(
        &self,
        name: &str,
        class: &str,
        size: &str,
    ) -> PersistentVolumeClaim {
        self.claims()
            .create(&PostParams::default(), &claim(name, class, size))
            .await
            .unwrap()
    }

    pub(crate) async fn delete_claim(&self, name: &str) {
        self.claims()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// Deletes claim `name` while its CreateVolume runs: once the `nth` CreateVolume since the
    /// driver's calls were last cleared has arrived (a delayed one, so it is still in flight).
    pub(crate) async fn delete_claim_during_create(&self, name: &str, nth: usize) {
        self.driver
            .wait_for_calls(Method::CreateVolume, nth, Duration::from_secs(30))
            .await
            .unwrap();
        self.delete_claim(name).await;
    }

    /// Waits until the claim is Bound; returns it and its PV.
    pub(crate) async fn bound(
        &self,
        name: &str,
        timeout: Duration,
    ) -> (PersistentVolumeClaim, PersistentVolume) {
        let claim = eventually(&format!("claim {name} Bound"), timeout, async || {
            let claim = self.claims().get(name).await.ok()?;
            (claim.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(claim)
        })
        .await;
        let volume_name = claim.spec.as_ref().unwrap().volume_name.clone().unwrap();
        let volume = self.volumes().get(&volume_name).await.unwrap();
        (claim, volume)
    }

    /// Waits until PV `name` no longer exists.
    pub(crate) async fn volume_gone(&self, name: &str, timeout: Duration) {
        eventually(&format!("PV {name} gone"), timeout, async || {
            self.volumes()
                .get_opt(name)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
    }

    /// Waits for the first Event with `reason`.
    pub(crate) async fn first_event(&self, reason: &str, timeout: Duration) -> Event {
        eventually(&format!("a {reason} Event"), timeout, async || {
            self.events(reason).await.into_iter().next()
        })
        .await
    }

    pub(crate) async fn events(&self, reason: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    }

    /// Updates an annotation of claim `name`: an event the provisioner's informer delivers
    /// after every earlier change of the claim.
    pub(crate) async fn touch_claim(&self, name: &str) {
        self.claims()
            .patch(name, &PatchParams::default(), &touch())
            .await
            .unwrap();
    }

    /// As [`Cluster::touch_claim`], for PV `name`.
    pub(crate) async fn touch_volume(&self, name: &str) {
        self.volumes()
            .patch(name, &PatchParams::default(), &touch())
            .await
            .unwrap();
    }

    pub(crate) async fn volume_count(&self) -> usize {
        self.volumes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
    }
}

/// A merge patch that changes nothing the provisioner reads but still makes a watch event.
fn touch() -> Patch<serde_json::Value> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Patch::Merge(serde_json::json!({
        "metadata": {"annotations": {"test.csi.k8s.io/touched": nanos.to_string()}}
    }))
}

pub(crate) fn driver_config() -> MockDriverConfig {
    MockDriverConfig {
        driver_name: DRIVER.into(),
        ..MockDriverConfig::default()
    }
}

/// [`driver_config`] with the capabilities data sources need: clones and snapshots.
pub(crate) fn data_source_driver_config() -> MockDriverConfig {
    let mut config = driver_config();
    config.controller_capabilities.extend([
        testbed_mock_csi::ControllerRpc::CloneVolume,
        testbed_mock_csi::ControllerRpc::CreateDeleteSnapshot,
    ]);
    config
}

pub(crate) fn class(name: &str, binding: &str) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        provisioner: DRIVER.into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some(binding.into()),
        ..StorageClass::default()
    }
}

/// A string map (StorageClass parameters, annotations) from pairs.
pub(crate) fn string_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(crate) fn claim(name: &str, class: &str, size: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(class.into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

pub(crate) use testbed_support::wait::eventually;

pub(crate) fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A running `csi-provisioner`; killed on drop, its log printed if the test is failing.
pub(crate) struct Provisioner {
    pub(crate) process: ChildProcess,
    pub(crate) http: SocketAddr,
}

impl Provisioner {
    /// Starts the binary with exactly `args` (no standard flags); it should serve on `http`.
    pub(crate) fn spawn_args(
        cluster: &Cluster,
        name: &str,
        args: &[String],
        http: SocketAddr,
    ) -> Self {
        Self::spawn(
            &cluster.dir.path().join(format!("{name}.log")),
            name,
            args,
            &[],
            http,
        )
    }

    fn spawn(
        log: &Path,
        name: &str,
        args: &[String],
        env: &[(&str, &str)],
        http: SocketAddr,
    ) -> Self {
        // The elector's identity is the pod name, which a pod has as HOSTNAME.
        let command = env.iter().fold(
            CommandLine::new(BIN, args).env("HOSTNAME", name),
            |command, (key, value)| command.env(key, value),
        );
        let process = ChildProcess::start(name, command, log).unwrap();
        Self { process, http }
    }

    pub(crate) fn log(&self) -> String {
        self.process.log_text()
    }

    pub(crate) async fn get(
        &self,
        path: &str,
    ) -> Option<testbed_support::http_client::HttpResponse> {
        testbed_support::http_client::get(self.http, path, Duration::from_secs(5))
            .await
            .ok()
    }

    /// Waits until the diagnostics server answers (it starts once the driver is known).
    pub(crate) async fn wait_serving(&self) {
        eventually(
            &format!("{} serving /metrics", self.process.name()),
            Duration::from_secs(20),
            async || self.get("/metrics").await.filter(|r| r.status == 200),
        )
        .await;
    }

    /// The value of one series of `/metrics`, e.g. `workqueue_adds_total{name="claims"}`.
    pub(crate) async fn metric(&self, series: &str) -> Option<f64> {
        let body = self.get("/metrics").await.filter(|r| r.status == 200)?.body;
        body.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// `workqueue_adds_total` of work queue `queue` ("claims" or "volumes").
    async fn queue_adds(&self, queue: &str) -> Option<f64> {
        self.metric(&format!("workqueue_adds_total{{name=\"{queue}\"}}"))
            .await
    }

    /// Waits until work queue `queue` has finished every item added to it (client-go counts
    /// each add once and each finished item once); returns the adds.
    pub(crate) async fn queue_idle(&self, queue: &str) -> f64 {
        eventually(
            &format!("the {queue} queue idle"),
            Duration::from_secs(20),
            async || {
                let adds = self.queue_adds(queue).await?;
                let done = self
                    .metric(&format!(
                        "workqueue_work_duration_seconds_count{{name=\"{queue}\"}}"
                    ))
                    .await?;
                (done >= adds).then_some(adds)
            },
        )
        .await
    }

    /// The positive signal that the provisioner has acted on the current state of the objects
    /// of `queue`: waits until the queue is idle, makes an update with `touch` (which the
    /// informer delivers after every earlier change), and waits until that add is finished
    /// too. What it would have done about an earlier change is then done.
    pub(crate) async fn settled(&self, queue: &str, touch: impl AsyncFnOnce()) {
        let before = self.queue_idle(queue).await;
        touch().await;
        eventually(
            &format!("the {queue} queue to take the touch"),
            Duration::from_secs(20),
            async || (self.queue_adds(queue).await? > before).then_some(()),
        )
        .await;
        self.queue_idle(queue).await;
    }

    /// Waits for the process to exit; returns its exit code.
    pub(crate) async fn exit_code(&mut self, timeout: Duration) -> Option<i32> {
        self.process.wait_exit(timeout).await.unwrap().code()
    }

    /// Sends SIGTERM, as kubelet does to stop the container.
    pub(crate) fn sigterm(&self) {
        self.process.signal(Signal::TERM).unwrap();
    }

    /// Waits until the log contains `line`: the positive signal that the process got there.
    pub(crate) async fn wait_logged(&mut self, line: &str) {
        self.process
            .wait_logged(line, Duration::from_secs(20))
            .await
            .unwrap();
    }

    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }
}
