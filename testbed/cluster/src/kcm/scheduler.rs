//! The one scheduler action the volume flow depends on: for a WaitForFirstConsumer claim,
//! kube-scheduler's volume binder records the chosen node in the claim's
//! `volume.kubernetes.io/selected-node` annotation (a full-object update), which lets the PV
//! binder hand the claim to the provisioner. There is no scheduler here, so tests and the
//! sandbox call [`select_node`] instead of creating a Pod.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::PostParams;
use kube::{Api, Client};

use super::objects::{self, ANN_SELECTED_NODE};

/// Errors of [`select_node`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("API request failed")]
    Api(#[source] kube::Error),
    /// The claim does not exist.
    #[error("PersistentVolumeClaim {namespace}/{name} not found")]
    ClaimNotFound {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// Sets `volume.kubernetes.io/selected-node: <node>` on the claim, retrying on conflicts
/// with other writers (the binder may update the claim at the same time).
///
/// # Errors
/// See [`Error`].
pub async fn select_node(
    client: &Client,
    namespace: &str,
    claim: &str,
    node: &str,
) -> Result<PersistentVolumeClaim, Error> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    loop {
        let mut pvc = api
            .get_opt(claim)
            .await
            .map_err(Error::Api)?
            .ok_or_else(|| Error::ClaimNotFound {
                namespace: namespace.to_owned(),
                name: claim.to_owned(),
            })?;
        if objects::annotation(&pvc, ANN_SELECTED_NODE) == Some(node) {
            return Ok(pvc);
        }
        objects::set_annotation(&mut pvc, ANN_SELECTED_NODE, node);
        match api.replace(claim, &PostParams::default(), &pvc).await {
            Ok(saved) => return Ok(saved),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => return Err(Error::Api(err)),
        }
    }
}
