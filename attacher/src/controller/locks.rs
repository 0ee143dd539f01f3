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

/// A lock per key; entries are dropped with [`KeyLocks::forget`] when the object is deleted.
#[derive(Debug, Default)]
pub(crate) struct KeyLocks(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl KeyLocks {
    /// Waits until no other sync of `key` runs; the sync runs while the guard lives.
    pub(crate) async fn lock(&self, key: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(locks.entry(key.to_owned()).or_default())
        };
        lock.lock_owned().await
    }

    /// Drops the entry of a deleted object. A sync still holding it keeps its own handle; the
    /// object is gone from the cache, so any later sync of the name finds nothing to do.
    pub(crate) fn forget(&self, key: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
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
}
