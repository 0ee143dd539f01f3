//! Whole-binary tests of data sources (spec provisioner.md §4.3, §6.4): the real
//! `csi-provisioner` clones claims and restores VolumeSnapshots against the in-memory API server
//! (snapshot and ReferenceGrant custom resources served as their CRDs do) and the mock CSI
//! driver (CreateSnapshot and content sources as the CSI spec says). The snapshot controller's
//! part (binding a VolumeSnapshot to its content, readiness) is played by the test.

#![allow(
    clippy::unwrap_used,
    reason = "shared assertion helpers of the tests panic on failure"
)]

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, TypedObjectReference};
use kube::Api;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::volume_content_source::Type;
use proto::csi::v1::{CreateSnapshotRequest, CreateVolumeRequest, DeleteVolumeRequest};
use serde_json::json;
use testbed_mock_csi::{Action, Fault, Method, When};
use tonic::Code;

/// Generous: the tests run in parallel on small CI machines.
const SHORT: Duration = Duration::from_secs(30);
const DRIVER_OTHER: &str = "other.csi.k8s.io";
const CLONE_FINALIZER: &str = "provisioner.storage.kubernetes.io/cloning-protection";
const SNAPSHOT_FINALIZER: &str =
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection";

async fn cluster() -> Cluster {
    let cluster = Cluster::with_driver(data_source_driver_config()).await;
    cluster.create_class(class("fast", "Immediate")).await;
    cluster
}

fn gvk(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn snapshots(cluster: &Cluster, namespace: &str) -> Api<DynamicObject> {
    let resource = gvk(
        "snapshot.storage.k8s.io",
        "v1",
        "VolumeSnapshot",
        "volumesnapshots",
    );
    Api::namespaced_with(cluster.client.clone(), namespace, &resource)
}

fn contents(cluster: &Cluster) -> Api<DynamicObject> {
    let resource = gvk(
        "snapshot.storage.k8s.io",
        "v1",
        "VolumeSnapshotContent",
        "volumesnapshotcontents",
    );
    Api::all_with(cluster.client.clone(), &resource)
}

async fn create_namespace(cluster: &Cluster, name: &str) {
    Api::<Namespace>::all(cluster.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
}

fn claim_from(
    name: &str,
    size: &str,
    kind: &str,
    group: Option<&str>,
    source: &str,
) -> PersistentVolumeClaim {
    let mut claim = claim(name, "fast", size);
    claim.spec.as_mut().unwrap().data_source_ref = Some(TypedObjectReference {
        api_group: group.map(str::to_owned),
        kind: kind.into(),
        name: source.into(),
        namespace: None,
    });
    claim
}

fn clone_of(name: &str, size: &str, source: &str) -> PersistentVolumeClaim {
    claim_from(name, size, "PersistentVolumeClaim", None, source)
}

/// Claim `copy` cloning `other/src` through `dataSourceRef`.
fn clone_from_other_namespace() -> PersistentVolumeClaim {
    let mut copy = clone_of("copy", "1Gi", "src");
    if let Some(reference) = copy.spec.as_mut().and_then(|s| s.data_source_ref.as_mut()) {
        reference.namespace = Some("other".into());
    }
    copy
}

fn restore_of(name: &str, size: &str, snapshot: &str) -> PersistentVolumeClaim {
    claim_from(
        name,
        size,
        "VolumeSnapshot",
        Some("snapshot.storage.k8s.io"),
        snapshot,
    )
}

/// The kube-apiserver copies a same-namespace `dataSourceRef` of a core kind or a snapshot
/// into `dataSource`; the test does it as the API server's defaulting would.
async fn create(cluster: &Cluster, mut claim: PersistentVolumeClaim) {
    let spec = claim.spec.as_mut().unwrap();
    if let Some(reference) = &spec.data_source_ref
        && reference.namespace.is_none()
        && matches!(
            reference.kind.as_str(),
            "PersistentVolumeClaim" | "VolumeSnapshot"
        )
    {
        spec.data_source = Some(k8s_openapi::api::core::v1::TypedLocalObjectReference {
            api_group: reference.api_group.clone(),
            kind: reference.kind.clone(),
            name: reference.name.clone(),
        });
    }
    let namespace = claim.metadata.namespace.clone().unwrap();
    Api::<PersistentVolumeClaim>::namespaced(cluster.client.clone(), &namespace)
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

fn finalizers(object: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Vec<String> {
    object.finalizers.clone().unwrap_or_default()
}

/// A bound claim `name` of 1Gi; returns its volume handle.
async fn bound_source(cluster: &Cluster, name: &str) -> String {
    cluster.create_claim(name, "fast", "1Gi").await;
    let (_, volume) = cluster.bound(name, SHORT).await;
    volume.spec.unwrap().csi.unwrap().volume_handle
}

/// What external-snapshotter would do for a VolumeSnapshot of `volume_handle`: CreateSnapshot
/// on the driver, a VolumeSnapshotContent bound to the snapshot, both statuses ready.
async fn ready_snapshot(cluster: &Cluster, name: &str, volume_handle: &str, driver: &str) {
    let mut csi = ControllerClient::new(cluster.driver.channel().unwrap());
    let snapshot = csi
        .create_snapshot(CreateSnapshotRequest {
            name: format!("snapshot-{name}"),
            source_volume_id: volume_handle.to_owned(),
            ..CreateSnapshotRequest::default()
        })
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    let api = snapshots(cluster, NAMESPACE);
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                "metadata": {"name": name},
                "spec": {"source": {"volumeSnapshotContentName": format!("content-{name}")}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let content_name = format!("content-{name}");
    contents(cluster)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
                "metadata": {"name": content_name},
                "spec": {
                    "driver": driver, "deletionPolicy": "Delete",
                    "sourceVolumeMode": "Filesystem",
                    "source": {"snapshotHandle": snapshot.snapshot_id},
                    "volumeSnapshotRef": {"name": name, "namespace": NAMESPACE,
                                          "uid": created.metadata.uid}
                }
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    contents(cluster)
        .patch_status(
            &content_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"snapshotHandle": snapshot.snapshot_id,
                                            "readyToUse": true,
                                            "restoreSize": snapshot.size_bytes}})),
        )
        .await
        .unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"boundVolumeSnapshotContentName": content_name,
                                        "readyToUse": true, "restoreSize": "1Gi"}}),
        ),
    )
    .await
    .unwrap();
}

/// The `ProvisioningFailed` Event of claim `name` whose message contains `needle`.
async fn failed_with(cluster: &Cluster, namespace: &str, name: &str, needle: &str) -> String {
    eventually(
        &format!("ProvisioningFailed of {name} mentioning {needle:?}"),
        SHORT,
        async || {
            let events: Api<k8s_openapi::api::core::v1::Event> =
                Api::namespaced(cluster.client.clone(), namespace);
            events
                .list(&kube::api::ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("ProvisioningFailed"))
                .filter(|e| e.involved_object.name.as_deref() == Some(name))
                .filter_map(|e| e.message)
                .find(|m| m.contains(needle))
        },
    )
    .await
}

#[tokio::test]
async fn a_clone_ends_bound_and_its_source_stays_protected_until_no_clone_is_pending() {
    let cluster = cluster().await;
    let provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    let handle = bound_source(&cluster, "src").await;

    // The first clone attempt fails after the source was protected.
    cluster
        .driver
        .inject(Fault::error(Method::CreateVolume, Code::Unavailable, "busy").on(When::Every));
    create(&cluster, clone_of("copy", "2Gi", "src")).await;
    failed_with(&cluster, NAMESPACE, "copy", "busy").await;
    let source = cluster.claims().get("src").await.unwrap();
    assert!(finalizers(&source.metadata).contains(&CLONE_FINALIZER.to_owned()));

    // Deleting the source while its clone is Pending: the clone-protection controller looks,
    // keeps the finalizer and retries.
    cluster.delete_claim("src").await;
    eventually("the clone-protection queue retried", SHORT, async || {
        let retries = provisioner
            .metric(r#"workqueue_retries_total{name="cloning-protection"}"#)
            .await?;
        (retries >= 1.0).then_some(())
    })
    .await;
    let source = cluster.claims().get("src").await.unwrap();
    assert!(source.metadata.deletion_timestamp.is_some());
    assert!(finalizers(&source.metadata).contains(&CLONE_FINALIZER.to_owned()));

    cluster.driver.clear_faults();
    let (_, volume) = cluster.bound("copy", SHORT).await;
    let request = cluster
        .driver
        .requests::<CreateVolumeRequest>(Method::CreateVolume)
        .into_iter()
        .last()
        .unwrap();
    assert_eq!(
        request.volume_content_source.unwrap().r#type,
        Some(Type::Volume(
            proto::csi::v1::volume_content_source::VolumeSource {
                volume_id: handle.clone()
            }
        ))
    );
    let created = cluster
        .driver
        .volume(&volume.spec.unwrap().csi.unwrap().volume_handle)
        .unwrap();
    assert_eq!(created.capacity_bytes, 2 << 30);

    // The clone is Bound: the source's finalizer comes off and the source goes.
    eventually("the source claim gone", SHORT, async || {
        cluster
            .claims()
            .get_opt("src")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_restore_ends_bound_and_the_snapshot_is_unprotected_after_the_pv_is_built() {
    let cluster = cluster().await;
    let _provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    let handle = bound_source(&cluster, "src").await;
    ready_snapshot(&cluster, "snap", &handle, DRIVER).await;
    let snapshot_id = cluster.driver.snapshots()[0].snapshot_id.clone();

    cluster
        .driver
        .inject(Fault::error(Method::CreateVolume, Code::Unavailable, "busy").on(When::Nth(1)));
    create(&cluster, restore_of("restored", "1Gi", "snap")).await;
    failed_with(&cluster, NAMESPACE, "restored", "busy").await;
    let protected = snapshots(&cluster, NAMESPACE).get("snap").await.unwrap();
    assert!(finalizers(&protected.metadata).contains(&SNAPSHOT_FINALIZER.to_owned()));

    let (_, volume) = cluster.bound("restored", SHORT).await;
    let created = cluster
        .driver
        .volume(&volume.spec.unwrap().csi.unwrap().volume_handle)
        .unwrap();
    assert_eq!(
        created.content_source.unwrap().r#type,
        Some(Type::Snapshot(
            proto::csi::v1::volume_content_source::SnapshotSource { snapshot_id }
        ))
    );
    eventually("the snapshot finalizer removed", SHORT, async || {
        let snapshot = snapshots(&cluster, NAMESPACE).get("snap").await.ok()?;
        (!finalizers(&snapshot.metadata).contains(&SNAPSHOT_FINALIZER.to_owned())).then_some(())
    })
    .await;
}

/// Waits until snapshot `name` carries no source-protection finalizer of ours.
async fn unprotected(cluster: &Cluster, name: &str) {
    eventually(
        &format!("snapshot {name} without our finalizer"),
        SHORT,
        async || {
            let snapshot = snapshots(cluster, NAMESPACE).get(name).await.ok()?;
            (!finalizers(&snapshot.metadata).contains(&SNAPSHOT_FINALIZER.to_owned())).then_some(())
        },
    )
    .await;
}

/// Waits until the provisioner saved a PV for claim `name` (bound or not).
async fn volume_saved_for(cluster: &Cluster, name: &str) {
    eventually(&format!("a PV for claim {name}"), SHORT, async || {
        cluster
            .volumes()
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|pv| {
                pv.spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .is_some_and(|r| r.name.as_deref() == Some(name))
            })
    })
    .await;
}

#[tokio::test]
async fn two_restores_saved_within_the_binder_lag_leave_the_snapshot_unprotected_without_a_sweep() {
    let mut cluster = cluster().await;
    let _provisioner =
        cluster.provisioner("csi-provisioner-0", &["--snapshot-orphan-sweep-interval=0"]);
    let handle = bound_source(&cluster, "src").await;
    ready_snapshot(&cluster, "snap", &handle, DRIVER).await;

    // The binder lags: the second restore gets its PV while the first claim, whose PV is saved,
    // is still Pending. The claims carry the storage-provisioner annotation the PV controller
    // would have written before it stalled.
    cluster.pause_kcm().await;
    let annotated = |name| {
        let mut claim = restore_of(name, "1Gi", "snap");
        claim.metadata.annotations = Some(
            [(
                "volume.kubernetes.io/storage-provisioner".to_owned(),
                DRIVER.to_owned(),
            )]
            .into(),
        );
        claim
    };
    create(&cluster, annotated("first")).await;
    volume_saved_for(&cluster, "first").await;
    create(&cluster, annotated("second")).await;
    volume_saved_for(&cluster, "second").await;
    cluster.resume_kcm();

    cluster.bound("first", SHORT).await;
    cluster.bound("second", SHORT).await;
    unprotected(&cluster, "snap").await;
}

#[tokio::test]
async fn a_restore_deleted_while_its_volume_is_created_leaves_the_snapshot_unprotected() {
    let slow = Duration::from_secs(3);
    let cases = [
        (
            "the volume is created, then deleted",
            Action::Delay(slow),
            1,
        ),
        (
            "the create fails finally",
            Action::DelayThenError(slow, Code::InvalidArgument, "bad parameters".into()),
            0,
        ),
    ];
    for (name, action, deletes) in cases {
        let cluster = cluster().await;
        let _provisioner =
            cluster.provisioner("csi-provisioner-0", &["--snapshot-orphan-sweep-interval=0"]);
        let handle = bound_source(&cluster, "src").await;
        ready_snapshot(&cluster, "snap", &handle, DRIVER).await;
        cluster.driver.clear_calls();
        cluster.driver.inject(Fault {
            method: Method::CreateVolume,
            when: When::Nth(1),
            action,
        });
        create(&cluster, restore_of("doomed", "1Gi", "snap")).await;
        // The snapshot is protected before CreateVolume.
        cluster.delete_claim_during_create("doomed", 1).await;

        unprotected(&cluster, "snap").await;
        let sent: Vec<DeleteVolumeRequest> = cluster.driver.requests(Method::DeleteVolume);
        assert_eq!(sent.len(), deletes, "{name}");
    }
}

#[tokio::test]
async fn the_sweep_removes_the_snapshot_finalizer_no_pending_claim_needs() {
    let cluster = cluster().await;
    let api = snapshots(&cluster, NAMESPACE);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": "orphan", "finalizers": [SNAPSHOT_FINALIZER]},
            "spec": {"source": {"volumeSnapshotContentName": "gone"}}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let _provisioner = cluster.provisioner(
        "csi-provisioner-0",
        &["--snapshot-orphan-sweep-interval=300ms"],
    );
    eventually("the orphaned finalizer swept", SHORT, async || {
        let snapshot = api.get("orphan").await.ok()?;
        finalizers(&snapshot.metadata).is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn other_data_source_kinds_are_handed_to_a_populator_without_a_volume() {
    let cluster = cluster().await;
    let provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    create(
        &cluster,
        claim_from("populated", "1Gi", "Hello", Some("hello.example.com"), "h"),
    )
    .await;
    let event = eventually("the populator hand-off Event", SHORT, async || {
        cluster.events("Provisioning").await.into_iter().find(|e| {
            e.message.as_deref() == Some("Assuming an external populator will provision the volume")
        })
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(event.involved_object.name.as_deref(), Some("populated"));
    provisioner
        .settled("claims", async || cluster.touch_claim("populated").await)
        .await;
    assert_eq!(cluster.driver.call_count(Method::CreateVolume), 0);
    assert!(cluster.events("ProvisioningFailed").await.is_empty());
}

#[tokio::test]
async fn each_unusable_source_gets_an_event_saying_why_and_no_volume() {
    let cluster = cluster().await;
    let _provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    let handle = bound_source(&cluster, "src").await;
    // A source being deleted (another finalizer holds it).
    bound_source(&cluster, "leaving").await;
    cluster
        .claims()
        .patch(
            "leaving",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["kubernetes.io/pvc-protection", "example.com/hold"]}})),
        )
        .await
        .unwrap();
    cluster.delete_claim("leaving").await;
    ready_snapshot(&cluster, "foreign", &handle, DRIVER_OTHER).await;
    ready_snapshot(&cluster, "ready", &handle, DRIVER).await;
    // A snapshot the snapshot controller has bound but not finished cutting.
    ready_snapshot(&cluster, "cutting", &handle, DRIVER).await;
    snapshots(&cluster, NAMESPACE)
        .patch_status(
            "cutting",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyToUse": false}})),
        )
        .await
        .unwrap();
    // A snapshot the snapshot controller has not bound to any content.
    snapshots(&cluster, NAMESPACE)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                "metadata": {"name": "unbound"},
                "spec": {"source": {"persistentVolumeClaimName": "src"}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut block = clone_of("block-clone", "1Gi", "src");
    block.spec.as_mut().unwrap().volume_mode = Some("Block".into());

    let cases = [
        (
            clone_of("of-missing", "1Gi", "missing"),
            "PersistentVolumeClaim default/missing specified as the data source does not exist",
        ),
        (
            clone_of("of-leaving", "1Gi", "leaving"),
            "PersistentVolumeClaim default/leaving specified as the data source is being deleted",
        ),
        (
            clone_of("too-small", "512Mi", "src"),
            "new PVC request must be greater than or equal in size to the specified PVC data source",
        ),
        (
            block,
            "must have the same volume mode for cloning. Source is Filesystem. Requested is Block",
        ),
        (
            restore_of("of-foreign", "1Gi", "foreign"),
            "it belongs to driver other.csi.k8s.io, not hostpath.csi.k8s.io",
        ),
        (
            restore_of("of-unbound", "1Gi", "unbound"),
            "snapshot default/unbound not bound to a VolumeSnapshotContent",
        ),
        (
            restore_of("of-cutting", "1Gi", "cutting"),
            "snapshot default/cutting is not Ready",
        ),
        (
            restore_of("tiny-restore", "512Mi", "ready"),
            "requested volume size 536870912 is less than the size 1073741824 for the source snapshot default/ready",
        ),
        (
            restore_of("of-missing-snapshot", "1Gi", "nothing"),
            "VolumeSnapshot default/nothing specified as the data source does not exist",
        ),
    ];
    for (claim, needle) in cases {
        let name = claim.metadata.name.clone().unwrap();
        create(&cluster, claim).await;
        failed_with(&cluster, NAMESPACE, &name, needle).await;
    }
    // Only the two source claims were ever created.
    assert_eq!(cluster.driver.call_count(Method::CreateVolume), 2);
    assert_eq!(cluster.driver.snapshots().len(), 3);
}

#[tokio::test]
async fn a_cross_namespace_clone_needs_the_gate_and_a_reference_grant() {
    let cluster = cluster().await;
    create_namespace(&cluster, "other").await;
    let mut source = claim("src", "fast", "1Gi");
    source.metadata.namespace = Some("other".into());
    create(&cluster, source).await;
    let _provisioner = cluster.provisioner(
        "csi-provisioner-0",
        &["--feature-gates=CrossNamespaceVolumeDataSource=true"],
    );
    eventually("the source in other bound", SHORT, async || {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.client.clone(), "other");
        let claim = claims.get("src").await.ok()?;
        (claim.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;

    create(&cluster, clone_from_other_namespace()).await;
    failed_with(
        &cluster,
        NAMESPACE,
        "copy",
        "isn't allowed: no ReferenceGrant in namespace other permits it",
    )
    .await;

    let grants = gvk(
        "gateway.networking.k8s.io",
        "v1beta1",
        "ReferenceGrant",
        "referencegrants",
    );
    Api::<DynamicObject>::namespaced_with(cluster.client.clone(), "other", &grants)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
                "metadata": {"name": "clones-from-default"},
                "spec": {
                    "from": [{"group": "", "kind": "PersistentVolumeClaim", "namespace": NAMESPACE}],
                    "to": [{"group": "", "kind": "PersistentVolumeClaim", "name": "src"}]
                }
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    cluster.bound("copy", SHORT).await;
    let request = cluster
        .driver
        .requests::<CreateVolumeRequest>(Method::CreateVolume)
        .into_iter()
        .last()
        .unwrap();
    assert!(matches!(
        request.volume_content_source.unwrap().r#type,
        Some(Type::Volume(_))
    ));
    let copy = cluster.claims().get("copy").await.unwrap();
    assert!(
        copy.spec.unwrap().data_source.is_none(),
        "cross-namespace: dataSourceRef only"
    );
}

#[tokio::test]
async fn without_the_gate_a_cross_namespace_source_is_refused() {
    let cluster = cluster().await;
    let _provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    create(&cluster, clone_from_other_namespace()).await;
    failed_with(
        &cluster,
        NAMESPACE,
        "copy",
        "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled",
    )
    .await;
}
