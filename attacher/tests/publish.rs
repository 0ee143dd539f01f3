//! Whole-binary tests of what `csi-attacher` sends in ControllerPublishVolume and
//! ControllerUnpublishVolume (spec sidecars.md §1.4 attach flow step 3, §5.7), decoded from the
//! mock driver's call record: inline volumes, publish secrets, readonly, block and mount
//! capabilities, access modes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::PersistentVolumeSpec;
use k8s_openapi::api::storage::v1::VolumeAttachmentSource;
use kube::api::ListParams;
use proto::csi::v1::ControllerPublishVolumeRequest;
use proto::csi::v1::volume_capability::access_mode::Mode;
use proto::csi::v1::volume_capability::{AccessType, BlockVolume, MountVolume};
use testbed_cluster::kcm::attach_detach;
use testbed_mock_csi::{ControllerRpc, DEFAULT_NODE_ID, Method, MockDriverConfig, MockVolume};

use crate::support::{
    Cluster, FINALIZER, TIMEOUT, csi_source, finalizers, has_our_finalizer, pv,
    pv_with_publish_secret, pv_with_spec,
};

fn mode(request: &ControllerPublishVolumeRequest) -> Mode {
    let capability = request.volume_capability.as_ref().unwrap();
    Mode::try_from(capability.access_mode.unwrap().mode).unwrap()
}

fn access(request: &ControllerPublishVolumeRequest) -> AccessType {
    request
        .volume_capability
        .clone()
        .unwrap()
        .access_type
        .unwrap()
}

fn mount(fs_type: &str, flags: &[&str]) -> AccessType {
    AccessType::Mount(MountVolume {
        fs_type: fs_type.into(),
        mount_flags: flags.iter().map(|f| (*f).to_owned()).collect(),
        volume_mount_group: String::new(),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inline_volume_is_published_from_its_spec_with_a_finalizer_only_on_the_va() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster
        .driver
        .insert_volume(MockVolume::new("vol-inline", 1 << 30));
    let _attacher = cluster.attacher();
    let spec = PersistentVolumeSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        csi: Some(k8s_openapi::api::core::v1::CSIPersistentVolumeSource {
            volume_attributes: Some(BTreeMap::from([("share".into(), "inline".into())])),
            ..csi_source("vol-inline")
        }),
        ..Default::default()
    };
    let name = cluster
        .create_va(
            "va-inline",
            VolumeAttachmentSource {
                inline_volume_spec: Some(spec),
                persistent_volume_name: None,
            },
        )
        .await;

    let va = attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(finalizers(&va.metadata), [FINALIZER]);
    assert!(cluster.published_volume("vol-inline"));
    let request = cluster.last_publish_of("vol-inline");
    assert_eq!(request.node_id, DEFAULT_NODE_ID);
    assert_eq!(
        request.volume_context,
        HashMap::from([("share".to_owned(), "inline".to_owned())])
    );
    assert_eq!(access(&request), mount("ext4", &[]));
    assert_eq!(mode(&request), Mode::SingleNodeMultiWriter);
    assert!(!request.readonly);
    let pvs = cluster
        .volumes()
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        pvs.items.iter().all(|pv| !has_our_finalizer(&pv.metadata)),
        "an inline volume has no PV to protect"
    );

    cluster.delete_va(&name).await;
    assert!(!cluster.published_volume("vol-inline"));
    let unpublish = cluster.unpublish_requests();
    assert_eq!(unpublish.len(), 1);
    assert_eq!(unpublish[0].volume_id, "vol-inline");
    assert_eq!(unpublish[0].node_id, DEFAULT_NODE_ID);
}

#[tokio::test(flavor = "multi_thread")]
async fn publish_secrets_reach_publish_and_unpublish_and_a_missing_one_fails_until_it_exists() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster
        .add_pv(pv_with_publish_secret("pv-s", "vol-s"))
        .await;
    let _attacher = cluster.attacher();
    let name = cluster.request_attach("pv-s").await;

    let error = cluster.attach_error(&name).await;
    assert_eq!(
        error.message.as_deref(),
        Some(
            r#"failed to load secret "default/publish-secret": secrets "publish-secret" not found"#
        )
    );
    assert_eq!(error.error_code, None, "not a driver error");
    let warning = cluster.event_about(&name, "FailedAttachVolume").await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let va = cluster.attachments().get(&name).await.unwrap();
    assert!(!has_our_finalizer(&va.metadata), "nothing attached yet");
    let pv = cluster.volumes().get("pv-s").await.unwrap();
    assert!(!has_our_finalizer(&pv.metadata), "nothing attached yet");
    assert_eq!(
        cluster.driver.call_count(Method::ControllerPublishVolume),
        0
    );

    // Secrets are not watched: the retry with backoff finds it.
    cluster.create_publish_secret().await;
    attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    let want = HashMap::from([("password".to_owned(), "s3cret".to_owned())]);
    assert_eq!(cluster.last_publish_of("vol-s").secrets, want);

    // ControllerUnpublishVolume gets the same secrets (CSI spec: "secrets ... required by
    // plugin to complete controller unpublish volume request").
    cluster.delete_va(&name).await;
    let unpublish = cluster.unpublish_requests();
    assert_eq!(unpublish.len(), 1);
    assert_eq!(unpublish[0].secrets, want);
}

/// Attaches a readOnly RWO volume (`vol-ro`) and an RWOP volume (`vol-rwop`) through a driver
/// with `controller_capabilities` and returns their publish requests.
async fn publish_readonly_and_rwop(
    controller_capabilities: Vec<ControllerRpc>,
) -> (
    ControllerPublishVolumeRequest,
    ControllerPublishVolumeRequest,
) {
    let config = MockDriverConfig {
        controller_capabilities,
        ..MockDriverConfig::default()
    };
    let cluster = Cluster::start(config).await;
    let mut read_only = pv("pv-ro", "vol-ro");
    if let Some(csi) = read_only.spec.as_mut().and_then(|s| s.csi.as_mut()) {
        csi.read_only = Some(true);
    }
    cluster.add_pv(read_only).await;
    cluster
        .add_pv(pv_with_spec(
            "pv-rwop",
            PersistentVolumeSpec {
                access_modes: Some(vec!["ReadWriteOncePod".into()]),
                csi: Some(csi_source("vol-rwop")),
                ..Default::default()
            },
        ))
        .await;
    let _attacher = cluster.attacher();
    cluster.attached_pv("pv-ro").await;
    cluster.attached_pv("pv-rwop").await;
    (
        cluster.last_publish_of("vol-ro"),
        cluster.last_publish_of("vol-rwop"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_with_publish_readonly_and_single_node_multi_writer_gets_readonly_and_single_writer()
 {
    let (read_only, rwop) = publish_readonly_and_rwop(vec![
        ControllerRpc::PublishUnpublishVolume,
        ControllerRpc::PublishReadonly,
        ControllerRpc::SingleNodeMultiWriter,
    ])
    .await;
    assert!(read_only.readonly, "PV spec.csi.readOnly");
    assert_eq!(mode(&read_only), Mode::SingleNodeMultiWriter, "RWO");
    assert!(!rwop.readonly);
    assert_eq!(mode(&rwop), Mode::SingleNodeSingleWriter, "RWOP");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_without_publish_readonly_and_single_node_multi_writer_gets_neither() {
    let (read_only, rwop) =
        publish_readonly_and_rwop(vec![ControllerRpc::PublishUnpublishVolume]).await;
    // CSI spec, ControllerPublishVolumeRequest.readonly: "The CO MUST set this field to false
    // if SP does not have the PUBLISH_READONLY controller capability."
    assert!(!read_only.readonly);
    assert_eq!(mode(&read_only), Mode::SingleNodeWriter, "RWO");
    // Spec §5.7: RWOP falls back to SINGLE_NODE_WRITER, as upstream does.
    assert_eq!(mode(&rwop), Mode::SingleNodeWriter, "RWOP");
}

#[tokio::test(flavor = "multi_thread")]
async fn block_volumes_get_block_access_and_mount_volumes_the_default_fstype_and_mount_options() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster
        .add_pv(pv_with_spec(
            "pv-block",
            PersistentVolumeSpec {
                volume_mode: Some("Block".into()),
                csi: Some(csi_source("vol-block")),
                ..Default::default()
            },
        ))
        .await;
    cluster
        .add_pv(pv_with_spec(
            "pv-mount",
            PersistentVolumeSpec {
                volume_mode: Some("Filesystem".into()),
                mount_options: Some(vec!["noatime".into(), "discard".into()]),
                csi: Some(k8s_openapi::api::core::v1::CSIPersistentVolumeSource {
                    fs_type: None,
                    ..csi_source("vol-mount")
                }),
                ..Default::default()
            },
        ))
        .await;
    let _attacher = cluster.attacher_with(&["--default-fstype=xfs"]);
    for pv in ["pv-block", "pv-mount", "pv-1"] {
        cluster.attached_pv(pv).await;
    }
    assert_eq!(
        access(&cluster.last_publish_of("vol-block")),
        AccessType::Block(BlockVolume {})
    );
    assert_eq!(
        access(&cluster.last_publish_of("vol-mount")),
        mount("xfs", &["noatime", "discard"]),
        "no fsType: --default-fstype"
    );
    assert_eq!(
        access(&cluster.last_publish_of("vol-1")),
        mount("ext4", &[]),
        "the PV's fsType wins"
    );
}
