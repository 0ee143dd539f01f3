//! Whole-binary tests of storage capacity tracking (`--enable-capacity`, spec provisioner.md
//! §6.1): the real `csi-provisioner` against the in-memory API server and the mock driver,
//! which answers GetCapacity like csi-driver-host-path with `--capacity fast=10Gi`.

#![allow(
    clippy::unwrap_used,
    reason = "shared assertion helpers of the tests panic on failure"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use serde_json::json;
use testbed_cluster::apiserver;
use testbed_mock_csi::{
    DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY, Fault, Method, MockDriverConfig, When,
};
use tonic::Code;

/// Generous: the tests run in parallel on small CI machines.
const SHORT: Duration = Duration::from_secs(30);
const GI: i64 = 1 << 30;
const POD: &str = "csi-provisioner-0";
/// Long enough that only a trigger (not the periodic poll) can explain a change in a test.
const NO_POLL: &str = "--capacity-poll-interval=1h";

fn capacity_driver() -> MockDriverConfig {
    MockDriverConfig {
        capacity_by_kind: BTreeMap::from([("fast".to_owned(), 10 * GI)]),
        max_volume_size: 4 * GI,
        ..driver_config()
    }
}

/// A class of the driver with host-path's `kind` parameter.
fn kind_class(name: &str, binding: &str) -> StorageClass {
    let mut class = class(name, binding);
    class.parameters = Some(BTreeMap::from([("kind".into(), "fast".into())]));
    class
}

fn capacities(cluster: &Cluster) -> Api<CSIStorageCapacity> {
    Api::namespaced(cluster.client.clone(), NAMESPACE)
}

async fn list(cluster: &Cluster) -> Vec<CSIStorageCapacity> {
    capacities(cluster)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Waits until the objects of class `class` are exactly one with `zone` and `capacity`.
async fn one_object(
    cluster: &Cluster,
    class: &str,
    zone: &str,
    capacity: &str,
) -> CSIStorageCapacity {
    eventually(
        &format!("one CSIStorageCapacity for {class} in {zone} with {capacity}"),
        SHORT,
        async || {
            let mut objects: Vec<_> = list(cluster)
                .await
                .into_iter()
                .filter(|o| o.storage_class_name == class)
                .collect();
            let object = objects.pop()?;
            let labels = object.node_topology.as_ref()?.match_labels.as_ref()?;
            (objects.is_empty()
                && labels.get(DEFAULT_TOPOLOGY_KEY).map(String::as_str) == Some(zone)
                && object.capacity.as_ref()?.0 == capacity)
                .then_some(object)
        },
    )
    .await
}

/// Deletes `object` as a user would.
async fn delete_object(cluster: &Cluster, object: &CSIStorageCapacity) {
    capacities(cluster)
        .delete(
            object.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
}

/// Waits for an object named other than `deleted`.
async fn recreated(cluster: &Cluster, deleted: &CSIStorageCapacity) -> CSIStorageCapacity {
    eventually("a re-created object", SHORT, async || {
        list(cluster)
            .await
            .into_iter()
            .find(|o| o.metadata.name != deleted.metadata.name)
    })
    .await
}

/// A cluster whose driver answers GetCapacity, with the late-binding class "fast".
async fn with_late_binding_class() -> Cluster {
    let cluster = Cluster::with_driver(capacity_driver()).await;
    cluster
        .create_class(kind_class("fast", "WaitForFirstConsumer"))
        .await;
    cluster
}

/// The pod the provisioner runs in (the owner at `--capacity-ownerref-level=0`).
async fn create_pod(cluster: &Cluster, owner: Option<serde_json::Value>) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "csi-provisioner", "image": "csi-provisioner"}]},
    });
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] = json!([owner]);
    }
    Api::<Pod>::namespaced(cluster.client.clone(), NAMESPACE)
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap()
}

/// A claim of class "fast" that the scheduler has placed on the node (late binding).
async fn create_scheduled_claim(cluster: &Cluster, name: &str, size: &str) {
    let mut claim = claim(name, "fast", size);
    claim.metadata.annotations = Some(BTreeMap::from([(
        "volume.kubernetes.io/selected-node".into(),
        DEFAULT_NODE_ID.into(),
    )]));
    cluster
        .claims()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

fn start(cluster: &Cluster, extra: &[&str]) -> Provisioner {
    let mut flags = vec!["--enable-capacity", NO_POLL];
    flags.extend_from_slice(extra);
    cluster.provisioner_env(POD, &flags, &[("NAMESPACE", NAMESPACE), ("POD_NAME", POD)])
}

async fn gauges(provisioner: &Provisioner) -> Option<(f64, f64, f64)> {
    Some((
        provisioner
            .metric("csistoragecapacities_desired_goal")
            .await?,
        provisioner
            .metric("csistoragecapacities_desired_current")
            .await?,
        provisioner.metric("csistoragecapacities_obsolete").await?,
    ))
}

async fn wait_gauges(provisioner: &Provisioner, want: (f64, f64, f64)) {
    eventually(&format!("gauges {want:?}"), SHORT, async || {
        (gauges(provisioner).await? == want).then_some(())
    })
    .await;
}

#[tokio::test]
async fn objects_appear_for_late_binding_classes_and_follow_provisioning_and_deletion() {
    let cluster = Cluster::with_driver(capacity_driver()).await;
    let pod = create_pod(&cluster, None).await;
    cluster
        .create_class(kind_class("fast", "WaitForFirstConsumer"))
        .await;
    cluster.create_class(kind_class("now", "Immediate")).await;
    let provisioner = start(&cluster, &["--capacity-ownerref-level=0"]);

    let object = one_object(&cluster, "fast", DEFAULT_NODE_ID, "10Gi").await;
    let name = object.metadata.name.clone().unwrap();
    assert!(name.starts_with("csisc-") && name.len() == 11, "{name}");
    assert_eq!(object.metadata.generate_name.as_deref(), Some("csisc-"));
    assert_eq!(
        object.metadata.labels.unwrap(),
        BTreeMap::from([
            (
                "csi.storage.k8s.io/drivername".to_owned(),
                DRIVER.to_owned()
            ),
            (
                "csi.storage.k8s.io/managed-by".to_owned(),
                "external-provisioner".to_owned()
            ),
        ])
    );
    assert_eq!(object.maximum_volume_size.unwrap().0, "4Gi");
    let owners = object.metadata.owner_references.unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].name.as_str()),
        ("Pod", POD)
    );
    assert_eq!(owners[0].uid, pod.metadata.uid.unwrap());
    assert_eq!(owners[0].controller, Some(true));
    // The Immediate class has none without --capacity-for-immediate-binding.
    wait_gauges(&provisioner, (1.0, 1.0, 0.0)).await;
    assert!(
        list(&cluster)
            .await
            .iter()
            .all(|o| o.storage_class_name == "fast")
    );
    let body = provisioner.get("/metrics").await.unwrap().body;
    assert!(body.contains("# HELP csistoragecapacities_desired_goal [ALPHA] Number of CSIStorageCapacity objects that are supposed to be managed automatically.\n"), "{body}");
    assert!(body.contains(r#"workqueue_adds_total{name="csistoragecapacity"}"#));
    assert!(body.contains(r#"workqueue_adds_total{name="csitopology"}"#));

    // A 3Gi volume of the class: its PV refreshes the segment at once (the poll is 1h away).
    create_scheduled_claim(&cluster, "data", "3Gi").await;
    let (_, volume) = cluster.bound("data", SHORT).await;
    let updated = one_object(&cluster, "fast", DEFAULT_NODE_ID, "7Gi").await;
    assert_eq!(
        updated.metadata.name.as_deref(),
        Some(name.as_str()),
        "updated in place"
    );
    cluster.delete_claim("data").await;
    cluster
        .volume_gone(volume.metadata.name.as_deref().unwrap(), SHORT)
        .await;
    one_object(&cluster, "fast", DEFAULT_NODE_ID, "10Gi").await;
}

#[tokio::test]
async fn objects_follow_node_labels_go_with_their_class_and_come_back_after_deletion() {
    let cluster = with_late_binding_class().await;
    let provisioner = start(&cluster, &["--capacity-ownerref-level=-1"]);
    let first = one_object(&cluster, "fast", DEFAULT_NODE_ID, "10Gi").await;
    assert_eq!(first.metadata.owner_references, None, "level -1: no owner");

    // A user deletes the object: it is re-created (a new name, the same content).
    delete_object(&cluster, &first).await;
    let again = recreated(&cluster, &first).await;
    assert_eq!(again.capacity, first.capacity);
    assert_eq!(again.node_topology, first.node_topology);

    // The node moves to another segment: the old object goes, one for the new segment comes
    // (the mock driver has no capacity there).
    Api::<Node>::all(cluster.client.clone())
        .patch(
            DEFAULT_NODE_ID,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {DEFAULT_TOPOLOGY_KEY: "elsewhere"}}})),
        )
        .await
        .unwrap();
    one_object(&cluster, "fast", "elsewhere", "0").await;
    wait_gauges(&provisioner, (1.0, 1.0, 0.0)).await;

    // The class goes: so does its object.
    Api::<StorageClass>::all(cluster.client.clone())
        .delete("fast", &DeleteParams::default())
        .await
        .unwrap();
    eventually("no CSIStorageCapacity left", SHORT, async || {
        list(&cluster).await.is_empty().then_some(())
    })
    .await;
    wait_gauges(&provisioner, (0.0, 0.0, 0.0)).await;
}

/// kube-apiserver sends watch events apart from the writer's answer: the provisioner's informer
/// can see its new object deleted before its create call returns. The object must still come
/// back (it once stayed away until the driver's capacity changed: the late answer was taken
/// for the current object).
#[tokio::test]
async fn an_object_deleted_before_its_create_returns_is_created_again() {
    let cluster = with_late_binding_class().await;
    let held = cluster
        .server
        .faults()
        .hold_answers("create", "csistoragecapacities", 1);
    let provisioner = start(&cluster, &["--capacity-ownerref-level=-1"]);
    let first = one_object(&cluster, "fast", DEFAULT_NODE_ID, "10Gi").await;
    // The gauge counts the objects in the provisioner's cache: it has seen the creation...
    wait_gauges(&provisioner, (1.0, 1.0, 0.0)).await;
    delete_object(&cluster, &first).await;
    // ...and the deletion, while the create's answer is still held back.
    wait_gauges(&provisioner, (1.0, 0.0, 0.0)).await;
    held.release();
    let again = recreated(&cluster, &first).await;
    assert_eq!(again.capacity, first.capacity);
    wait_gauges(&provisioner, (1.0, 1.0, 0.0)).await;
}

#[tokio::test]
async fn immediate_classes_get_objects_with_capacity_for_immediate_binding() {
    let cluster = Cluster::with_driver(capacity_driver()).await;
    cluster.create_class(kind_class("now", "Immediate")).await;
    let mut other = kind_class("foreign", "Immediate");
    other.provisioner = "other.csi.k8s.io".into();
    cluster.create_class(other).await;
    let provisioner = start(
        &cluster,
        &[
            "--capacity-ownerref-level=-1",
            "--capacity-for-immediate-binding",
        ],
    );
    one_object(&cluster, "now", DEFAULT_NODE_ID, "10Gi").await;
    wait_gauges(&provisioner, (1.0, 1.0, 0.0)).await;
}

#[tokio::test]
async fn a_malformed_get_capacity_answer_is_logged_and_never_published() {
    let mut driver = capacity_driver();
    driver.capacity_answer = Some((-5, None));
    let cluster = Cluster::with_driver(driver).await;
    cluster
        .create_class(kind_class("fast", "WaitForFirstConsumer"))
        .await;
    let mut provisioner = start(&cluster, &["--capacity-ownerref-level=-1"]);
    provisioner
        .wait_logged("GetCapacity returned a negative available_capacity (-5)")
        .await;
    assert!(
        list(&cluster).await.is_empty(),
        "no object from a bad answer"
    );
    assert_eq!(gauges(&provisioner).await, Some((1.0, 0.0, 0.0)));
    // Once the driver answers sensibly (the retry backs off from 100ms), the object comes.
    cluster
        .driver
        .update_config(|c| c.capacity_answer = Some((GI, None)));
    let object = one_object(&cluster, "fast", DEFAULT_NODE_ID, "1Gi").await;
    assert_eq!(
        object.maximum_volume_size, None,
        "absent maximum_volume_size"
    );
}

#[tokio::test]
async fn the_owner_is_found_by_walking_controller_references() {
    let cluster = Cluster::with_driver(capacity_driver()).await;
    let node = Api::<Node>::all(cluster.client.clone())
        .get(DEFAULT_NODE_ID)
        .await
        .unwrap();
    // A mirror (static) pod is controlled by its Node.
    create_pod(
        &cluster,
        Some(json!({
            "apiVersion": "v1", "kind": "Node", "name": DEFAULT_NODE_ID,
            "uid": node.metadata.uid.clone().unwrap(), "controller": true,
        })),
    )
    .await;
    cluster
        .create_class(kind_class("fast", "WaitForFirstConsumer"))
        .await;
    let _provisioner = start(&cluster, &["--capacity-ownerref-level=1"]);
    let object = one_object(&cluster, "fast", DEFAULT_NODE_ID, "10Gi").await;
    let owners = object.metadata.owner_references.unwrap();
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].name.as_str()),
        ("Node", DEFAULT_NODE_ID)
    );
    assert_eq!(Some(&owners[0].uid), node.metadata.uid.as_ref());

    // One level more than there is: a clear error at start.
    let mut too_deep = start(&cluster, &["--capacity-ownerref-level=2"]);
    assert_eq!(too_deep.exit_code(SHORT).await, Some(255));
    assert!(
        too_deep
            .log()
            .contains("Node mock-node has no controller owner"),
        "{}",
        too_deep.log()
    );
}

/// One environment variable.
type Env = (&'static str, &'static str);

#[tokio::test]
async fn bad_capacity_flags_and_missing_environment_exit_2_before_connecting() {
    let cluster = Cluster::with_driver(capacity_driver()).await;
    let cases: [(&[&str], &[Env], &str); 4] = [
        (
            &["--enable-capacity"],
            &[("POD_NAME", POD)],
            "NAMESPACE environment variable",
        ),
        (
            &["--enable-capacity"],
            &[("NAMESPACE", NAMESPACE)],
            "POD_NAME environment variable",
        ),
        (
            &["--enable-capacity", "--capacity-threads=0"],
            &[("NAMESPACE", NAMESPACE), ("POD_NAME", POD)],
            "--capacity-threads must be greater than 0",
        ),
        (
            &["--enable-capacity", "--capacity-ownerref-level=-3"],
            &[("NAMESPACE", NAMESPACE)],
            "--capacity-ownerref-level must be -1",
        ),
    ];
    for (flags, env, needle) in cases {
        let mut provisioner = cluster.provisioner_env(POD, flags, env);
        assert_eq!(
            provisioner.exit_code(SHORT).await,
            Some(2),
            "{flags:?} {env:?}"
        );
        assert!(
            provisioner.log().contains(needle),
            "{needle}: {}",
            provisioner.log()
        );
    }
    assert_eq!(
        cluster.driver.call_count(Method::Probe),
        0,
        "refused before connecting"
    );
}

#[tokio::test]
async fn a_refresh_whose_get_capacity_fails_is_retried() {
    let cluster = with_late_binding_class().await;
    let _provisioner = start(&cluster, &["--capacity-ownerref-level=-1"]);
    one_object(&cluster, "fast", DEFAULT_NODE_ID, "10Gi").await;
    // The refresh after the next provisioning fails once; the poll is 1h away, so only the
    // retry can bring the new value.
    cluster
        .driver
        .inject(Fault::error(Method::GetCapacity, Code::Unavailable, "busy").on(When::Nth(1)));
    create_scheduled_claim(&cluster, "data", "2Gi").await;
    cluster.bound("data", SHORT).await;
    one_object(&cluster, "fast", DEFAULT_NODE_ID, "8Gi").await;
    assert!(
        cluster.driver.calls_of(Method::GetCapacity).len() >= 3,
        "first poll, the failed refresh, its retry"
    );
}

/// Kubernetes 1.21-1.23 serve CSIStorageCapacity at storage.k8s.io/v1beta1 only: the probe's
/// v1 create gets 404, so the provisioner falls back to v1beta1 (upstream) and caches,
/// creates, updates and deletes its objects there, with v1's fields.
#[tokio::test]
async fn without_v1_the_objects_are_kept_at_v1beta1() {
    let cluster = Cluster::with_server(
        capacity_driver(),
        apiserver::Config {
            disabled_resources: vec!["storage.k8s.io/v1/csistoragecapacities".into()],
            enabled_resources: vec!["storage.k8s.io/v1beta1/csistoragecapacities".into()],
            ..apiserver::Config::default()
        },
    )
    .await;
    create_pod(&cluster, None).await;
    cluster
        .create_class(kind_class("fast", "WaitForFirstConsumer"))
        .await;
    let provisioner = start(&cluster, &["--capacity-ownerref-level=0"]);
    let beta = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("storage.k8s.io", "v1beta1", "CSIStorageCapacity"),
        "csistoragecapacities",
    );
    let objects: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), NAMESPACE, &beta);
    let wait_capacity = async |capacity: &str| {
        eventually(
            &format!("one v1beta1 CSIStorageCapacity with {capacity}"),
            SHORT,
            async || {
                let mut items = objects.list(&ListParams::default()).await.ok()?.items;
                let object = items.pop()?;
                (items.is_empty() && object.data["capacity"] == capacity).then_some(object)
            },
        )
        .await
    };
    let listed = wait_capacity("10Gi").await;
    let name = listed.metadata.name.clone().unwrap();
    let object = objects.get(&name).await.unwrap();
    assert_eq!(
        object.types.as_ref().unwrap().api_version,
        "storage.k8s.io/v1beta1"
    );
    assert_eq!(object.data["storageClassName"], "fast");
    assert_eq!(object.data["maximumVolumeSize"], "4Gi");
    assert_eq!(
        object.data["nodeTopology"]["matchLabels"][DEFAULT_TOPOLOGY_KEY],
        DEFAULT_NODE_ID
    );
    let labels = object.metadata.labels.clone().unwrap();
    assert_eq!(labels["csi.storage.k8s.io/drivername"], DRIVER);
    assert_eq!(
        labels["csi.storage.k8s.io/managed-by"],
        "external-provisioner"
    );
    assert_eq!(object.metadata.owner_references.unwrap()[0].name, POD);
    wait_gauges(&provisioner, (1.0, 1.0, 0.0)).await;

    // Provisioning refreshes the segment: the same object is updated at v1beta1.
    create_scheduled_claim(&cluster, "data", "3Gi").await;
    cluster.bound("data", SHORT).await;
    let updated = wait_capacity("7Gi").await;
    assert_eq!(updated.metadata.name.as_deref(), Some(name.as_str()));

    // Without its class the object is obsolete and deleted at v1beta1.
    Api::<StorageClass>::all(cluster.client.clone())
        .delete("fast", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the v1beta1 object deleted", SHORT, async || {
        let items = objects.list(&ListParams::default()).await.ok()?.items;
        items.is_empty().then_some(())
    })
    .await;
}

/// Neither version served (or no such namespace): start fails naming both, where upstream
/// would fall back to v1beta1 and fail every write.
#[tokio::test]
async fn without_any_capacity_version_start_fails_naming_both() {
    let cluster = Cluster::with_server(
        capacity_driver(),
        apiserver::Config {
            disabled_resources: vec!["storage.k8s.io/v1/csistoragecapacities".into()],
            ..apiserver::Config::default()
        },
    )
    .await;
    create_pod(&cluster, None).await;
    let mut provisioner = start(&cluster, &["--capacity-ownerref-level=0"]);
    assert_eq!(provisioner.exit_code(SHORT).await, Some(255));
    assert!(
        provisioner
            .log()
            .contains("neither storage.k8s.io/v1 nor v1beta1 CSIStorageCapacity is served"),
        "{}",
        provisioner.log()
    );
}
