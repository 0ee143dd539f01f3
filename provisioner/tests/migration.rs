//! Whole-binary test of CSI migration in the volume controller (spec provisioner.md §6.5):
//! `csi-provisioner` for a driver in-tree volumes migrated to (`ebs.csi.aws.com`) deletes a
//! Released in-tree `awsElasticBlockStore` PersistentVolume that kube-controller-manager left
//! to it (`pv.kubernetes.io/migrated-to`), through csi-translation-lib's translation, with the
//! DeleteVolume labelled `migrated`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeSpec,
    PersistentVolumeStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proto::csi::v1::DeleteVolumeRequest;
use testbed_mock_csi::{Method, MockDriverConfig, MockVolume};

use crate::support::Cluster;

const EBS: &str = "ebs.csi.aws.com";
const SHORT: Duration = Duration::from_secs(30);

/// A Released in-tree EBS PV of a claim that is gone, as a cluster from before CSI migration
/// holds it once the claim is deleted, with the annotations kube-controller-manager sets.
fn released_in_tree_pv(name: &str, volume_id: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(BTreeMap::from([
                (
                    "pv.kubernetes.io/provisioned-by".into(),
                    "kubernetes.io/aws-ebs".into(),
                ),
                ("pv.kubernetes.io/migrated-to".into(), EBS.into()),
            ])),
            finalizers: Some(vec!["kubernetes.io/pv-protection".into()]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: volume_id.into(),
                fs_type: Some("ext4".into()),
                ..Default::default()
            }),
            claim_ref: Some(ObjectReference {
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some("default".into()),
                name: Some("gone".into()),
                uid: Some("0d6b3f9e-0000-4000-8000-000000000001".into()),
                ..Default::default()
            }),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            storage_class_name: Some("gp2".into()),
            ..Default::default()
        }),
        status: Some(PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn a_released_in_tree_ebs_volume_is_deleted_as_its_translation_and_labelled_migrated() {
    let cluster = Cluster::with_driver(MockDriverConfig {
        driver_name: EBS.into(),
        ..MockDriverConfig::default()
    })
    .await;
    cluster
        .driver
        .insert_volume(MockVolume::new("vol-0abc", 1 << 30));
    cluster
        .server
        .put_object(&released_in_tree_pv(
            "pvc-in-tree",
            "aws://us-east-1a/vol-0abc",
        ))
        .unwrap();
    let provisioner = cluster.provisioner("csi-provisioner-0", &[]);

    cluster.volume_gone("pvc-in-tree", SHORT).await;
    let deletes: Vec<DeleteVolumeRequest> = cluster.driver.requests(Method::DeleteVolume);
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].volume_id, "vol-0abc");
    assert!(
        cluster.driver.volumes().is_empty(),
        "the EBS volume is gone"
    );
    let series = format!(
        "csi_sidecar_operations_seconds_count{{driver_name=\"{EBS}\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Controller/DeleteVolume\",migrated=\"true\"}}"
    );
    assert_eq!(provisioner.metric(&series).await, Some(1.0));
    assert_eq!(cluster.driver.call_count(Method::DeleteVolume), 1);
}
