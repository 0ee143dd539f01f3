//! Which volume a VolumeAttachment is about: its PersistentVolume's `spec.csi`, or the inline
//! CSI spec of `spec.source.inlineVolumeSpec`. Checked the way external-attacher checks it
//! (`csi_handler.go`, `csiAttach` / `csiDetach`) and before anything is written, so that a
//! broken VolumeAttachment never gets a finalizer and stays deletable.
//!
//! A PersistentVolume of one of the seven in-tree plugins Kubernetes migrated to CSI drivers
//! (`awsElasticBlockStore`, `gcePersistentDisk`, ...) is translated to its CSI source as
//! upstream does with csi-translation-lib (`csi_common::migration`), whatever driver this
//! attacher runs: kube-controller-manager names the driver in the VolumeAttachment. Other
//! PersistentVolumes without `spec.csi` (NFS, host path, ...) get upstream's error for a
//! non-CSI source. Inline volumes come translated already (the attach-detach controller puts
//! the CSI spec into `inlineVolumeSpec`).

use std::borrow::Cow;

use csi_common::migration::{self, PvFacts, TranslationError};
use csi_common::secrets::SecretRef;

use crate::cached::{CsiSource, PersistentVolume, PersistentVolumeSpec, VolumeAttachment};
use crate::names::{NODE_ID_ANNOTATION, PUBLISH_SECRET_ANNOTATION, VOLUME_HANDLE_ANNOTATION};

/// The volume a VolumeAttachment points at.
#[derive(Debug, Clone)]
pub(crate) struct Volume<'a> {
    /// Volume mode, access modes and mount options.
    pub(crate) spec: &'a PersistentVolumeSpec,
    /// Handle, attributes, read-only flag, fsType and the publish secret: the PV's own, or
    /// the translation of its in-tree source.
    pub(crate) csi: Cow<'a, CsiSource>,
    /// The access modes a translation gave the volume (GCE PD), in place of the spec's.
    pub(crate) translated_access_modes: Option<Vec<String>>,
    /// Whether the CSI source is a translation (the `migrated` label of the call's metrics).
    pub(crate) migrated: bool,
}

impl<'a> Volume<'a> {
    /// A CSI volume as the spec holds it.
    pub(crate) fn csi(spec: &'a PersistentVolumeSpec, csi: &'a CsiSource) -> Self {
        Self {
            spec,
            csi: Cow::Borrowed(csi),
            translated_access_modes: None,
            migrated: false,
        }
    }

    /// The access modes the publish request carries.
    pub(crate) fn access_modes(&self) -> &[String] {
        self.translated_access_modes
            .as_deref()
            .or(self.spec.access_modes.as_deref())
            .unwrap_or_default()
    }
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
    /// An in-tree source csi-translation-lib refuses (CSI migration; external-attacher's text).
    #[error("failed to translate in tree pv to CSI: {0}")]
    Translation(TranslationError),
}

/// What ControllerUnpublishVolume needs besides the node ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DetachTarget {
    /// The volume handle.
    pub(crate) volume_id: String,
    /// The publish Secret, if the volume has one.
    pub(crate) secret: Option<SecretRef>,
    /// Whether the volume is a translated in-tree one (the call's `migrated` metric label).
    pub(crate) migrated: bool,
}

/// The volume to detach: from the PersistentVolume (translated if in-tree) or inline spec like
/// upstream, and, when the PersistentVolume is gone, from the annotations the attach wrote (not
/// upstream, issue #235).
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
            migrated: volume.migrated,
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
            // The attach recorded the handle it called the driver with, translated or not;
            // with the PV gone nothing tells which, and the label is only a metric's.
            Ok(DetachTarget {
                volume_id,
                secret,
                migrated: false,
            })
        }
        Err(err) => Err(err),
    }
}

/// The annotations an attach of `volume` records on the VolumeAttachment.
pub(crate) fn attach_annotations<'a>(
    volume: &'a Volume<'_>,
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
            Ok(Volume::csi(inline, csi))
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
            // csi-translation-lib translates whenever a migratable source is set, before it
            // looks at `csi` (external-attacher `csiAttach`: IsPVMigratable, then getCSISource).
            if let Some(source) = spec.in_tree_source() {
                return translate(pv, spec, source);
            }
            match &spec.csi {
                Some(csi) => Ok(Volume::csi(spec, csi)),
                None => Err(SourceError::NotCsi(name.to_owned())),
            }
        }
    }
}

/// The CSI volume of an in-tree PersistentVolume (CSI migration).
fn translate<'a>(
    pv: &'a PersistentVolume,
    spec: &'a PersistentVolumeSpec,
    source: migration::InTreeSource<'_>,
) -> Result<Volume<'a>, SourceError> {
    let facts = PvFacts::new(
        &pv.metadata,
        spec.claim_ref
            .as_ref()
            .and_then(|claim| claim.namespace.as_deref()),
        spec.access_modes.as_deref(),
    );
    let translated = migration::translate_pv(source, &facts).map_err(SourceError::Translation)?;
    let csi = translated.csi;
    Ok(Volume {
        spec,
        csi: Cow::Owned(CsiSource {
            volume_handle: csi.volume_handle,
            fs_type: csi.fs_type,
            read_only: Some(csi.read_only),
            volume_attributes: Some(csi.volume_attributes.into_boxed_slice()),
            // No plugin's translation sets one (only Azure File a node-stage Secret).
            controller_publish_secret_ref: None,
        }),
        translated_access_modes: translated.access_modes,
        migrated: true,
    })
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
                "in-tree PV, translated",
                va(Some("pv1"), None),
                Some(&in_tree),
                Purpose::Attach,
                Ok("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk"),
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
            let got = resolve(&va, pv, purpose).map(|v| v.csi.volume_handle.clone());
            assert_eq!(got, want.map(str::to_owned), "{name}");
        }
    }

    #[test]
    fn a_pv_without_csi_is_translated_only_when_csi_translation_lib_would_migrate_it() {
        let nfs = spec(json!({"nfs": {"server": "nfs.example.com", "path": "/export"}}));
        let bad_ebs = spec(json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/foo"}}));
        let cases = [
            (
                "NFS",
                nfs,
                "pv spec contained non-csi source that was not migrated",
            ),
            (
                "EBS of another form",
                bad_ebs,
                // external-attacher's full text for this PV (csi_handler.go, aws_ebs.go).
                "failed to translate in tree pv to CSI: failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://us-east-1a/foo)",
            ),
        ];
        let attachment = va(Some("pv1"), None);
        for (name, spec, want) in cases {
            let volume = pv("pv1", spec, false);
            let got = resolve(&attachment, Some(&volume), Purpose::Attach);
            assert_eq!(
                got.map(|v| v.csi.volume_handle.clone())
                    .map_err(|e| e.to_string()),
                Err(want.to_owned()),
                "{name}"
            );
        }
    }

    #[test]
    fn an_in_tree_pv_is_published_and_unpublished_as_its_translation() {
        let mut labels = std::collections::BTreeMap::new();
        labels.insert(
            csi_common::migration::ZONE_LABEL.to_owned(),
            "us-central1-a".to_owned(),
        );
        let mut gce = pv(
            "pv1",
            spec(json!({
                "gcePersistentDisk": {"pdName": "disk", "fsType": "xfs", "readOnly": true},
                "accessModes": ["ReadWriteMany"],
                "volumeMode": "Filesystem",
            })),
            false,
        );
        gce.metadata.labels = Some(labels);
        let attachment = va(Some("pv1"), None);
        let volume = resolve(&attachment, Some(&gce), Purpose::Attach).unwrap();
        assert!(volume.migrated);
        assert_eq!(
            *volume.csi,
            CsiSource {
                volume_handle: "projects/UNSPECIFIED/zones/us-central1-a/disks/disk".into(),
                fs_type: Some("xfs".into()),
                read_only: Some(true),
                volume_attributes: Some(Box::new([("partition".into(), String::new())])),
                controller_publish_secret_ref: None,
            }
        );
        // csi-translation-lib gives a GCE PD one access mode.
        assert_eq!(volume.access_modes(), ["ReadWriteOnce"]);
        let target = detach_target(&attachment, Some(&gce)).unwrap();
        assert_eq!(
            (target.volume_id.as_str(), target.migrated),
            ("projects/UNSPECIFIED/zones/us-central1-a/disks/disk", true)
        );

        let ebs = pv(
            "pv1",
            spec(
                json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"},
                        "accessModes": ["ReadWriteOnce"]}),
            ),
            false,
        );
        let volume = resolve(&attachment, Some(&ebs), Purpose::Detach).unwrap();
        assert_eq!(volume.csi.volume_handle, "vol-1");
        assert_eq!(volume.access_modes(), ["ReadWriteOnce"], "unchanged");

        let csi = pv("pv1", csi_spec("h1"), false);
        let volume = resolve(&attachment, Some(&csi), Purpose::Attach).unwrap();
        assert!(!volume.migrated, "a CSI PV is not a migrated one");
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
            migrated: false,
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
