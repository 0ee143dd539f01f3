//! Start-up steps of capacity tracking that talk to the API server (upstream `main.go`):
//! the storage.k8s.io/v1 probe and the owner of the objects.

use csi_common::kube_client::error_text;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::Scope;
use kube::{Api, Client};

/// Why capacity tracking cannot start (upstream: `klog.Fatal`).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The probe got 404: v1 is not served (upstream then falls back to v1beta1, removed in
    /// Kubernetes 1.27; this provisioner does not, docs/compatibility.md) or the namespace
    /// does not exist.
    #[error(
        "cannot create CSIStorageCapacity objects in namespace {0}: storage.k8s.io/v1 CSIStorageCapacity is not served (Kubernetes >= 1.24 is needed) or the namespace does not exist"
    )]
    NoV1(String),
    /// The probe got an answer other than "invalid" or "not found".
    #[error("unexpected answer while probing for storage.k8s.io/v1 CSIStorageCapacity: {0}")]
    Probe(String),
    /// A GET of the walk failed.
    #[error(
        "cannot look up the owner of CSIStorageCapacity objects: {kind} {namespace}/{name}: {error}"
    )]
    Get {
        /// Kind of the object being fetched.
        kind: String,
        /// Its namespace (empty for cluster-scoped objects).
        namespace: String,
        /// Its name.
        name: String,
        /// client-go style error text.
        error: String,
    },
    /// An object of the walk has no controller owner, so `--capacity-ownerref-level` is too
    /// high for how the provisioner is deployed.
    #[error(
        "cannot look up the owner of CSIStorageCapacity objects: {kind} {name} has no controller owner, but --capacity-ownerref-level={level} asks for {missing} more level(s)"
    )]
    NoController {
        /// Kind of the object without controller.
        kind: String,
        /// Its name.
        name: String,
        /// `--capacity-ownerref-level`.
        level: i32,
        /// How many hops were still to go.
        missing: i32,
    },
}

/// Upstream's probe name: never a valid object name, so the create cannot succeed.
const PROBE_NAME: &str = "#%123-invalid-name";

/// Checks that storage.k8s.io/v1 CSIStorageCapacity is served: creating an invalid object
/// answers 422 Invalid if it is and 404 if it is not (upstream's probe).
pub(crate) async fn probe_v1(client: &Client, namespace: &str) -> Result<(), StartError> {
    let api: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), namespace);
    let probe = CSIStorageCapacity {
        metadata: ObjectMeta {
            name: Some(PROBE_NAME.to_owned()),
            ..ObjectMeta::default()
        },
        ..CSIStorageCapacity::default()
    };
    match api.create(&PostParams::default(), &probe).await {
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Err(StartError::NoV1(namespace.to_owned()))
        }
        Err(err) => Err(StartError::Probe(error_text(&err))),
        Ok(_) => Err(StartError::Probe(format!(
            "an object named {PROBE_NAME:?} was created"
        ))),
    }
}

/// The owner of our objects: `None` for level -1, the Pod for 0, else the object reached by
/// following `controller: true` owner references `level` times from the Pod (generic GETs
/// through discovery of the objects in between, so ReplicaSet, StatefulSet, DaemonSet,
/// Deployment or a custom controller all work, as with upstream's unstructured client).
pub(crate) async fn resolve(
    client: &Client,
    namespace: &str,
    pod_name: &str,
    level: i32,
) -> Result<Option<OwnerReference>, StartError> {
    if level < 0 {
        return Ok(None);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pods.get(pod_name).await.map_err(|err| StartError::Get {
        kind: "Pod".into(),
        namespace: namespace.into(),
        name: pod_name.into(),
        error: error_text(&err),
    })?;
    let mut current = OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod_name.into(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let mut meta = pod.metadata;
    for hop in 0..level {
        let Some(next) = controller_of(&meta) else {
            return Err(StartError::NoController {
                kind: current.kind,
                name: current.name,
                level,
                missing: level - hop,
            });
        };
        // The last owner is not fetched: its reference already has the uid. So a Deployment
        // (level 2) needs GET on pods and replicasets only, as upstream's RBAC says.
        if hop + 1 < level {
            meta = get(client, namespace, &next).await?;
        }
        current = OwnerReference {
            controller: Some(true),
            block_owner_deletion: None,
            ..next
        };
    }
    Ok(Some(current))
}

/// The owner reference marked `controller: true`, if any.
fn controller_of(meta: &ObjectMeta) -> Option<OwnerReference> {
    meta.owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|o| o.controller == Some(true))
        .cloned()
}

/// GETs the object `owner` names: namespaced objects in `namespace` (owners live in their
/// dependent's namespace), cluster-scoped ones (a mirror pod's Node) without.
async fn get(
    client: &Client,
    namespace: &str,
    owner: &OwnerReference,
) -> Result<ObjectMeta, StartError> {
    let failed = |error: String| StartError::Get {
        kind: owner.kind.clone(),
        namespace: namespace.into(),
        name: owner.name.clone(),
        error,
    };
    let (group, version) = match owner.api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", owner.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &owner.kind);
    let (resource, capabilities): (ApiResource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|err| failed(error_text(&err)))?;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let object = api
        .get(&owner.name)
        .await
        .map_err(|err| failed(error_text(&err)))?;
    Ok(object.metadata)
}
