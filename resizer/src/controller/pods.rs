//! Which pods use a blocked claim, without upstream's cluster-wide Pod informer (#211: it
//! caches every pod of the cluster and gets the resizer OOM-killed on big clusters).
//!
//! A claim is *blocked* while the sync must not call the driver because a pod may use it
//! (`crate::inuse::must_check`). Only then is the claim's namespace watched: one namespaced
//! pod informer per namespace that has a blocked claim, started by the first blocked claim
//! there and stopped when the last one is freed. With no blocked claim nothing is cached, so
//! memory does not grow with the number of pods in the cluster. A pod selector cannot do
//! better: kube-apiserver selects pods by a few fields (`metadata.name`, `spec.nodeName`,
//! `status.phase`, ...) and never by the claims in `spec.volumes`, so the namespace is the
//! narrowest server-side filter.
//!
//! When a pod event leaves a blocked claim unused (the pod was deleted or terminated), the
//! claim is queued at once (upstream #175: upstream's pod events never queue a claim, so an
//! offline expansion waited for the backoff or the resync).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use csi_common::informer::Store;
use csi_common::informer::{self, Change};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use crate::inuse;

/// How long a sync waits for a namespace's first pod list. Past it the claim is retried with
/// backoff (the watch keeps trying in the background, e.g. while pod RBAC is missing).
const FIRST_LIST_WAIT: Duration = Duration::from_secs(30);

/// What a freed claim is handed to: the queue's `add` with its `namespace/name` key.
pub(crate) type Requeue = Arc<dyn Fn(String) + Send + Sync>;

/// The pod watches of namespaces with blocked claims.
pub(crate) struct PodWatch {
    client: Client,
    requeue: Requeue,
    namespaces: Mutex<HashMap<String, Watched>>,
}

impl std::fmt::Debug for PodWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodWatch")
            .field("namespaces", &self.lock().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// One namespace's watch and its blocked claims: name → whether a pod was seen using it.
/// Only a claim seen in use is queued when its pods go; a claim just blocked is answered by
/// [`PodWatch::in_use`] itself, which decides under the same lock as [`changed`], so no pod
/// event falls between the two.
struct Watched {
    pods: Store<Pod>,
    blocked: HashMap<String, bool>,
    task: tokio::task::AbortHandle,
}

/// Why [`PodWatch::in_use`] could not answer.
#[derive(Debug, thiserror::Error)]
#[error("the pods of namespace {namespace} could not be listed within {FIRST_LIST_WAIT:?}")]
pub(crate) struct NotListed {
    namespace: String,
}

impl PodWatch {
    /// Watches nothing until a claim is blocked; freed claims go to `requeue`.
    pub(crate) fn new(client: Client, requeue: Requeue) -> Arc<Self> {
        Arc::new(Self {
            client,
            requeue,
            namespaces: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watched>> {
        self.namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a pod uses claim `namespace/claim`. While one does, the claim stays blocked and
    /// is queued when the last such pod goes; otherwise it is unblocked (and the namespace
    /// unwatched if it was the last one there).
    pub(crate) async fn in_use(
        self: &Arc<Self>,
        namespace: &str,
        claim: &str,
    ) -> Result<bool, NotListed> {
        let pods = self.block(namespace, claim);
        if tokio::time::timeout(FIRST_LIST_WAIT, pods.wait_until_ready())
            .await
            .is_err()
        {
            return Err(NotListed {
                namespace: namespace.to_owned(),
            });
        }
        let mut namespaces = self.lock();
        let used = pods.state().iter().any(|pod| inuse::uses(pod, claim));
        if used {
            if let Some(seen) = namespaces
                .get_mut(namespace)
                .and_then(|watched| watched.blocked.get_mut(claim))
            {
                *seen = true;
            }
        } else {
            unblock(&mut namespaces, namespace, claim);
        }
        Ok(used)
    }

    /// Forgets a deleted claim.
    pub(crate) fn forget(&self, namespace: &str, claim: &str) {
        self.unblock(namespace, claim);
    }

    /// Whether `namespace` is watched now (for tests).
    #[cfg(test)]
    pub(crate) fn watches(&self, namespace: &str) -> bool {
        self.lock().contains_key(namespace)
    }

    /// Marks the claim blocked, starting the namespace's watch if needed; its store.
    fn block(self: &Arc<Self>, namespace: &str, claim: &str) -> Store<Pod> {
        let mut namespaces = self.lock();
        let watched = namespaces
            .entry(namespace.to_owned())
            .or_insert_with(|| self.watch(namespace));
        watched.blocked.entry(claim.to_owned()).or_insert(false);
        watched.pods.clone()
    }

    fn unblock(&self, namespace: &str, claim: &str) {
        unblock(&mut self.lock(), namespace, claim);
    }

    fn watch(self: &Arc<Self>, namespace: &str) -> Watched {
        tracing::debug!(namespace, "claim blocked: watching the namespace's pods");
        let store: Arc<OnceLock<Store<Pod>>> = Arc::default();
        let (pods, task) = informer::informer(
            Api::<Pod>::namespaced(self.client.clone(), namespace),
            inuse::trim,
            {
                let watch = Arc::downgrade(self);
                let store = Arc::clone(&store);
                let namespace = namespace.to_owned();
                move |_: Change<'_, Pod>| {
                    if let Some(pods) = store.get() {
                        changed(&watch, &namespace, pods);
                    }
                }
            },
        );
        let _ = store.set(pods.clone());
        Watched {
            pods,
            blocked: HashMap::new(),
            task: tokio::spawn(task).abort_handle(),
        }
    }
}

/// Unblocks the claim; stops the namespace's watch when it was the last one there.
fn unblock(namespaces: &mut HashMap<String, Watched>, namespace: &str, claim: &str) {
    let Some(watched) = namespaces.get_mut(namespace) else {
        return;
    };
    watched.blocked.remove(claim);
    if watched.blocked.is_empty()
        && let Some(watched) = namespaces.remove(namespace)
    {
        watched.task.abort();
        tracing::debug!(namespace, "no blocked claim left: pod watch stopped");
    }
}

/// A pod changed: queue every claim of the namespace seen in use that no pod uses any more
/// (the pod was deleted or terminated, or a re-list dropped pods deleted meanwhile). Cheap:
/// only namespaces with a blocked claim are watched.
fn changed(watch: &Weak<PodWatch>, namespace: &str, pods: &Store<Pod>) {
    let Some(watch) = watch.upgrade() else {
        return;
    };
    let freed: Vec<String> = {
        let mut namespaces = watch.lock();
        let Some(watched) = namespaces.get(namespace) else {
            return;
        };
        let state = pods.state();
        let freed: Vec<String> = watched
            .blocked
            .iter()
            .filter(|(claim, seen)| **seen && !state.iter().any(|pod| inuse::uses(pod, claim)))
            .map(|(claim, _)| claim.clone())
            .collect();
        for claim in &freed {
            unblock(&mut namespaces, namespace, claim);
        }
        freed
    };
    for claim in freed {
        let key = format!("{namespace}/{claim}");
        tracing::info!(pvc = key, "no pod uses the claim any more: queueing it");
        (watch.requeue)(key);
    }
}

#[cfg(test)]
mod tests;
