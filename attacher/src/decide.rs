//! What a sync of one VolumeAttachment or PersistentVolume must do, decided from the cached
//! objects alone (external-attacher `csi_handler.go` `syncAttach` / `syncDetach` /
//! `SyncNewOrUpdatedPersistentVolume`, trivial_handler.go).

use csi_common::migration;
use serde_json::Value;

use crate::cached::{PersistentVolume, VolumeAttachment};
use crate::names::has_finalizer;
use crate::patch;

/// The work a VolumeAttachment needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VaAction {
    /// Another driver's VolumeAttachment: not ours to touch.
    NotOurs,
    /// Run the attach flow (ControllerPublishVolume).
    Attach,
    /// Run the detach flow (ControllerUnpublishVolume).
    Detach,
    /// Already attached (or already detached: our finalizer is gone); nothing to do.
    UpToDate,
}

/// Decides a VolumeAttachment sync. `forced` is the reconciler's one-shot request to redo the
/// operation although the status already says it is done (the backend disagreed).
pub(crate) fn va_action(
    va: &VolumeAttachment,
    driver: &str,
    finalizer: &str,
    forced: bool,
) -> VaAction {
    if va.spec.attacher != driver {
        return VaAction::NotOurs;
    }
    if va.metadata.deletion_timestamp.is_none() {
        let attached = va.status.as_ref().is_some_and(|s| s.attached);
        if attached && !forced {
            VaAction::UpToDate
        } else {
            VaAction::Attach
        }
    } else if has_finalizer(&va.metadata, finalizer) || forced {
        VaAction::Detach
    } else {
        VaAction::UpToDate
    }
}

/// The trivial handler's whole job (drivers without ControllerPublishVolume): mark our
/// VolumeAttachments attached, with no finalizer, annotation or CSI call.
pub(crate) fn trivial_patch(va: &VolumeAttachment, driver: &str) -> Option<Value> {
    let attached = va.status.as_ref().is_some_and(|s| s.attached);
    (va.spec.attacher == driver && !attached).then(patch::trivially_attached)
}

/// Whether the API server's answer to our finalizer removal shows that it deleted the
/// VolumeAttachment in that write: it is being deleted and no finalizer is left
/// (kube-apiserver removes such an object at once and answers with its last state, fixtures
/// j4/j5). Then the detached status cannot be written any more: upstream sends it anyway and
/// always gets 404 (golden traffic), one wasted write per detach.
pub(crate) fn gone_after_finalizer_removal(answer: &VolumeAttachment) -> bool {
    answer.metadata.deletion_timestamp.is_some()
        && answer
            .metadata
            .finalizers
            .as_deref()
            .is_none_or(<[String]>::is_empty)
}

/// Whether the attacher's finalizer may come off a PersistentVolume once no VolumeAttachment
/// names it: the PV is being deleted, or it is an in-tree PV that `driver` no longer serves
/// (CSI migration rolled back: kube-controller-manager sets `pv.kubernetes.io/migrated-to` to
/// the driver while it is migrated, and the in-tree plugin attaches it otherwise), as
/// external-attacher's PV handlers and `SyncNewOrUpdatedPersistentVolume` decide.
pub(crate) fn pv_finalizer_may_go(pv: &PersistentVolume, driver: &str) -> bool {
    if pv.metadata.deletion_timestamp.is_some() {
        return true;
    }
    let in_tree = pv
        .spec
        .as_ref()
        .is_some_and(|spec| spec.in_tree_source().is_some());
    let migrated_here = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(migration::MIGRATED_TO_ANNOTATION))
        .is_some_and(|to| to == driver);
    in_tree && !migrated_here
}

/// The patch that releases a PersistentVolume, or `None` while its finalizer may not go
/// ([`pv_finalizer_may_go`]), it does not carry our finalizer, or any VolumeAttachment (of any
/// driver) still names it.
pub(crate) fn pv_release<'a>(
    pv: &PersistentVolume,
    (finalizer, driver): (&str, &str),
    mut attachments: impl Iterator<Item = &'a VolumeAttachment>,
) -> Option<Value> {
    if !pv_finalizer_may_go(pv, driver) {
        return None;
    }
    let name = pv.metadata.name.as_deref()?;
    if attachments.any(|va| va.spec.source.persistent_volume_name.as_deref() == Some(name)) {
        return None;
    }
    patch::pv_remove_finalizer(pv, finalizer)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::storage::v1::VolumeAttachmentStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::cached::{VolumeAttachmentSource, VolumeAttachmentSpec};

    const F: &str = "external-attacher/d";

    fn va(attacher: &str, attached: bool, deleting: bool, finalizer: bool) -> VolumeAttachment {
        VolumeAttachment {
            metadata: ObjectMeta {
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                finalizers: finalizer.then(|| vec![F.to_owned()]),
                ..Default::default()
            },
            spec: VolumeAttachmentSpec {
                attacher: attacher.into(),
                node_name: "n".into(),
                source: VolumeAttachmentSource {
                    persistent_volume_name: Some("pv1".into()),
                    inline_volume_spec: None,
                },
            },
            status: Some(VolumeAttachmentStatus {
                attached,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn va_actions_follow_external_attacher() {
        use VaAction::{Attach, Detach, NotOurs, UpToDate};
        // (name, attacher, attached, deleting, finalizer, forced, want)
        let cases = [
            ("other driver", "other", false, false, false, false, NotOurs),
            ("new", "d", false, false, false, false, Attach),
            ("attached", "d", true, false, true, false, UpToDate),
            ("attached, forced", "d", true, false, true, true, Attach),
            ("deleted", "d", true, true, true, false, Detach),
            (
                "deleted, finalizer gone",
                "d",
                false,
                true,
                false,
                false,
                UpToDate,
            ),
            (
                "deleted, finalizer gone, forced",
                "d",
                false,
                true,
                false,
                true,
                Detach,
            ),
        ];
        for (name, attacher, attached, deleting, finalizer, forced, want) in cases {
            let va = va(attacher, attached, deleting, finalizer);
            assert_eq!(va_action(&va, "d", F, forced), want, "{name}");
        }
    }

    #[test]
    fn a_va_is_gone_after_the_finalizer_removal_only_when_deleted_without_finalizers_left() {
        // (name, deleting, finalizers, want)
        let cases = [
            ("deleted, none left", true, None, true),
            ("deleted, empty list", true, Some(vec![]), true),
            (
                "deleted, another controller's finalizer left",
                true,
                Some(vec!["example.com/other".to_owned()]),
                false,
            ),
            ("not deleted", false, None, false),
        ];
        for (name, deleting, finalizers, want) in cases {
            let mut answer = va("d", true, deleting, false);
            answer.metadata.finalizers = finalizers;
            assert_eq!(gone_after_finalizer_removal(&answer), want, "{name}");
        }
    }

    #[test]
    fn trivial_handler_marks_only_our_unattached_attachments() {
        assert!(trivial_patch(&va("d", false, false, false), "d").is_some());
        assert!(trivial_patch(&va("d", true, false, false), "d").is_none());
        assert!(trivial_patch(&va("other", false, false, false), "d").is_none());
    }

    #[test]
    fn a_pv_is_released_only_when_deleted_and_unused() {
        let pv = |deleting: bool| PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv1".into()),
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                finalizers: Some(vec![F.to_owned()]),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut elsewhere = va("other", true, false, false);
        elsewhere.spec.source.persistent_volume_name = Some("pv2".into());
        let using = va("other", true, false, false);
        let ours = (F, "d");
        assert!(pv_release(&pv(true), ours, [&elsewhere].into_iter()).is_some());
        assert!(
            pv_release(&pv(true), ours, [&elsewhere, &using].into_iter()).is_none(),
            "any driver's VA holds it"
        );
        assert!(pv_release(&pv(false), ours, std::iter::empty()).is_none());
        assert!(
            pv_release(
                &pv(true),
                ("external-attacher/other", "other"),
                std::iter::empty()
            )
            .is_none()
        );
    }

    #[test]
    fn an_in_tree_pv_is_released_when_its_migration_to_the_driver_is_rolled_back() {
        let pv = |in_tree: bool, migrated_to: Option<&str>| PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv1".into()),
                finalizers: Some(vec![F.to_owned()]),
                annotations: migrated_to.map(|to| {
                    std::collections::BTreeMap::from([(
                        migration::MIGRATED_TO_ANNOTATION.to_owned(),
                        to.to_owned(),
                    )])
                }),
                ..Default::default()
            },
            spec: Some(if in_tree {
                serde_json::from_value(
                    serde_json::json!({"awsElasticBlockStore": {"volumeID": "vol-1"}}),
                )
                .unwrap()
            } else {
                crate::cached::PersistentVolumeSpec::default()
            }),
        };
        let cases = [
            (
                "in-tree, migrated to this driver",
                pv(true, Some("d")),
                false,
            ),
            (
                "in-tree, migrated to another driver",
                pv(true, Some("e")),
                true,
            ),
            (
                "in-tree, migration off (no annotation)",
                pv(true, None),
                true,
            ),
            ("CSI, no annotation", pv(false, None), false),
        ];
        let using = va("d", true, false, false);
        for (name, pv, want) in cases {
            assert_eq!(pv_finalizer_may_go(&pv, "d"), want, "{name}");
            assert_eq!(
                pv_release(&pv, (F, "d"), std::iter::empty()).is_some(),
                want,
                "{name}"
            );
            assert!(
                pv_release(&pv, (F, "d"), [&using].into_iter()).is_none(),
                "{name}: never while a VA names it"
            );
        }
    }

    /// Property tests (issue 14): invariants that keep volumes safe, over arbitrary driver
    /// names and VA states. 4000 executions per run.
    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

            #[test]
            fn a_va_is_never_detached_unless_deleted_nor_published_again_once_attached(
                attacher in prop_oneof![Just("d".to_owned()), any::<String>()],
                attached: bool,
                deleting: bool,
                finalizer: bool,
                forced: bool,
            ) {
                let action = va_action(&va(&attacher, attached, deleting, finalizer), "d", F, forced);
                if attacher != "d" {
                    prop_assert_eq!(action, VaAction::NotOurs);
                }
                if !deleting {
                    prop_assert_ne!(action, VaAction::Detach);
                }
                if attached && !deleting && !forced {
                    // No double publish after a success.
                    prop_assert_ne!(action, VaAction::Attach);
                }
                if deleting {
                    // A VA being deleted is never attached again.
                    prop_assert_ne!(action, VaAction::Attach);
                }
                if deleting && !finalizer && !forced {
                    prop_assert_ne!(action, VaAction::Detach);
                }
            }
        }
    }
}
