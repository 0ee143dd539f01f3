//! One sync at a time per VolumeAttachment across the attach and the detach queue.
//!
//! A work queue never hands one key to two workers, but the attacher has two VolumeAttachment
//! queues (so detaches are not starved by attaches, upstream #761) and a VolumeAttachment moves
//! from one to the other when it is deleted while its attach is still running. The detach then
//! waits here for the attach to finish instead of calling ControllerUnpublishVolume beside an
//! unfinished ControllerPublishVolume.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// A lock per key while a sync holds or waits for it: the last guard of a key drops its entry,
/// so the map does not keep one lock per cached VolumeAttachment (with thousands cached, that
/// was memory held for no sync). Entries are also dropped with [`KeyLocks::forget`] when the
/// object is deleted.
#[derive(Debug, Default)]
pub(crate) struct KeyLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// Held while a sync of `key` runs.
#[derive(Debug)]
pub(crate) struct KeyGuard {
    locks: Arc<KeyLocks>,
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = self.locks.map();
        // Every waiter cloned the entry's `Arc` under this map lock, so a count of one (the
        // map's own) means nobody holds or waits for the key.
        if locks
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            locks.remove(&self.key);
        }
    }
}

impl KeyLocks {
    /// Waits until no other sync of `key` runs; the sync runs while the guard lives.
    pub(crate) async fn lock(self: &Arc<Self>, key: &str) -> KeyGuard {
        let lock = Arc::clone(self.map().entry(key.to_owned()).or_default());
        KeyGuard {
            locks: Arc::clone(self),
            key: key.to_owned(),
            guard: Some(lock.lock_owned().await),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the entry of a deleted object. A sync still holding it keeps its own handle; the
    /// object is gone from the cache, so any later sync of the name finds nothing to do.
    pub(crate) fn forget(&self, key: &str) {
        self.map().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_sync_of_one_key_waits_for_the_first() {
        let locks = Arc::new(KeyLocks::default());
        let first = locks.lock("va-1").await;
        let other = locks.lock("va-2").await;
        let waiting = tokio::spawn({
            let locks = Arc::clone(&locks);
            async move { drop(locks.lock("va-1").await) }
        });
        // The other key was not blocked; the same key is until the first guard goes.
        drop(other);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(first);
        waiting.await.unwrap();
    }

    #[tokio::test]
    async fn an_entry_lives_only_while_a_sync_holds_or_waits_for_it() {
        let locks = Arc::new(KeyLocks::default());
        let first = locks.lock("va-1").await;
        let waiting = tokio::spawn({
            let locks = Arc::clone(&locks);
            async move { locks.lock("va-1").await }
        });
        // The waiter's handle is in the map before it blocks.
        testbed_support::wait::eventually(
            "the waiter's handle in the map",
            std::time::Duration::from_secs(5),
            async || (locks.map().get("va-1").map(Arc::strong_count) == Some(3)).then_some(()),
        )
        .await;
        drop(first);
        let second = waiting.await.unwrap();
        assert_eq!(locks.map().len(), 1, "kept for the second sync");
        drop(second);
        assert!(locks.map().is_empty(), "dropped with the last guard");
    }
}
