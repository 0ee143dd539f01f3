//! Our own finished writes, so a cache that has not caught up with them does not repeat the
//! operation.
//!
//! After an attach the VolumeAttachment changes twice (finalizer and annotations, then
//! `status.attached`). The informer delivers both, and the first re-queues the object while the
//! cache still says "not attached", which made a second ControllerPublishVolume (found with
//! 200 VolumeAttachments: 210 publishes). The same lag after a detach would repeat
//! ControllerUnpublishVolume (upstream #587). upstream lives with the extra calls; here a sync
//! that sees exactly a version of the object from before our successful write skips it: the
//! watch event of that write re-queues the object anyway. Any other version (someone else
//! changed the object since) is synced normally.
//!
//! After an attach, every version the cache shows until it shows `status.attached` is skipped,
//! not only ours: the informer delivers versions in order, so one that arrives before our
//! status write's is older than it, even when another writer made it between our two writes.
//! The chaos suite's `conflicts` fault (an annotation patched over and over) found 3
//! ControllerPublishVolume calls repeated that way for 12 VolumeAttachments. The entry goes as
//! soon as an attached version arrives (the event handler forgets it), so a later change is
//! synced normally.
//!
//! A sync must read this record *before* it reads the cache ([`Settled::entry`], then
//! [`Record::covers`]): the informer applies a version to the cache and then runs the event
//! handler that forgets the record, so a sync that read the cache first could hold a snapshot
//! from before our status write and yet find the record already forgotten, and publish again
//! (seen once in CI: one VA published twice by a new leader, 0.9 ms after it was marked
//! attached). Read in this order, a record that is there covers any older snapshot, and a
//! record that is gone was forgotten after the cache already showed the attach.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::cached::VolumeAttachment;
use crate::decide::VaAction;

/// Per VolumeAttachment name: the uid, the operation done, and the resourceVersions the cache
/// may still show from before it was done.
#[derive(Debug, Default)]
pub(crate) struct Settled(Mutex<HashMap<String, Record>>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    uid: String,
    action: VaAction,
    stale_versions: Vec<String>,
}

impl Record {
    /// Whether `action` on the cached `va` (read after this record) would repeat the write
    /// this record is about.
    pub(crate) fn covers(&self, va: &VolumeAttachment, action: VaAction) -> bool {
        let Some((_, uid, version)) = key(va) else {
            return false;
        };
        self.uid == uid
            && self.action == action
            && (action == VaAction::Attach || self.stale_versions.contains(&version))
    }
}

fn key(va: &VolumeAttachment) -> Option<(String, String, String)> {
    Some((
        va.metadata.name.clone()?,
        va.metadata.uid.clone()?,
        va.metadata.resource_version.clone()?,
    ))
}

impl Settled {
    /// `action` succeeded for `va`; the cache may still show any of `stale_versions`.
    pub(crate) fn record(
        &self,
        va: &VolumeAttachment,
        action: VaAction,
        stale_versions: Vec<String>,
    ) {
        let Some((name, uid, _)) = key(va) else {
            return;
        };
        self.lock().insert(
            name,
            Record {
                uid,
                action,
                stale_versions,
            },
        );
    }

    /// The record of `name`, to be read before the cache (see the module docs).
    pub(crate) fn entry(&self, name: &str) -> Option<Record> {
        self.lock().get(name).cloned()
    }

    /// The cache caught up (or the object is gone): forget `name`.
    pub(crate) fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    /// What a sync decides: the record read first, then the cached `va`.
    fn done(settled: &Settled, va: &VolumeAttachment, action: VaAction) -> bool {
        settled
            .entry("va")
            .is_some_and(|record| record.covers(va, action))
    }

    fn va(uid: &str, version: &str) -> VolumeAttachment {
        VolumeAttachment {
            metadata: ObjectMeta {
                name: Some("va".into()),
                uid: Some(uid.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn an_attach_is_skipped_until_the_cache_shows_it() {
        let settled = Settled::default();
        settled.record(
            &va("u1", "5"),
            VaAction::Attach,
            vec!["5".into(), "6".into()],
        );
        let cases = [
            ("version we read", "u1", "5", VaAction::Attach, true),
            (
                "version our metadata patch made",
                "u1",
                "6",
                VaAction::Attach,
                true,
            ),
            (
                "changed by someone before the cache showed our attach",
                "u1",
                "9",
                VaAction::Attach,
                true,
            ),
            (
                "another object of the same name",
                "u2",
                "5",
                VaAction::Attach,
                false,
            ),
            ("another operation", "u1", "5", VaAction::Detach, false),
        ];
        for (name, uid, version, action, want) in cases {
            assert_eq!(done(&settled, &va(uid, version), action), want, "{name}");
        }
        settled.forget("va");
        assert!(
            !done(&settled, &va("u1", "5"), VaAction::Attach),
            "forgotten"
        );
    }

    #[test]
    fn after_a_detach_only_the_versions_from_before_our_write_are_skipped() {
        let settled = Settled::default();
        settled.record(&va("u1", "5"), VaAction::Detach, vec!["5".into()]);
        assert!(done(&settled, &va("u1", "5"), VaAction::Detach));
        assert!(!done(&settled, &va("u1", "9"), VaAction::Detach));
    }

    #[test]
    fn a_record_read_before_the_cache_still_covers_a_snapshot_older_than_the_forget() {
        let settled = Settled::default();
        settled.record(
            &va("u1", "5"),
            VaAction::Attach,
            vec!["5".into(), "6".into()],
        );
        // The sync reads the record, then the cache (version 6, not yet attached); the
        // informer then applies the attached version 7 and its handler forgets the record.
        let record = settled.entry("va");
        let snapshot = va("u1", "6");
        settled.forget("va");
        assert!(record.is_some_and(|r| r.covers(&snapshot, VaAction::Attach)));
        assert!(settled.entry("va").is_none());
    }
}
