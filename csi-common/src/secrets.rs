//! The Secrets CSI calls carry: which Secret a PersistentVolume names for a call, reading it with
//! a plain GET, and turning its data into the CSI `secrets` map, with the error text upstream
//! prints when it cannot be read.
//!
//! Every controller sidecar does this the same way (external-provisioner, external-attacher and
//! external-resizer each have a `getCredentials`): Secrets are never watched or cached, only
//! read when a call needs one, so a sidecar needs `get` on secrets only when a StorageClass
//! configures them. Who reads which reference (spec sidecars.md §1.4, §2.3; provisioner.md §3):
//! the provisioner the one its StorageClass templates resolve to (the templates stay in the
//! provisioner), the attacher `spec.csi.controllerPublishSecretRef`, the resizer
//! `spec.csi.controllerExpandSecretRef` for ControllerExpandVolume and [`controller_modify`]
//! for ControllerModifyVolume.
//!
//! ```no_run
//! # async fn attach(client: kube::Client, pv: k8s_openapi::api::core::v1::PersistentVolume)
//! # -> Result<(), csi_common::secrets::FetchError> {
//! use csi_common::secrets::{self, SecretRef};
//!
//! let source = pv.spec.as_ref().and_then(|s| s.csi.as_ref());
//! let secrets = match source.and_then(|csi| csi.controller_publish_secret_ref.as_ref()) {
//!     // FetchError: "error getting secret s1 in namespace ns1" (the provisioner's words),
//!     // with client-go's `secrets "s1" not found` as its source. The attacher words it
//!     // `failed to load secret "ns1/s1": ...` from the same fields, as external-attacher does.
//!     Some(reference) => secrets::fetch(&client, &SecretRef::from(reference)).await?,
//!     None => Default::default(),
//! };
//! # let _ = secrets;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{PersistentVolume, Secret, SecretReference};
use kube::{Api, Client};

use crate::kube_client::KubeError;

/// PV annotation: the Secret name for ControllerModifyVolume. The PV has no field for it, so
/// external-provisioner writes it from the StorageClass and external-resizer reads it.
pub const ANN_CONTROLLER_MODIFY_SECRET_NAME: &str =
    "volume.kubernetes.io/controller-modify-secret-name";
/// PV annotation: the Secret namespace for ControllerModifyVolume.
pub const ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/controller-modify-secret-namespace";

/// A Secret by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// Secret name (a DNS-1123 subdomain).
    pub name: String,
    /// Secret namespace (a DNS-1123 label).
    pub namespace: String,
}

impl From<&SecretReference> for SecretRef {
    /// An unset name or namespace is empty, as Go's zero-valued strings are.
    fn from(reference: &SecretReference) -> Self {
        Self {
            name: reference.name.clone().unwrap_or_default(),
            namespace: reference.namespace.clone().unwrap_or_default(),
        }
    }
}

impl From<&SecretRef> for SecretReference {
    fn from(secret: &SecretRef) -> Self {
        Self {
            name: Some(secret.name.clone()),
            namespace: Some(secret.namespace.clone()),
        }
    }
}

/// The Secret for ControllerModifyVolume (external-resizer's modifier): the
/// [`ANN_CONTROLLER_MODIFY_SECRET_NAME`]/[`ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE`] pair when
/// both are set and non-empty, else `spec.csi.controllerExpandSecretRef`, else none.
pub fn controller_modify(pv: &PersistentVolume) -> Option<SecretRef> {
    let annotations = pv.metadata.annotations.as_ref();
    let annotation = |key| {
        annotations
            .and_then(|a| a.get(key))
            .filter(|v| !v.is_empty())
    };
    if let (Some(name), Some(namespace)) = (
        annotation(ANN_CONTROLLER_MODIFY_SECRET_NAME),
        annotation(ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE),
    ) {
        return Some(SecretRef {
            name: name.clone(),
            namespace: namespace.clone(),
        });
    }
    pv.spec
        .as_ref()?
        .csi
        .as_ref()?
        .controller_expand_secret_ref
        .as_ref()
        .map(SecretRef::from)
}

/// The Secret could not be read (upstream `getCredentials`).
#[derive(Debug, thiserror::Error)]
#[error("error getting secret {name} in namespace {namespace}")]
pub struct FetchError {
    /// Secret name.
    pub name: String,
    /// Secret namespace.
    pub namespace: String,
    /// The API error (`secrets "x" not found`, as client-go prints it).
    #[source]
    pub source: KubeError,
}

/// GETs `secret` and returns its data as CSI wants it ([`csi_secrets`]).
///
/// The values are credentials: they are never logged here, and the CSI requests that carry them
/// redact them in `Debug` and in the `-v=5` call log.
pub async fn fetch(
    client: &Client,
    secret: &SecretRef,
) -> Result<HashMap<String, String>, FetchError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    let object = api.get(&secret.name).await.map_err(|source| FetchError {
        name: secret.name.clone(),
        namespace: secret.namespace.clone(),
        source: KubeError(source),
    })?;
    Ok(csi_secrets(&object))
}

/// A Secret's `data` as the CSI `secrets` map: each value as Go's `string(bytes)`, except that
/// bytes that are not UTF-8 are replaced (protobuf strings must be UTF-8, and grpc-go would fail
/// to send them). `stringData` is write-only in the API and never read back.
pub fn csi_secrets(secret: &Secret) -> HashMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), String::from_utf8_lossy(&value.0).into_owned()))
        .collect()
}

#[cfg(test)]
mod tests;
