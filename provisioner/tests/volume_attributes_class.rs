//! Whole-binary tests of VolumeAttributesClass on create (spec provisioner.md §4.3 step 14,
//! §6.6): the class's parameters reach CreateVolume as `mutable_parameters`, the PV names the
//! class and carries the controller-modify secret annotations csi-resizer reads, and every way
//! the class can be unusable is a `ProvisioningFailed` Event on the claim.

#![allow(
    clippy::unwrap_used,
    reason = "shared assertion helpers of the tests panic on failure"
)]

use std::collections::HashMap;
use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use proto::csi::v1::CreateVolumeRequest;
use testbed_mock_csi::{ControllerRpc, Method, MockDriverConfig};

/// Generous: the tests run in parallel on small CI machines.
const SHORT: Duration = Duration::from_secs(30);

fn modifying_driver() -> MockDriverConfig {
    let mut config = driver_config();
    config
        .controller_capabilities
        .push(ControllerRpc::ModifyVolume);
    config
}

async fn create_vac(cluster: &Cluster, name: &str, driver: &str) {
    let class = VolumeAttributesClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        driver_name: driver.into(),
        parameters: Some(string_map(&[("iops", "300")])),
    };
    Api::<VolumeAttributesClass>::all(cluster.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}

async fn create_claim_with_vac(cluster: &Cluster, name: &str, vac: &str) {
    let mut claim = claim(name, "fast", "1Gi");
    claim.spec.as_mut().unwrap().volume_attributes_class_name = Some(vac.into());
    cluster
        .claims()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

/// The message of the first `ProvisioningFailed` Event.
async fn failure(cluster: &Cluster) -> String {
    cluster
        .first_event("ProvisioningFailed", SHORT)
        .await
        .message
        .unwrap()
}

#[tokio::test]
async fn class_parameters_reach_the_driver_and_the_pv_names_the_class() {
    let cluster = Cluster::with_driver(modifying_driver()).await;
    let mut fast = class("fast", "Immediate");
    fast.parameters = Some(string_map(&[
        (
            "csi.storage.k8s.io/controller-modify-secret-name",
            "modify-${pvc.name}",
        ),
        (
            "csi.storage.k8s.io/controller-modify-secret-namespace",
            "${pvc.namespace}",
        ),
    ]));
    cluster.create_class(fast).await;
    create_vac(&cluster, "gold", DRIVER).await;
    let _provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    create_claim_with_vac(&cluster, "vac", "gold").await;

    let (_, volume) = cluster.bound("vac", SHORT).await;
    let requests: Vec<CreateVolumeRequest> = cluster.driver.requests(Method::CreateVolume);
    assert_eq!(
        requests[0].mutable_parameters,
        HashMap::from([("iops".to_owned(), "300".to_owned())])
    );
    assert!(requests[0].parameters.is_empty(), "secret keys stripped");
    let handle = &volume
        .spec
        .as_ref()
        .unwrap()
        .csi
        .as_ref()
        .unwrap()
        .volume_handle;
    assert_eq!(
        cluster.driver.volume(handle).unwrap().mutable_parameters,
        string_map(&[("iops", "300")])
    );
    assert_eq!(
        volume
            .spec
            .as_ref()
            .unwrap()
            .volume_attributes_class_name
            .as_deref(),
        Some("gold")
    );
    // The keys csi-resizer reads for ControllerModifyVolume (csi_common::secrets).
    let annotations = volume.metadata.annotations.unwrap();
    assert_eq!(
        annotations[csi_common::secrets::ANN_CONTROLLER_MODIFY_SECRET_NAME],
        "modify-vac"
    );
    assert_eq!(
        annotations[csi_common::secrets::ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE],
        NAMESPACE
    );
}

#[tokio::test]
async fn a_class_of_another_driver_is_a_provisioning_failure() {
    let cluster = Cluster::with_driver(modifying_driver()).await;
    cluster.create_class(class("fast", "Immediate")).await;
    create_vac(&cluster, "silver", "other.csi.k8s.io").await;
    let _provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    create_claim_with_vac(&cluster, "vac", "silver").await;
    assert_eq!(
        failure(&cluster).await,
        format!(
            "VAC silver referenced in PVC is for driver other.csi.k8s.io which does not match driver name {DRIVER}"
        )
    );
    assert_eq!(cluster.driver.call_count(Method::CreateVolume), 0);
}

#[tokio::test]
async fn a_driver_without_modify_volume_is_a_provisioning_failure() {
    let cluster = Cluster::start().await;
    cluster.create_class(class("fast", "Immediate")).await;
    create_vac(&cluster, "gold", DRIVER).await;
    let _provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    create_claim_with_vac(&cluster, "vac", "gold").await;
    assert_eq!(
        failure(&cluster).await,
        "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is not reported"
    );
    assert_eq!(cluster.driver.call_count(Method::CreateVolume), 0);
}

#[tokio::test]
async fn a_missing_class_is_retried_until_it_exists() {
    let cluster = Cluster::with_driver(modifying_driver()).await;
    cluster.create_class(class("fast", "Immediate")).await;
    let _provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    create_claim_with_vac(&cluster, "vac", "gold").await;
    assert_eq!(
        failure(&cluster).await,
        r#"volumeattributesclasses.storage.k8s.io "gold" not found"#
    );
    assert_eq!(cluster.driver.call_count(Method::CreateVolume), 0);

    create_vac(&cluster, "gold", DRIVER).await;
    let (_, volume) = cluster.bound("vac", SHORT).await;
    assert_eq!(
        volume.spec.unwrap().volume_attributes_class_name.as_deref(),
        Some("gold")
    );
}

#[tokio::test]
async fn with_the_gate_off_the_class_is_ignored() {
    let cluster = Cluster::start().await;
    cluster.create_class(class("fast", "Immediate")).await;
    let _provisioner = cluster.provisioner(
        "csi-provisioner-0",
        &["--feature-gates=VolumeAttributesClass=false"],
    );
    create_claim_with_vac(&cluster, "vac", "gold").await;
    let (_, volume) = cluster.bound("vac", SHORT).await;
    let requests: Vec<CreateVolumeRequest> = cluster.driver.requests(Method::CreateVolume);
    assert!(requests[0].mutable_parameters.is_empty());
    assert_eq!(volume.spec.unwrap().volume_attributes_class_name, None);
}
