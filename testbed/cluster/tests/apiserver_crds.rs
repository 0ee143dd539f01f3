//! The custom resources the in-memory API server serves as a cluster with their CRDs installed
//! does: external-snapshotter's snapshot.storage.k8s.io/v1 VolumeSnapshot and
//! VolumeSnapshotContent, and the Gateway API's gateway.networking.k8s.io/v1beta1
//! ReferenceGrant. Behaviour copied from kube-apiserver's CRD registry: discovery lists them
//! (preferred version = the served one), objects are kept as sent (no typed decoding), a kind
//! with a status subresource drops `status` on create and ignores it on main-resource updates
//! (it is written through `/status`), list items keep kind and apiVersion, no new finalizer may be added once deletion started, and
//! a version that is not served is a 404.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn snapshots() -> ApiResource {
    resource(
        "snapshot.storage.k8s.io",
        "v1",
        "VolumeSnapshot",
        "volumesnapshots",
    )
}

fn object(value: serde_json::Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

#[tokio::test]
async fn a_volume_snapshot_status_is_written_through_its_status_subresource_only() {
    let server = ApiServer::new();
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &snapshots());
    let created = api
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                "metadata": {"name": "snap"},
                "spec": {"source": {"persistentVolumeClaimName": "data"}, "unknownField": 1},
                "status": {"readyToUse": true}
            })),
        )
        .await
        .unwrap();
    // Status reset on create; the spec kept as sent (no typed decoding); generation 1.
    assert!(created.data.get("status").is_none(), "{created:?}");
    assert_eq!(created.data["spec"]["unknownField"], 1);
    assert_eq!(created.metadata.generation, Some(1));

    let status = api
        .patch_status(
            "snap",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyToUse": true, "restoreSize": "1Gi"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.data["status"]["readyToUse"], true);

    // A plain Update (what csi-provisioner does to add its finalizer) cannot change status.
    let mut update = status.clone();
    update.data["status"]["readyToUse"] = json!(false);
    update
        .metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push("provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection".into());
    let updated = api
        .replace("snap", &PostParams::default(), &update)
        .await
        .unwrap();
    assert_eq!(updated.data["status"]["readyToUse"], true);
    assert_eq!(updated.metadata.finalizers.as_ref().unwrap().len(), 1);
    // Metadata-only change: generation stays.
    assert_eq!(updated.metadata.generation, Some(1));

    // Deletion waits for the finalizer, and no new one can be added meanwhile.
    api.delete("snap", &DeleteParams::default()).await.unwrap();
    let mut deleting = api.get("snap").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    deleting
        .metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push("example.com/late".into());
    let err = api
        .replace("snap", &PostParams::default(), &deleting)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
}

#[tokio::test]
async fn reference_grants_are_served_at_v1beta1_only() {
    let server = ApiServer::new();
    let grants = resource(
        "gateway.networking.k8s.io",
        "v1beta1",
        "ReferenceGrant",
        "referencegrants",
    );
    let namespaces: Api<Namespace> = Api::all(server.client());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "source"}})).unwrap(),
        )
        .await
        .unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "source", &grants);
    let grant = object(json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "allow"},
        "spec": {
            "from": [{"group": "", "kind": "PersistentVolumeClaim", "namespace": "target"}],
            "to": [{"group": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot"}]
        }
    }));
    api.create(&PostParams::default(), &grant).await.unwrap();
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    // Unstructured list items keep their kind and apiVersion (built-in kinds' items do not).
    let types = listed.items[0].types.as_ref().expect("kind and apiVersion");
    assert_eq!(types.kind, "ReferenceGrant");
    assert_eq!(types.api_version, "gateway.networking.k8s.io/v1beta1");
    assert_eq!(
        listed.items[0].data["spec"]["from"][0]["namespace"],
        "target"
    );

    let v1 = resource(
        "gateway.networking.k8s.io",
        "v1",
        "ReferenceGrant",
        "referencegrants",
    );
    let err = Api::<DynamicObject>::namespaced_with(server.client(), "source", &v1)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn discovery_lists_the_custom_groups_with_their_served_version() {
    let server = ApiServer::new();
    let client = server.client();
    let discovery = kube::Discovery::new(client).run().await.unwrap();
    let gateway = discovery
        .get("gateway.networking.k8s.io")
        .expect("gateway group discovered");
    assert_eq!(gateway.preferred_version_or_latest(), "v1beta1");
    let (grant, caps) = gateway
        .recommended_kind("ReferenceGrant")
        .expect("ReferenceGrant discovered");
    assert_eq!(grant.plural, "referencegrants");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    let snapshot = discovery
        .get("snapshot.storage.k8s.io")
        .expect("snapshot group discovered");
    assert!(snapshot.recommended_kind("VolumeSnapshotContent").is_some());
}
