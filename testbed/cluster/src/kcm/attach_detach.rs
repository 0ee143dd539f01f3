//! A minimal attach-detach controller: on request, create or delete the VolumeAttachment that
//! kube-controller-manager's CSI attacher plugin (`pkg/volume/csi/csi_attacher.go`) would
//! create for a (PersistentVolume, node) pair, and wait for external-attacher to report it
//! attached. There is no reconciliation against Pods: callers decide what is attached.

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::{
    VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec, VolumeAttachmentStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

/// Errors of the attach-detach helper.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("API request failed")]
    Api(#[source] kube::Error),
    /// The volume does not exist.
    #[error("PersistentVolume {0} not found")]
    VolumeNotFound(String),
    /// The volume is not a CSI volume, so there is nothing for a CSI attacher to do.
    #[error("PersistentVolume {0} has no spec.csi")]
    NotCsi(String),
    /// An existing VolumeAttachment with the computed name is for another volume or node.
    #[error("VolumeAttachment {0} exists for a different volume or node")]
    Conflict(String),
    /// The wait ran out.
    #[error("VolumeAttachment {name} not {what} within {timeout:?}")]
    Timeout {
        /// The VolumeAttachment.
        name: String,
        /// "attached" or "deleted".
        what: &'static str,
        /// How long we waited.
        timeout: Duration,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `getAttachmentName`: `csi-` + hex SHA-256 of volume handle, driver name and node name
/// concatenated (upstream hashes the CSI volume handle, not the PV name).
pub fn attachment_name(volume_handle: &str, driver: &str, node: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{volume_handle}{driver}{node}").as_bytes(),
    );
    let mut name = String::from("csi-");
    for byte in digest.as_ref() {
        let _ = write!(name, "{byte:02x}");
    }
    name
}

/// The VolumeAttachment the CSI attacher plugin creates for `volume` on `node`.
///
/// # Errors
/// [`Error::NotCsi`] when the volume has no CSI source.
pub fn volume_attachment(volume: &PersistentVolume, node: &str) -> Result<VolumeAttachment> {
    let pv_name = volume.metadata.name.clone().unwrap_or_default();
    let csi = volume
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .ok_or_else(|| Error::NotCsi(pv_name.clone()))?;
    Ok(VolumeAttachment {
        metadata: ObjectMeta {
            name: Some(attachment_name(&csi.volume_handle, &csi.driver, node)),
            ..Default::default()
        },
        spec: VolumeAttachmentSpec {
            attacher: csi.driver.clone(),
            node_name: node.to_owned(),
            source: VolumeAttachmentSource {
                persistent_volume_name: Some(pv_name),
                inline_volume_spec: None,
            },
        },
        status: Some(VolumeAttachmentStatus {
            attached: false,
            ..Default::default()
        }),
    })
}

async fn attachment_for(client: &Client, pv_name: &str, node: &str) -> Result<VolumeAttachment> {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let volume = volumes
        .get_opt(pv_name)
        .await
        .map_err(Error::Api)?
        .ok_or_else(|| Error::VolumeNotFound(pv_name.to_owned()))?;
    volume_attachment(&volume, node)
}

/// Creates the VolumeAttachment for `pv_name` on `node` (reusing an identical existing one,
/// as upstream does) and returns its name.
///
/// # Errors
/// See [`Error`].
pub async fn attach(client: &Client, pv_name: &str, node: &str) -> Result<String> {
    let attachment = attachment_for(client, pv_name, node).await?;
    let name = attachment.metadata.name.clone().unwrap_or_default();
    let api: Api<VolumeAttachment> = Api::all(client.clone());
    match api.create(&PostParams::default(), &attachment).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let existing = api.get(&name).await.map_err(Error::Api)?;
            if existing.spec.node_name != node
                || existing.spec.source.persistent_volume_name.as_deref() != Some(pv_name)
            {
                return Err(Error::Conflict(name));
            }
        }
        Err(err) => return Err(Error::Api(err)),
    }
    tracing::info!(volume = pv_name, node, attachment = %name, "VolumeAttachment requested");
    Ok(name)
}

/// Deletes the VolumeAttachment for `pv_name` on `node` (no error when it is already gone)
/// and returns its name. The object stays until external-attacher removes its finalizer.
///
/// # Errors
/// See [`Error`].
pub async fn detach(client: &Client, pv_name: &str, node: &str) -> Result<String> {
    let attachment = attachment_for(client, pv_name, node).await?;
    let name = attachment.metadata.name.unwrap_or_default();
    let api: Api<VolumeAttachment> = Api::all(client.clone());
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(err) => return Err(Error::Api(err)),
    }
    tracing::info!(volume = pv_name, node, attachment = %name, "VolumeAttachment deletion requested");
    Ok(name)
}

const POLL: Duration = Duration::from_millis(100);

/// Waits until the VolumeAttachment reports `status.attached: true` (upstream polls the same
/// way in `waitForVolumeAttachment`) and returns it.
///
/// # Errors
/// [`Error::Timeout`] when it did not happen within `timeout`.
pub async fn wait_attached(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<VolumeAttachment> {
    let api: Api<VolumeAttachment> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(va) = api.get_opt(name).await.map_err(Error::Api)?
            && va.status.as_ref().is_some_and(|s| s.attached)
        {
            return Ok(va);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                name: name.to_owned(),
                what: "attached",
                timeout,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the VolumeAttachment is gone.
///
/// # Errors
/// [`Error::Timeout`] when it did not happen within `timeout`.
pub async fn wait_detached(client: &Client, name: &str, timeout: Duration) -> Result<()> {
    let api: Api<VolumeAttachment> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if api.get_opt(name).await.map_err(Error::Api)?.is_none() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                name: name.to_owned(),
                what: "deleted",
                timeout,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_names_hash_handle_driver_and_node() {
        // sha256("vol-1" "mock.csi.k8s.io" "node-1"), checked with `printf %s ... | sha256sum`.
        assert_eq!(
            attachment_name("vol-1", "mock.csi.k8s.io", "node-1"),
            "csi-cdf9cd07f4cc57383970b2622faaac120b4b36ca83a86294ffefcf6a18c4ffde"
        );
    }
}
