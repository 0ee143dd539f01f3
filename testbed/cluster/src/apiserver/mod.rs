//! An in-memory Kubernetes API server for tests and demos: real HTTP semantics of
//! kube-apiserver v1.36.2 (as captured in the golden fixtures) for the resources the CSI
//! sidecars touch, usable in-process as a tower service for `kube::Client::new` or listening
//! on 127.0.0.1 with a generated kubeconfig for real binaries and kubectl.
//!
//! What it models: one store with a global resourceVersion and per-resource history (watch
//! resume, 410 Expired after compaction), LIST with selectors and pagination, WATCH with
//! bookmarks and streaming lists, create/update/patch/delete with optimistic concurrency,
//! finalizers, status subresources, admission defaults, validation (422 with causes), discovery
//! (with resources switched off as `--runtime-config` does, [`Config::disabled_resources`]),
//! `managedFields` on every object (`managed`, simplified; with [`Config::managed_fields`])
//! and fault injection. What it does
//! not: authentication/authorization (everything is allowed), server-side apply's conflict
//! detection, protobuf, YAML bodies other than JSON, garbage collection of
//! dependents, controllers (no PV binder, no pvc-protection controller: the finalizers it adds
//! stay until a client removes them).

mod admission;
mod decode;
mod delete;
mod discovery;
mod encode;
mod events;
mod faults;
mod handlers;
mod in_process;
mod killable;
mod kubeconfig;
mod list;
mod managed;
mod namespaces;
pub mod patch;
mod quantity;
mod render;
mod request;
mod requests;
mod resources;
mod routes;
mod selectors;
mod status;
mod store;
mod validation;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use faults::{Faults, HeldAnswers};
pub use kubeconfig::Listening;
pub use requests::{Permission, RequestCounts};
pub use status::ApiError;

/// The field manager of the managedFields entry [`ApiServer::put_object`] records.
pub const PUT_MANAGER: &str = "testbed";

/// Tunables of an [`ApiServer`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Events kept per resource for watch resume and consistent pagination; older
    /// resourceVersions answer 410 Expired.
    pub history: usize,
    /// Interval of periodic watch bookmarks (kube-apiserver sends one about every minute).
    pub bookmark_interval: Duration,
    /// Namespaces that exist from the start.
    pub namespaces: Vec<String>,
    /// Resources switched off as kube-apiserver's
    /// `--runtime-config=<group>/<version>/<resource>=false` does, e.g.
    /// `storage.k8s.io/v1/volumeattributesclasses` for a cluster that does not serve
    /// VolumeAttributesClass: absent from discovery (resource lists and aggregated discovery),
    /// and their paths answer 404 like any unknown path.
    pub disabled_resources: Vec<String>,
    /// Resources kube-apiserver v1.36.2 no longer serves, switched on as
    /// `--runtime-config=<group>/<version>/<resource>=true` would on an older server. The one
    /// such resource is `storage.k8s.io/v1beta1/csistoragecapacities` (Kubernetes 1.21-1.26,
    /// same fields as v1): with it here and `storage.k8s.io/v1/csistoragecapacities` in
    /// [`Config::disabled_resources`], the server copies Kubernetes 1.21-1.23, where v1 of
    /// that kind did not exist: its v1 paths answer 404 and discovery lists v1beta1 only.
    pub enabled_resources: Vec<String>,
    /// Whether writes record `managedFields` as kube-apiserver always does (`managed`). Off
    /// by default: the entries make every object about twice as large to encode and decode,
    /// which slowed the controller-manager stand-in's binding of 200 claims in a debug test
    /// from 9 s to 38 s; the benches turn it on so their memory figures match a cluster's.
    pub managed_fields: bool,
    /// resourceVersion of the last write before the server starts: the first write gets the
    /// next one. A real server's is etcd's revision, which on a cluster that has lived a while
    /// is in the millions or more, so resourceVersions there are seven or more digits long
    /// from the start; 0 copies a brand-new etcd.
    pub first_resource_version: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            history: store::DEFAULT_HISTORY,
            bookmark_interval: Duration::from_mins(1),
            namespaces: ["default", "kube-system", "kube-public", "kube-node-lease"]
                .map(str::to_owned)
                .to_vec(),
            disabled_resources: Vec::new(),
            enabled_resources: Vec::new(),
            managed_fields: false,
            first_resource_version: 0,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    store: Arc<store::Store>,
    faults: Faults,
    requests: RequestCounts,
    config: Config,
    /// A restart has the server down: in-process clients are refused too
    /// ([`in_process::InProcess`]), and a watch that starts now ends at once.
    down: AtomicBool,
}

/// Errors of the direct (non-HTTP) store access helpers.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The type is not a resource this server serves.
    #[error("resource {0} is not served by the in-memory API server")]
    UnknownResource(String),
    /// The object could not be converted to or from JSON.
    #[error("object does not round-trip through JSON")]
    Json(#[source] serde_json::Error),
    /// The object has no name.
    #[error("object has no metadata.name")]
    NoName,
}

/// Handle to one in-memory API server; clones share the same state.
#[derive(Debug, Clone)]
pub struct ApiServer {
    shared: Arc<Shared>,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl ApiServer {
    /// A server with the default configuration and namespaces `default`, `kube-system`,
    /// `kube-public` and `kube-node-lease`.
    pub fn new() -> Self {
        Self::with_config(Config::default())
    }

    /// A server with `config`.
    pub fn with_config(config: Config) -> Self {
        let store = Arc::new(store::Store::starting_at(
            config.history,
            config.first_resource_version,
        ));
        let server = Self {
            shared: Arc::new(Shared {
                faults: Faults::new(store.clone()),
                requests: RequestCounts::default(),
                store,
                config,
                down: AtomicBool::new(false),
            }),
        };
        for ns in server.shared.config.namespaces.clone() {
            let namespace = json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}
            });
            server.put_raw("", "namespaces", namespace);
        }
        server
    }

    /// The server as an axum router (a tower service), for in-process clients.
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .fallback(routes::dispatch)
            .with_state(self.shared.clone())
    }

    /// A `kube::Client` talking to this server in-process (default namespace `default`).
    /// While an [`ApiServer::restart`] has the server down, its requests fail as a refused
    /// connection would.
    pub fn client(&self) -> kube::Client {
        let service = in_process::InProcess::new(self.router(), self.shared.clone());
        kube::Client::new(service, "default")
    }

    /// Listen on 127.0.0.1 with a random port (plain HTTP/1.1).
    pub async fn listen(&self) -> std::io::Result<Listening> {
        Listening::start(self.router()).await
    }

    /// Restarts the server behind `listening` the way a kube-apiserver process restart looks
    /// to its clients: every open watch ends, the listener closes so new connections are
    /// refused for `down`, then the server listens on the same address again with the same
    /// stored objects (etcd outlives the apiserver). On start-up a real apiserver writes its
    /// identity Lease `kube-system/apiserver-<id>` (the APIServerIdentity feature, on since
    /// 1.26), so the resourceVersion clients see next is newer than any they hold; this one
    /// does the same. With `compact`, the history is also compacted (etcd's periodic
    /// compaction, `--etcd-compaction-interval`, ran while it was down), so a watch resumed
    /// from an old resourceVersion gets 410 Expired and the client must re-list.
    ///
    /// Every open connection is closed, requests being answered included, as when the process
    /// dies ([`Listening::shutdown`]): a graceful stop waited for a watch that slipped past the
    /// dropped ones and kept the server half down until its client gave up.
    ///
    /// # Errors
    /// The address cannot be bound again.
    pub async fn restart(
        &self,
        listening: Listening,
        down: Duration,
        compact: bool,
    ) -> std::io::Result<Listening> {
        let addr = listening.addr();
        // In-process clients (the controller-manager stand-in) lose the server too: a real
        // kube-controller-manager cannot reach a restarting apiserver either.
        self.shared.down.store(true, Ordering::SeqCst);
        self.faults().drop_watches();
        listening.shutdown().await;
        tokio::time::sleep(down).await;
        let identity = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": format!("apiserver-{}", admission::new_uid()),
                "namespace": "kube-system",
                "labels": {"apiserver.kubernetes.io/identity": "kube-apiserver"},
            },
            "spec": {"holderIdentity": "kube-apiserver", "leaseDurationSeconds": 3600},
        });
        self.put_raw("coordination.k8s.io", "leases", identity);
        if compact {
            self.faults().compact();
        }
        let listening = Listening::start_at(self.router(), addr).await;
        self.shared.down.store(false, Ordering::SeqCst);
        listening
    }

    /// Fault injection.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// The resource requests received so far.
    pub fn requests(&self) -> &RequestCounts {
        &self.shared.requests
    }

    /// The current resourceVersion (the last write's).
    pub fn resource_version(&self) -> u64 {
        self.shared.store.lock().rv()
    }

    /// The resource of a typed object, if served.
    fn info_of<K: kube::Resource<DynamicType = ()>>()
    -> Result<&'static resources::ResourceInfo, StoreError> {
        let (group, version, plural) = (K::group(&()), K::version(&()), K::plural(&()));
        resources::find(&group, &version, &plural)
            .ok_or_else(|| StoreError::UnknownResource(format!("{plural}.{group}/{version}")))
    }

    /// Read an object directly from the store (no HTTP, no fault injection).
    pub fn get_object<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let info = Self::info_of::<K>()?;
        let storage = render::storage_info(info);
        let ns = namespace.filter(|_| info.namespaced);
        let Some(obj) = self
            .shared
            .store
            .lock()
            .get(storage.bucket, &store::key(ns, name))
        else {
            return Ok(None);
        };
        K::deserialize(&*render::to_view(info, &obj))
            .map(Some)
            .map_err(StoreError::Json)
    }

    /// List objects directly from the store (`None`: all namespaces), in key order.
    pub fn list_objects<K>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let info = Self::info_of::<K>()?;
        let storage = render::storage_info(info);
        let prefix = store::prefix(namespace.filter(|_| info.namespaced));
        let objects = self.shared.store.lock().range(storage.bucket, &prefix);
        objects
            .into_iter()
            .map(|(_, o)| K::deserialize(&*render::to_view(info, &o)).map_err(StoreError::Json))
            .collect()
    }

    /// Store an object as is, bypassing admission and validation (test setup, e.g. a PVC
    /// already Bound): creates or replaces it, keeping uid and creationTimestamp of an existing
    /// object and filling them for a new one. Watchers see ADDED or MODIFIED. With
    /// [`Config::managed_fields`], an object that carries no managedFields gets the entry a
    /// client's write would record (manager [`PUT_MANAGER`]: every field of a new object, the
    /// changed ones added to a replaced object's entries), so that objects stored for a bench
    /// are as heavy as the ones a sidecar reads from kube-apiserver.
    pub fn put_object<K>(&self, object: &K) -> Result<K, StoreError>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let info = Self::info_of::<K>()?;
        let mut value = serde_json::to_value(object).map_err(StoreError::Json)?;
        value["kind"] = json!(info.kind);
        value["apiVersion"] = json!(info.api_version());
        if value["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            return Err(StoreError::NoName);
        }
        let stored = self.put_raw_info(info, render::to_storage(info, value));
        K::deserialize(&*render::to_view(info, &stored)).map_err(StoreError::Json)
    }

    /// Remove an object at once, ignoring finalizers (watchers see DELETED). Returns whether
    /// it existed.
    pub fn delete_object<K>(&self, namespace: Option<&str>, name: &str) -> Result<bool, StoreError>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let info = Self::info_of::<K>()?;
        let storage = render::storage_info(info);
        let ns = namespace.filter(|_| info.namespaced);
        Ok(self
            .shared
            .store
            .lock()
            .remove(storage.bucket, store::key(ns, name))
            .is_some())
    }

    fn put_raw(&self, group: &str, plural: &str, value: Value) -> Value {
        match resources::find(group, "v1", plural) {
            Some(info) => self.put_raw_info(info, value),
            None => value,
        }
    }

    fn put_raw_info(&self, info: &'static resources::ResourceInfo, mut value: Value) -> Value {
        let storage = render::storage_info(info);
        let name = value["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let ns = value["metadata"]["namespace"].as_str().map(str::to_owned);
        let ns = ns.as_deref().filter(|_| storage.namespaced);
        let key = store::key(ns, &name);
        let mut inner = self.shared.store.lock();
        let existing = inner.get(storage.bucket, &key);
        for field in ["uid", "creationTimestamp"] {
            let current = existing.as_ref().map(|e| e["metadata"][field].clone());
            match current {
                Some(v) if !v.is_null() => value["metadata"][field] = v,
                _ if value["metadata"][field].is_null() => {
                    value["metadata"][field] = json!(match field {
                        "uid" => admission::new_uid(),
                        _ => admission::now(),
                    });
                }
                _ => {}
            }
        }
        admission::normalize(storage, &mut value);
        if self.shared.config.managed_fields && value["metadata"]["managedFields"].is_null() {
            let writer = managed::Writer {
                manager: PUT_MANAGER,
                operation: "Update",
                subresource: None,
            };
            // A replaced object keeps its entries and adds what changed, as an update does.
            managed::record(existing.as_deref(), &mut value, &writer, &admission::now());
        }
        let stored = if existing.is_some() {
            inner.replace(storage.bucket, key, value)
        } else {
            inner.insert(storage.bucket, key, value)
        };
        (*stored).clone()
    }
}
