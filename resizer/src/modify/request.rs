//! The ControllerModifyVolumeRequest (external-resizer `callModifyVolumeOnPlugin` and
//! `csi.Client.Modify`; spec sidecars.md §2.5 step 6).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::PersistentVolume;
use proto::csi::v1::ControllerModifyVolumeRequest;

use super::error::ModifyError;
use crate::names::modify;

/// The claim and volume names `--extra-modify-metadata` adds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Metadata<'a> {
    /// The claim's name.
    pub(crate) pvc_name: &'a str,
    /// The claim's namespace.
    pub(crate) pvc_namespace: &'a str,
}

/// `volume_id` = the PV's volume handle, `secrets`, and `mutable_parameters` = the class'
/// `parameters`, plus the claim and PV names under upstream's keys when `metadata` is given
/// (`--extra-modify-metadata`; the names win over class parameters of the same key, as
/// upstream's map assignment does).
pub(crate) fn modify(
    pv: &PersistentVolume,
    parameters: Option<&BTreeMap<String, String>>,
    secrets: HashMap<String, String>,
    metadata: Option<Metadata<'_>>,
) -> Result<ControllerModifyVolumeRequest, ModifyError> {
    let handle = pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .map(|csi| csi.volume_handle.as_str())
        .filter(|h| !h.is_empty())
        .ok_or(ModifyError::NotCsi)?;
    let mut mutable_parameters: HashMap<String, String> = parameters
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    if let Some(metadata) = metadata {
        mutable_parameters.insert(
            modify::PVC_NAME_KEY.to_owned(),
            metadata.pvc_name.to_owned(),
        );
        mutable_parameters.insert(
            modify::PVC_NAMESPACE_KEY.to_owned(),
            metadata.pvc_namespace.to_owned(),
        );
        mutable_parameters.insert(
            modify::PV_NAME_KEY.to_owned(),
            pv.metadata.name.clone().unwrap_or_default(),
        );
    }
    Ok(ControllerModifyVolumeRequest {
        volume_id: handle.to_owned(),
        secrets,
        mutable_parameters,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pv(handle: &str) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv-1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: "d".into(),
                    volume_handle: handle.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn parameters_secrets_and_extra_metadata_reach_the_request() {
        let params = BTreeMap::from([
            ("iops".to_owned(), "3000".to_owned()),
            (modify::PV_NAME_KEY.to_owned(), "from-class".to_owned()),
        ]);
        let secrets = HashMap::from([("key".to_owned(), "value".to_owned())]);
        let plain = modify(&pv("vol-1"), Some(&params), secrets.clone(), None).unwrap();
        assert_eq!(plain.volume_id, "vol-1");
        assert_eq!(plain.secrets, secrets);
        assert_eq!(plain.mutable_parameters.len(), 2);
        assert_eq!(plain.mutable_parameters[modify::PV_NAME_KEY], "from-class");

        let metadata = Metadata {
            pvc_name: "data",
            pvc_namespace: "ns",
        };
        let extra = modify(&pv("vol-1"), Some(&params), HashMap::new(), Some(metadata)).unwrap();
        assert_eq!(
            extra.mutable_parameters,
            HashMap::from([
                ("iops".to_owned(), "3000".to_owned()),
                (modify::PVC_NAME_KEY.to_owned(), "data".to_owned()),
                (modify::PVC_NAMESPACE_KEY.to_owned(), "ns".to_owned()),
                (modify::PV_NAME_KEY.to_owned(), "pv-1".to_owned()),
            ])
        );
        // A class without parameters still gets the metadata.
        let empty = modify(&pv("vol-1"), None, HashMap::new(), Some(metadata)).unwrap();
        assert_eq!(empty.mutable_parameters.len(), 3);
    }

    #[test]
    fn a_volume_without_a_handle_is_an_error() {
        assert!(matches!(
            modify(&pv(""), None, HashMap::new(), None),
            Err(ModifyError::NotCsi)
        ));
        assert!(matches!(
            modify(&PersistentVolume::default(), None, HashMap::new(), None),
            Err(ModifyError::NotCsi)
        ));
    }
}
