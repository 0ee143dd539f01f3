//! Whole-binary tests of node deployment (spec provisioner.md §6.2): three `csi-provisioner`
//! processes on three nodes, each next to its own node-local mock driver, as a DaemonSet runs
//! them.

#![allow(
    clippy::unwrap_used,
    reason = "shared assertion helpers of the tests panic on failure"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Api;
use kube::api::{ListParams, PostParams};
use proto::csi::v1::{CreateVolumeRequest, DeleteVolumeRequest, GetCapacityRequest};
use testbed_mock_csi::{
    DEFAULT_TOPOLOGY_KEY, Method, MockDriver, MockDriverConfig, MockDriverHandle, PluginCapability,
    PluginService,
};

/// Generous: the tests run in parallel on small CI machines.
const SHORT: Duration = Duration::from_mins(1);
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
const MI: i64 = 1 << 20;

/// The driver on `node`: its own node id and a node-scoped topology segment; node-c has only
/// 100Mi of storage.
async fn node_driver(cluster: &Cluster, node: &str) -> MockDriverHandle {
    let config = MockDriverConfig {
        node_id: node.into(),
        topology: BTreeMap::from([(DEFAULT_TOPOLOGY_KEY.into(), node.into())]),
        total_capacity: (node == "node-c").then_some(100 * MI),
        ..driver_config()
    };
    MockDriver::start(config, cluster.dir.path().join(format!("{node}.sock")))
        .await
        .unwrap()
}

/// `csi-provisioner --node-deployment` on `node` next to `driver`, with short delays and
/// `extra` flags.
fn node_provisioner(
    cluster: &Cluster,
    node: &str,
    driver: &MockDriverHandle,
    extra: &[&str],
) -> Provisioner {
    let mut flags = vec![
        "--node-deployment",
        "--node-deployment-base-delay=100ms",
        "--node-deployment-max-delay=1s",
    ];
    flags.extend_from_slice(extra);
    cluster.provisioner_with(
        &format!("csi-provisioner-{node}"),
        driver.socket_path(),
        &[("NODE_NAME", node)],
        &flags,
    )
}

/// The claim names each driver was asked to create.
fn created_names(driver: &MockDriverHandle) -> BTreeSet<String> {
    driver
        .requests::<CreateVolumeRequest>(Method::CreateVolume)
        .into_iter()
        .map(|r| r.name)
        .collect()
}

#[tokio::test]
async fn three_nodes_provision_each_claim_once_and_delete_only_their_own_volumes() {
    let cluster = Cluster::start().await;
    cluster.create_class(class("immediate", "Immediate")).await;
    cluster
        .create_class(class("late", "WaitForFirstConsumer"))
        .await;
    let mut drivers = Vec::new();
    for node in NODES {
        drivers.push(node_driver(&cluster, node).await);
    }
    let provisioners: Vec<Provisioner> = NODES
        .iter()
        .zip(&drivers)
        .map(|(node, driver)| node_provisioner(&cluster, node, driver, &[]))
        .collect();
    for provisioner in &provisioners {
        provisioner.wait_serving().await;
    }

    let immediate: Vec<String> = (0..6).map(|i| format!("now-{i}")).collect();
    for name in &immediate {
        cluster.create_claim(name, "immediate", "1Gi").await;
    }
    // WaitForFirstConsumer: the scheduler picks the node; node-c's claim fits its 100Mi.
    let late: Vec<(String, &str)> = NODES.iter().map(|n| (format!("late-{n}"), *n)).collect();
    for (name, node) in &late {
        cluster.create_claim(name, "late", "10Mi").await;
        cluster
            .kcm()
            .select_node(NAMESPACE, name, node)
            .await
            .unwrap();
    }

    // PV name -> volume handle, and the Immediate claims each node won.
    let mut handles = BTreeMap::new();
    let mut won = [0_usize; 3];
    for name in &immediate {
        let (index, pv, handle) = provisioned_once(&cluster, &drivers, name).await;
        won[index] += 1;
        handles.insert(pv, handle);
    }
    for (name, node) in &late {
        let (index, pv, handle) = provisioned_once(&cluster, &drivers, name).await;
        assert_eq!(
            NODES[index], *node,
            "late binding keeps the scheduler's node"
        );
        handles.insert(pv, handle);
    }
    // Every winner checked GetCapacity before taking a claim; node-c, with 100Mi, took none of
    // the 1Gi claims.
    for (driver, won) in drivers.iter().zip(won) {
        let checks: Vec<GetCapacityRequest> = driver.requests(Method::GetCapacity);
        assert!(checks.len() >= won, "{won} claims, {} checks", checks.len());
    }
    assert_eq!(won[2], 0, "node-c has no room for 1Gi");
    let total: usize = drivers.iter().map(|d| d.volumes().len()).sum();
    assert_eq!(total, immediate.len() + late.len(), "one volume per claim");

    for name in immediate.iter().chain(late.iter().map(|(n, _)| n)) {
        cluster.delete_claim(name).await;
    }
    for pv in handles.keys() {
        cluster.volume_gone(pv, SHORT).await;
    }
    assert_deleted_by_owners(&drivers, &handles);
}

/// Waits until claim `name` is bound and checks it was provisioned exactly once, by the node
/// its selected-node names; returns that node's index, the PV name and the volume handle.
async fn provisioned_once(
    cluster: &Cluster,
    drivers: &[MockDriverHandle],
    name: &str,
) -> (usize, String, String) {
    let (claim, volume) = cluster.bound(name, SHORT).await;
    let node =
        claim.metadata.annotations.as_ref().unwrap()["volume.kubernetes.io/selected-node"].clone();
    let index = NODES.iter().position(|n| *n == node).unwrap();
    let pv = volume.metadata.name.clone().unwrap();
    // Exactly one driver was asked for the volume: the selected node's.
    for (i, driver) in drivers.iter().enumerate() {
        assert_eq!(
            created_names(driver).contains(&pv),
            i == index,
            "{pv} on {node}"
        );
    }
    // The requirement comes from this node's NodeGetInfo topology alone.
    let request = drivers[index]
        .requests::<CreateVolumeRequest>(Method::CreateVolume)
        .into_iter()
        .find(|r| r.name == pv)
        .unwrap();
    let requisite = request.accessibility_requirements.unwrap().requisite;
    assert_eq!(requisite.len(), 1);
    assert_eq!(requisite[0].segments[DEFAULT_TOPOLOGY_KEY], node);
    let spec = volume.spec.as_ref().unwrap();
    let affinity = serde_json::to_value(spec.node_affinity.as_ref().unwrap()).unwrap();
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0],
        node.as_str()
    );
    let csi = spec.csi.as_ref().unwrap();
    let identity =
        &csi.volume_attributes.as_ref().unwrap()["storage.kubernetes.io/csiProvisionerIdentity"];
    assert!(
        identity.ends_with(&format!("-{DRIVER}-{node}")),
        "{identity}"
    );
    (index, pv, csi.volume_handle.clone())
}

/// Deletion only by the owning node: every driver deleted exactly the volumes it created.
fn assert_deleted_by_owners(drivers: &[MockDriverHandle], handles: &BTreeMap<String, String>) {
    for driver in drivers {
        assert!(driver.volumes().is_empty());
        let created = created_names(driver);
        let ids: BTreeSet<&String> = handles
            .iter()
            .filter(|(pv, _)| created.contains(*pv))
            .map(|(_, handle)| handle)
            .collect();
        let deletes: Vec<DeleteVolumeRequest> = driver.requests(Method::DeleteVolume);
        assert_eq!(deletes.len(), ids.len(), "{deletes:?}");
        for delete in deletes {
            assert!(ids.contains(&delete.volume_id), "{delete:?}");
        }
    }
}

#[tokio::test]
async fn a_conflict_while_taking_a_claim_is_tried_again_after_a_longer_wait() {
    let cluster = Cluster::start().await;
    cluster.create_class(class("immediate", "Immediate")).await;
    let driver = node_driver(&cluster, "node-a").await;
    cluster.create_claim("now", "immediate", "1Gi").await;
    // The controller-manager stand-in has handed the claim to the driver (its last update).
    eventually("the claim handed to the driver", SHORT, async || {
        let claim = cluster.claims().get("now").await.ok()?;
        claim
            .metadata
            .annotations?
            .contains_key("volume.kubernetes.io/storage-provisioner")
            .then_some(())
    })
    .await;
    // What kube-apiserver answers when the claim changed since this node read it.
    cluster
        .server
        .faults()
        .fail("update", "persistentvolumeclaims", 409, 1);
    let mut provisioner = node_provisioner(&cluster, "node-a", &driver, &[]);
    provisioner
        .wait_logged("conflict while taking the claim, will try again")
        .await;
    let (claim, _) = cluster.bound("now", SHORT).await;
    assert_eq!(
        claim.metadata.annotations.unwrap()["volume.kubernetes.io/selected-node"],
        "node-a"
    );
    assert_eq!(created_names(&driver).len(), 1);
}

#[tokio::test]
async fn without_immediate_binding_only_the_schedulers_claims_are_provisioned() {
    let cluster = Cluster::start().await;
    cluster.create_class(class("immediate", "Immediate")).await;
    cluster
        .create_class(class("late", "WaitForFirstConsumer"))
        .await;
    let driver = node_driver(&cluster, "node-a").await;
    let provisioner = node_provisioner(
        &cluster,
        "node-a",
        &driver,
        &[
            "--node-deployment-immediate-binding=false",
            "--node-deployment-base-delay=10ms",
        ],
    );
    provisioner.wait_serving().await;
    cluster.create_claim("now", "immediate", "1Gi").await;
    cluster.create_claim("late", "late", "1Gi").await;
    cluster
        .kcm()
        .select_node(NAMESPACE, "late", "node-a")
        .await
        .unwrap();
    cluster.bound("late", SHORT).await;
    // Positive signal: the provisioner has acted on the Immediate claim as it stands.
    provisioner
        .settled("claims", async || cluster.touch_claim("now").await)
        .await;
    let claim = cluster.claims().get("now").await.unwrap();
    assert!(
        !claim
            .metadata
            .annotations
            .unwrap()
            .contains_key("volume.kubernetes.io/selected-node"),
        "not taken"
    );
    assert_eq!(created_names(&driver).len(), 1, "only the late claim");
    assert!(
        driver
            .requests::<GetCapacityRequest>(Method::GetCapacity)
            .is_empty()
    );
}

#[tokio::test]
async fn without_topology_only_the_node_that_made_a_volume_deletes_it() {
    let cluster = Cluster::start().await;
    cluster
        .create_class(class("late", "WaitForFirstConsumer"))
        .await;
    let mut drivers = Vec::new();
    let mut provisioners = Vec::new();
    for node in ["node-a", "node-b"] {
        // A node-local driver that reports no topology: PVs get no node affinity.
        let config = MockDriverConfig {
            node_id: node.into(),
            topology: BTreeMap::new(),
            plugin_capabilities: vec![PluginCapability::Service(PluginService::ControllerService)],
            ..driver_config()
        };
        let driver = MockDriver::start(config, cluster.dir.path().join(format!("{node}.sock")))
            .await
            .unwrap();
        provisioners.push(node_provisioner(&cluster, node, &driver, &[]));
        drivers.push(driver);
    }
    cluster.create_claim("late", "late", "1Gi").await;
    cluster
        .kcm()
        .select_node(NAMESPACE, "late", "node-b")
        .await
        .unwrap();
    let (_, volume) = cluster.bound("late", SHORT).await;
    assert!(volume.spec.as_ref().unwrap().node_affinity.is_none());
    cluster.delete_claim("late").await;
    cluster
        .volume_gone(volume.metadata.name.as_deref().unwrap(), SHORT)
        .await;
    assert!(drivers[1].volumes().is_empty(), "node-b deleted its volume");
    assert_eq!(
        drivers[0].call_count(Method::DeleteVolume),
        0,
        "node-a has nothing to delete"
    );
}

#[tokio::test]
async fn node_deployment_without_node_name_exits_2_before_connecting() {
    let cluster = Cluster::start().await;
    let mut provisioner = cluster.provisioner_with(
        "csi-provisioner-0",
        &cluster.socket(),
        &[],
        &["--node-deployment"],
    );
    assert_eq!(
        provisioner.exit_code(Duration::from_secs(10)).await,
        Some(2)
    );
    assert!(
        provisioner.log().contains("NODE_NAME"),
        "{}",
        provisioner.log()
    );
    assert_eq!(cluster.driver.call_count(Method::Probe), 0);
}

#[tokio::test]
async fn a_driver_without_node_info_stops_node_deployment_at_start() {
    let cluster = Cluster::start().await;
    cluster.driver.inject(testbed_mock_csi::Fault::error(
        Method::NodeGetInfo,
        tonic::Code::Unavailable,
        "node service down",
    ));
    let mut provisioner = cluster.provisioner_with(
        "csi-provisioner-0",
        &cluster.socket(),
        &[("NODE_NAME", "mock-node")],
        &["--node-deployment"],
    );
    assert_eq!(
        provisioner.exit_code(Duration::from_secs(30)).await,
        Some(255)
    );
    assert!(
        provisioner
            .log()
            .contains("failed to get node info from CSI driver"),
        "{}",
        provisioner.log()
    );
}

/// A CSIStorageCapacity of class "fast" for `node`'s segment, labelled as `managed_by`'s.
fn capacity_object(name: &str, node: &str, managed_by: &str) -> CSIStorageCapacity {
    CSIStorageCapacity {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NAMESPACE.into()),
            labels: Some(BTreeMap::from([
                ("csi.storage.k8s.io/drivername".into(), DRIVER.into()),
                ("csi.storage.k8s.io/managed-by".into(), managed_by.into()),
            ])),
            ..ObjectMeta::default()
        },
        node_topology: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(DEFAULT_TOPOLOGY_KEY.into(), node.into())])),
            match_expressions: None,
        }),
        storage_class_name: "fast".into(),
        capacity: Some(Quantity("1Gi".into())),
        maximum_volume_size: None,
    }
}

/// `(segment value, managed-by value, capacity)` of the objects the provisioners created
/// (`generateName` `csisc-`), sorted.
async fn published(cluster: &Cluster) -> Vec<(String, String, String)> {
    let api: Api<CSIStorageCapacity> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let mut out: Vec<_> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| {
            o.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("csisc-"))
        })
        .map(|o| {
            let label = |map: Option<&BTreeMap<String, String>>, key: &str| {
                map.and_then(|m| m.get(key)).cloned().unwrap_or_default()
            };
            (
                label(
                    o.node_topology
                        .as_ref()
                        .and_then(|t| t.match_labels.as_ref()),
                    DEFAULT_TOPOLOGY_KEY,
                ),
                label(o.metadata.labels.as_ref(), "csi.storage.k8s.io/managed-by"),
                o.capacity.map(|q| q.0).unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Spec §6.2 with §6.1: each node's instance publishes its own NodeGetInfo segment only, with
/// `managed-by=external-provisioner-<node>`, deletes its own stale objects and leaves other
/// managers' objects alone.
#[tokio::test]
async fn each_node_publishes_capacity_for_its_own_segment_and_keeps_to_its_own_objects() {
    let cluster = Cluster::start().await;
    let mut class = class("fast", "WaitForFirstConsumer");
    class.parameters = Some(BTreeMap::from([("kind".into(), "fast".into())]));
    cluster.create_class(class).await;
    let api: Api<CSIStorageCapacity> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    // node-a's object for a segment node-a no longer has (stale: node-a deletes it), and
    // objects of a node whose instance does not run and of a central provisioner for
    // node-a's segment (another manager's: nobody here deletes them).
    for object in [
        capacity_object("stale-a", "gone", "external-provisioner-node-a"),
        capacity_object("foreign-x", "node-x", "external-provisioner-node-x"),
        capacity_object("central-a", "node-a", "external-provisioner"),
    ] {
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let mut drivers = Vec::new();
    let mut provisioners = Vec::new();
    for (node, gib) in [("node-a", 10), ("node-b", 20)] {
        let config = MockDriverConfig {
            node_id: node.into(),
            topology: BTreeMap::from([(DEFAULT_TOPOLOGY_KEY.into(), node.into())]),
            capacity_by_kind: BTreeMap::from([("fast".to_owned(), gib << 30)]),
            ..driver_config()
        };
        let driver = MockDriver::start(config, cluster.dir.path().join(format!("{node}.sock")))
            .await
            .unwrap();
        provisioners.push(cluster.provisioner_with(
            &format!("csi-provisioner-{node}"),
            driver.socket_path(),
            &[("NODE_NAME", node), ("NAMESPACE", NAMESPACE)],
            &[
                "--node-deployment",
                "--enable-capacity",
                "--capacity-ownerref-level=-1",
            ],
        ));
        drivers.push(driver);
    }
    let want = vec![
        (
            "node-a".to_owned(),
            "external-provisioner-node-a".to_owned(),
            "10Gi".to_owned(),
        ),
        (
            "node-b".to_owned(),
            "external-provisioner-node-b".to_owned(),
            "20Gi".to_owned(),
        ),
    ];
    eventually("one object per node, each node's own", SHORT, async || {
        (published(&cluster).await == want).then_some(())
    })
    .await;
    // Each instance wants one object (its segment × "fast"), has it, and sees nothing obsolete
    // once its stale object is gone: the other node's and the foreign objects are not its own.
    for provisioner in &provisioners {
        eventually(
            "gauges 1 wanted, 1 current, 0 obsolete",
            SHORT,
            async || {
                let goal = provisioner
                    .metric("csistoragecapacities_desired_goal")
                    .await?;
                let current = provisioner
                    .metric("csistoragecapacities_desired_current")
                    .await?;
                let obsolete = provisioner.metric("csistoragecapacities_obsolete").await?;
                ((goal, current, obsolete) == (1.0, 1.0, 0.0)).then_some(())
            },
        )
        .await;
    }
    eventually("node-a deleted its stale object", SHORT, async || {
        api.get_opt("stale-a")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // The pass that deleted node-a's stale object judged every object node-a sees; the
    // others' objects came through it.
    for name in ["foreign-x", "central-a"] {
        assert!(api.get_opt(name).await.unwrap().is_some(), "{name} kept");
    }
    assert_eq!(published(&cluster).await, want, "no object was replaced");
    // Each driver was asked about its own segment only.
    for (driver, node) in drivers.iter().zip(["node-a", "node-b"]) {
        let asked: BTreeSet<String> = driver
            .requests::<GetCapacityRequest>(Method::GetCapacity)
            .into_iter()
            .filter_map(|r| {
                r.accessible_topology?
                    .segments
                    .get(DEFAULT_TOPOLOGY_KEY)
                    .cloned()
            })
            .collect();
        assert_eq!(asked, BTreeSet::from([node.to_owned()]), "{node}");
    }
}
