//! Against the in-memory API server, which serves namespaced pod LIST and WATCH like
//! kube-apiserver: ADDED / MODIFIED / DELETED events for the pods of one namespace only, a
//! DELETED event when the pod object is gone (the test server removes a pod at once, as
//! kube-apiserver does once kubelet confirmed its grace period), and a status write as
//! MODIFIED. That is all this module relies on.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_support::wait::eventually;

use super::*;

const WAIT: Duration = Duration::from_secs(10);

fn pod(name: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "busybox"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}
    }))
    .unwrap()
}

struct Harness {
    _server: ApiServer,
    client: Client,
    watch: Arc<PodWatch>,
    queued: Arc<Mutex<Vec<String>>>,
}

impl Harness {
    async fn start() -> Self {
        let server = ApiServer::new();
        let client = server.client();
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap(),
            )
            .await
            .unwrap();
        let queued: Arc<Mutex<Vec<String>>> = Arc::default();
        let watch = PodWatch::new(client.clone(), {
            let queued = Arc::clone(&queued);
            Arc::new(move |key| queued.lock().unwrap().push(key))
        });
        Self {
            _server: server,
            client,
            watch,
            queued,
        }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn create(&self, namespace: &str, name: &str, claim: &str) {
        self.pods(namespace)
            .create(&PostParams::default(), &pod(name, claim))
            .await
            .unwrap();
    }

    async fn queued(&self, key: &str) {
        eventually(&format!("{key} queued"), WAIT, async || {
            self.queued
                .lock()
                .unwrap()
                .iter()
                .any(|k| k == key)
                .then_some(())
        })
        .await;
    }

    fn cached_pods(&self, namespace: &str) -> Option<usize> {
        Some(self.watch.lock().get(namespace)?.pods.state().len())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unused_claim_leaves_no_watch_behind() {
    let h = Harness::start().await;
    h.create("other", "elsewhere", "data").await;
    h.create("default", "web", "logs").await;
    assert!(!h.watch.in_use("default", "data").await.unwrap());
    assert!(!h.watch.watches("default"));
    assert!(h.queued.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_used_claim_is_queued_when_its_last_pod_is_deleted_and_the_watch_stops() {
    let h = Harness::start().await;
    h.create("default", "one", "data").await;
    h.create("default", "two", "data").await;
    h.create("other", "elsewhere", "data").await;
    assert!(h.watch.in_use("default", "data").await.unwrap());
    assert!(h.watch.watches("default"));
    assert!(!h.watch.watches("other"));
    assert_eq!(h.cached_pods("default"), Some(2), "only its namespace");

    h.pods("default")
        .delete("one", &DeleteParams::default())
        .await
        .unwrap();
    eventually("one gone from the watch", WAIT, async || {
        (h.cached_pods("default")? == 1).then_some(())
    })
    .await;
    // Still used by "two": not queued, still blocked.
    assert!(h.queued.lock().unwrap().is_empty());
    assert!(h.watch.in_use("default", "data").await.unwrap());

    h.pods("default")
        .delete("two", &DeleteParams::default())
        .await
        .unwrap();
    h.queued("default/data").await;
    assert!(!h.watch.watches("default"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_terminates_frees_the_claim() {
    let h = Harness::start().await;
    h.create("other", "job", "data").await;
    assert!(h.watch.in_use("other", "data").await.unwrap());
    h.pods("other")
        .patch_status(
            "job",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    h.queued("other/data").await;
    assert!(!h.watch.watches("other"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_claim_is_forgotten_and_its_watch_stopped() {
    let h = Harness::start().await;
    h.create("default", "web", "data").await;
    assert!(h.watch.in_use("default", "data").await.unwrap());
    h.watch.forget("default", "data");
    assert!(!h.watch.watches("default"));
}

/// kube-apiserver's graceful deletion: a deleted pod first gets a `deletionTimestamp` (its
/// containers and volumes are still being torn down) and goes only when kubelet is done. The
/// test server does the same for a pod with a finalizer. Until the pod is gone it still uses
/// the claim.
#[tokio::test(flavor = "multi_thread")]
async fn a_terminating_pod_still_uses_the_claim_until_it_is_gone() {
    let h = Harness::start().await;
    let mut held = pod("web", "data");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    h.pods("default")
        .create(&PostParams::default(), &held)
        .await
        .unwrap();
    assert!(h.watch.in_use("default", "data").await.unwrap());
    h.pods("default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the watch sees the deletionTimestamp", WAIT, async || {
        let namespaces = h.watch.lock();
        let pods = namespaces.get("default")?.pods.state();
        pods.iter()
            .any(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    assert!(h.queued.lock().unwrap().is_empty());
    assert!(h.watch.in_use("default", "data").await.unwrap());

    h.pods("default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    h.queued("default/data").await;
}
