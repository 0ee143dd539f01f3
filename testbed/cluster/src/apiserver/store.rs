//! The object store: one global resourceVersion counter (like an etcd revision), objects per
//! storage bucket keyed the way etcd keys them (`/<namespace>/<name>` or `/<name>`, so lists
//! come out in etcd's order), and a bounded event history per bucket.
//!
//! The history serves three things the real server gets from etcd MVCC and its watch cache:
//! resuming a watch from a resourceVersion, LIST at an exact resourceVersion and consistent
//! continue pages (the state at an older revision is rebuilt by undoing newer events). Once an
//! event falls out of the ring (or [`Store::compact`] is called) older revisions are gone and
//! requests for them answer 410 Expired, like a compacted etcd.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::Value;
use tokio::sync::{broadcast, watch};

/// Default number of events kept per bucket.
pub(crate) const DEFAULT_HISTORY: usize = 1000;

/// Capacity of the live event channel; a watcher that falls this far behind is ended (the
/// client re-watches from its last resourceVersion, as with a real server dropping a slow
/// watcher).
const LIVE_CAPACITY: usize = 8192;

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed; the record carries its last state at the new resourceVersion.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history and sent to live watchers.
#[derive(Debug)]
pub(crate) struct Record {
    /// resourceVersion of this change.
    pub(crate) rv: u64,
    /// Storage bucket.
    pub(crate) bucket: &'static str,
    /// Storage key (`/<namespace>/<name>` or `/<name>`).
    pub(crate) key: String,
    /// What happened.
    pub(crate) event: EventType,
    /// State after the change (for `Deleted`: the last state, stamped with `rv`).
    pub(crate) object: Arc<Value>,
    /// State before the change (`None` for `Added`).
    pub(crate) prev: Option<Arc<Value>>,
    /// `object` as JSON; for `Added` and `Modified` the same cell as the stored object's.
    pub(crate) json: Encoded,
}

/// An object as JSON in the storage resource's own shape, encoded by the first watch that
/// sends it and reused by every other one: by the watchers of the write's event and by every
/// watch that starts later and lists the object in its initial events. Each watch encoding its
/// own copy made a write cost more with every watcher and a sidecar's start cost the server
/// an encoding of every stored object (kube-apiserver serializes an event's object once for
/// all its watchers, KEP 1152 "Less object serializations").
pub(crate) type Encoded = Arc<OnceLock<Arc<[u8]>>>;

/// A stored object and its encoding.
#[derive(Debug)]
struct Entry {
    object: Arc<Value>,
    json: Encoded,
}

#[derive(Debug, Default)]
struct Bucket {
    objects: BTreeMap<String, Entry>,
    history: VecDeque<Arc<Record>>,
    /// Oldest resourceVersion the history can still serve from (watch from RV >= this).
    compacted: u64,
}

/// The mutable state behind the store lock.
#[derive(Debug)]
pub(crate) struct Inner {
    rv: u64,
    /// resourceVersion the store started at: what came before is gone, as in an etcd
    /// compacted at that revision.
    first: u64,
    buckets: HashMap<&'static str, Bucket>,
    history_limit: usize,
    live: broadcast::Sender<Arc<Record>>,
}

/// The state at one resourceVersion could not be rebuilt: the history was compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooOld {
    /// The oldest resourceVersion still available.
    pub(crate) oldest: u64,
}

/// Shared store handle.
#[derive(Debug)]
pub(crate) struct Store {
    inner: Mutex<Inner>,
    /// Bumped by [`Store::drop_watches`]; every open watch ends when it changes.
    epoch: watch::Sender<u64>,
}

/// Storage key of a namespaced or cluster-scoped object.
pub(crate) fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("/{ns}/{name}"),
        None => format!("/{name}"),
    }
}

/// Key prefix of all objects in a namespace (`None`: every object).
pub(crate) fn prefix(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("/{ns}/"),
        None => "/".to_owned(),
    }
}

impl Store {
    /// An empty store keeping `history_limit` events per bucket.
    #[cfg(test)]
    pub(crate) fn new(history_limit: usize) -> Self {
        Self::starting_at(history_limit, 0)
    }

    /// As [`Store::new`], with `rv` as the resourceVersion of the last write: the first
    /// write gets `rv + 1`.
    pub(crate) fn starting_at(history_limit: usize, rv: u64) -> Self {
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let (epoch, _) = watch::channel(0);
        Self {
            inner: Mutex::new(Inner {
                rv,
                first: rv,
                buckets: HashMap::new(),
                history_limit: history_limit.max(1),
                live,
            }),
            epoch,
        }
    }

    /// Lock the store. Never held across an await.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every write is one insert),
        // so recover from poisoning instead of failing every later request.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A receiver that changes when [`Store::drop_watches`] is called.
    pub(crate) fn epoch(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// End every open watch stream, as an apiserver restart does.
    pub(crate) fn drop_watches(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Forget all history: older resourceVersions answer 410 Expired from now on.
    pub(crate) fn compact(&self) {
        let mut inner = self.lock();
        let rv = inner.rv;
        for bucket in inner.buckets.values_mut() {
            bucket.history.clear();
            bucket.compacted = rv;
        }
    }
}

impl Inner {
    /// The current resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// Subscribe to live changes; call while holding the lock to miss nothing.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Record>> {
        self.live.subscribe()
    }

    /// One object.
    pub(crate) fn get(&self, bucket: &str, key: &str) -> Option<Arc<Value>> {
        Some(self.buckets.get(bucket)?.objects.get(key)?.object.clone())
    }

    /// Current objects under `prefix` in key order.
    pub(crate) fn range(&self, bucket: &str, prefix: &str) -> Vec<(String, Arc<Value>)> {
        self.entries(bucket, prefix)
            .map(|(k, e)| (k.clone(), e.object.clone()))
            .collect()
    }

    /// Current objects under `prefix` in key order, each with its encoding.
    pub(crate) fn range_encoded(&self, bucket: &str, prefix: &str) -> Vec<(Arc<Value>, Encoded)> {
        self.entries(bucket, prefix)
            .map(|(_, e)| (e.object.clone(), e.json.clone()))
            .collect()
    }

    fn entries<'a>(
        &'a self,
        bucket: &str,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Entry)> + 'a {
        self.buckets
            .get(bucket)
            .into_iter()
            .flat_map(move |b| b.objects.range(prefix.to_owned()..))
            .take_while(move |(k, _)| k.starts_with(prefix))
    }

    /// Objects under `prefix` as they were at resourceVersion `at`.
    pub(crate) fn range_at(
        &self,
        bucket: &str,
        prefix: &str,
        at: u64,
    ) -> Result<Vec<(String, Arc<Value>)>, TooOld> {
        let compacted = self.compacted_at(bucket);
        if at < compacted {
            return Err(TooOld { oldest: compacted });
        }
        let Some(b) = self.buckets.get(bucket) else {
            return Ok(Vec::new());
        };
        let mut objects: BTreeMap<String, Arc<Value>> =
            self.range(bucket, prefix).into_iter().collect();
        for record in b.history.iter().rev().take_while(|r| r.rv > at) {
            if !record.key.starts_with(prefix) {
                continue;
            }
            match &record.prev {
                Some(prev) => {
                    objects.insert(record.key.clone(), prev.clone());
                }
                None => {
                    objects.remove(&record.key);
                }
            }
        }
        Ok(objects.into_iter().collect())
    }

    /// History records of `bucket` newer than `after`, oldest first.
    pub(crate) fn history_after(
        &self,
        bucket: &str,
        after: u64,
    ) -> Result<Vec<Arc<Record>>, TooOld> {
        let compacted = self.compacted_at(bucket);
        if after < compacted {
            return Err(TooOld { oldest: compacted });
        }
        let Some(b) = self.buckets.get(bucket) else {
            return Ok(Vec::new());
        };
        let newer: Vec<Arc<Record>> = b
            .history
            .iter()
            .rev()
            .take_while(|r| r.rv > after)
            .cloned()
            .collect();
        Ok(newer.into_iter().rev().collect())
    }

    /// The oldest resourceVersion `bucket` can serve from: its compaction, and never before
    /// the store's start.
    fn compacted_at(&self, bucket: &str) -> u64 {
        self.buckets
            .get(bucket)
            .map_or(self.first, |b| b.compacted.max(self.first))
    }

    /// The oldest resourceVersion `bucket` can serve from.
    #[cfg(test)]
    pub(crate) fn compacted(&self, bucket: &str) -> u64 {
        self.buckets.get(bucket).map_or(0, |b| b.compacted)
    }

    /// Store a new object; returns it with its resourceVersion.
    pub(crate) fn insert(
        &mut self,
        bucket: &'static str,
        key: String,
        object: Value,
    ) -> Arc<Value> {
        self.write(bucket, key, Some(object), EventType::Added)
    }

    /// Replace an object; returns it with its new resourceVersion.
    pub(crate) fn replace(
        &mut self,
        bucket: &'static str,
        key: String,
        object: Value,
    ) -> Arc<Value> {
        self.write(bucket, key, Some(object), EventType::Modified)
    }

    /// Remove an object; returns its last state stamped with the deletion's resourceVersion.
    pub(crate) fn remove(&mut self, bucket: &'static str, key: String) -> Option<Arc<Value>> {
        self.get(bucket, &key)?;
        Some(self.write(bucket, key, None, EventType::Deleted))
    }

    fn write(
        &mut self,
        bucket_name: &'static str,
        key: String,
        object: Option<Value>,
        event: EventType,
    ) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        let limit = self.history_limit;
        let bucket = self.buckets.entry(bucket_name).or_default();
        let prev = bucket.objects.get(&key).map(|e| e.object.clone());
        let json = Encoded::default();
        let stored = if let Some(mut obj) = object {
            set_resource_version(&mut obj, rv);
            let object = Arc::new(obj);
            let entry = Entry {
                object: object.clone(),
                json: json.clone(),
            };
            bucket.objects.insert(key.clone(), entry);
            object
        } else {
            bucket.objects.remove(&key);
            let mut last = prev.as_deref().cloned().unwrap_or(Value::Null);
            set_resource_version(&mut last, rv);
            Arc::new(last)
        };
        let record = Arc::new(Record {
            rv,
            bucket: bucket_name,
            key,
            event,
            object: stored.clone(),
            prev,
            json,
        });
        bucket.history.push_back(record.clone());
        while bucket.history.len() > limit {
            if let Some(evicted) = bucket.history.pop_front() {
                bucket.compacted = evicted.rv;
            }
        }
        // No receiver is fine: nobody is watching.
        let _ = self.live.send(record);
        stored
    }
}

fn set_resource_version(object: &mut Value, rv: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, v: u32) -> Value {
        json!({"metadata": {"name": name}, "v": v})
    }

    #[test]
    fn every_write_gets_the_next_resource_version() {
        let store = Store::new(10);
        let mut inner = store.lock();
        let a = inner.insert("x", key(None, "a"), obj("a", 1));
        let b = inner.replace("x", key(None, "a"), obj("a", 2));
        assert_eq!(a["metadata"]["resourceVersion"], "1");
        assert_eq!(b["metadata"]["resourceVersion"], "2");
        let gone = inner.remove("x", key(None, "a")).unwrap();
        assert_eq!(gone["metadata"]["resourceVersion"], "3");
        assert_eq!(gone["v"], 2);
        assert!(inner.get("x", "/a").is_none());
    }

    #[test]
    fn a_stored_object_shares_its_encoding_with_the_event_that_wrote_it() {
        // A watch starting later lists the object with the bytes its event's watchers got.
        let store = Store::new(10);
        let mut inner = store.lock();
        let mut live = inner.subscribe();
        inner.insert("x", key(None, "a"), obj("a", 1));
        inner.insert("x", key(None, "b"), obj("b", 1));
        let added = live.try_recv().unwrap();
        let listed = inner.range_encoded("x", "/");
        assert_eq!(listed.len(), 2);
        assert!(Arc::ptr_eq(&added.json, &listed[0].1));
        assert!(Arc::ptr_eq(&added.object, &listed[0].0));

        // A new state gets a new encoding; a deletion's last state (a new resourceVersion)
        // is encoded on its own.
        inner.replace("x", key(None, "a"), obj("a", 2));
        let _ = live.try_recv().unwrap();
        let modified = live.try_recv().unwrap();
        let listed = inner.range_encoded("x", "/");
        assert!(!Arc::ptr_eq(&added.json, &listed[0].1));
        assert!(Arc::ptr_eq(&modified.json, &listed[0].1));
        inner.remove("x", key(None, "a"));
        let deleted = live.try_recv().unwrap();
        assert!(!Arc::ptr_eq(&modified.json, &deleted.json));
        assert_eq!(inner.range_encoded("x", "/").len(), 1);
    }

    #[test]
    fn a_store_started_late_numbers_on_and_has_no_history_before_its_start() {
        // A long-lived cluster's etcd revision is in the millions: its resourceVersions are
        // long from the first write, and nothing older can be served (410 Expired).
        let store = Store::starting_at(10, 999_999);
        let mut inner = store.lock();
        let a = inner.insert("x", key(None, "a"), obj("a", 1));
        assert_eq!(a["metadata"]["resourceVersion"], "1000000");
        assert_eq!(
            inner.history_after("x", 5).unwrap_err(),
            TooOld { oldest: 999_999 }
        );
        assert_eq!(
            inner.range_at("y", "/", 5).unwrap_err(),
            TooOld { oldest: 999_999 }
        );
        assert_eq!(inner.history_after("x", 999_999).unwrap().len(), 1);
        assert!(inner.range_at("y", "/", 1_000_000).unwrap().is_empty());
    }

    #[test]
    fn the_state_at_an_older_revision_is_rebuilt_from_history() {
        let store = Store::new(10);
        let mut inner = store.lock();
        inner.insert("x", key(Some("ns"), "a"), obj("a", 1));
        inner.insert("x", key(Some("ns"), "b"), obj("b", 1));
        inner.replace("x", key(Some("ns"), "a"), obj("a", 2));
        inner.remove("x", key(Some("ns"), "b"));
        inner.insert("x", key(Some("other"), "c"), obj("c", 1));
        let at2 = inner.range_at("x", "/ns/", 2).unwrap();
        let names: Vec<_> = at2
            .iter()
            .map(|(k, v)| (k.as_str(), v["v"].clone()))
            .collect();
        assert_eq!(names, vec![("/ns/a", json!(1)), ("/ns/b", json!(1))]);
        assert_eq!(inner.range_at("x", "/", 5).unwrap().len(), 2);
    }

    #[test]
    fn history_beyond_the_limit_is_compacted() {
        let store = Store::new(2);
        let mut inner = store.lock();
        for i in 0..4 {
            inner.insert("x", key(None, &format!("o{i}")), obj("o", i));
        }
        assert_eq!(inner.compacted("x"), 2);
        assert_eq!(
            inner.history_after("x", 1).unwrap_err(),
            TooOld { oldest: 2 }
        );
        assert_eq!(inner.history_after("x", 2).unwrap().len(), 2);
        drop(inner);
        store.compact();
        assert!(store.lock().history_after("x", 3).is_err());
        assert!(store.lock().history_after("x", 4).unwrap().is_empty());
    }
}
