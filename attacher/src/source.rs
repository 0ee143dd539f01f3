//! Which volume a VolumeAttachment is about: its PersistentVolume's `spec.csi`, or the inline
//! CSI spec of `spec.source.inlineVolumeSpec`. Checked the way external-attacher checks it
//! (`csi_handler.go`, `csiAttach` / `csiDetach`) and before anything is written, so that a
//! broken VolumeAttachment never gets a finalizer and stays deletable.
//!
//! In-tree volumes that upstream would translate (CSI migration) are refused with an error that
//! says so: translating them needs csi-translation-lib's per-plugin rules, which this attacher
//! does not have yet. Other PersistentVolumes without `spec.csi` (NFS, host path, ...) get
//! upstream's error for a non-CSI source.

use csi_common::secrets::SecretRef;

use crate::cached::{CsiSource, PersistentVolume, PersistentVolumeSpec, VolumeAttachment};
use crate::names::{NODE_ID_ANNOTATION, PUBLISH_SECRET_ANNOTATION, VOLUME_HANDLE_ANNOTATION};

/// The volume a VolumeAttachment points at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Volume<'a> {
    /// Volume mode, access modes and mount options.
    pub(crate) spec: &'a PersistentVolumeSpec,
    /// Handle, attributes, read-only flag, fsType and the publish secret.
    pub(crate) csi: &'a CsiSource,
}

/// What the volume is resolved for: attach refuses a PersistentVolume that is being deleted,
/// detach does not (it must still release it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// ControllerPublishVolume.
    Attach,
    /// ControllerUnpublishVolume (and the reconciler's look-ups).
    Detach,
}

/// Why a VolumeAttachment's volume cannot be used. Every variant is retried with backoff (the
/// PV may appear, the VA may be fixed); the text goes into `status.attachError` /
/// `status.detachError` and the event, so it keeps upstream's words where upstream has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SourceError {
    #[error("both InlineCSIVolumeSource and PersistentVolumeName specified in VA source")]
    Both,
    #[error("neither InlineCSIVolumeSource nor PersistentVolumeName specified in VA source")]
    Neither,
    #[error("inline volume spec contains nil CSI source")]
    InlineWithoutCsi,
    /// client-go's lister NotFound text.
    #[error("persistentvolume \"{0}\" not found")]
    PvNotFound(String),
    #[error("PersistentVolume \"{0}\" is marked for deletion")]
    PvBeingDeleted(String),
    /// Neither CSI nor an in-tree type csi-translation-lib translates (external-attacher
    /// `getCSISource`'s text).
    #[error("pv spec contained non-csi source that was not migrated")]
    NotCsi(String),
    /// Upstream would translate it with csi-translation-lib (CSI migration).
    #[error(
        "PersistentVolume \"{0}\" is an in-tree volume without a CSI source: CSI migration is not supported by this csi-attacher yet"
    )]
    InTree(String),
}

/// What ControllerUnpublishVolume needs besides the node ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DetachTarget {
    /// The volume handle.
    pub(crate) volume_id: String,
    /// The publish Secret, if the volume has one.
    pub(crate) secret: Option<SecretRef>,
}

/// The volume to detach: from the PersistentVolume or inline spec like upstream, and, when the
/// PersistentVolume is gone, from the annotations the attach wrote (not upstream, issue #235).
pub(crate) fn detach_target(
    va: &VolumeAttachment,
    pv: Option<&PersistentVolume>,
) -> Result<DetachTarget, SourceError> {
    match resolve(va, pv, Purpose::Detach) {
        Ok(volume) => Ok(DetachTarget {
            volume_id: volume.csi.volume_handle.clone(),
            secret: volume
                .csi
                .controller_publish_secret_ref
                .as_ref()
                .map(SecretRef::from),
        }),
        Err(SourceError::PvNotFound(name)) => {
            let volume_id = va
                .annotation(VOLUME_HANDLE_ANNOTATION)
                .ok_or(SourceError::PvNotFound(name))?
                .to_owned();
            let secret = va.annotation(PUBLISH_SECRET_ANNOTATION).and_then(|text| {
                let (namespace, name) = text.split_once('/')?;
                Some(SecretRef {
                    name: name.to_owned(),
                    namespace: namespace.to_owned(),
                })
            });
            Ok(DetachTarget { volume_id, secret })
        }
        Err(err) => Err(err),
    }
}

/// The annotations an attach of `volume` records on the VolumeAttachment.
pub(crate) fn attach_annotations<'a>(
    volume: &Volume<'a>,
    node_id: &'a str,
    secret: Option<&'a str>,
) -> Vec<(&'static str, &'a str)> {
    let mut annotations = vec![
        (NODE_ID_ANNOTATION, node_id),
        (VOLUME_HANDLE_ANNOTATION, volume.csi.volume_handle.as_str()),
    ];
    if let Some(secret) = secret {
        annotations.push((PUBLISH_SECRET_ANNOTATION, secret));
    }
    annotations
}

/// `<namespace>/<name>` of the publish Secret, as [`PUBLISH_SECRET_ANNOTATION`] holds it.
pub(crate) fn secret_text(secret: &SecretRef) -> String {
    format!("{}/{}", secret.namespace, secret.name)
}

/// The name of the VolumeAttachment's PersistentVolume, if the source is one. The executor
/// looks it up and passes it to [`resolve`].
pub(crate) fn pv_name(va: &VolumeAttachment) -> Option<&str> {
    va.spec.source.persistent_volume_name.as_deref()
}

/// The volume of `va`; `pv` is the store's copy of the PersistentVolume named by
/// [`pv_name`] (`None` when it is not in the store).
pub(crate) fn resolve<'a>(
    va: &'a VolumeAttachment,
    pv: Option<&'a PersistentVolume>,
    purpose: Purpose,
) -> Result<Volume<'a>, SourceError> {
    let source = &va.spec.source;
    match (
        source.persistent_volume_name.as_deref(),
        source.inline_volume_spec.as_ref(),
    ) {
        (Some(_), Some(_)) => Err(SourceError::Both),
        (None, None) => Err(SourceError::Neither),
        (None, Some(inline)) => {
            let csi = inline.csi.as_ref().ok_or(SourceError::InlineWithoutCsi)?;
            Ok(Volume { spec: inline, csi })
        }
        (Some(name), None) => {
            let pv = pv.ok_or_else(|| SourceError::PvNotFound(name.to_owned()))?;
            if purpose == Purpose::Attach && pv.metadata.deletion_timestamp.is_some() {
                return Err(SourceError::PvBeingDeleted(name.to_owned()));
            }
            let spec = pv
                .spec
                .as_ref()
                .ok_or_else(|| SourceError::NotCsi(name.to_owned()))?;
            match &spec.csi {
                Some(csi) => Ok(Volume { spec, csi }),
                None if is_migratable(spec) => Err(SourceError::InTree(name.to_owned())),
                None => Err(SourceError::NotCsi(name.to_owned())),
            }
        }
    }
}

/// Whether csi-translation-lib would translate the PersistentVolume's in-tree source: the
/// plugins of the seven CSI-migration drivers (spec §1.2 step 6).
fn is_migratable(spec: &PersistentVolumeSpec) -> bool {
    spec.aws_elastic_block_store.is_some()
        || spec.gce_persistent_disk.is_some()
        || spec.azure_disk.is_some()
        || spec.azure_file.is_some()
        || spec.cinder.is_some()
        || spec.vsphere_volume.is_some()
        || spec.portworx_volume.is_some()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::cached::{VolumeAttachmentSource, VolumeAttachmentSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn csi(handle: &str) -> CsiSource {
        CsiSource {
            volume_handle: handle.into(),
            ..Default::default()
        }
    }

    fn va(pv: Option<&str>, inline: Option<PersistentVolumeSpec>) -> VolumeAttachment {
        VolumeAttachment {
            spec: VolumeAttachmentSpec {
                attacher: "d".into(),
                node_name: "n".into(),
                source: VolumeAttachmentSource {
                    persistent_volume_name: pv.map(str::to_owned),
                    inline_volume_spec: inline.map(Box::new),
                },
            },
            ..Default::default()
        }
    }

    fn pv(name: &str, spec: PersistentVolumeSpec, deleting: bool) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.into()),
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            spec: Some(spec),
        }
    }

    fn csi_spec(handle: &str) -> PersistentVolumeSpec {
        PersistentVolumeSpec {
            csi: Some(csi(handle)),
            ..Default::default()
        }
    }

    /// A spec as the API server sends it, read by the cache's projection.
    fn spec(json: serde_json::Value) -> PersistentVolumeSpec {
        serde_json::from_value(json).unwrap()
    }

    type Want = Result<&'static str, SourceError>;

    #[test]
    fn sources_resolve_like_external_attacher() {
        let gce = spec(json!({"gcePersistentDisk": {"pdName": "disk"}}));
        let live = pv("pv1", csi_spec("h1"), false);
        let deleting = pv("pv1", csi_spec("h1"), true);
        let in_tree = pv("pv1", gce.clone(), false);

        let inline_csi = va(None, Some(csi_spec("inline")));
        let cases: Vec<(
            &str,
            VolumeAttachment,
            Option<&PersistentVolume>,
            Purpose,
            Want,
        )> = vec![
            (
                "PV",
                va(Some("pv1"), None),
                Some(&live),
                Purpose::Attach,
                Ok("h1"),
            ),
            (
                "PV being deleted, attach",
                va(Some("pv1"), None),
                Some(&deleting),
                Purpose::Attach,
                Err(SourceError::PvBeingDeleted("pv1".into())),
            ),
            (
                "PV being deleted, detach",
                va(Some("pv1"), None),
                Some(&deleting),
                Purpose::Detach,
                Ok("h1"),
            ),
            (
                "PV missing",
                va(Some("pv1"), None),
                None,
                Purpose::Detach,
                Err(SourceError::PvNotFound("pv1".into())),
            ),
            (
                "in-tree PV",
                va(Some("pv1"), None),
                Some(&in_tree),
                Purpose::Attach,
                Err(SourceError::InTree("pv1".into())),
            ),
            (
                "inline CSI",
                inline_csi,
                None,
                Purpose::Attach,
                Ok("inline"),
            ),
            (
                "inline without CSI",
                va(None, Some(gce.clone())),
                None,
                Purpose::Attach,
                Err(SourceError::InlineWithoutCsi),
            ),
            (
                "both",
                va(Some("pv1"), Some(csi_spec("x"))),
                Some(&live),
                Purpose::Attach,
                Err(SourceError::Both),
            ),
            (
                "neither",
                va(None, None),
                None,
                Purpose::Attach,
                Err(SourceError::Neither),
            ),
        ];
        for (name, va, pv, purpose, want) in cases {
            let got = resolve(&va, pv, purpose).map(|v| v.csi.volume_handle.as_str());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_pv_without_csi_is_in_tree_only_when_csi_translation_lib_would_migrate_it() {
        let nfs = spec(json!({"nfs": {"server": "nfs.example.com", "path": "/export"}}));
        let gce = spec(json!({"gcePersistentDisk": {}}));
        let cases = [
            ("NFS", nfs, SourceError::NotCsi("pv1".into())),
            ("GCE PD", gce, SourceError::InTree("pv1".into())),
        ];
        let attachment = va(Some("pv1"), None);
        for (name, spec, want) in cases {
            let volume = pv("pv1", spec, false);
            let got = resolve(&attachment, Some(&volume), Purpose::Attach);
            assert_eq!(
                got.map(|v| v.csi.volume_handle.clone()),
                Err(want),
                "{name}"
            );
        }
    }

    #[test]
    fn detach_survives_a_force_deleted_pv_through_the_annotations() {
        use std::collections::BTreeMap;
        let mut annotated = va(Some("pv1"), None);
        annotated.metadata.annotations = Some(BTreeMap::from([
            (VOLUME_HANDLE_ANNOTATION.to_owned(), "h1".to_owned()),
            (PUBLISH_SECRET_ANNOTATION.to_owned(), "ns/s".to_owned()),
        ]));
        let mut with_secret = csi_spec("h1");
        if let Some(csi) = with_secret.csi.as_mut() {
            csi.controller_publish_secret_ref = Some(k8s_openapi::api::core::v1::SecretReference {
                name: Some("s".into()),
                namespace: Some("ns".into()),
            });
        }
        let secret = Some(SecretRef {
            name: "s".into(),
            namespace: "ns".into(),
        });
        let live = pv("pv1", with_secret, false);
        let want = Ok(DetachTarget {
            volume_id: "h1".into(),
            secret,
        });
        assert_eq!(
            detach_target(&va(Some("pv1"), None), Some(&live)),
            want,
            "from the PV"
        );
        assert_eq!(detach_target(&annotated, None), want, "PV gone");
        assert_eq!(
            detach_target(&va(Some("pv1"), None), None),
            Err(SourceError::PvNotFound("pv1".into())),
            "PV gone, attached by an attacher that wrote no annotations"
        );
    }

    #[test]
    fn error_texts_keep_upstream_words() {
        assert_eq!(
            SourceError::PvNotFound("pv1".into()).to_string(),
            r#"persistentvolume "pv1" not found"#
        );
        assert_eq!(
            SourceError::PvBeingDeleted("pv1".into()).to_string(),
            r#"PersistentVolume "pv1" is marked for deletion"#
        );
    }
}
