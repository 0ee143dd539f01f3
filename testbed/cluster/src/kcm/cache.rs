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

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::objects;

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

/// The key the index files a volume under: the namespace and name of the claim its claimRef
/// names, or `None` for a volume without claimRef (free for any claim).
type ClaimKey = Option<(String, String)>;

fn claim_key(volume: &PersistentVolume) -> ClaimKey {
    objects::claim_ref(volume).map(|r| {
        (
            r.namespace.clone().unwrap_or_default(),
            r.name.clone().unwrap_or_default(),
        )
    })
}

/// Volume names by [`ClaimKey`].
#[derive(Debug, Default)]
struct Index {
    key_of: HashMap<String, ClaimKey>,
    names: HashMap<ClaimKey, BTreeSet<String>>,
}

impl Index {
    fn file(&mut self, volume: &PersistentVolume) {
        let Some(name) = volume.metadata.name.as_deref() else {
            return;
        };
        let key = claim_key(volume);
        match self.key_of.get(name) {
            Some(old) if *old == key => return,
            Some(old) => {
                let old = old.clone();
                self.unfile(&old, name);
            }
            None => {}
        }
        self.key_of.insert(name.to_owned(), key.clone());
        self.names.entry(key).or_default().insert(name.to_owned());
    }

    fn remove(&mut self, volume: &PersistentVolume) {
        let Some(name) = volume.metadata.name.as_deref() else {
            return;
        };
        if let Some(old) = self.key_of.remove(name) {
            self.unfile(&old, name);
        }
    }

    fn unfile(&mut self, key: &ClaimKey, name: &str) {
        if let Some(names) = self.names.get_mut(key) {
            names.remove(name);
            if names.is_empty() {
                self.names.remove(key);
            }
        }
    }
}

/// The volume informer's volumes by the claim their `spec.claimRef` names, kept from the
/// informer's own watch events, so that it describes the objects the store holds.
///
/// Upstream's claim sync scans every cached volume of the claim's access modes
/// (`findBestMatchForClaim`); the single claim worker did the same over a copy of the store's
/// list at every sync, and at 5,000 volumes that scan and copy were the top of the test bed's
/// profile (docs/bench.md, "The stand-in's reads"). The candidates of a match are only
/// the volumes reserved for the claim and the free ones (every other volume is skipped by the
/// match), so the index answers with those, and the match reads each as its newest copy
/// ([`Newest::get`]), our own writes included as upstream's `ctrl.volumes` has them.
#[derive(Debug, Default)]
pub(crate) struct VolumesByClaim(Mutex<Indexes>);

#[derive(Debug, Default)]
struct Indexes {
    /// What the store holds.
    current: Index,
    /// A relist in progress: as kube-runtime's store, the index keeps answering from the
    /// previous list until the new one is complete.
    relisting: Option<Index>,
}

impl VolumesByClaim {
    /// Follows one event of the volume watch (before the store applies it).
    pub(crate) fn apply(&self, event: &watcher::Event<PersistentVolume>) {
        let mut indexes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(volume) => indexes.current.file(volume),
            watcher::Event::Delete(volume) => indexes.current.remove(volume),
            watcher::Event::Init => indexes.relisting = Some(Index::default()),
            watcher::Event::InitApply(volume) => indexes
                .relisting
                .get_or_insert_with(Index::default)
                .file(volume),
            watcher::Event::InitDone => {
                indexes.current = indexes.relisting.take().unwrap_or_default();
            }
        }
    }

    /// Names of the volumes whose claimRef names `namespace/name`, and, with `free`, of the
    /// volumes without claimRef; in name order.
    pub(crate) fn candidates(&self, namespace: &str, name: &str, free: bool) -> Vec<String> {
        let indexes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let names = &indexes.current.names;
        let reserved = names.get(&Some((namespace.to_owned(), name.to_owned())));
        let free = names.get(&None).filter(|_| free);
        reserved
            .into_iter()
            .chain(free)
            .flatten()
            .cloned()
            .collect()
    }

    /// [`VolumesByClaim::candidates`] for `claim`.
    pub(crate) fn candidates_for(&self, claim: &PersistentVolumeClaim, free: bool) -> Vec<String> {
        self.candidates(
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default(),
            free,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
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

    fn reserved(name: &str, claim: Option<&str>) -> PersistentVolume {
        let mut pv = volume("1", "");
        pv.metadata.name = Some(name.into());
        pv.spec = Some(k8s_openapi::api::core::v1::PersistentVolumeSpec {
            claim_ref: claim.map(|c| ObjectReference {
                namespace: Some("ns".into()),
                name: Some(c.into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        pv
    }

    #[test]
    fn the_index_follows_claim_refs_as_they_are_set_changed_and_deleted() {
        let index = VolumesByClaim::default();
        index.apply(&watcher::Event::Apply(reserved("pv-a", Some("c1"))));
        index.apply(&watcher::Event::Apply(reserved("pv-b", None)));
        index.apply(&watcher::Event::Apply(reserved("pv-c", Some("c2"))));
        assert_eq!(index.candidates("ns", "c1", true), ["pv-a", "pv-b"]);
        assert_eq!(index.candidates("ns", "c1", false), ["pv-a"]);
        assert!(index.candidates("other", "c1", false).is_empty());

        // The binder reserves the free volume for c1; pv-a is released to nobody; pv-c goes.
        index.apply(&watcher::Event::Apply(reserved("pv-b", Some("c1"))));
        index.apply(&watcher::Event::Apply(reserved("pv-a", None)));
        index.apply(&watcher::Event::Delete(reserved("pv-c", Some("c2"))));
        assert_eq!(index.candidates("ns", "c1", false), ["pv-b"]);
        assert_eq!(index.candidates("ns", "c1", true), ["pv-b", "pv-a"]);
        assert!(
            index
                .candidates("ns", "c2", true)
                .iter()
                .all(|n| n == "pv-a")
        );
    }

    #[test]
    fn a_relist_replaces_the_index_only_when_complete() {
        let index = VolumesByClaim::default();
        index.apply(&watcher::Event::Apply(reserved("pv-a", Some("c1"))));
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(reserved("pv-b", Some("c1"))));
        // Until the relist is done, the previous list answers.
        assert_eq!(index.candidates("ns", "c1", false), ["pv-a"]);
        index.apply(&watcher::Event::InitDone);
        // pv-a was deleted while the watch was down: the new list does not have it.
        assert_eq!(index.candidates("ns", "c1", false), ["pv-b"]);
    }
}
