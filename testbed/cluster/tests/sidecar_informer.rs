//! The sidecars' informer (`csi_common::informer`) against the in-memory API server: its initial
//! list is one streaming-list watch, as client-go's informers send it (golden traffic: one
//! `watch?sendInitialEvents=true` per informer, no LIST), and a server that refuses streaming
//! lists gets a LIST and a WATCH instead.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use csi_common::informer::{Change, informer};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;

fn pv(name: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": "d", "volumeHandle": name}}
    }))
    .unwrap()
}

/// Starts an informer on PVs and waits until it has synced; returns what it cached.
async fn sync(server: &ApiServer) -> Vec<String> {
    let (store, task) = informer(
        Api::<PersistentVolume>::all(server.client()),
        |_: &mut PersistentVolume| {},
        |_: Change<'_, PersistentVolume>| {},
    );
    let task = tokio::spawn(task);
    store.wait_until_ready().await.unwrap();
    let mut names: Vec<String> = store
        .state()
        .iter()
        .filter_map(|pv| pv.metadata.name.clone())
        .collect();
    names.sort();
    task.abort();
    names
}

#[tokio::test]
async fn the_initial_list_is_one_streaming_watch_and_no_list() {
    let server = ApiServer::new();
    server.put_object(&pv("a")).unwrap();
    server.put_object(&pv("b")).unwrap();
    assert_eq!(sync(&server).await, ["a", "b"]);
    assert_eq!(server.requests().get("watch", "persistentvolumes"), 1);
    assert_eq!(server.requests().get("list", "persistentvolumes"), 0);
}

#[tokio::test]
async fn a_server_that_refuses_streaming_lists_is_listed_instead() {
    let server = ApiServer::new();
    server.put_object(&pv("a")).unwrap();
    // What kube-apiserver with the WatchList feature gate off answers to sendInitialEvents.
    server.faults().fail("watch", "persistentvolumes", 422, 1);
    assert_eq!(sync(&server).await, ["a"]);
    assert_eq!(server.requests().get("list", "persistentvolumes"), 1);
}
