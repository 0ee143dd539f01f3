//! `ApiServer::restart` behaves like a kube-apiserver process restart seen from a client over
//! HTTP: open watches end, the port refuses connections while it is down, the same objects
//! come back with a newer resourceVersion, and after a compaction a watch resumed from an old
//! resourceVersion gets 410 Expired.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::json;
use testbed_cluster::apiserver::{ApiServer, Listening};

fn client_of(listening: &Listening) -> Client {
    Client::try_from(kube::Config::new(listening.url().parse().unwrap())).unwrap()
}

async fn stored_config_map(api: &Api<ConfigMap>) -> String {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "kept", "namespace": "default"}}))
            .unwrap();
    api.create(&PostParams::default(), &cm)
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

type Watch = futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>;

/// A listening server with one stored ConfigMap, a client of it, the ConfigMap's
/// resourceVersion and a watch open from there.
async fn watching(server: &ApiServer) -> (Listening, Api<ConfigMap>, String, Watch) {
    let listening = server.listen().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client_of(&listening), "default");
    let created_rv = stored_config_map(&api).await;
    let watch = api
        .watch(&WatchParams::default(), &created_rv)
        .await
        .unwrap()
        .boxed();
    (listening, api, created_rv, watch)
}

/// Starts a restart with 2 s of down time; the task ends with the server listening again.
fn restart_for_two_seconds(
    server: &ApiServer,
    listening: Listening,
) -> tokio::task::JoinHandle<Listening> {
    let server = server.clone();
    tokio::spawn(async move {
        server
            .restart(listening, Duration::from_secs(2), false)
            .await
            .unwrap()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_ends_watches_refuses_connections_then_serves_the_same_objects_newer() {
    let server = ApiServer::new();
    let (listening, api, created_rv, mut watch) = watching(&server).await;
    let addr = listening.addr();

    let restarting = restart_for_two_seconds(&server, listening);
    // The open watch ends (the stream is over, no event).
    assert!(watch.try_next().await.unwrap_or(None).is_none());
    // While it is down, the port refuses connections.
    let mut refused = false;
    while !restarting.is_finished() && !refused {
        refused = tokio::net::TcpStream::connect(addr).await.is_err();
    }
    assert!(refused, "the port never refused a connection");
    let listening = restarting.await.unwrap();
    assert_eq!(listening.addr(), addr);

    let list = api.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list.items.iter().map(|c| c.metadata.name.clone()).collect();
    assert_eq!(names, [Some("kept".to_owned())]);
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv > created_rv.parse().unwrap());
    // Without a compaction a watch resumes from the old resourceVersion.
    let mut resumed = api
        .watch(&WatchParams::default().timeout(1), &created_rv)
        .await
        .unwrap()
        .boxed();
    assert!(resumed.try_next().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_restart_with_compaction_a_resumed_watch_gets_410_expired() {
    let server = ApiServer::new();
    let listening = server.listen().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client_of(&listening), "default");
    let created_rv = stored_config_map(&api).await;
    let listening = server
        .restart(listening, Duration::from_millis(100), true)
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client_of(&listening), "default");
    let mut resumed = api
        .watch(&WatchParams::default(), &created_rv)
        .await
        .unwrap()
        .boxed();
    match resumed.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

/// A real apiserver that dies takes every connection with it; a graceful stop waited for a
/// watch that had started after the others were dropped (found by `chaos --fault
/// api-restart`: the server stayed half down for 14 s). Here no watch is dropped first: the
/// stop alone must end the open watch and an idle keep-alive connection, and return at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_resets_every_connection_an_open_watch_included() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let server = ApiServer::new();
    let (listening, _api, _rv, mut watch) = watching(&server).await;
    // A keep-alive connection that has had its answer and waits for the next request.
    let mut idle = tokio::net::TcpStream::connect(listening.addr())
        .await
        .unwrap();
    idle.write_all(b"GET /version HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0; 4096];
    let n = idle.read(&mut answer).await.unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &answer[..n]
    );

    tokio::time::timeout(Duration::from_secs(5), listening.shutdown())
        .await
        .expect("the stop waited for a connection");
    assert!(watch.try_next().await.unwrap_or(None).is_none());
    // The idle connection is closed: end of stream or a reset, never another answer.
    let _ = idle
        .write_all(b"GET /version HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    let mut rest = Vec::new();
    let read = idle.read_to_end(&mut rest).await;
    assert!(read.is_err() || rest.is_empty(), "{rest:?}");
}

/// In-process clients (the controller-manager stand-in uses one) lose the server while it is
/// down, as a real kube-controller-manager loses a restarting apiserver; before, they kept
/// writing through the restart.
#[tokio::test(flavor = "multi_thread")]
async fn in_process_clients_are_refused_while_the_server_is_down() {
    let server = ApiServer::new();
    let (listening, _api, _rv, _watch) = watching(&server).await;
    let addr = listening.addr();
    let in_process: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let restarting = restart_for_two_seconds(&server, listening);
    // The port refusing connections is the sign that the server is down.
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            !restarting.is_finished(),
            "the port never refused a connection"
        );
    }
    let refused = in_process.list(&ListParams::default()).await;
    assert!(
        matches!(refused, Err(kube::Error::Service(_))),
        "{refused:?}"
    );
    let _listening = restarting.await.unwrap();
    let names: Vec<_> = in_process
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, [Some("kept".to_owned())]);
}
