//! Whole-binary tests of CSI migration (spec sidecars.md §1.2 step 6, §1.4): `csi-attacher` for
//! a driver in-tree volumes migrated to (`ebs.csi.aws.com`) attaches and detaches an in-tree
//! `awsElasticBlockStore` PersistentVolume as csi-translation-lib translates it, labels its CSI
//! call metrics `migrated`, and lets go of such a PV once its migration is rolled back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use proto::csi::v1::volume_capability::AccessType;
use proto::csi::v1::volume_capability::MountVolume;
use testbed_cluster::kcm::attach_detach;
use testbed_mock_csi::{DEFAULT_NODE_ID, MockDriverConfig, MockVolume};
use testbed_support::wait::eventually;

use crate::support::{Cluster, TIMEOUT, finalizers, free_port, metrics, pv_source};

const EBS: &str = "ebs.csi.aws.com";
const EBS_FINALIZER: &str = "external-attacher/ebs-csi-aws-com";
const MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";

/// An in-tree EBS PV as a cluster from before CSI migration holds it, with the annotation
/// kube-controller-manager adds while the plugin is migrated.
fn in_tree_pv(name: &str, volume_id: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(BTreeMap::from([
                (
                    "pv.kubernetes.io/provisioned-by".into(),
                    "kubernetes.io/aws-ebs".into(),
                ),
                (MIGRATED_TO.into(), EBS.into()),
            ])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: volume_id.into(),
                fs_type: Some("xfs".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The `_count` of `method`'s OK calls labelled `migrated`, from /metrics.
fn count(body: &str, method: &str, migrated: &str) -> Option<u64> {
    let series = format!(
        "csi_sidecar_operations_seconds_count{{driver_name=\"{EBS}\",grpc_status_code=\"OK\",method_name=\"/csi.v1.{method}\",migrated=\"{migrated}\"}} "
    );
    body.lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|n| n.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_tree_ebs_volume_is_attached_and_detached_as_its_translation_and_labelled_migrated() {
    let cluster = Cluster::start_named(EBS, MockDriverConfig::default()).await;
    cluster
        .driver
        .insert_volume(MockVolume::new("vol-0abc", 1 << 30));
    cluster
        .add_pv(in_tree_pv("pv-ebs", "aws://us-east-1a/vol-0abc"))
        .await;
    let http = free_port();
    let _attacher = cluster.attacher_with(&[&format!("--http-endpoint={http}")]);
    let name = cluster.create_va("va-ebs", pv_source("pv-ebs")).await;

    attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    let request = cluster.last_publish_of("vol-0abc");
    assert_eq!(request.node_id, DEFAULT_NODE_ID);
    assert_eq!(
        request.volume_context,
        HashMap::from([("partition".to_owned(), "0".to_owned())]),
        "csi-translation-lib's volume attributes of an EBS volume"
    );
    assert_eq!(
        request.volume_capability.unwrap().access_type,
        Some(AccessType::Mount(MountVolume {
            fs_type: "xfs".into(),
            ..Default::default()
        }))
    );
    let pv = cluster.volumes().get("pv-ebs").await.unwrap();
    assert!(
        finalizers(&pv.metadata).contains(&EBS_FINALIZER.to_owned()),
        "{:?}",
        pv.metadata.finalizers
    );
    let spec = pv.spec.unwrap();
    assert!(
        spec.csi.is_none() && spec.aws_elastic_block_store.is_some(),
        "the translation is the attacher's, never written back"
    );

    cluster.delete_va(&name).await;
    let unpublish = cluster.unpublish_requests();
    assert_eq!(unpublish.len(), 1);
    assert_eq!(unpublish[0].volume_id, "vol-0abc");

    // Every call after start-up carries `migrated`: "true" only for the translated volume's.
    let body = eventually("the unpublish in /metrics", TIMEOUT, async || {
        metrics(http)
            .await
            .filter(|body| count(body, "Controller/ControllerUnpublishVolume", "true").is_some())
    })
    .await;
    assert_eq!(
        count(&body, "Controller/ControllerPublishVolume", "true"),
        Some(1),
        "{body}"
    );
    assert_eq!(count(&body, "Identity/Probe", "false"), Some(1), "{body}");
    assert!(
        !body.contains("GetPluginInfo"),
        "the calls before the label are not served, as upstream's first metrics manager: {body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_tree_pv_whose_migration_is_rolled_back_loses_the_finalizer_once_unused() {
    let cluster = Cluster::start_named(EBS, MockDriverConfig::default()).await;
    cluster
        .driver
        .insert_volume(MockVolume::new("vol-0def", 1 << 30));
    cluster.add_pv(in_tree_pv("pv-ebs", "vol-0def")).await;
    let _attacher = cluster.attacher();
    let name = cluster.create_va("va-ebs", pv_source("pv-ebs")).await;
    attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        cluster.last_publish_of("vol-0def").volume_id,
        "vol-0def",
        "an EBS volume ID that is not an aws:// URL is the handle as it is"
    );

    // Migration turned off: kube-controller-manager takes the annotation away and the in-tree
    // plugin takes over. While a VolumeAttachment names the PV, the finalizer stays.
    let unannotate = serde_json::json!({"metadata": {"annotations": {MIGRATED_TO: null}}});
    cluster
        .volumes()
        .patch(
            "pv-ebs",
            &PatchParams::default(),
            &Patch::Merge(&unannotate),
        )
        .await
        .unwrap();
    cluster.delete_va(&name).await;
    eventually(
        "the finalizer off the rolled-back PV",
        TIMEOUT,
        async || {
            let pv = cluster.volumes().get("pv-ebs").await.ok()?;
            (!finalizers(&pv.metadata).contains(&EBS_FINALIZER.to_owned())).then_some(())
        },
    )
    .await;
    let pv = cluster.volumes().get("pv-ebs").await.unwrap();
    assert!(
        pv.metadata.deletion_timestamp.is_none(),
        "only released, not deleted"
    );
}
