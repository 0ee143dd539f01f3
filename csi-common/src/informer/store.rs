//! The cache an informer fills: the objects in `Arc`s, found by namespace and name.
//!
//! kube-runtime's reflector store keys its map by an `ObjectRef`, which copies the name, the
//! namespace, the resourceVersion and the uid of every object into four more strings beside
//! it: about 240 bytes per cached object with the table's slot in csi-provisioner's heap
//! profile (docs/bench.md, "Memory per cached object"). This table holds only
//! the `Arc`s, 8 bytes a slot, and finds an object by hashing the namespace and name it
//! already carries. Reads and readiness behave as the reflector store's: a re-list is
//! buffered until it is complete (the readers keep the previous state until then), and the
//! store is ready after the first complete list.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, PoisonError, RwLock};

use hashbrown::HashTable;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;

/// A read handle on an informer's cache; clones share it.
pub struct Store<K> {
    table: Arc<RwLock<Table<K>>>,
    ready: watch::Receiver<bool>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
            ready: self.ready.clone(),
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("len", &self.len()).finish()
    }
}

/// The informer's task ended before its first list was complete, so the store will never be
/// ready (the sidecar is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the informer stopped before its first list was complete")]
pub struct WriterDropped;

/// What a [`Store`] finds an object by: its namespace (`None` for a cluster-scoped object)
/// and its name. Every Kubernetes object has them ([`Resource`]); a cache that holds its own
/// compact form of an object implements this for it.
pub trait Keyed {
    /// The namespace and the name (a name is required by the API server; an object without
    /// one is cached under the empty name, as kube-runtime's `ObjectRef` does).
    fn key(&self) -> (Option<&str>, &str);
}

impl<K: Resource> Keyed for K {
    fn key(&self) -> (Option<&str>, &str) {
        let meta = self.meta();
        (
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }
}

impl<K: Resource> Store<K> {
    /// The cached object `key` names (its namespace and name; the rest of the reference is
    /// not compared, as in kube-runtime's store).
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.lookup(key.namespace.as_deref(), &key.name)
    }
}

impl<K: Keyed> Store<K> {
    /// The cached object named `name` in `namespace` (`None` for a cluster-scoped object).
    pub fn lookup(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.read().get(namespace, name).cloned()
    }
}

impl<K> Store<K> {
    /// Every cached object, in no particular order.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.read().objects.iter().cloned().collect()
    }

    /// A cached object `matches` accepts, if any (the first the table holds; the order is not
    /// defined).
    pub fn find(&self, mut matches: impl FnMut(&K) -> bool) -> Option<Arc<K>> {
        self.read().objects.iter().find(|o| matches(o)).cloned()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until the first list is complete.
    ///
    /// # Errors
    ///
    /// [`WriterDropped`] if the informer stopped before that.
    pub async fn wait_until_ready(&self) -> Result<(), WriterDropped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| WriterDropped)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table<K>> {
        // A panic while holding the lock cannot leave the table half-changed: every change is a
        // single insert, remove or swap.
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The objects of one list and the hasher that places them.
pub(super) struct Table<K> {
    objects: HashTable<Arc<K>>,
    hasher: RandomState,
}

impl<K> Default for Table<K> {
    fn default() -> Self {
        Self {
            objects: HashTable::new(),
            hasher: RandomState::new(),
        }
    }
}

/// The namespace and name of a cached object.
fn key_of<K: Keyed>(object: &K) -> (Option<&str>, &str) {
    object.key()
}

/// Where `hasher` places the object with `namespace` and `name`.
fn hash_of(hasher: &RandomState, namespace: Option<&str>, name: &str) -> u64 {
    hasher.hash_one((namespace, name))
}

impl<K: Keyed> Table<K> {
    fn hash(&self, namespace: Option<&str>, name: &str) -> u64 {
        hash_of(&self.hasher, namespace, name)
    }

    fn get(&self, namespace: Option<&str>, name: &str) -> Option<&Arc<K>> {
        let hash = self.hash(namespace, name);
        self.objects
            .find(hash, |o| key_of(o.as_ref()) == (namespace, name))
    }

    /// Caches `object`, returning the object it replaces.
    fn insert(&mut self, object: Arc<K>) -> Option<Arc<K>> {
        let (namespace, name) = key_of(object.as_ref());
        let hash = self.hash(namespace, name);
        let hasher = &self.hasher;
        match self.objects.entry(
            hash,
            |o| key_of(o.as_ref()) == (namespace, name),
            |o| {
                let (namespace, name) = key_of(o.as_ref());
                hash_of(hasher, namespace, name)
            },
        ) {
            hashbrown::hash_table::Entry::Occupied(mut slot) => {
                Some(std::mem::replace(slot.get_mut(), object))
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(object);
                None
            }
        }
    }

    /// Drops the object with the namespace and name of `object`, returning it.
    pub(super) fn remove(&mut self, object: &K) -> Option<Arc<K>> {
        let (namespace, name) = key_of(object);
        let hash = self.hash(namespace, name);
        self.objects
            .find_entry(hash, |o| key_of(o.as_ref()) == (namespace, name))
            .ok()
            .map(|slot| slot.remove().0)
    }

    /// Every object, leaving the table empty.
    pub(super) fn drain(&mut self) -> Vec<Arc<K>> {
        self.objects.drain().collect()
    }
}

/// The informer's side of a [`Store`]: applies watch events, buffering a re-list until it is
/// complete.
pub(super) struct Writer<K> {
    table: Arc<RwLock<Table<K>>>,
    ready: watch::Sender<bool>,
    /// The list being received, from `Init` to `InitDone`.
    relist: Option<Table<K>>,
}

/// A new, empty and not yet ready store and its writer.
pub(super) fn store<K>() -> (Store<K>, Writer<K>) {
    let table = Arc::new(RwLock::new(Table::default()));
    let (ready, receiver) = watch::channel(false);
    (
        Store {
            table: Arc::clone(&table),
            ready: receiver,
        },
        Writer {
            table,
            ready,
            relist: None,
        },
    )
}

impl<K: Keyed> Writer<K> {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table<K>> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// A watch ADDED or MODIFIED: caches `object`; returns it and the object it replaces.
    pub(super) fn apply(&mut self, object: K) -> (Arc<K>, Option<Arc<K>>) {
        let object = Arc::new(object);
        let old = self.write().insert(Arc::clone(&object));
        (object, old)
    }

    /// A watch DELETED: drops the cached object with the namespace and name of `object`.
    pub(super) fn delete(&mut self, object: &K) {
        self.write().remove(object);
    }

    /// The start of a (re-)list: the objects until [`Writer::list_done`] form the new state.
    pub(super) fn list_start(&mut self) {
        self.relist = Some(Table::default());
    }

    /// One object of the list being received.
    pub(super) fn list_apply(&mut self, object: K) {
        self.relist
            .get_or_insert_with(Table::default)
            .insert(Arc::new(object));
    }

    /// The list is complete: it replaces the cached state, and the store is ready. Returns the
    /// state it replaced.
    pub(super) fn list_done(&mut self) -> Table<K> {
        let list = self.relist.take().unwrap_or_default();
        let before = std::mem::replace(&mut *self.write(), list);
        self.ready.send_replace(true);
        before
    }
}

#[cfg(test)]
mod tests;
