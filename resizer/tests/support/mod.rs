//! The harness of the whole-binary tests of `csi-resizer` (moved from `binary.rs` as it was, to
//! be shared with `modify.rs`): the in-memory API server, the mock CSI driver and a claim
//! bound by hand (no controller-manager), the binary as a child process, and readers of the
//! claim's status.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test harness: a failure should panic; not every test uses every helper"
)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Event, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimCondition, PersistentVolumeClaimSpec, PersistentVolumeSpec, Pod,
    SecretReference, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use proto::csi::v1::ControllerExpandVolumeRequest;
use serde_json::json;
use testbed_cluster::apiserver::{ApiServer, Listening};
use testbed_mock_csi::{
    Fault, Method, MockDriver, MockDriverConfig, MockDriverHandle, MockVolume, When,
};
use testbed_support::process::{ChildProcess, CommandLine};
use testbed_support::wait::eventually;
use tonic::Code;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_csi-resizer");
pub(crate) const DRIVER: &str = "hostpath.csi.k8s.io";
pub(crate) const GI: i64 = 1 << 30;
/// How long a test waits for a positive signal before it fails; a passing test never waits
/// it out. 60 s, not 20: on a loaded 2-core machine (a build beside the tests, 30-40 % steal)
/// eight publish retries of `contention.rs` took 20 s.
pub(crate) const TIMEOUT: Duration = Duration::from_mins(1);

/// API server, mock driver with `vol-1` (1Gi), and claim `default/data` bound to `pv-1`.
pub(crate) struct Cluster {
    pub(crate) server: ApiServer,
    pub(crate) _listening: Listening,
    pub(crate) client: Client,
    pub(crate) driver: MockDriverHandle,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) dir: tempfile::TempDir,
}

impl Cluster {
    pub(crate) async fn start(config: MockDriverConfig) -> Self {
        Self::start_with_pv(config, |_| {}).await
    }

    pub(crate) async fn start_with_pv(
        config: MockDriverConfig,
        pv_change: impl FnOnce(&mut PersistentVolume),
    ) -> Self {
        Self::start_on(ApiServer::new(), config, pv_change).await
    }

    /// As [`Cluster::start_with_pv`], on `server`.
    pub(crate) async fn start_on(
        server: ApiServer,
        config: MockDriverConfig,
        pv_change: impl FnOnce(&mut PersistentVolume),
    ) -> Self {
        Self::start_named(server, DRIVER, config, pv_change).await
    }

    /// As [`Cluster::start_on`], with the driver named `driver_name` (the PVs stay CSI
    /// volumes of [`DRIVER`] unless `pv_change` changes them).
    pub(crate) async fn start_named(
        server: ApiServer,
        driver_name: &str,
        config: MockDriverConfig,
        pv_change: impl FnOnce(&mut PersistentVolume),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
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
        let cluster = Self {
            server,
            _listening: listening,
            client,
            driver,
            kubeconfig,
            dir,
        };
        cluster.add_claim(1, pv_change).await;
        cluster
    }

    /// Claim `data` (n = 1) or `data-<n>`, bound to PV `pv-<n>` of volume `vol-<n>` (1Gi).
    pub(crate) async fn add_claim(&self, n: usize, pv_change: impl FnOnce(&mut PersistentVolume)) {
        let name = claim_name(n);
        self.driver
            .insert_volume(MockVolume::new(format!("vol-{n}"), GI));
        let claim = self
            .claims()
            .create(&PostParams::default(), &pvc(&name, n))
            .await
            .unwrap();
        let mut volume = pv(&name, n, claim.metadata.uid.clone().unwrap());
        pv_change(&mut volume);
        Api::<PersistentVolume>::all(self.client.clone())
            .create(&PostParams::default(), &volume)
            .await
            .unwrap();
        self.claims()
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}),
                ),
            )
            .await
            .unwrap();
    }

    pub(crate) fn resizer(&self, extra: &[&str]) -> ChildProcess {
        ChildProcess::spawn(
            "csi-resizer",
            std::path::Path::new(BIN),
            &Self::args_with(&self.driver, &self.kubeconfig, extra),
            &self.dir.path().join("resizer.log"),
        )
        .unwrap()
    }

    /// A resizer whose log is `<name>.log`, with `HOSTNAME=<name>` (its Lease identity).
    pub(crate) fn replica(&self, name: &str, extra: &[&str]) -> ChildProcess {
        let args = Self::args_with(&self.driver, &self.kubeconfig, extra);
        ChildProcess::start(
            name,
            CommandLine::new(BIN, &args).env("HOSTNAME", name),
            &self.dir.path().join(format!("{name}.log")),
        )
        .unwrap()
    }

    /// The test defaults (fast retries, no in-use gate) unless `extra` sets the same flag.
    pub(crate) fn args_with(
        driver: &MockDriverHandle,
        kubeconfig: &std::path::Path,
        extra: &[&str],
    ) -> Vec<String> {
        let defaults = [
            "--retry-interval-start=100ms",
            "--retry-interval-max=1s",
            "--handle-volume-inuse-error=false",
            "-v=5",
        ];
        let flag = |arg: &str| arg.split('=').next().unwrap_or_default().to_owned();
        let mut args = vec![
            format!("--csi-address={}", driver.socket_path().display()),
            format!("--kubeconfig={}", kubeconfig.display()),
        ];
        args.extend(
            defaults
                .iter()
                .filter(|d| extra.iter().all(|e| flag(e) != flag(d)))
                .map(|d| (*d).to_owned()),
        );
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args
    }

    /// Pod `name` in `default` mounting claim `data`, as a scheduled, running pod.
    pub(crate) async fn pod_using_data(&self, name: &str) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "busybox"}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
        }))
        .unwrap();
        Api::<Pod>::namespaced(self.client.clone(), "default")
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }

    pub(crate) async fn delete_pod(&self, name: &str) {
        Api::<Pod>::namespaced(self.client.clone(), "default")
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }

    /// The `VolumeResizeFailed` events that say the claim is in use (their `count` summed:
    /// repeats are one counted event).
    pub(crate) async fn in_use_events(&self) -> i32 {
        self.events("VolumeResizeFailed")
            .await
            .iter()
            .filter(|e| {
                e.message.as_deref()
                    == Some("Unable to expand default/data because CSI driver hostpath.csi.k8s.io only supports offline expansion and volume is currently in-use")
            })
            .map(|e| e.count.unwrap_or(1))
            .sum()
    }

    /// The first ControllerExpandVolume fails with Internal "backend down".
    pub(crate) fn fail_first_expansion(&self) {
        self.driver.inject(
            Fault::error(
                Method::ControllerExpandVolume,
                Code::Internal,
                "backend down",
            )
            .on(When::FirstN(1)),
        );
    }

    pub(crate) fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), "default")
    }

    pub(crate) async fn request(&self, size: &str) {
        self.request_of("data", size).await;
    }

    pub(crate) async fn request_of(&self, name: &str, size: &str) {
        self.claims()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": size}}}})),
            )
            .await
            .unwrap();
    }

    pub(crate) async fn claim(&self) -> PersistentVolumeClaim {
        self.claims().get("data").await.unwrap()
    }

    pub(crate) async fn volume(&self) -> PersistentVolume {
        Api::<PersistentVolume>::all(self.client.clone())
            .get("pv-1")
            .await
            .unwrap()
    }

    /// The claim once `check` holds for it.
    pub(crate) async fn claim_when(
        &self,
        what: &str,
        check: impl Fn(&PersistentVolumeClaim) -> bool,
    ) -> PersistentVolumeClaim {
        eventually(what, TIMEOUT, async || {
            let claim = self.claims().get("data").await.ok()?;
            check(&claim).then_some(claim)
        })
        .await
    }

    /// The claim once kubelet or the resizer wrote `status.capacity` = `size`.
    pub(crate) async fn capacity_reaches(&self, size: &str) -> PersistentVolumeClaim {
        self.claim_when(&format!("status.capacity {size}"), |c| {
            capacity(c).as_deref() == Some(size)
        })
        .await
    }

    /// The claim once it has a `ControllerResizeError` condition.
    pub(crate) async fn controller_resize_error(&self) -> PersistentVolumeClaim {
        self.claim_when("ControllerResizeError", |c| {
            condition_types(c).contains(&"ControllerResizeError".to_owned())
        })
        .await
    }

    /// The claim once `allocatedResourceStatuses.storage` = `status`.
    pub(crate) async fn resize_status_reaches(&self, status: &str) -> PersistentVolumeClaim {
        self.claim_when(status, |c| resize_status(c).as_deref() == Some(status))
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

    pub(crate) async fn event(&self, reason: &str) -> Event {
        eventually(reason, TIMEOUT, async || {
            self.events(reason).await.into_iter().next()
        })
        .await
    }

    /// Every ControllerExpandVolume fails with `code` until the faults are cleared.
    pub(crate) fn fail_expansions(&self, code: Code, message: &str) {
        self.driver
            .inject(Fault::error(Method::ControllerExpandVolume, code, message));
    }

    pub(crate) fn expand_requests(&self) -> Vec<i64> {
        self.driver
            .requests::<ControllerExpandVolumeRequest>(Method::ControllerExpandVolume)
            .into_iter()
            .map(|r| r.capacity_range.unwrap().required_bytes)
            .collect()
    }
}

/// A free local port for `--http-endpoint`.
pub(crate) fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

pub(crate) fn storage(size: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([("storage".into(), Quantity(size.into()))])
}

pub(crate) fn claim_name(n: usize) -> String {
    if n == 1 {
        "data".to_owned()
    } else {
        format!("data-{n}")
    }
}

pub(crate) fn pvc(name: &str, n: usize) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            volume_name: Some(format!("pv-{n}")),
            resources: Some(VolumeResourceRequirements {
                requests: Some(storage("1Gi")),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

pub(crate) fn pv(claim: &str, n: usize, claim_uid: String) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(format!("pv-{n}")),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: format!("vol-{n}"),
                fs_type: Some("ext4".into()),
                ..Default::default()
            }),
            capacity: Some(storage("1Gi")),
            claim_ref: Some(ObjectReference {
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some("default".into()),
                name: Some(claim.into()),
                uid: Some(claim_uid),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn resize_status(claim: &PersistentVolumeClaim) -> Option<String> {
    claim
        .status
        .as_ref()?
        .allocated_resource_statuses
        .as_ref()?
        .get("storage")
        .cloned()
}

pub(crate) fn allocated(claim: &PersistentVolumeClaim) -> Option<String> {
    Some(
        claim
            .status
            .as_ref()?
            .allocated_resources
            .as_ref()?
            .get("storage")?
            .0
            .clone(),
    )
}

pub(crate) fn capacity(claim: &PersistentVolumeClaim) -> Option<String> {
    Some(
        claim
            .status
            .as_ref()?
            .capacity
            .as_ref()?
            .get("storage")?
            .0
            .clone(),
    )
}

pub(crate) fn condition_types(claim: &PersistentVolumeClaim) -> Vec<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().map(|c| c.type_.clone()).collect())
        .unwrap_or_default()
}

/// The claim's condition of `type_`.
pub(crate) fn condition<'a>(
    claim: &'a PersistentVolumeClaim,
    type_: &str,
) -> Option<&'a PersistentVolumeClaimCondition> {
    claim
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

pub(crate) fn condition_message(claim: &PersistentVolumeClaim, type_: &str) -> Option<String> {
    condition(claim, type_)?.message.clone()
}

/// Sets `spec.csi.controllerExpandSecretRef` of `pv` to `default/<name>`.
pub(crate) fn expand_secret(pv: &mut PersistentVolume, name: &str) {
    pv.spec
        .as_mut()
        .unwrap()
        .csi
        .as_mut()
        .unwrap()
        .controller_expand_secret_ref = Some(SecretReference {
        name: Some(name.into()),
        namespace: Some("default".into()),
    });
}

pub(crate) fn pv_capacity(pv: &PersistentVolume) -> String {
    pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"]
        .0
        .clone()
}

pub(crate) fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

pub(crate) fn pre_resize_capacity(pv: &PersistentVolume) -> Option<&str> {
    annotation(
        &pv.metadata,
        "volume.alpha.kubernetes.io/pre-resize-capacity",
    )
}

pub(crate) fn no_node_expansion() -> MockDriverConfig {
    MockDriverConfig {
        node_expansion_required: false,
        ..MockDriverConfig::default()
    }
}

/// The claim's `volume.kubernetes.io/node-expansion-not-required` annotation.
pub(crate) fn not_required(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(
        &claim.metadata,
        "volume.kubernetes.io/node-expansion-not-required",
    )
}
