//! Start-up steps of capacity tracking that talk to the API server (upstream `main.go`):
//! the version probe (storage.k8s.io/v1, else v1beta1) and the owner of the objects.

use csi_common::kube_client::error_text;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::Scope;
use kube::{Api, Client};

use super::version::{Capacity, CapacityVersion};

/// Why capacity tracking cannot start (upstream: `klog.Fatal`).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Both probes got 404: neither v1 nor v1beta1 is served, or the namespace does not exist
    /// (upstream probes v1 only and would fail every write; docs/compatibility.md).
    #[error(
        "cannot create CSIStorageCapacity objects in namespace {0}: neither storage.k8s.io/v1 nor v1beta1 CSIStorageCapacity is served (Kubernetes >= 1.21 is needed) or the namespace does not exist"
    )]
    NotServed(String),
    /// A probe got an answer other than "invalid" or "not found".
    #[error(
        "unexpected answer while probing for storage.k8s.io/{version} CSIStorageCapacity: {error}"
    )]
    Probe {
        /// The version probed.
        version: &'static str,
        /// What it answered.
        error: String,
    },
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

/// The version to read and write CSIStorageCapacity objects at: v1 if served, else v1beta1
/// (upstream's probe, a 404 of v1 meaning Kubernetes 1.21-1.23). Creating an invalid object
/// answers 422 Invalid where the version is served and 404 where it is not.
pub(crate) async fn probe(client: &Client, namespace: &str) -> Result<CapacityVersion, StartError> {
    for version in [CapacityVersion::V1, CapacityVersion::V1beta1] {
        if served(client, namespace, version).await? {
            return Ok(version);
        }
    }
    Err(StartError::NotServed(namespace.to_owned()))
}

/// Whether `version` is served: 422 yes, 404 no.
async fn served(
    client: &Client,
    namespace: &str,
    version: CapacityVersion,
) -> Result<bool, StartError> {
    let api: Api<Capacity> = Api::namespaced_with(client.clone(), namespace, &version);
    let mut probe = Capacity::default();
    probe.metadata.name = Some(PROBE_NAME.to_owned());
    let failed = |error: String| StartError::Probe {
        version: version.as_str(),
        error,
    };
    match api.create(&PostParams::default(), &probe).await {
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(err) => Err(failed(error_text(&err))),
        Ok(_) => Err(failed(format!(
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
