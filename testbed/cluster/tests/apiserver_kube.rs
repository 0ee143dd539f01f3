//! kube-rs against the in-memory API server: a `kube::Client` over the in-process router and
//! over TCP with a generated kubeconfig, and kube-runtime's watcher and reflector kept in sync
//! through watch expiry (timeoutSeconds), dropped watches (an apiserver restart) and a
//! compaction that forces a 410 and a re-list — with LIST+WATCH and with streaming lists.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_support::wait::eventually;

fn pvc(name: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_kube_client_over_the_router_creates_reads_patches_and_deletes() {
    let server = ApiServer::new();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(server.client(), "default");
    let created = pvcs
        .create(&PostParams::default(), &pvc("data"))
        .await
        .unwrap();
    assert_eq!(
        created.spec.as_ref().unwrap().volume_mode.as_deref(),
        Some("Filesystem")
    );
    assert_eq!(
        created.metadata.finalizers,
        Some(vec!["kubernetes.io/pvc-protection".to_owned()])
    );
    let err = pvcs
        .create(&PostParams::default(), &pvc("data"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );
    let patched = pvcs
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["a"], "b");
    let status = pvcs
        .patch_status(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().phase.as_deref(), Some("Bound"));
    let listed = pvcs
        .list(&ListParams::default().labels("a=b"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    pvcs.delete("data", &DeleteParams::default()).await.unwrap();
    let terminating = pvcs.get("data").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    pvcs.patch(
        "data",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(pvcs.get_opt("data").await.unwrap().is_none());
}

/// Fault `lose_answers`: the write is stored, its answer cut off after the headers, so the
/// client gets an error and not the object, as when kube-apiserver's connection breaks after
/// it committed the write. The next matching request is answered again.
#[tokio::test]
async fn a_lost_answer_leaves_the_write_stored_and_the_client_an_error() {
    let server = ApiServer::new();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(server.client(), "default");
    pvcs.create(&PostParams::default(), &pvc("data"))
        .await
        .unwrap();
    server
        .faults()
        .lose_answers("patch", "persistentvolumeclaims/status", 1);
    let status = Patch::Merge(json!({"status": {"phase": "Bound"}}));
    let lost = pvcs
        .patch_status("data", &PatchParams::default(), &status)
        .await
        .expect_err("the answer was cut off");
    assert!(!matches!(lost, kube::Error::Api(_)), "{lost:?}");
    assert!(
        csi_common::kube_client::may_have_been_applied(&lost),
        "{lost:?}"
    );
    let stored = pvcs.get("data").await.unwrap();
    assert_eq!(stored.status.unwrap().phase.as_deref(), Some("Bound"));
    let again = Patch::Merge(json!({"status": {"phase": "Lost"}}));
    let answered = pvcs
        .patch_status("data", &PatchParams::default(), &again)
        .await
        .unwrap();
    assert_eq!(answered.status.unwrap().phase.as_deref(), Some("Lost"));
}

#[tokio::test]
async fn a_stale_lease_update_conflicts_like_leader_election_expects() {
    let server = ApiServer::new();
    let leases: Api<Lease> = Api::namespaced(server.client(), "kube-system");
    let lease: Lease = serde_json::from_value(
        json!({"metadata": {"name": "external-resizer-hostpath-csi-k8s-io"},
        "spec": {"holderIdentity": "vm", "leaseDurationSeconds": 15}}),
    )
    .unwrap();
    let first = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut renewed = first.clone();
    renewed.spec.as_mut().unwrap().lease_transitions = Some(1);
    leases
        .replace(
            "external-resizer-hostpath-csi-k8s-io",
            &PostParams::default(),
            &renewed,
        )
        .await
        .unwrap();
    let err = leases
        .replace(
            "external-resizer-hostpath-csi-k8s-io",
            &PostParams::default(),
            &first,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
}

/// Names and resourceVersions, sorted.
fn summary(items: impl IntoIterator<Item = PersistentVolumeClaim>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap(),
                p.metadata.resource_version.unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

async fn wait_in_sync(
    server: &ApiServer,
    reader: &reflector::Store<PersistentVolumeClaim>,
    what: &str,
) {
    for _ in 0..400 {
        let want = summary(
            server
                .list_objects::<PersistentVolumeClaim>(Some("default"))
                .unwrap(),
        );
        let have = summary(reader.state().iter().map(|p| (**p).clone()));
        if want == have {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "reflector out of sync after {what}: server {:?} reflector {:?}",
        summary(
            server
                .list_objects::<PersistentVolumeClaim>(Some("default"))
                .unwrap()
        ),
        summary(reader.state().iter().map(|p| (**p).clone()))
    );
}

async fn reflector_survives_expiry_drops_and_compaction(config: watcher::Config) {
    let server = ApiServer::new();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(server.client(), "default");
    for name in ["a", "b", "c"] {
        pvcs.create(&PostParams::default(), &pvc(name))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(pvcs.clone(), config.timeout(1)));
    let errors = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen_errors = errors.clone();
    let driver = tokio::spawn(stream.for_each(move |event| {
        if event.is_err() {
            seen_errors.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        std::future::ready(())
    }));
    wait_in_sync(&server, &reader, "the initial list").await;

    // Watch expiry: the 1 s watches end and are resumed from the last resourceVersion. The
    // positive signal: the watcher opened a second watch.
    eventually(
        "a new watch after the first expired",
        Duration::from_secs(10),
        async || (server.requests().get("watch", "persistentvolumeclaims") >= 2).then_some(()),
    )
    .await;
    pvcs.create(&PostParams::default(), &pvc("d"))
        .await
        .unwrap();
    pvcs.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    wait_in_sync(&server, &reader, "watch expiry").await;

    // A dropped watch (apiserver restart): resumed from the last resourceVersion.
    server.faults().drop_watches();
    pvcs.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "2"}}})),
    )
    .await
    .unwrap();
    wait_in_sync(&server, &reader, "a dropped watch").await;
    assert_eq!(
        errors.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "expiry and drops are not errors"
    );

    // Compaction while the watch is down: the resume answers 410 and the watcher re-lists,
    // dropping the object deleted meanwhile.
    server
        .faults()
        .fail("watch", "persistentvolumeclaims", 503, 1);
    server.faults().drop_watches();
    server
        .delete_object::<PersistentVolumeClaim>(Some("default"), "c")
        .unwrap();
    pvcs.create(&PostParams::default(), &pvc("e"))
        .await
        .unwrap();
    server.faults().compact();
    wait_in_sync(&server, &reader, "compaction").await;
    assert!(
        errors.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "the 410 reached the watcher"
    );
    let names: Vec<String> = summary(reader.state().iter().map(|p| (**p).clone()))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, vec!["a", "b", "d", "e"]);
    driver.abort();
}

#[tokio::test]
async fn a_list_watch_reflector_stays_in_sync_through_expiry_drops_and_compaction() {
    reflector_survives_expiry_drops_and_compaction(watcher::Config::default()).await;
}

#[tokio::test]
async fn a_streaming_list_reflector_stays_in_sync_through_expiry_drops_and_compaction() {
    reflector_survives_expiry_drops_and_compaction(watcher::Config::default().streaming_lists())
        .await;
}

#[tokio::test]
async fn a_listening_server_serves_clients_built_from_its_kubeconfig() {
    let server = ApiServer::new();
    let listening = server.listen().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    listening.write_kubeconfig(&path).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = kube::Client::try_from(config).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    // A watch over TCP delivers events as they happen.
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(client);
    let mut events = watcher(pvcs.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    pvcs.create(&PostParams::default(), &pvc("over-tcp"))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("over-tcp"));
    let version = server.client().apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "36")
    );
}

#[tokio::test]
async fn direct_store_access_bypasses_admission_and_is_seen_by_watchers() {
    let server = ApiServer::new();
    let mut bound = pvc("preset");
    bound.metadata.namespace = Some("default".to_owned());
    bound.status = Some(serde_json::from_value(json!({"phase": "Bound"})).unwrap());
    let stored = server.put_object(&bound).unwrap();
    assert!(stored.metadata.uid.is_some() && stored.metadata.resource_version.is_some());
    assert_eq!(
        stored.metadata.finalizers, None,
        "no admission: no pvc-protection finalizer"
    );
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(server.client(), "default");
    let got = pvcs.get("preset").await.unwrap();
    assert_eq!(got.status.unwrap().phase.as_deref(), Some("Bound"));
    assert_eq!(
        server
            .get_object::<PersistentVolumeClaim>(Some("default"), "preset")
            .unwrap()
            .unwrap()
            .metadata
            .uid,
        stored.metadata.uid
    );
    assert_eq!(
        server
            .list_objects::<PersistentVolumeClaim>(None)
            .unwrap()
            .len(),
        1
    );
    assert!(
        server
            .delete_object::<PersistentVolumeClaim>(Some("default"), "preset")
            .unwrap()
    );
    assert!(pvcs.get_opt("preset").await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn injected_latency_delays_every_request() {
    let server = ApiServer::new();
    let namespaces: Api<Namespace> = Api::all(server.client());
    server.faults().add_latency(Duration::from_secs(2));
    let start = tokio::time::Instant::now();
    namespaces.list(&ListParams::default()).await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(2));
    server.faults().clear();
    let start = tokio::time::Instant::now();
    namespaces.list(&ListParams::default()).await.unwrap();
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// external-provisioner's storage.k8s.io/v1 probe creates a CSIStorageCapacity named
/// `#%123-invalid-name` and takes 422 Invalid (not 404) as "v1 is served"; kube-apiserver's
/// ValidateCSIStorageCapacity also refuses a negative `capacity` (and only that quantity).
#[tokio::test]
async fn csi_storage_capacities_are_validated_like_kube_apiserver() {
    use k8s_openapi::api::storage::v1::CSIStorageCapacity;
    let server = ApiServer::new();
    let api: Api<CSIStorageCapacity> = Api::namespaced(server.client(), "default");
    let object = |name: &str, capacity: &str, max: &str| -> CSIStorageCapacity {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "storageClassName": "fast",
            "capacity": capacity,
            "maximumVolumeSize": max,
        }))
        .unwrap()
    };
    let code = |result: kube::Result<CSIStorageCapacity>| match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    };
    let probe = api
        .create(
            &PostParams::default(),
            &object("#%123-invalid-name", "1", "1"),
        )
        .await;
    assert_eq!(code(probe), 422);
    let negative = api
        .create(&PostParams::default(), &object("negative", "-1Gi", "1Gi"))
        .await;
    assert_eq!(code(negative), 422);
    // maximumVolumeSize is not checked by kube-apiserver.
    api.create(&PostParams::default(), &object("max-negative", "0", "-1"))
        .await
        .unwrap();
    let mut valid = api
        .create(&PostParams::default(), &object("valid", "10Gi", "1Gi"))
        .await
        .unwrap();
    valid.capacity = Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
        "-5".into(),
    ));
    assert_eq!(
        code(api.replace("valid", &PostParams::default(), &valid).await),
        422
    );
}
