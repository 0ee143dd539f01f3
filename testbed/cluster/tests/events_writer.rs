//! `csi_common::events` against the fake API server: the writer creates an Event, then
//! aggregates a repeat by PATCH, as client-go's recorder does. It lives here, not in
//! csi-common, so csi-common's tests do not build the API server (which uses csi-common).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use csi_common::events::{EventRecorder, EventType};
use k8s_openapi::api::core::v1::{Event, ObjectReference};
use kube::Api;
use testbed_cluster::apiserver::{ApiServer, Config};

/// The claim the events are about; the API server does not check that it exists.
fn claim() -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some("fixtures".into()),
        name: Some("fx-pvc".into()),
        uid: Some("uid-fx-pvc".into()),
        ..ObjectReference::default()
    }
}

#[tokio::test]
async fn the_writer_creates_then_patches_events_on_the_api_server() {
    let server = ApiServer::with_config(Config {
        namespaces: vec!["default".into(), "fixtures".into()],
        ..Config::default()
    });
    let client = server.client();
    let (recorder, writer) = EventRecorder::new(client.clone(), "external-provisioner".into());
    let writer = tokio::spawn(writer);
    recorder.event(&claim(), EventType::Warning, "ProvisioningFailed", "boom");
    recorder.event(&claim(), EventType::Warning, "ProvisioningFailed", "boom");
    drop(recorder);
    writer.await.unwrap();
    let events: Api<Event> = Api::namespaced(client, "fixtures");
    let list = events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "{list:?}");
    assert_eq!(list.items[0].count, Some(2));
    assert_eq!(list.items[0].message.as_deref(), Some("boom"));
}
