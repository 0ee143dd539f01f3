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
//!
//! The record is made *before* the write it is about ([`Settled::write`]), and dropped if the
//! write fails. The version a write makes can reach the informer, whose handler forgets the
//! record, before the write's answer reaches the sync; a record made after the answer then
//! outlived its forget. After a detach that removed the last finalizer the object was gone and
//! nothing ever forgot it: one record leaked per such race. A heap profile of a 15-minute
//! `chaos --churn` (heaptrack, 24,960 lifecycles) found this map grown to 8,192 slots, so more
//! than 3,584 records for some 20 objects in flight; it was the largest grower once the event
//! correlator's caches were full. A record in place early is harmless: only syncs of the
//! same name read it, and they wait for this one ([`super::locks::KeyLocks`]).
//!
//! A write that fails may be stored all the same: the request left, kube-apiserver committed
//! it, and the answer was lost to a broken connection (the chaos suite's API server restarts
//! cut answers that way; the resizer's `api-restart-compacted` row found the same case, see
//! docs/reliability.md). Its record goes, since nothing says the write happened, but the name
//! is marked *unanswered* ([`Settled::take_unanswered`]); the next sync of that name reads the
//! object from the API server, not from a cache that the same broken connection may have left
//! behind, so it does not publish a volume whose attach is stored, or unpublish one whose
//! finalizer is already gone.
//!
//! A finishing write that fails for any reason leaves the driver's success behind: the
//! volume is published (or unpublished) and the API does not say so yet. Upstream's retry
//! calls the driver again (idempotent by the CSI spec). Here the answer is kept
//! ([`Settled::answered`]) for the object's uid, the operation and the call's volume and
//! node, and the retry finishes from it ([`Settled::answer`]) without a second call; the
//! reconciler's forced re-attach (the driver says the volume is not published) drops it. It
//! goes when a finishing write succeeds or the object is gone.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use csi_common::kube_client::{KubeError, may_have_been_applied};

use crate::cached::VolumeAttachment;
use crate::decide::VaAction;

/// Per VolumeAttachment name: the uid, the operation done, and the resourceVersions the cache
/// may still show from before it was done; and the names whose last write went unanswered.
#[derive(Debug, Default)]
pub(crate) struct Settled(Mutex<Inner>);

#[derive(Debug, Default)]
struct Inner {
    records: HashMap<String, Record>,
    unanswered: HashSet<String>,
    answers: HashMap<String, Answer>,
}

/// A driver call that succeeded for a VolumeAttachment whose finishing write then failed.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    uid: String,
    /// The volume id and node id the call was for.
    call: (String, String),
    done: Done,
}

/// What the driver did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Done {
    /// ControllerPublishVolume succeeded; the attached status to write.
    Published(serde_json::Value),
    /// ControllerUnpublishVolume succeeded.
    Unpublished,
}

/// Whether a failed write may be stored all the same (it left, and its answer was lost).
pub(crate) trait Unanswered {
    /// See the trait.
    fn may_be_stored(&self) -> bool;
}

impl Unanswered for KubeError {
    fn may_be_stored(&self) -> bool {
        may_have_been_applied(&self.0)
    }
}

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
    fn record(&self, va: &VolumeAttachment, action: VaAction, stale_versions: Vec<String>) {
        let Some((name, uid, _)) = key(va) else {
            return;
        };
        self.lock().records.insert(
            name,
            Record {
                uid,
                action,
                stale_versions,
            },
        );
    }

    /// Runs `write`, the write that finishes `action` on `va`, with its record already in place
    /// (see the module docs); the record goes again if the write fails, and the name is marked
    /// unanswered if the failed write may be stored all the same.
    pub(crate) async fn write<T, E: Unanswered>(
        &self,
        va: &VolumeAttachment,
        action: VaAction,
        stale_versions: Vec<String>,
        write: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.record(va, action, stale_versions);
        let result = write.await;
        if let Some(name) = va.metadata.name.as_deref() {
            let mut inner = self.lock();
            match &result {
                Ok(_) => {
                    inner.answers.remove(name);
                }
                Err(err) => {
                    inner.records.remove(name);
                    if err.may_be_stored() {
                        inner.unanswered.insert(name.to_owned());
                    }
                }
            }
        }
        result
    }

    /// The driver `done` it for `va` with the volume and node of `call`, and the write that
    /// records it failed: a retry finishes from it instead of calling the driver again.
    pub(crate) fn answered(&self, va: &VolumeAttachment, call: (String, String), done: Done) {
        let (Some(name), Some(uid)) = (va.metadata.name.clone(), va.metadata.uid.clone()) else {
            return;
        };
        self.lock().answers.insert(name, Answer { uid, call, done });
    }

    /// The kept answer of the driver for `va` with the volume and node of `call`, if the same
    /// object's finishing write failed after it.
    pub(crate) fn answer(&self, va: &VolumeAttachment, call: &(String, String)) -> Option<Done> {
        self.with_answer(va, call, Done::clone)
    }

    /// Whether the kept answer for `va` and `call` is an unpublish (read in place: a kept
    /// publish answer may hold a large status).
    pub(crate) fn unpublished(&self, va: &VolumeAttachment, call: &(String, String)) -> bool {
        self.with_answer(va, call, |done| *done == Done::Unpublished)
            .unwrap_or(false)
    }

    fn with_answer<R>(
        &self,
        va: &VolumeAttachment,
        call: &(String, String),
        read: impl FnOnce(&Done) -> R,
    ) -> Option<R> {
        let name = va.metadata.name.as_deref()?;
        let uid = va.metadata.uid.as_deref()?;
        let inner = self.lock();
        let answer = inner.answers.get(name)?;
        (answer.uid == uid && answer.call == *call).then(|| read(&answer.done))
    }

    /// Nothing is pending for `name` (it is up to date, or the reconciler asks for the
    /// operation again): drop the driver's kept answer.
    pub(crate) fn drop_answer(&self, name: &str) {
        self.lock().answers.remove(name);
    }

    /// How many records and marks are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let inner = self.lock();
        inner.records.len() + inner.unanswered.len() + inner.answers.len()
    }

    /// The record of `name`, to be read before the cache (see the module docs).
    pub(crate) fn entry(&self, name: &str) -> Option<Record> {
        self.lock().records.get(name).cloned()
    }

    /// A read-back found the write of `action` stored, its answer lost: the cached version
    /// `cached`, which asks for `action`, is covered as if the answer had come.
    pub(crate) fn stored_unseen(&self, cached: &VolumeAttachment, action: VaAction) {
        let stale = cached.metadata.resource_version.iter().cloned().collect();
        self.record(cached, action, stale);
    }

    /// Whether the last write of `name` went unanswered, so the object is to be read from the
    /// API server; clears the mark (the sync that takes it reads, or marks `name` again).
    pub(crate) fn take_unanswered(&self, name: &str) -> bool {
        self.lock().unanswered.remove(name)
    }

    /// Marks `name` unanswered again (its read-back failed).
    pub(crate) fn mark_unanswered(&self, name: &str) {
        self.lock().unanswered.insert(name.to_owned());
    }

    /// The cache caught up: forget the record of `name`.
    pub(crate) fn forget(&self, name: &str) {
        self.lock().records.remove(name);
    }

    /// The object is gone: forget all about `name`.
    pub(crate) fn gone(&self, name: &str) {
        let mut inner = self.lock();
        inner.records.remove(name);
        inner.unanswered.remove(name);
        inner.answers.remove(name);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    /// A failed write: refused by the API server, or stored with its answer lost.
    #[derive(Debug, PartialEq, Eq)]
    enum Failure {
        Refused,
        Lost,
    }

    impl Unanswered for Failure {
        fn may_be_stored(&self) -> bool {
            *self == Self::Lost
        }
    }

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

    #[tokio::test]
    async fn a_forget_that_lands_during_the_write_leaves_no_record() {
        // The informer's handler forgets the record while the write is still waiting for its
        // answer (the object was deleted, or the attached version arrived): nothing may stay.
        let settled = Settled::default();
        let written = settled
            .write(&va("u1", "5"), VaAction::Detach, vec!["5".into()], async {
                settled.forget("va");
                Ok::<_, Failure>(())
            })
            .await;
        assert_eq!(written, Ok(()));
        assert_eq!(settled.len(), 0);
    }

    #[tokio::test]
    async fn the_record_is_in_place_while_the_write_runs_and_goes_if_it_fails() {
        let settled = Settled::default();
        let failed = settled
            .write(&va("u1", "5"), VaAction::Attach, vec!["5".into()], async {
                assert!(done(&settled, &va("u1", "5"), VaAction::Attach));
                Err::<(), _>(Failure::Refused)
            })
            .await;
        assert_eq!(failed, Err(Failure::Refused));
        assert_eq!(settled.len(), 0);

        settled
            .write(&va("u1", "5"), VaAction::Attach, vec!["5".into()], async {
                Ok::<_, Failure>(())
            })
            .await
            .unwrap();
        assert!(done(&settled, &va("u1", "6"), VaAction::Attach), "kept");
    }

    #[tokio::test]
    async fn a_write_whose_answer_was_lost_marks_the_name_until_a_sync_takes_it() {
        let settled = Settled::default();
        let lost = settled
            .write(&va("u1", "5"), VaAction::Attach, vec!["5".into()], async {
                Err::<(), _>(Failure::Lost)
            })
            .await;
        assert_eq!(lost, Err(Failure::Lost));
        assert!(settled.entry("va").is_none(), "nothing says it was stored");
        assert!(settled.take_unanswered("va"));
        assert!(!settled.take_unanswered("va"), "taken once");

        settled.mark_unanswered("va");
        settled.forget("va");
        assert!(
            settled.take_unanswered("va"),
            "the cache catching up with something else does not answer the write"
        );
        settled.mark_unanswered("va");
        settled.gone("va");
        assert_eq!(settled.len(), 0, "the object is gone");

        let refused = settled
            .write(&va("u1", "5"), VaAction::Detach, vec!["5".into()], async {
                Err::<(), _>(Failure::Refused)
            })
            .await;
        assert_eq!(refused, Err(Failure::Refused));
        assert_eq!(settled.len(), 0, "a refused write is known not stored");
    }

    #[tokio::test]
    async fn a_kept_answer_stands_for_its_object_and_call_until_a_write_succeeds() {
        let settled = Settled::default();
        let call = || ("vol".to_owned(), "node".to_owned());
        settled.answered(&va("u1", "5"), call(), Done::Unpublished);
        let cases = [
            ("same object, same call", "u1", ("vol", "node"), true),
            (
                "another object of the same name",
                "u2",
                ("vol", "node"),
                false,
            ),
            ("another node id", "u1", ("vol", "node-2"), false),
            ("another volume", "u1", ("vol-2", "node"), false),
        ];
        for (name, uid, (volume, node), want) in cases {
            let found = settled.answer(&va(uid, "9"), &(volume.to_owned(), node.to_owned()));
            assert_eq!(found.is_some(), want, "{name}");
        }
        settled.drop_answer("va");
        assert_eq!(settled.answer(&va("u1", "5"), &call()), None, "dropped");

        let status = serde_json::json!({"status": {"attached": true}});
        settled.answered(&va("u1", "5"), call(), Done::Published(status.clone()));
        let refused = settled
            .write(&va("u1", "5"), VaAction::Attach, vec![], async {
                Err::<(), _>(Failure::Refused)
            })
            .await;
        assert!(refused.is_err());
        assert_eq!(
            settled.answer(&va("u1", "5"), &call()),
            Some(Done::Published(status)),
            "a failed write keeps it"
        );
        settled
            .write(&va("u1", "5"), VaAction::Attach, vec![], async {
                Ok::<_, Failure>(())
            })
            .await
            .unwrap();
        assert_eq!(settled.answer(&va("u1", "5"), &call()), None, "recorded");
        settled.answered(&va("u1", "5"), call(), Done::Unpublished);
        settled.gone("va");
        assert_eq!(settled.len(), 0, "the object is gone");
    }
}
