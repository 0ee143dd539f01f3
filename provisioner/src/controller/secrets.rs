//! The secrets a DeleteVolume sends: the provisioner secret a PV's annotations (or its class)
//! name, read with [`csi_common::secrets::fetch`]; shared by the volume controller and the
//! clean-up of PVs that could not be saved.

use std::collections::HashMap;

use csi_common::secrets;
use k8s_openapi::api::core::v1::PersistentVolume;

use crate::annotations::pv_class_name;
use crate::secrets::{DeletionSecretError, deletion_secret};

use super::Context;

/// The `secrets` of DeleteVolume for `volume` (spec §5 step 4e): the provisioner secret its
/// annotations (or, for old PVs, its class) name. A secret that cannot be read is only logged
/// and the volume deleted without it, as upstream does: it may be gone with its namespace.
pub(crate) async fn deletion_secrets<D>(
    ctx: &Context<D>,
    volume: &PersistentVolume,
) -> Result<HashMap<String, String>, DeletionSecretError> {
    let class = ctx.stores.class(&pv_class_name(volume));
    let Some(secret) = deletion_secret(volume, class.as_deref())? else {
        return Ok(HashMap::default());
    };
    match secrets::fetch(&ctx.client, &secret).await {
        Ok(data) => Ok(data),
        Err(err) => {
            let name = volume.metadata.name.as_deref().unwrap_or_default();
            tracing::warn!(
                volume = name,
                error = csi_common::logging::error_chain(&err),
                "deleting without provisioner secret"
            );
            Ok(HashMap::default())
        }
    }
}
