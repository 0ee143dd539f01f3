use serde_json::{Value, json};

use super::*;

/// A claim with every spec field, plus what the projection drops (managedFields, status
/// fields other than the phase).
fn claim_json() -> Value {
    json!({
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "metadata": {
            "name": "copy", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
            "creationTimestamp": "2026-11-21T15:35:48Z",
            "deletionTimestamp": "2026-11-21T15:36:48Z",
            "labels": {"team": "storage"},
            "annotations": {
                "volume.kubernetes.io/storage-provisioner": "hostpath.csi.k8s.io",
                "volume.kubernetes.io/selected-node": "node-1"
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "s", "uid": "1"}],
            "finalizers": ["kubernetes.io/pvc-protection"],
            "managedFields": [{"manager": "kubectl", "operation": "Update"}]
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "dataSource": {"kind": "PersistentVolumeClaim", "name": "src"},
            "dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                              "name": "snap", "namespace": "other"},
            "resources": {"requests": {"storage": "2Gi"}, "limits": {"storage": "3Gi"}},
            "selector": {"matchLabels": {"a": "b"}},
            "storageClassName": "fast",
            "volumeAttributesClassName": "gold",
            "volumeMode": "Block",
            "volumeName": "pv-1"
        },
        "status": {
            "phase": "Pending",
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "2Gi"},
            "conditions": [{"type": "Resizing", "status": "True"}]
        }
    })
}

/// A provisioned CSI volume with every spec field but the in-tree sources, plus an in-tree
/// source and status fields the projection drops.
fn volume_json() -> Value {
    let secret = |name: &str| json!({"name": name, "namespace": "secrets"});
    json!({
        "kind": "PersistentVolume",
        "apiVersion": "v1",
        "metadata": {
            "name": "pvc-1", "uid": "u-2", "resourceVersion": "9",
            "labels": {"zone": "a"},
            "annotations": {
                "pv.kubernetes.io/provisioned-by": "hostpath.csi.k8s.io",
                "volume.kubernetes.io/provisioner-deletion-secret-name": "s"
            },
            "finalizers": ["external-provisioner.volume.kubernetes.io/finalizer"],
            "managedFields": [{"manager": "csi-provisioner", "operation": "Update"}]
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "2Gi"},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "ns", "name": "copy",
                         "uid": "u-1", "resourceVersion": "7"},
            "csi": {
                "driver": "hostpath.csi.k8s.io",
                "volumeHandle": "h-1",
                "fsType": "ext4",
                "readOnly": true,
                "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": "1-2-h",
                                     "a": "b"},
                "controllerExpandSecretRef": secret("ce"),
                "controllerPublishSecretRef": secret("cp"),
                "nodeExpandSecretRef": secret("ne"),
                "nodePublishSecretRef": secret("np"),
                "nodeStageSecretRef": secret("ns")
            },
            "mountOptions": ["noatime"],
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.hostpath.csi/node", "operator": "In", "values": ["node-1"]}
            ]}]}},
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "fast",
            "volumeAttributesClassName": "gold",
            "volumeMode": "Block",
            "nfs": {"server": "nfs.example.com", "path": "/export"}
        },
        "status": {"phase": "Bound", "message": "m", "reason": "r"}
    })
}

fn without_managed_fields(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        managed_fields: None,
        ..meta
    }
}

/// The real claim cut down to what the projection keeps.
fn kept_claim(real: real::PersistentVolumeClaim) -> real::PersistentVolumeClaim {
    real::PersistentVolumeClaim {
        metadata: without_managed_fields(real.metadata),
        spec: real.spec,
        status: real.status.map(|s| real::PersistentVolumeClaimStatus {
            phase: s.phase,
            ..Default::default()
        }),
    }
}

/// The real volume cut down to what the projection keeps.
fn kept_volume(real: real::PersistentVolume) -> real::PersistentVolume {
    real::PersistentVolume {
        metadata: without_managed_fields(real.metadata),
        spec: real
            .spec
            .map(|s| real::PersistentVolumeSpec { nfs: None, ..s }),
        status: real.status.map(|s| real::PersistentVolumeStatus {
            phase: s.phase,
            ..Default::default()
        }),
    }
}

fn cached_claim(value: Value) -> PersistentVolumeClaim {
    claim_projection()(serde_json::from_value(value).unwrap())
}

fn cached_volume(value: Value) -> PersistentVolume {
    volume_projection()(serde_json::from_value(value).unwrap())
}

#[test]
fn a_cached_claim_reads_as_the_real_claim_but_for_managed_fields_and_status_details() {
    let real: real::PersistentVolumeClaim = serde_json::from_value(claim_json()).unwrap();
    let cached = cached_claim(claim_json());
    let want = kept_claim(real.clone());
    assert_eq!(cached.to_full(), want);
    // The fixture sets what the projection must keep, so the comparison above can fail.
    let spec = want.spec.as_ref().unwrap();
    assert!(
        spec.data_source.is_some()
            && spec.data_source_ref.is_some()
            && spec.selector.is_some()
            && spec.volume_attributes_class_name.is_some()
            && spec.resources.as_ref().is_some_and(|r| r.limits.is_some())
            && want.metadata.owner_references.is_some()
            && want.metadata.labels.is_some()
            && want.metadata.finalizers.is_some()
    );
    assert_ne!(
        want, real,
        "managedFields and the status details are dropped"
    );
}

#[test]
fn a_cached_volume_reads_as_the_real_volume_but_for_in_tree_sources_and_status_details() {
    let real: real::PersistentVolume = serde_json::from_value(volume_json()).unwrap();
    let cached = cached_volume(volume_json());
    let want = kept_volume(real.clone());
    assert_eq!(cached.to_full(), want);
    let spec = want.spec.as_ref().unwrap();
    let csi = spec.csi.as_ref().unwrap();
    assert!(
        csi.node_stage_secret_ref.is_some()
            && csi.volume_attributes.as_ref().is_some_and(|a| a.len() == 2)
            && spec.node_affinity.is_some()
            && spec.claim_ref.is_some()
            && spec.persistent_volume_reclaim_policy.is_some()
            && want
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.len() == 2)
            && want.metadata.labels.is_some()
    );
    assert_ne!(
        want, real,
        "the in-tree source and the status details are dropped"
    );
}

#[test]
fn a_cached_volume_keeps_the_in_tree_sources_csi_migration_translates() {
    for (key, source) in [
        (
            "awsElasticBlockStore",
            json!({"volumeID": "aws://us-east-1a/vol-1", "fsType": "xfs", "partition": 1, "readOnly": true}),
        ),
        (
            "gcePersistentDisk",
            json!({"pdName": "disk", "fsType": "ext4", "partition": 2}),
        ),
        (
            "azureDisk",
            json!({"diskName": "d", "diskURI": "/d", "kind": "Managed", "cachingMode": "None"}),
        ),
        (
            "azureFile",
            json!({"secretName": "s", "secretNamespace": "ns", "shareName": "share"}),
        ),
        (
            "cinder",
            json!({"volumeID": "c-1", "secretRef": {"name": "s"}}),
        ),
        (
            "vsphereVolume",
            json!({"volumePath": "[ds] v.vmdk", "storagePolicyName": "gold"}),
        ),
        (
            "portworxVolume",
            json!({"volumeID": "px-1", "readOnly": true}),
        ),
    ] {
        let mut json = volume_json();
        json["spec"]["csi"] = Value::Null;
        json["spec"]["nfs"] = Value::Null;
        json["spec"][key] = source;
        let real: real::PersistentVolume = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(cached_volume(json).to_full(), kept_volume(real), "{key}");
    }
}

#[test]
fn absent_and_null_fields_read_as_k8s_openapi_reads_them() {
    for value in [
        json!({}),
        json!({"metadata": null, "spec": null, "status": null}),
        json!({"spec": {"resources": {"requests": null}, "csi": {"driver": null, "volumeHandle": null}}}),
    ] {
        let real: real::PersistentVolumeClaim = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(cached_claim(value.clone()).to_full(), kept_claim(real));
        let real: real::PersistentVolume = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(cached_volume(value).to_full(), kept_volume(real));
    }
}

#[test]
fn the_watched_projections_are_the_resources_they_project() {
    use kube::Resource;
    assert_eq!(
        ClaimWire::url_path(&(), None),
        real::PersistentVolumeClaim::url_path(&(), None)
    );
    assert_eq!(ClaimWire::kind(&()), real::PersistentVolumeClaim::kind(&()));
    assert_eq!(
        VolumeWire::url_path(&(), None),
        real::PersistentVolume::url_path(&(), None)
    );
    assert_eq!(
        VolumeWire::api_version(&()),
        real::PersistentVolume::api_version(&())
    );
}

/// The caches are keyed as the real objects are: a claim by namespace and name, a volume by
/// name alone.
#[test]
fn cached_objects_are_found_by_namespace_and_name() {
    assert_eq!(cached_claim(claim_json()).key(), (Some("ns"), "copy"));
    assert_eq!(cached_volume(volume_json()).key(), (None, "pvc-1"));
}

/// Claims of one class, driver and size share their strings: what the compact form saves
/// depends on it (docs/bench.md).
#[test]
fn objects_of_one_cache_share_their_common_strings() {
    let mut interner = Interner::default();
    let mut claims = Vec::new();
    let mut volumes = Vec::new();
    let mut volume_interner = Interner::default();
    for i in 0..2 {
        let mut claim = claim_json();
        claim["metadata"]["name"] = json!(format!("c-{i}"));
        claims.push(PersistentVolumeClaim::new(
            serde_json::from_value(claim).unwrap(),
            &mut interner,
        ));
        let mut volume = volume_json();
        volume["metadata"]["name"] = json!(format!("pvc-{i}"));
        volume["spec"]["csi"]["volumeHandle"] = json!(format!("h-{i}"));
        volumes.push(PersistentVolume::new(
            serde_json::from_value(volume).unwrap(),
            &mut volume_interner,
        ));
    }
    let spec = |c: &PersistentVolumeClaim| c.spec.clone().unwrap();
    let (a, b) = (spec(&claims[0]), spec(&claims[1]));
    assert!(Arc::ptr_eq(
        a.access_modes.as_ref().unwrap(),
        b.access_modes.as_ref().unwrap()
    ));
    assert!(Arc::ptr_eq(
        a.storage_class_name.as_ref().unwrap(),
        b.storage_class_name.as_ref().unwrap()
    ));
    let requests = |s: &ClaimSpec| s.resources.clone().unwrap().requests.unwrap();
    assert!(Arc::ptr_eq(&requests(&a), &requests(&b)));
    let csi = |v: &PersistentVolume| v.spec.clone().unwrap().csi.unwrap();
    let (a, b) = (csi(&volumes[0]), csi(&volumes[1]));
    assert!(Arc::ptr_eq(&a.driver, &b.driver));
    assert!(Arc::ptr_eq(
        a.volume_attributes.as_ref().unwrap(),
        b.volume_attributes.as_ref().unwrap()
    ));
    let affinity = |v: &PersistentVolume| v.spec.clone().unwrap().node_affinity.unwrap();
    assert!(Arc::ptr_eq(&affinity(&volumes[0]), &affinity(&volumes[1])));
    // The claimRef's kind and namespace: csi_common::cached's `Reference` tests.
}
