//! The binder's view of claims and volumes, as upstream pv_controller keeps it: the informer's
//! store, plus every object the controller itself wrote, whichever of the two is newer.
//!
//! Upstream's `ctrl.claims` and `ctrl.volumes` are stores fed both by the informers and by
//! the controller's own successful writes (`storeClaimUpdate` / `storeVolumeUpdate`), and
//! `storeObjectUpdate` keeps whichever copy has the higher resourceVersion, read as an
//! integer. So a sync that follows our own write sees that write even while the watch that
//! will deliver it is behind, instead of writing from a stale copy and meeting a 409. Here
//! the informer's store is kube-runtime's (we cannot feed it ourselves), so our writes are
//! kept beside it and the newer copy is chosen on each read ([`choose`]); a written copy is
//! dropped as soon as the store has caught up with it, or no longer has the object.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

/// Which copy of an object a read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    /// The store's copy; a written copy, if any, is outdated and dropped.
    Cached,
    /// Our own written copy: the store has not caught up with it yet.
    Written,
    /// The store no longer has the object (deleted, or never seen): nothing, and a written
    /// copy is dropped.
    Gone,
}

/// The resourceVersion as upstream's `storeObjectUpdate` reads it: a decimal integer.
fn version(obj: &impl Resource) -> Option<u64> {
    obj.meta().resource_version.as_deref()?.parse().ok()
}

/// Which copy to read: the store's or our written copy of one object.
///
/// We only write objects we have read from the store, so an object missing from the store has
/// been deleted since; a newer one of the same name carries a higher version. A version that
/// does not parse is not compared (upstream refuses to store it); the store's copy wins.
pub(crate) fn choose<K: Resource>(cached: Option<&K>, written: Option<&K>) -> Choice {
    let Some(cached) = cached else {
        return Choice::Gone;
    };
    match (version(cached), written.and_then(version)) {
        (Some(cached), Some(written)) if written > cached => Choice::Written,
        _ => Choice::Cached,
    }
}

/// An informer's store plus our own writes (see the module documentation).
pub(crate) struct Newest<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    written: Mutex<HashMap<ObjectRef<K>, Arc<K>>>,
}

impl<K> Newest<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    pub(crate) fn new(store: Store<K>) -> Self {
        Self {
            store,
            written: Mutex::new(HashMap::new()),
        }
    }

    /// The newest copy of `key` we know of, `None` when the store does not have it.
    pub(crate) fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        let cached = self.store.get(key);
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let ours = written.get(key);
        match choose(cached.as_deref(), ours.map(AsRef::as_ref)) {
            Choice::Written => ours.cloned(),
            Choice::Cached => {
                written.remove(key);
                cached
            }
            Choice::Gone => {
                written.remove(key);
                None
            }
        }
    }

    /// Every object in the store, as the store has it. Unlike upstream's, the claim sync's
    /// match over all volumes does not see our writes the store has not caught up with:
    /// that would cost a lookup per volume on every claim sync, and a stale candidate costs
    /// one 409 and a retry (every write is guarded by its resourceVersion).
    pub(crate) fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// Records an object the API server returned from our write, and hands it back.
    pub(crate) fn wrote(&self, obj: K) -> K {
        let key = ObjectRef::from_obj(&obj);
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let newer = written
            .get(&key)
            .is_none_or(|o| choose(Some(&**o), Some(&obj)) == Choice::Written);
        if newer {
            written.insert(key, Arc::new(obj.clone()));
        }
        obj
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::reflector::store;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    #[test]
    fn the_newer_copy_wins_and_a_missing_object_is_gone() {
        let cases = [
            // (store's version, our written version) -> choice
            (None, None, Choice::Gone),
            (None, Some("9"), Choice::Gone),
            (Some("5"), None, Choice::Cached),
            (Some("5"), Some("4"), Choice::Cached),
            (Some("5"), Some("5"), Choice::Cached),
            (Some("5"), Some("6"), Choice::Written),
            // Compared as integers, not as strings ("10" < "9" as text).
            (Some("9"), Some("10"), Choice::Written),
            (Some("x"), Some("6"), Choice::Cached),
            (Some("5"), Some("x"), Choice::Cached),
        ];
        for (cached, written, want) in cases {
            let (c, w) = (
                cached.map(|v| volume(v, "")),
                written.map(|v| volume(v, "")),
            );
            assert_eq!(
                choose(c.as_ref(), w.as_ref()),
                want,
                "{cached:?} {written:?}"
            );
        }
    }

    fn volume(version: &str, phase: &str) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv-1".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            status: Some(k8s_openapi::api::core::v1::PersistentVolumeStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn phase(pv: &PersistentVolume) -> &str {
        super::super::objects::pv_phase(pv)
    }

    /// A cache whose informer has seen `pv-1` at version 10 in `phase`, and its writer.
    fn cache_with(phase: &str) -> (Newest<PersistentVolume>, Writer<PersistentVolume>) {
        let (reader, mut writer) = store::<PersistentVolume>();
        writer.apply_watcher_event(&watcher::Event::Apply(volume("10", phase)));
        (Newest::new(reader), writer)
    }

    #[test]
    fn a_read_sees_our_write_until_the_informer_catches_up() {
        let (cache, mut writer) = cache_with("Pending");
        let key = ObjectRef::new("pv-1");

        cache.wrote(volume("11", "Bound"));
        assert_eq!(phase(&cache.get(&key).unwrap()), "Bound");

        // The informer delivers our write, then someone else's: the store's copy is read.
        writer.apply_watcher_event(&watcher::Event::Apply(volume("11", "Bound")));
        writer.apply_watcher_event(&watcher::Event::Apply(volume("12", "Released")));
        assert_eq!(phase(&cache.get(&key).unwrap()), "Released");
        assert!(cache.written.lock().unwrap().is_empty());
    }

    #[test]
    fn an_object_deleted_from_the_store_is_gone_despite_our_write() {
        let (cache, mut writer) = cache_with("Bound");
        cache.wrote(volume("11", "Released"));
        writer.apply_watcher_event(&watcher::Event::Delete(volume("11", "Released")));
        assert!(cache.get(&ObjectRef::new("pv-1")).is_none());
        assert!(cache.written.lock().unwrap().is_empty());
    }

    #[test]
    fn an_older_write_does_not_replace_a_newer_one() {
        let (cache, _writer) = cache_with("Pending");
        cache.wrote(volume("12", "Bound"));
        cache.wrote(volume("11", "Available"));
        assert_eq!(phase(&cache.get(&ObjectRef::new("pv-1")).unwrap()), "Bound");
    }
}
