//! Whole-binary tests of `csi-attacher` against the in-memory API server, the
//! controller-manager stand-in's attach-detach helper and the mock CSI driver: the attach and
//! detach flows, errors and recovery, queues and metrics. Publish requests are in
//! `publish.rs`, bad input in `bad_input.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::{CSINode, VolumeAttachment};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use testbed_cluster::kcm::attach_detach;
use testbed_mock_csi::{
    ControllerRpc, DEFAULT_NODE_ID, Fault, Method, MockDriverConfig, MockVolume,
};
use testbed_support::wait::eventually;
use tonic::Code;

use crate::support::{
    BIN, Cluster, FINALIZER, TIMEOUT, free_port, has_our_finalizer, metrics, pv_source,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_pv_volume_is_attached_and_detached_with_finalizers_annotations_and_events() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let _attacher = cluster.attacher();

    let va = cluster.attached().await;
    let name = va.metadata.name.clone().unwrap();
    assert_eq!(
        va.metadata.finalizers.clone().unwrap_or_default(),
        [FINALIZER]
    );
    let annotations = va.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("csi.alpha.kubernetes.io/node-id")
            .map(String::as_str),
        Some(DEFAULT_NODE_ID)
    );
    assert_eq!(
        annotations
            .get("csi-attacher/volume-handle")
            .map(String::as_str),
        Some("vol-1")
    );
    assert!(cluster.published());
    let pv = Api::<PersistentVolume>::all(cluster.client.clone())
        .get("pv-1")
        .await
        .unwrap();
    assert!(
        pv.metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == FINALIZER)
    );
    eventually("a SuccessfulAttachVolume event", TIMEOUT, async || {
        cluster
            .events("SuccessfulAttachVolume")
            .await
            .into_iter()
            .next()
    })
    .await;

    cluster.detached(&name).await;
    assert!(!cluster.published());
    eventually("a SuccessfulDetachVolume event", TIMEOUT, async || {
        cluster
            .events("SuccessfulDetachVolume")
            .await
            .into_iter()
            .next()
    })
    .await;
}

/// kube-apiserver sends a write's watch events apart from its answer: the attacher's informer
/// can see its VolumeAttachment marked attached, and then deleted, before the answer to that
/// status write arrives (the in-memory API server holds the answer back). The late answer must
/// neither keep the VA attached nor publish it again: one publish, one unpublish, VA gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_va_deleted_before_its_attached_status_returns_is_detached_once() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let held = cluster
        .server
        .faults()
        .hold_answers("patch", "volumeattachments/status", 1);
    let _attacher = cluster.attacher();
    let name = cluster.request_attach("pv-1").await;
    // The status write is stored, its answer still held back.
    attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    cluster.request_delete(&name).await;
    held.release();
    attach_detach::wait_detached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    assert!(!cluster.published());
    assert_eq!(cluster.publish_requests().len(), 1, "published once");
    assert_eq!(cluster.unpublish_requests().len(), 1, "unpublished once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_driver_leaves_an_attach_error_and_a_warning_until_it_recovers() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster.driver.inject(Fault::error(
        Method::ControllerPublishVolume,
        Code::ResourceExhausted,
        "too many volumes on the node",
    ));
    let _attacher = cluster.attacher();
    let name = cluster.request_attach("pv-1").await;
    let vas = Api::<VolumeAttachment>::all(cluster.client.clone());
    let error = eventually("status.attachError", TIMEOUT, async || {
        vas.get(&name).await.ok()?.status?.attach_error
    })
    .await;
    assert_eq!(
        error.message.as_deref(),
        Some("rpc error: code = ResourceExhausted desc = too many volumes on the node")
    );
    assert_eq!(error.error_code, Some(Code::ResourceExhausted as i32));
    let warning = eventually("a FailedAttachVolume event", TIMEOUT, async || {
        cluster
            .events("FailedAttachVolume")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        warning
            .message
            .unwrap_or_default()
            .contains("code = ResourceExhausted"),
        "the event carries the CSI code"
    );

    cluster.driver.clear_faults();
    let va = attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    assert!(
        va.status.unwrap().attach_error.is_none(),
        "cleared on success"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_va_whose_pv_and_csinode_are_gone_still_detaches() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster.add_volume("pv-2", "vol-2").await;
    let _attacher = cluster.attacher();
    let name = cluster.attached().await.metadata.name.unwrap();

    // Force-delete the PV (its finalizers removed by hand) and remove the node's CSINode.
    let pvs = Api::<PersistentVolume>::all(cluster.client.clone());
    pvs.delete("pv-1", &DeleteParams::default()).await.unwrap();
    pvs.patch(
        "pv-1",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("PV gone", TIMEOUT, async || {
        pvs.get_opt("pv-1").await.unwrap().is_none().then_some(())
    })
    .await;
    Api::<CSINode>::all(cluster.client.clone())
        .delete(DEFAULT_NODE_ID, &DeleteParams::default())
        .await
        .unwrap();
    // Two more attaches fail once the attacher's caches have lost the PV and the CSINode, so
    // the detach below cannot use either.
    let probe = cluster.create_va("va-probe", pv_source("pv-1")).await;
    cluster
        .attach_error_becomes(&probe, r#"persistentvolume "pv-1" not found"#)
        .await;
    let other = cluster.request_attach("pv-2").await;
    cluster
        .attach_error_becomes(&other, r#"csinode.storage.k8s.io "mock-node" not found"#)
        .await;

    cluster.delete_va(&name).await;
    assert!(
        !cluster.published(),
        "unpublished with the annotated handle and node ID"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_va_whose_csinode_lost_the_driver_detaches_with_the_annotated_node_id() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster.add_volume("pv-2", "vol-2").await;
    let _attacher = cluster.attacher();
    let name = cluster.attached().await.metadata.name.unwrap();

    // The driver pod left the node: the kubelet drops its CSINode entry, the CSINode stays.
    Api::<CSINode>::all(cluster.client.clone())
        .patch(
            DEFAULT_NODE_ID,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"drivers": []}})),
        )
        .await
        .unwrap();
    // An attach on the node fails once the attacher's cache has the change (no fallback for
    // attach), so the detach below cannot use the old entry.
    let other = cluster.request_attach("pv-2").await;
    assert_eq!(
        cluster.attach_error(&other).await.message.as_deref(),
        Some("CSINode mock-node does not contain driver hostpath.csi.k8s.io")
    );

    cluster.detached(&name).await;
    let unpublish = cluster.unpublish_requests();
    assert_eq!(unpublish.len(), 1);
    assert_eq!(unpublish[0].node_id, DEFAULT_NODE_ID, "from the annotation");
    assert!(!cluster.published());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pv_deleted_while_attached_keeps_our_finalizer_until_its_va_is_gone() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let http = free_port();
    let _attacher = cluster.attacher_with(&[&format!("--http-endpoint={http}")]);
    let name = cluster.attached().await.metadata.name.unwrap();
    let pvs = cluster.volumes();
    pvs.delete("pv-1", &DeleteParams::default()).await.unwrap();
    // The PV sync has looked at the deleted PV (its only item so far) and kept the finalizer.
    eventually("one PV sync done", TIMEOUT, async || {
        metrics(http).await.filter(|body| {
            body.contains(r#"workqueue_work_duration_seconds_count{name="csi-attacher-pv"} 1"#)
        })
    })
    .await;
    let deleting = pvs.get("pv-1").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert!(
        has_our_finalizer(&deleting.metadata),
        "the VA still needs it"
    );

    // Detach still reads the PV being deleted; then the PV sync releases it.
    cluster.detached(&name).await;
    assert!(!cluster.published());
    eventually("our finalizer off the PV", TIMEOUT, async || {
        let pv = pvs.get_opt("pv-1").await.ok()?;
        pv.is_none_or(|pv| !has_our_finalizer(&pv.metadata))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_without_publish_gets_the_trivial_handler() {
    let config = MockDriverConfig {
        controller_capabilities: vec![ControllerRpc::CreateDeleteVolume],
        ..MockDriverConfig::default()
    };
    let cluster = Cluster::start(config).await;
    let _attacher = cluster.attacher();
    let va = cluster.attached().await;
    assert!(
        va.metadata.finalizers.unwrap_or_default().is_empty(),
        "no finalizer"
    );
    assert!(!cluster.published(), "no ControllerPublishVolume");
    assert_eq!(
        cluster.driver.call_count(Method::ControllerPublishVolume),
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_flags_exit_with_upstreams_codes() {
    let usage = tokio::process::Command::new(BIN)
        .arg("--no-such-flag")
        .output()
        .await
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
    let workers = tokio::process::Command::new(BIN)
        .arg("--worker-threads=0")
        .output()
        .await
        .unwrap();
    assert_eq!(workers.status.code(), Some(1));
    let version = tokio::process::Command::new(BIN)
        .arg("-version")
        .output()
        .await
        .unwrap();
    assert_eq!(version.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&version.stdout).contains(" v0."));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_slow_detaches_does_not_delay_a_new_attach() {
    const BURST: usize = 8;
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    for i in 0..=BURST {
        cluster
            .add_volume(&format!("pv-b{i}"), &format!("vol-b{i}"))
            .await;
    }
    let _attacher = cluster.attacher_with(&["--worker-threads=2"]);
    let mut names = Vec::new();
    for i in 0..BURST {
        let pv = format!("pv-b{i}");
        names.push(
            attach_detach::attach(&cluster.client, &pv, DEFAULT_NODE_ID)
                .await
                .unwrap(),
        );
    }
    for name in &names {
        attach_detach::wait_attached(&cluster.client, name, TIMEOUT)
            .await
            .unwrap();
    }

    // Every detach takes a second; two workers need BURST / 2 seconds for all of them. With one
    // queue (upstream) a new attach waits behind the whole burst.
    cluster.driver.inject(Fault::delay(
        Method::ControllerUnpublishVolume,
        Duration::from_secs(1),
    ));
    let vas = Api::<VolumeAttachment>::all(cluster.client.clone());
    for name in &names {
        vas.delete(name, &DeleteParams::default()).await.unwrap();
    }
    cluster
        .driver
        .wait_for_calls(Method::ControllerUnpublishVolume, 1, TIMEOUT)
        .await
        .unwrap();

    let new = attach_detach::attach(&cluster.client, &format!("pv-b{BURST}"), DEFAULT_NODE_ID)
        .await
        .unwrap();
    attach_detach::wait_attached(&cluster.client, &new, TIMEOUT)
        .await
        .unwrap();
    let mut waiting = 0;
    for name in &names {
        if vas.get_opt(name).await.unwrap().is_some() {
            waiting += 1;
        }
    }
    assert!(
        waiting >= BURST / 2,
        "the attach finished while {waiting} of {BURST} detaches still waited"
    );
    for name in &names {
        attach_detach::wait_detached(&cluster.client, name, TIMEOUT)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_election_backlog_and_queue_metrics_use_upstreams_names_plus_the_backlog() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    // Every publish fails, so the VA waits for its attach.
    cluster.driver.inject(Fault::error(
        Method::ControllerPublishVolume,
        Code::Internal,
        "backend down",
    ));
    let http = free_port();
    let endpoint = format!("--http-endpoint={http}");
    let _attacher = cluster.attacher_with(&[
        &endpoint,
        "--leader-election",
        "--leader-election-namespace=default",
    ]);
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        cluster.client.clone(),
        "default",
    );
    eventually("the Lease", TIMEOUT, async || {
        leases
            .get_opt("external-attacher-leader-hostpath-csi-k8s-io")
            .await
            .ok()
            .flatten()
    })
    .await;
    attach_detach::attach(&cluster.client, "pv-1", DEFAULT_NODE_ID)
        .await
        .unwrap();
    // Waits for the failed publish too: the pending gauge counts the VA from the informer's
    // event on, before its first ControllerPublishVolume has answered.
    let body = eventually(
        "one failed attach pending in /metrics",
        TIMEOUT,
        async || {
            metrics(http).await.filter(|body| {
                body.contains(r#"csi_attacher_pending_operations{operation="attach"} 1"#)
                    && body.contains(r#"workqueue_retries_total{name="csi-attacher-va"}"#)
                    && body.contains(r#"grpc_status_code="Internal""#)
            })
        },
    )
    .await;
    for family in [
        r#"csi_attacher_pending_operations{operation="detach"} 0"#,
        r#"csi_attacher_oldest_pending_operation_seconds{operation="attach"}"#,
        r#"workqueue_adds_total{name="csi-attacher-va-detach"}"#,
        r#"workqueue_adds_total{name="csi-attacher-pv"}"#,
        r#"grpc_status_code="Internal",method_name="/csi.v1.Controller/ControllerPublishVolume""#,
        r#"leader_election_master_status{name=""} 1"#,
    ] {
        assert!(body.contains(family), "{family} in\n{body}");
    }
    let health =
        testbed_support::http_client::get(http, "/healthz/leader-election", Duration::from_secs(5))
            .await
            .unwrap();
    assert_eq!(health.status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reconciler_publishes_again_after_an_out_of_band_detach() {
    let mut config = MockDriverConfig::default();
    config
        .controller_capabilities
        .push(ControllerRpc::ListVolumesPublishedNodes);
    let cluster = Cluster::start(config).await;
    let _attacher = cluster.attacher_with(&["--reconcile-sync=200ms"]);
    cluster.attached().await;
    let publishes = cluster.driver.call_count(Method::ControllerPublishVolume);

    // The backend forgets the attachment behind Kubernetes' back.
    cluster
        .driver
        .insert_volume(MockVolume::new("vol-1", 1 << 30));
    assert!(!cluster.published());
    eventually("vol-1 published again", TIMEOUT, async || {
        cluster.published().then_some(())
    })
    .await;
    assert!(cluster.driver.call_count(Method::ControllerPublishVolume) > publishes);
    assert!(cluster.driver.call_count(Method::ListVolumes) > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_volumes_are_attached_and_detached() {
    const COUNT: usize = 200;
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    for i in 0..COUNT {
        cluster
            .add_volume(&format!("pv-m{i}"), &format!("vol-m{i}"))
            .await;
    }
    let _attacher = cluster.attacher_with(&["--kube-api-qps=200", "--kube-api-burst=400"]);
    let mut names = Vec::new();
    for i in 0..COUNT {
        let pv = format!("pv-m{i}");
        names.push(
            attach_detach::attach(&cluster.client, &pv, DEFAULT_NODE_ID)
                .await
                .unwrap(),
        );
    }
    let vas = Api::<VolumeAttachment>::all(cluster.client.clone());
    let long = Duration::from_mins(1);
    eventually("every VA attached", long, async || {
        let list = vas.list(&ListParams::default()).await.ok()?;
        let attached = list
            .items
            .iter()
            .filter(|va| va.status.as_ref().is_some_and(|s| s.attached))
            .count();
        (attached == COUNT).then_some(())
    })
    .await;
    assert_eq!(
        cluster.driver.call_count(Method::ControllerPublishVolume),
        COUNT,
        "one publish per volume"
    );
    for name in &names {
        vas.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("every VA gone", long, async || {
        vas.list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    assert_eq!(
        cluster.driver.call_count(Method::ControllerUnpublishVolume),
        COUNT,
        "one unpublish per volume"
    );
}
