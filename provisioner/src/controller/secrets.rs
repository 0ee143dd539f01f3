//! Fetching the provisioner secret whose data goes into CreateVolume / DeleteVolume `secrets`
//! (spec §2.8: a plain GET, never cached or watched, so the provisioner needs `get` on secrets
//! only when a StorageClass configures one).

use std::collections::HashMap;

use csi_common::kube_client::KubeError;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use crate::secrets::SecretRef;

/// The secret could not be read.
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

/// GETs `secret` and turns its data into the string map CSI wants (Go's `string(bytes)`; bytes
/// that are not UTF-8 are replaced, since protobuf strings must be UTF-8).
///
/// The values are credentials: they are never logged here, and the requests that carry them
/// redact them in `Debug`.
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
    Ok(object
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, String::from_utf8_lossy(&value.0).into_owned()))
        .collect())
}
