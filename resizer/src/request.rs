//! The ControllerExpandVolume request for a PV (external-resizer `csiResizer.Resize`): the
//! volume handle, the target as `required_bytes`, the expand secrets and the volume capability
//! built like the attacher's, but with no default fs type (spec sidecars.md §2.4 step 7).

use std::borrow::Cow;
use std::collections::HashMap;

use csi_common::access_modes;
use csi_common::capabilities::ControllerCapabilities;
use csi_common::migration;
use csi_common::volume_capability::{self, AccessType};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use proto::csi::v1::{CapacityRange, ControllerExpandVolumeRequest};

use crate::error::{ExpandError, Untranslatable};

/// The spec ControllerExpandVolume is built from, and whether it is a translation: the PV's
/// own when it has a CSI source, else its in-tree source translated as csi-translation-lib
/// does (CSI migration; external-resizer `csiResizer.Resize`). A PV with neither has no
/// handle.
pub(crate) fn volume(
    pv: &PersistentVolume,
) -> Result<(Cow<'_, PersistentVolumeSpec>, bool), ExpandError> {
    let spec = pv.spec.as_ref().ok_or(ExpandError::NoVolumeHandle)?;
    if spec.csi.is_some() {
        return Ok((Cow::Borrowed(spec), false));
    }
    match migration::translated_spec(pv) {
        Some(Ok(translated)) => Ok((Cow::Owned(translated), true)),
        Some(Err(refused)) => Err(ExpandError::Translation(Untranslatable::Refused(refused))),
        None => Err(ExpandError::Translation(Untranslatable::NoPlugin(
            pv.metadata.name.clone().unwrap_or_default(),
        ))),
    }
}

/// The request to expand the volume of `spec` (with CSI source `csi`) to `target` bytes.
pub(crate) fn expand(
    spec: &PersistentVolumeSpec,
    csi: &CSIPersistentVolumeSource,
    target: i64,
    secrets: HashMap<String, String>,
    capabilities: &ControllerCapabilities,
) -> Result<ControllerExpandVolumeRequest, ExpandError> {
    if csi.volume_handle.is_empty() {
        return Err(ExpandError::NoVolumeHandle);
    }
    let mode = access_modes::set_to_csi(
        spec.access_modes.as_deref().unwrap_or_default(),
        capabilities,
    )
    .map_err(ExpandError::AccessModes)?;
    let access = if spec.volume_mode.as_deref() == Some("Block") {
        AccessType::Block
    } else {
        AccessType::Mount {
            fs_type: csi.fs_type.as_deref().unwrap_or_default(),
            mount_flags: spec.mount_options.as_deref().unwrap_or_default(),
        }
    };
    Ok(ControllerExpandVolumeRequest {
        volume_id: csi.volume_handle.clone(),
        capacity_range: Some(CapacityRange {
            required_bytes: target,
            limit_bytes: 0,
        }),
        secrets,
        volume_capability: Some(volume_capability::build(mode, &access)),
    })
}

#[cfg(test)]
mod tests {
    use proto::csi::v1::volume_capability::AccessType as Wire;
    use proto::csi::v1::volume_capability::access_mode::Mode;

    use super::*;

    fn source(handle: &str) -> CSIPersistentVolumeSource {
        CSIPersistentVolumeSource {
            driver: "d".into(),
            volume_handle: handle.into(),
            fs_type: Some("xfs".into()),
            ..Default::default()
        }
    }

    fn spec(modes: &[&str], block: bool) -> PersistentVolumeSpec {
        PersistentVolumeSpec {
            access_modes: Some(modes.iter().map(|m| (*m).to_owned()).collect()),
            volume_mode: block.then(|| "Block".to_owned()),
            mount_options: Some(vec!["noatime".into()]),
            ..Default::default()
        }
    }

    #[test]
    fn request_carries_handle_size_secrets_and_capability() {
        let secrets = HashMap::from([("k".to_owned(), "v".to_owned())]);
        let req = expand(
            &spec(&["ReadWriteOnce"], false),
            &source("vol-1"),
            2 << 30,
            secrets.clone(),
            &ControllerCapabilities::default(),
        )
        .unwrap();
        assert_eq!(req.volume_id, "vol-1");
        assert_eq!(req.capacity_range.unwrap().required_bytes, 2 << 30);
        assert_eq!(req.secrets, secrets);
        let cap = req.volume_capability.unwrap();
        assert_eq!(cap.access_mode.unwrap().mode, Mode::SingleNodeWriter as i32);
        match cap.access_type.unwrap() {
            Wire::Mount(m) => {
                assert_eq!(m.fs_type, "xfs");
                assert_eq!(m.mount_flags, ["noatime"]);
            }
            Wire::Block(_) => panic!("mount expected"),
        }

        let block = expand(
            &spec(&["ReadWriteMany"], true),
            &source("vol-1"),
            1,
            HashMap::new(),
            &ControllerCapabilities::default(),
        )
        .unwrap()
        .volume_capability
        .unwrap();
        assert!(matches!(block.access_type, Some(Wire::Block(_))));
        assert_eq!(
            block.access_mode.unwrap().mode,
            Mode::MultiNodeMultiWriter as i32
        );
    }

    #[test]
    fn bad_volumes_are_errors_not_panics() {
        let caps = ControllerCapabilities::default();
        let empty = expand(
            &spec(&["ReadWriteOnce"], false),
            &source(""),
            1,
            HashMap::new(),
            &caps,
        );
        assert!(matches!(empty, Err(ExpandError::NoVolumeHandle)));
        let modes = expand(&spec(&[], false), &source("v"), 1, HashMap::new(), &caps);
        assert!(matches!(modes, Err(ExpandError::AccessModes(_))));
        let rwop_mixed = expand(
            &spec(&["ReadWriteOncePod", "ReadWriteOnce"], false),
            &source("v"),
            1,
            HashMap::new(),
            &caps,
        );
        assert!(matches!(rwop_mixed, Err(ExpandError::AccessModes(_))));
    }

    #[test]
    fn an_in_tree_pv_is_expanded_as_its_translation() {
        let pv = |spec: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pv-1"}, "spec": spec}))
                .unwrap()
        };
        let csi = pv(serde_json::json!({"csi": {"driver": "d", "volumeHandle": "h"}}));
        let (spec, migrated) = volume(&csi).unwrap();
        assert!(!migrated && matches!(spec, Cow::Borrowed(_)));

        let ebs = pv(serde_json::json!({
            "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1", "fsType": "xfs"},
            "accessModes": ["ReadWriteOnce"],
        }));
        let (spec, migrated) = volume(&ebs).unwrap();
        assert!(migrated);
        let source = spec.csi.as_ref().unwrap();
        let request = expand(
            &spec,
            source,
            2,
            HashMap::new(),
            &ControllerCapabilities::default(),
        )
        .unwrap();
        assert_eq!(request.volume_id, "vol-1");

        let cases = [
            (
                serde_json::json!({"awsElasticBlockStore": {"volumeID": "aws://z/bad"}}),
                "failed to translate persistent volume: failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://z/bad)",
            ),
            (
                serde_json::json!({"nfs": {"server": "s", "path": "/"}}),
                "failed to translate persistent volume: could not find in-tree plugin translation logic for \"pv-1\"",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(volume(&pv(spec)).unwrap_err().to_string(), want);
        }
    }
}
