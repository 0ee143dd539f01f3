//! Which volume a VolumeAttachment is about: its PersistentVolume's `spec.csi`, or the inline
//! CSI spec of `spec.source.inlineVolumeSpec`. Checked the way external-attacher checks it
//! (`csi_handler.go`, `csiAttach` / `csiDetach`) and before anything is written, so that a
//! broken VolumeAttachment never gets a finalizer and stays deletable.
//!
//! In-tree volumes (CSI migration) are refused with an error that says so: translating them
//! needs csi-translation-lib's per-plugin rules, which this attacher does not have yet.

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::VolumeAttachment;

/// The volume a VolumeAttachment points at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Volume<'a> {
    /// The PersistentVolume's name, when the source is one (it gets the attacher's finalizer).
    pub(crate) pv_name: Option<&'a str>,
    /// Volume mode, access modes and mount options.
    pub(crate) spec: &'a PersistentVolumeSpec,
    /// Handle, attributes, read-only flag, fsType and the publish secret.
    pub(crate) csi: &'a CSIPersistentVolumeSource,
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
    /// Upstream would translate it with csi-translation-lib (CSI migration).
    #[error(
        "PersistentVolume \"{0}\" is an in-tree volume without a CSI source: CSI migration is not supported by this csi-attacher yet"
    )]
    InTree(String),
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
            Ok(Volume {
                pv_name: None,
                spec: inline,
                csi,
            })
        }
        (Some(name), None) => {
            let pv = pv.ok_or_else(|| SourceError::PvNotFound(name.to_owned()))?;
            if purpose == Purpose::Attach && pv.metadata.deletion_timestamp.is_some() {
                return Err(SourceError::PvBeingDeleted(name.to_owned()));
            }
            let spec = pv
                .spec
                .as_ref()
                .ok_or_else(|| SourceError::InTree(name.to_owned()))?;
            let csi = spec
                .csi
                .as_ref()
                .ok_or_else(|| SourceError::InTree(name.to_owned()))?;
            Ok(Volume {
                pv_name: Some(name),
                spec,
                csi,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::GCEPersistentDiskVolumeSource;
    use k8s_openapi::api::storage::v1::{VolumeAttachmentSource, VolumeAttachmentSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn csi(handle: &str) -> CSIPersistentVolumeSource {
        CSIPersistentVolumeSource {
            driver: "d".into(),
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
                    inline_volume_spec: inline,
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
            ..Default::default()
        }
    }

    fn csi_spec(handle: &str) -> PersistentVolumeSpec {
        PersistentVolumeSpec {
            csi: Some(csi(handle)),
            ..Default::default()
        }
    }

    type Want = Result<(Option<&'static str>, &'static str), SourceError>;

    #[test]
    fn sources_resolve_like_external_attacher() {
        let gce = PersistentVolumeSpec {
            gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
                pd_name: "disk".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
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
                Ok((Some("pv1"), "h1")),
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
                Ok((Some("pv1"), "h1")),
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
                Ok((None, "inline")),
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
            let got = resolve(&va, pv, purpose).map(|v| (v.pv_name, v.csi.volume_handle.as_str()));
            assert_eq!(got, want, "{name}");
        }
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
