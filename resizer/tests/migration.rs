//! Whole-binary tests of CSI migration (spec sidecars.md §2.3, §2.4 step 7): `csi-resizer` for
//! a driver in-tree volumes migrated to (`ebs.csi.aws.com`) expands an in-tree
//! `awsElasticBlockStore` PersistentVolume whose claim kube-controller-manager delegated to it,
//! through csi-translation-lib's translation, with the call's metrics labelled `migrated`; a
//! volume the translation refuses gets a clear error on its claim.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{AWSElasticBlockStoreVolumeSource, PersistentVolume};
use kube::api::{Patch, PatchParams};
use proto::csi::v1::ControllerExpandVolumeRequest;
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;
use testbed_mock_csi::{Method, MockDriverConfig};
use testbed_support::wait::eventually;

use crate::support::{Cluster, TIMEOUT, condition_message, free_port};

const EBS: &str = "ebs.csi.aws.com";

/// Turns the PV into an in-tree EBS volume of `volume_id`.
fn in_tree(volume_id: &'static str) -> impl FnOnce(&mut PersistentVolume) {
    move |pv| {
        let spec = pv.spec.as_mut().unwrap();
        spec.csi = None;
        spec.aws_elastic_block_store = Some(AWSElasticBlockStoreVolumeSource {
            volume_id: volume_id.into(),
            fs_type: Some("ext4".into()),
            ..Default::default()
        });
    }
}

/// What kube-controller-manager's expand controller writes on a claim whose in-tree volume
/// is migrated: the CSI driver as its resizer.
async fn delegate(cluster: &Cluster, claim: &str) {
    let annotate =
        json!({"metadata": {"annotations": {"volume.kubernetes.io/storage-resizer": EBS}}});
    cluster
        .claims()
        .patch(claim, &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_tree_ebs_volume_is_expanded_as_its_translation_and_labelled_migrated() {
    let cluster = Cluster::start_named(
        ApiServer::new(),
        EBS,
        MockDriverConfig::default(),
        in_tree("aws://us-east-1a/vol-1"),
    )
    .await;
    delegate(&cluster, "data").await;
    // A second in-tree claim whose volume ID names no EBS volume.
    cluster.add_claim(2, in_tree("aws://us-east-1a/bad")).await;
    delegate(&cluster, "data-2").await;
    let http = free_port();
    let _resizer = cluster.resizer(&[&format!("--http-endpoint={http}")]);
    cluster.request("2Gi").await;
    cluster.request_of("data-2", "2Gi").await;

    // The mock answers as csi-driver-host-path: node expansion required.
    cluster.resize_status_reaches("NodeResizePending").await;
    let requests = cluster
        .driver
        .requests::<ControllerExpandVolumeRequest>(Method::ControllerExpandVolume);
    assert_eq!(
        requests.len(),
        1,
        "only the translatable volume reaches the driver"
    );
    assert_eq!(requests[0].volume_id, "vol-1");
    let pv = eventually("the PV's capacity at 2Gi", TIMEOUT, async || {
        let pv = cluster.volume().await;
        let size = pv
            .spec
            .as_ref()?
            .capacity
            .as_ref()?
            .get("storage")?
            .0
            .clone();
        (size == "2Gi").then_some(pv)
    })
    .await;
    let spec = pv.spec.unwrap();
    assert!(
        spec.csi.is_none() && spec.aws_elastic_block_store.is_some(),
        "the translation is the resizer's, never written back"
    );

    let refused = eventually("data-2's ControllerResizeError", TIMEOUT, async || {
        let claim = cluster.claims().get("data-2").await.ok()?;
        condition_message(&claim, "ControllerResizeError")
    })
    .await;
    assert!(
        refused.contains(
            "failed to translate persistent volume: failed to translate Kubernetes ID to EBS Volume ID Invalid format for AWS volume (aws://us-east-1a/bad)"
        ),
        "{refused}"
    );

    let body = eventually("the expansion in /metrics", TIMEOUT, async || {
        let response =
            testbed_support::http_client::get(http, "/metrics", Duration::from_secs(5))
                .await
                .ok()?;
        let series = format!(
            "csi_sidecar_operations_seconds_count{{driver_name=\"{EBS}\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Controller/ControllerExpandVolume\",migrated=\"true\"}} 1"
        );
        response.body.contains(&series).then_some(response.body)
    })
    .await;
    assert!(
        body.contains("method_name=\"/csi.v1.Identity/Probe\",migrated=\"false\""),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_of_no_migrated_plugin_delegated_to_the_driver_gets_a_clear_event() {
    let cluster = Cluster::start_named(ApiServer::new(), EBS, MockDriverConfig::default(), |pv| {
        let spec = pv.spec.as_mut().unwrap();
        spec.csi = None;
        spec.host_path = Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: "/data".into(),
            ..Default::default()
        });
    })
    .await;
    delegate(&cluster, "data").await;
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;
    let failed = cluster.event("VolumeResizeFailed").await;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert!(
        failed.message.as_deref().is_some_and(|m| m.contains(
            "failed to translate persistent volume: could not find in-tree plugin translation logic for \"pv-1\""
        )),
        "{:?}",
        failed.message
    );
    assert_eq!(cluster.driver.call_count(Method::ControllerExpandVolume), 0);
}
