//! The provisioner bench's cache load: bound claim+PV pairs stored straight into the API
//! server before csi-provisioner starts, shaped as a real cluster has them after
//! csi-provisioner and kube-controller-manager are done (the golden fixtures'
//! `objects/pvc-2-bound.json` and `objects/pv-1-provisioned-bound.json`), `managedFields`
//! included, so that a fresh start reads as much JSON per object as it would from
//! kube-apiserver. Each PV has the node affinity the mock driver's topology gives the PVs the
//! burst provisions (the fixture's hostpath PV has one too), so the two caches hold the same.

use serde_json::{Value, json};
use testbed_cluster::apiserver::ApiServer;
use testbed_mock_csi::{DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

/// The namespace of the stored claims (the burst's claims live elsewhere, so its cleanup does
/// not wait for these).
pub(crate) const NAMESPACE: &str = "bench-cached";

const TIME: &str = "2026-11-21T15:35:48Z";

fn claim_name(i: usize) -> String {
    format!("cached-claim-{i}")
}

fn pv_name(i: usize) -> String {
    format!("pvc-cached-{i:08}")
}

/// One managedFields entry of `manager`.
fn entry(manager: &str, subresource: Option<&str>, fields: &Value) -> Value {
    let mut entry = json!({
        "manager": manager, "operation": "Update", "apiVersion": "v1", "time": TIME,
        "fieldsType": "FieldsV1", "fieldsV1": fields,
    });
    if let Some(sub) = subresource {
        entry["subresource"] = json!(sub);
    }
    entry
}

/// Claim `i` of `class`, bound to its PV by the PV controller.
fn claim(i: usize, class: &str, driver: &str) -> Value {
    json!({
        "metadata": {
            "name": claim_name(i),
            "namespace": NAMESPACE,
            "labels": {"app": "bench"},
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "pv.kubernetes.io/bound-by-controller": "yes",
                "volume.beta.kubernetes.io/storage-provisioner": driver,
                "volume.kubernetes.io/storage-provisioner": driver,
            },
            "finalizers": ["kubernetes.io/pvc-protection"],
            "managedFields": [
                entry("kubectl-create", None, &json!({
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:accessModes": {}, "f:resources": {"f:requests": {".": {}, "f:storage": {}}},
                               "f:storageClassName": {}, "f:volumeMode": {}},
                })),
                entry("kube-controller-manager", None, &json!({
                    "f:metadata": {"f:annotations": {".": {},
                        "f:pv.kubernetes.io/bind-completed": {}, "f:pv.kubernetes.io/bound-by-controller": {},
                        "f:volume.beta.kubernetes.io/storage-provisioner": {},
                        "f:volume.kubernetes.io/storage-provisioner": {}}},
                    "f:spec": {"f:volumeName": {}},
                })),
                entry("kube-controller-manager", Some("status"), &json!({
                    "f:status": {"f:accessModes": {}, "f:capacity": {".": {}, "f:storage": {}}, "f:phase": {}},
                })),
            ],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": class,
            "volumeMode": "Filesystem",
            "volumeName": pv_name(i),
        },
        "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}},
    })
}

/// The PV csi-provisioner made for claim `i` (uid `claim_uid`), bound by the PV controller.
fn volume(i: usize, class: &str, driver: &str, claim_uid: &str) -> Value {
    json!({
        "metadata": {
            "name": pv_name(i),
            "annotations": {"pv.kubernetes.io/provisioned-by": driver},
            "finalizers": ["external-provisioner.volume.kubernetes.io/finalizer", "kubernetes.io/pv-protection"],
            "managedFields": [
                entry("csi-provisioner", None, &json!({
                    "f:metadata": {"f:annotations": {".": {}, "f:pv.kubernetes.io/provisioned-by": {}},
                                   "f:finalizers": {".": {}, "v:\"external-provisioner.volume.kubernetes.io/finalizer\"": {}}},
                    "f:spec": {"f:accessModes": {}, "f:capacity": {".": {}, "f:storage": {}},
                               "f:claimRef": {".": {}, "f:apiVersion": {}, "f:kind": {}, "f:name": {},
                                              "f:namespace": {}, "f:resourceVersion": {}, "f:uid": {}},
                               "f:csi": {".": {}, "f:driver": {}, "f:fsType": {},
                                         "f:volumeAttributes": {".": {}, "f:storage.kubernetes.io/csiProvisionerIdentity": {}},
                                         "f:volumeHandle": {}},
                               "f:nodeAffinity": {".": {}, "f:required": {}},
                               "f:persistentVolumeReclaimPolicy": {}, "f:storageClassName": {}, "f:volumeMode": {}},
                })),
                entry("kube-controller-manager", Some("status"), &json!({"f:status": {"f:phase": {}}})),
            ],
        },
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": class,
            "volumeMode": "Filesystem",
            "claimRef": {
                "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": NAMESPACE,
                "name": claim_name(i), "uid": claim_uid, "resourceVersion": "1",
            },
            "csi": {
                "driver": driver,
                "volumeHandle": format!("cached-volume-{i:08}"),
                "fsType": "ext4",
                "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": format!("1795275348577-3187-{driver}")},
            },
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": DEFAULT_TOPOLOGY_KEY, "operator": "In", "values": [DEFAULT_NODE_ID]},
            ]}]}},
        },
        "status": {"phase": "Bound", "lastPhaseTransitionTime": TIME},
    })
}

/// Stores `count` bound pairs of StorageClass `class`, straight into the store (no request is
/// counted; the namespace must exist). csi-provisioner has nothing to do for them: its
/// finalizer is on every PV and every claim is bound.
pub(crate) fn store(
    server: &ApiServer,
    count: usize,
    class: &str,
    driver: &str,
) -> anyhow::Result<()> {
    for i in 1..=count {
        let claim: PersistentVolumeClaim = serde_json::from_value(claim(i, class, driver))?;
        let stored = server.put_object(&claim).context("cannot store a claim")?;
        let uid = stored.metadata.uid.unwrap_or_default();
        let pv: PersistentVolume = serde_json::from_value(volume(i, class, driver, &uid))?;
        server.put_object(&pv).context("cannot store a PV")?;
    }
    Ok(())
}
