//! Shared informers: a kube-runtime watcher feeding a reflector [`Store`], with client-go's
//! event-handler view of the changes, so a controller can filter on old and new object and
//! never misses a deletion.
//!
//! kube-runtime's `reflect` keeps the cache but tells a handler only the new object, and after a
//! re-list (watch expired, 410 Gone) objects deleted meanwhile simply vanish from the store. A
//! client-go informer instead calls `UpdateFunc(old, new)` and, on a re-list, `DeleteFunc` for
//! every object that is gone (`DeletedFinalStateUnknown`). The sidecars rely on both: the
//! attacher ignores updates that only touch its own error fields, and queues a
//! PersistentVolume when a VolumeAttachment is deleted. [`informer`] gives the same:
//! [`Change::Applied`] carries the cached object from before the event (equal
//! resourceVersions on a re-list are client-go's resync), and [`Change::Deleted`] is reported
//! for watch deletions and for objects a re-list no longer contains.
//!
//! The objects are cached in a [`Store`] of this crate rather than kube-runtime's reflector
//! store, whose keys copy four strings of every object (see the `store` module).
//!
//! Every object is trimmed before it is cached (`managedFields` is often half of an object and
//! no sidecar reads it; see [`trim_managed_fields`]), or, with [`projected_informer`], cached in
//! a compact form of the sidecar's own (csi-provisioner's and csi-resizer's claims and volumes).
//!
//! The initial list is a streaming list, as client-go's informers do since 0.34 (the golden
//! traffic: one `watch?sendInitialEvents=true` per informer, no LIST): one request instead of a
//! LIST (one per 500 objects) and a WATCH, so the start-up needs fewer tokens of the
//! `--kube-api-qps` bucket, and no whole list response is held in memory at once. A server that
//! refuses it (400/422 to `sendInitialEvents`) gets a LIST and a WATCH instead.
//!
//! ```no_run
//! use csi_common::informer::{Change, informer, trim_managed_fields};
//! use k8s_openapi::api::storage::v1::VolumeAttachment;
//!
//! # async fn run(client: kube::Client) {
//! let (store, task) = informer(
//!     kube::Api::<VolumeAttachment>::all(client),
//!     |va: &mut VolumeAttachment| trim_managed_fields(&mut va.metadata),
//!     |change: Change<'_, VolumeAttachment>| match change {
//!         Change::Applied { old, new } => { /* filter old vs new, enqueue */ }
//!         Change::Deleted(va) => { /* enqueue what depended on it */ }
//!     },
//! );
//! tokio::spawn(task);
//! store.wait_until_ready().await.unwrap();
//! # }
//! ```

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::kube_client::{error_text, status_text};

mod store;

pub use self::store::{Keyed, Store, WriterDropped};

/// A future that keeps one cache filled; it runs until dropped or aborted.
pub type InformerTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One change of a cached object, as a client-go event handler sees it.
#[derive(Debug)]
pub enum Change<'a, K> {
    /// Added (`old` is `None`) or updated. After a re-list every object is reported again with
    /// `old` set; an unchanged resourceVersion then means nothing changed (a resync).
    Applied {
        /// The cached object before this event.
        old: Option<Arc<K>>,
        /// The object now in the cache.
        new: &'a K,
    },
    /// Deleted: a watch DELETE, or gone from the list after a re-list (its last known state).
    Deleted(&'a K),
}

/// Starts caching the objects of `api`: returns the store to read and the task that fills it.
/// `trim` shrinks each object before it is cached; `on_change` runs after the cache has the
/// change, on the informer's task (keep it short: enqueue, do not call out).
pub fn informer<K, F>(api: Api<K>, trim: fn(&mut K), on_change: F) -> (Store<K>, InformerTask)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Eq + Hash + Send + Sync,
    F: FnMut(Change<'_, K>) + Send + 'static,
{
    filtered_informer(api, watcher::Config::default(), trim, on_change)
}

/// As [`informer`], listing and watching only what `config` selects (client-go's
/// `WithTweakListOptions`, e.g. a label selector).
pub fn filtered_informer<K, F>(
    api: Api<K>,
    base: watcher::Config,
    trim: fn(&mut K),
    on_change: F,
) -> (Store<K>, InformerTask)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Eq + Hash + Send + Sync,
    F: FnMut(Change<'_, K>) + Send + 'static,
{
    let project = move |mut object: K| {
        trim(&mut object);
        object
    };
    projected_informer(api, base, project, on_change)
}

/// As [`filtered_informer`], caching what `project` makes of each object rather than the
/// object: a compact form of its own (say with [`crate::cached::Meta`] and shared strings from
/// an [`crate::intern::Interner`] the closure owns) for a cache of thousands of objects. The
/// handler sees the cached form. `project` runs on the informer's task, once per object of every
/// event, deletions included.
pub fn projected_informer<K, C, P, F>(
    api: Api<K>,
    base: watcher::Config,
    project: P,
    on_change: F,
) -> (Store<C>, InformerTask)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Eq + Hash + Send + Sync,
    C: Keyed + Send + Sync + 'static,
    P: FnMut(K) -> C + Send + 'static,
    F: FnMut(Change<'_, C>) + Send + 'static,
{
    let (reader, writer) = store::store();
    // The kind's name for the log lines; a kind whose version is chosen at run time (its
    // dynamic type) is named by its default one.
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let mut cache = Cache::new(reader.clone(), writer, project, on_change);
    let task = async move {
        // client-go's informers (WatchListClient, on since client-go 0.34) start with one
        // streaming-list watch and fall back to a LIST when the server refuses it.
        let mut config = base.clone().streaming_lists();
        loop {
            let stream = watcher(api.clone(), config.clone()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            let mut synced = false;
            let refused = loop {
                match stream.next().await {
                    None => break false,
                    Some(Ok(event)) => {
                        synced |= matches!(event, watcher::Event::InitDone);
                        cache.apply(event);
                    }
                    Some(Err(err))
                        if !synced && is_streaming(&config) && refuses_streaming(&err) =>
                    {
                        tracing::info!(
                            kind,
                            error = watch_error_text(&err),
                            "the API server does not serve streaming lists, listing instead"
                        );
                        break true;
                    }
                    Some(Err(err)) => {
                        tracing::warn!(
                            kind,
                            error = watch_error_text(&err),
                            "watch failed, retrying"
                        );
                    }
                }
            };
            if !refused {
                return;
            }
            config = base.clone();
        }
    };
    (reader, Box::pin(task))
}

fn is_streaming(config: &watcher::Config) -> bool {
    config.initial_list_strategy == watcher::InitialListStrategy::StreamingList
}

/// Whether the server refused the streaming-list watch itself (kube-apiserver before 1.27, or
/// with the `WatchList` feature gate off, answers 422 or 400 to `sendInitialEvents`), rather
/// than failing as any watch may (those are retried as they are).
fn refuses_streaming(err: &watcher::Error) -> bool {
    let code = match err {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status.code,
        _ => return false,
    };
    matches!(code, 400 | 422)
}

/// The store writer, the projection and the handler. What client-go's `Replace` reports after
/// a re-list is computed from the state the list replaced ([`store::Writer::list_done`]
/// buffers the new list until it is complete), so nothing is kept per object besides the store.
struct Cache<C, P, F> {
    store: Store<C>,
    writer: store::Writer<C>,
    project: P,
    on_change: F,
}

impl<C, P, F> Cache<C, P, F>
where
    C: Keyed,
    F: FnMut(Change<'_, C>),
{
    fn new(store: Store<C>, writer: store::Writer<C>, project: P, on_change: F) -> Self {
        Self {
            store,
            writer,
            project,
            on_change,
        }
    }

    /// Applies one event, then tells the handler (after the store has the change, and with no
    /// lock held, so the handler may read the store).
    fn apply<K>(&mut self, event: watcher::Event<K>)
    where
        P: FnMut(K) -> C,
    {
        match event {
            watcher::Event::Apply(new) => {
                let (new, old) = self.writer.apply((self.project)(new));
                (self.on_change)(Change::Applied { old, new: &new });
            }
            watcher::Event::Delete(gone) => {
                let gone = (self.project)(gone);
                self.writer.delete(&gone);
                (self.on_change)(Change::Deleted(&gone));
            }
            watcher::Event::Init => self.writer.list_start(),
            watcher::Event::InitApply(object) => self.writer.list_apply((self.project)(object)),
            watcher::Event::InitDone => {
                let mut before = self.writer.list_done();
                // Reported only now, when the store holds the whole new list, so a handler that
                // reads the store sees a consistent state.
                for new in self.store.state() {
                    let old = before.remove(&new);
                    (self.on_change)(Change::Applied { old, new: &new });
                }
                for gone in before.drain() {
                    (self.on_change)(Change::Deleted(&gone));
                }
            }
        }
    }
}

/// Drops `managedFields`, which no sidecar reads.
pub fn trim_managed_fields(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
}

/// An object's resourceVersion as a number, to tell which of two copies (a cached one, a
/// write's answer, a deletion's last state) is newer. Kubernetes calls them opaque, but
/// kube-apiserver's are etcd revisions, increasing integers (and the in-memory API server's
/// too); `None` when absent or not a number, and the caller decides what that means.
pub fn resource_version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// A watch failure in client-go's words ("failed to list: …", "failed to watch: …").
fn watch_error_text(err: &watcher::Error) -> String {
    match err {
        watcher::Error::InitialListFailed(e) => format!("failed to list: {}", error_text(e)),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            format!("failed to watch: {}", error_text(e))
        }
        watcher::Error::WatchError(status) => format!("failed to watch: {}", status_text(status)),
        watcher::Error::NoResourceVersion => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn object(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// What a handler saw: ("applied", name, old rv, new rv) or ("deleted", name, rv).
    fn replay(events: Vec<watcher::Event<ConfigMap>>) -> (Vec<String>, Vec<String>) {
        let (store, writer) = store::store();
        let seen = std::sync::Mutex::new(Vec::new());
        let identity = |object: ConfigMap| object;
        let mut cache = Cache::new(
            store.clone(),
            writer,
            identity,
            |change: Change<'_, ConfigMap>| {
                let line = match change {
                    Change::Applied { old, new } => format!(
                        "applied {} {}->{}",
                        new.metadata.name.as_deref().unwrap_or_default(),
                        old.and_then(|o| o.metadata.resource_version.clone())
                            .unwrap_or_default(),
                        new.metadata.resource_version.as_deref().unwrap_or_default(),
                    ),
                    Change::Deleted(gone) => format!(
                        "deleted {} {}",
                        gone.metadata.name.as_deref().unwrap_or_default(),
                        gone.metadata
                            .resource_version
                            .as_deref()
                            .unwrap_or_default(),
                    ),
                };
                seen.lock().unwrap().push(line);
            },
        );
        for event in events {
            cache.apply(event);
        }
        drop(cache);
        let mut names: Vec<String> = store
            .state()
            .iter()
            .map(|o| o.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        let mut seen = seen.into_inner().unwrap();
        // The order within one re-list follows the store's hash map; compare as sets there.
        seen.sort();
        (seen, names)
    }

    #[test]
    fn watch_errors_carry_the_api_message_without_a_debug_dump() {
        let gone = || {
            Box::new(kube::core::Status {
                code: 410,
                message: "too old resource version: 1 (336)".into(),
                reason: "Expired".into(),
                ..kube::core::Status::default()
            })
        };
        let cases = [
            (
                watcher::Error::InitialListFailed(kube::Error::Api(gone())),
                "failed to list: too old resource version: 1 (336)",
            ),
            (
                watcher::Error::WatchFailed(kube::Error::Api(gone())),
                "failed to watch: too old resource version: 1 (336)",
            ),
            (
                watcher::Error::WatchError(gone()),
                "failed to watch: too old resource version: 1 (336)",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(watch_error_text(&err), want);
        }
    }

    #[test]
    fn watch_events_carry_the_old_object() {
        use watcher::Event::{Apply, Delete, Init, InitDone};
        let (seen, cached) = replay(vec![
            Init,
            InitDone,
            Apply(object("a", "1")),
            Apply(object("a", "2")),
            Delete(object("a", "3")),
            Apply(object("b", "4")),
        ]);
        assert_eq!(
            seen,
            [
                "applied a ->1",
                "applied a 1->2",
                "applied b ->4",
                "deleted a 3"
            ]
        );
        assert_eq!(cached, ["b"]);
    }

    #[test]
    fn a_relist_reports_resyncs_updates_and_deletions_like_client_go_replace() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let (seen, cached) = replay(vec![
            Init,
            InitApply(object("same", "1")),
            InitApply(object("changed", "2")),
            InitApply(object("gone", "3")),
            InitDone,
            // The watch expired (410); the re-list no longer has "gone" and adds "new".
            Init,
            InitApply(object("same", "1")),
            InitApply(object("changed", "5")),
            InitApply(object("new", "6")),
            InitDone,
            Apply(object("new", "7")),
        ]);
        assert_eq!(
            seen,
            [
                "applied changed ->2",
                "applied changed 2->5",
                "applied gone ->3",
                "applied new ->6",
                "applied new 6->7",
                "applied same ->1",
                "applied same 1->1",
                "deleted gone 3",
            ]
        );
        assert_eq!(cached, ["changed", "new", "same"]);
    }
}
