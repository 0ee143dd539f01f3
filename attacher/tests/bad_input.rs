//! Whole-binary tests of bad input (issue 10): each case ends as a clear `status.attachError`
//! and a Warning event, is retried with backoff, and never leaves a finalizer on a
//! VolumeAttachment or PersistentVolume that was never attached, so deleting it is not blocked.
//! A driver's publish context that the API server cannot store, and a driver error too long
//! for it, are saved as attach errors too; a publish Secret missing at detach time is a
//! `status.detachError` until it is back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, NFSVolumeSource, PersistentVolumeSpec, Secret,
};
use k8s_openapi::api::storage::v1::CSINode;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use testbed_cluster::kcm::attach_detach;
use testbed_mock_csi::{DEFAULT_NODE_ID, Fault, Method, MockDriverConfig};
use testbed_support::wait::eventually;
use tonic::Code;

use crate::support::{
    Cluster, PUBLISH_SECRET, TIMEOUT, csi_node, has_our_finalizer, pv_source,
    pv_with_publish_secret, pv_with_spec,
};

/// Waits until the Warning about `name` has been recorded at least twice: the attach was
/// retried (the event correlator counts identical events on one Event).
async fn warned_twice(cluster: &Cluster, name: &str) {
    eventually(
        &format!("a repeated FailedAttachVolume about {name}"),
        TIMEOUT,
        async || {
            let event = cluster
                .events("FailedAttachVolume")
                .await
                .into_iter()
                .find(|e| e.involved_object.name.as_deref() == Some(name))?;
            (event.type_.as_deref() == Some("Warning") && event.count.unwrap_or(1) >= 2)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_va_naming_a_missing_pv_fails_without_a_finalizer_until_the_pv_exists() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let _attacher = cluster.attacher();
    let name = cluster.create_va("va-late", pv_source("pv-late")).await;

    let error = cluster.attach_error(&name).await;
    assert_eq!(
        error.message.as_deref(),
        Some(r#"persistentvolume "pv-late" not found"#)
    );
    warned_twice(&cluster, &name).await;
    let va = cluster.attachments().get(&name).await.unwrap();
    assert!(!has_our_finalizer(&va.metadata));

    cluster.add_volume("pv-late", "vol-late").await;
    attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    assert!(cluster.published_volume("vol-late"));
}

#[tokio::test(flavor = "multi_thread")]
async fn pvs_without_a_csi_source_fail_with_clear_errors_and_their_vas_stay_deletable() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster
        .add_pv(pv_with_spec(
            "pv-nfs",
            PersistentVolumeSpec {
                nfs: Some(NFSVolumeSource {
                    server: "nfs.example.com".into(),
                    path: "/export".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ))
        .await;
    // An in-tree volume CSI migration translates, but whose ID names no EBS volume.
    cluster
        .add_pv(pv_with_spec(
            "pv-ebs",
            PersistentVolumeSpec {
                aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                    volume_id: "aws://us-east-1a/not-a-volume".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ))
        .await;
    let _attacher = cluster.attacher();
    let nfs = cluster.create_va("va-nfs", pv_source("pv-nfs")).await;
    let ebs = cluster.create_va("va-ebs", pv_source("pv-ebs")).await;

    assert_eq!(
        cluster.attach_error(&nfs).await.message.as_deref(),
        Some("pv spec contained non-csi source that was not migrated"),
        "upstream's words"
    );
    assert_eq!(
        cluster.attach_error(&ebs).await.message.as_deref(),
        Some(
            "failed to translate in tree pv to CSI: failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://us-east-1a/not-a-volume)"
        ),
        "external-attacher's and csi-translation-lib's words"
    );
    warned_twice(&cluster, &nfs).await;
    warned_twice(&cluster, &ebs).await;
    for (va, pv) in [(&nfs, "pv-nfs"), (&ebs, "pv-ebs")] {
        let va_object = cluster.attachments().get(va).await.unwrap();
        assert!(!has_our_finalizer(&va_object.metadata), "{va}");
        let pv_object = cluster.volumes().get(pv).await.unwrap();
        assert!(!has_our_finalizer(&pv_object.metadata), "{pv}");
        cluster.delete_va(va).await;
    }
    assert_eq!(
        cluster.driver.call_count(Method::ControllerPublishVolume),
        0
    );
    assert_eq!(
        cluster.driver.call_count(Method::ControllerUnpublishVolume),
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_csinode_without_the_driver_fails_until_the_driver_registers() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let csi_nodes = Api::<CSINode>::all(cluster.client.clone());
    let drivers = |names: &[&str]| {
        Patch::Merge(serde_json::json!({"spec": {"drivers": csi_node(names).spec.drivers}}))
    };
    csi_nodes
        .patch(
            DEFAULT_NODE_ID,
            &PatchParams::default(),
            &drivers(&["other.csi.k8s.io"]),
        )
        .await
        .unwrap();
    let _attacher = cluster.attacher();
    let name = cluster.request_attach("pv-1").await;

    assert_eq!(
        cluster.attach_error(&name).await.message.as_deref(),
        Some("CSINode mock-node does not contain driver hostpath.csi.k8s.io"),
        "upstream's words"
    );
    warned_twice(&cluster, &name).await;
    let va = cluster.attachments().get(&name).await.unwrap();
    assert!(!has_our_finalizer(&va.metadata));
    let pv = cluster.volumes().get("pv-1").await.unwrap();
    assert!(!has_our_finalizer(&pv.metadata));
    assert_eq!(
        cluster.driver.call_count(Method::ControllerPublishVolume),
        0
    );

    // node-driver-registrar registers the driver; the next retry publishes.
    csi_nodes
        .patch(
            DEFAULT_NODE_ID,
            &PatchParams::default(),
            &drivers(&["other.csi.k8s.io", support::DRIVER]),
        )
        .await
        .unwrap();
    attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    assert!(cluster.published());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_publish_context_becomes_attachment_metadata_and_an_empty_one_is_valid() {
    let config = MockDriverConfig {
        publish_context: BTreeMap::from([("devicePath".to_owned(), "/dev/mock-1".to_owned())]),
        ..MockDriverConfig::default()
    };
    let cluster = Cluster::start(config).await;
    cluster.add_volume("pv-2", "vol-2").await;
    let _attacher = cluster.attacher();
    let with_context = cluster.attached_pv("pv-1").await;
    assert_eq!(
        with_context.status.unwrap().attachment_metadata,
        Some(BTreeMap::from([(
            "devicePath".to_owned(),
            "/dev/mock-1".to_owned()
        )]))
    );

    cluster
        .driver
        .update_config(|config| config.publish_context.clear());
    let without = cluster.attached_pv("pv-2").await;
    let status = without.status.unwrap();
    assert!(status.attached);
    assert!(
        status
            .attachment_metadata
            .is_none_or(|metadata| metadata.is_empty())
    );
    assert!(status.attach_error.is_none());
}

/// kube-apiserver refuses a VolumeAttachment status whose `attachmentMetadata` has more than
/// 256 KiB of keys and values (`maxAttachedVolumeMetadataSize`); the CSI spec makes the
/// publish context opaque, so its size is the only way it can be malformed for the CO.
#[tokio::test(flavor = "multi_thread")]
async fn a_publish_context_too_large_for_the_api_server_is_an_attach_error_and_still_detaches() {
    let config = MockDriverConfig {
        publish_context: BTreeMap::from([("blob".to_owned(), "x".repeat(300 * 1024))]),
        ..MockDriverConfig::default()
    };
    let cluster = Cluster::start(config).await;
    let _attacher = cluster.attacher();
    let name = cluster.request_attach("pv-1").await;

    let error = cluster.attach_error(&name).await;
    assert_eq!(
        error.message.as_deref(),
        Some(
            "the driver's publish context has 307204 bytes of keys and values, more than the 262144 that status.attachmentMetadata of a VolumeAttachment can hold"
        )
    );
    warned_twice(&cluster, &name).await;
    cluster
        .driver
        .wait_for_calls(Method::ControllerPublishVolume, 2, TIMEOUT)
        .await
        .unwrap();
    let va = cluster.attachments().get(&name).await.unwrap();
    assert!(!va.status.unwrap().attached);
    // The backend did attach it: the finalizer stays so that deleting the VA unpublishes.
    assert!(has_our_finalizer(&va.metadata));
    assert!(cluster.published());

    cluster.delete_va(&name).await;
    assert!(!cluster.published());
}

/// kube-apiserver refuses an `attachError.message` over 1024 bytes (`maxVolumeErrorMessageSize`)
/// and with it the whole status write, while the CSI spec puts no limit on a driver's error
/// message.
#[tokio::test(flavor = "multi_thread")]
async fn a_driver_error_longer_than_the_api_server_accepts_is_saved_cut_short() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster.driver.inject(Fault::error(
        Method::ControllerPublishVolume,
        Code::Internal,
        "e".repeat(2000),
    ));
    let _attacher = cluster.attacher();
    let name = cluster.request_attach("pv-1").await;
    let message = cluster.attach_error(&name).await.message.unwrap();
    assert_eq!(message.len(), 1024);
    assert!(message.starts_with("rpc error: code = Internal desc = eee"));
    cluster.driver.clear_faults();
    attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_publish_secret_gone_before_detach_is_a_detach_error_until_it_is_back() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster
        .add_pv(pv_with_publish_secret("pv-s", "vol-s"))
        .await;
    cluster.create_publish_secret().await;
    let _attacher = cluster.attacher();
    let name = cluster.attached_pv("pv-s").await.metadata.name.unwrap();
    Api::<Secret>::namespaced(cluster.client.clone(), "default")
        .delete(PUBLISH_SECRET, &DeleteParams::default())
        .await
        .unwrap();

    cluster.request_delete(&name).await;
    let error = eventually("status.detachError", TIMEOUT, async || {
        cluster
            .attachments()
            .get(&name)
            .await
            .ok()?
            .status?
            .detach_error
    })
    .await;
    assert_eq!(
        error.message.as_deref(),
        Some(
            r#"failed to load secret "default/publish-secret": secrets "publish-secret" not found"#
        )
    );
    let warning = cluster.event_about(&name, "FailedDetachVolume").await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        cluster.published_volume("vol-s"),
        "not unpublished without its secrets"
    );

    cluster.create_publish_secret().await;
    attach_detach::wait_detached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    assert!(!cluster.published_volume("vol-s"));
}
