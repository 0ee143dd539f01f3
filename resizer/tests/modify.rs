//! Whole-binary tests of `csi-resizer`'s modify controller against the in-memory API server
//! and the mock CSI driver: a claim bound by hand gets a VolumeAttributesClass, and the
//! binary drives ControllerModifyVolume, the PV's class, the claim's status and the events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Secret};
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use proto::csi::v1::ControllerModifyVolumeRequest;
use serde_json::{Value, json};
use testbed_cluster::apiserver::{ApiServer, Config};
use testbed_mock_csi::{ControllerRpc, Fault, Method, MockDriverConfig, When};
use testbed_support::wait::eventually;
use tonic::Code;

use crate::support::*;

/// A driver that expands without node expansion and modifies.
fn modify_driver() -> MockDriverConfig {
    let mut config = no_node_expansion();
    config
        .controller_capabilities
        .push(ControllerRpc::ModifyVolume);
    config
}

async fn create_class(cluster: &Cluster, name: &str, iops: &str) {
    Api::<VolumeAttributesClass>::all(cluster.client.clone())
        .create(
            &PostParams::default(),
            &VolumeAttributesClass {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                driver_name: DRIVER.into(),
                parameters: Some(BTreeMap::from([("iops".to_owned(), iops.to_owned())])),
            },
        )
        .await
        .unwrap();
}

/// Sets `spec.volumeAttributesClassName` of claim `name` (`None`: null).
async fn set_class_of(cluster: &Cluster, name: &str, class: Option<&str>) {
    cluster
        .claims()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"volumeAttributesClassName": class}})),
        )
        .await
        .unwrap();
}

async fn set_class(cluster: &Cluster, class: Option<&str>) {
    set_class_of(cluster, "data", class).await;
}

/// `status.modifyVolumeStatus` as (status, target).
fn modify_status(claim: &PersistentVolumeClaim) -> Option<(String, String)> {
    let status = claim.status.as_ref()?.modify_volume_status.as_ref()?;
    Some((
        status.status.clone(),
        status
            .target_volume_attributes_class_name
            .clone()
            .unwrap_or_default(),
    ))
}

fn current_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()?
        .current_volume_attributes_class_name
        .as_deref()
}

/// The claim once its class `class` is applied: current class set, no modify status.
async fn applied(cluster: &Cluster, class: &str) -> PersistentVolumeClaim {
    cluster
        .claim_when(&format!("class {class} applied"), |c| {
            current_class(c) == Some(class) && modify_status(c).is_none()
        })
        .await
}

async fn status_reaches(cluster: &Cluster, status: &str, target: &str) -> PersistentVolumeClaim {
    cluster
        .claim_when(&format!("modifyVolumeStatus {status} {target}"), |c| {
            modify_status(c) == Some((status.to_owned(), target.to_owned()))
        })
        .await
}

fn modify_requests(cluster: &Cluster) -> Vec<ControllerModifyVolumeRequest> {
    cluster
        .driver
        .requests::<ControllerModifyVolumeRequest>(Method::ControllerModifyVolume)
}

fn volume_class(pv: &PersistentVolume) -> Option<&str> {
    pv.spec.as_ref()?.volume_attributes_class_name.as_deref()
}

/// The messages of the events with `reason`, once there is one containing `text`.
async fn event_with(cluster: &Cluster, reason: &str, text: &str) -> String {
    eventually(
        &format!("{reason} event with {text:?}"),
        TIMEOUT,
        async || {
            cluster
                .events(reason)
                .await
                .into_iter()
                .filter_map(|e| e.message)
                .find(|m| m.contains(text))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_class_is_applied_to_the_pv_then_the_claim_with_events() {
    let cluster = Cluster::start(modify_driver()).await;
    create_class(&cluster, "gold", "3000").await;
    let _resizer = cluster.resizer(&[]);
    set_class(&cluster, Some("gold")).await;

    let claim = applied(&cluster, "gold").await;
    assert_eq!(condition_types(&claim), Vec::<String>::new());
    assert_eq!(volume_class(&cluster.volume().await), Some("gold"));
    let requests = modify_requests(&cluster);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].volume_id, "vol-1");
    assert_eq!(
        requests[0].mutable_parameters,
        [("iops".to_owned(), "3000".to_owned())].into()
    );
    assert!(requests[0].secrets.is_empty());
    assert_eq!(
        cluster.driver.volume("vol-1").unwrap().mutable_parameters,
        BTreeMap::from([("iops".to_owned(), "3000".to_owned())])
    );
    assert_eq!(
        event_with(&cluster, "VolumeModify", "data").await,
        "external resizer is modifying volume data with vac gold"
    );
    assert_eq!(
        event_with(&cluster, "VolumeModifySuccessful", "data").await,
        "external resizer modified volume data with vac gold successfully"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_infeasible_class_is_reported_and_the_user_rolls_back_to_the_previous_one() {
    let cluster = Cluster::start(modify_driver()).await;
    create_class(&cluster, "gold", "3000").await;
    create_class(&cluster, "fast", "999999").await;
    let _resizer = cluster.resizer(&[]);
    set_class(&cluster, Some("gold")).await;
    applied(&cluster, "gold").await;

    cluster.driver.inject(Fault::error(
        Method::ControllerModifyVolume,
        Code::InvalidArgument,
        "iops 999999 is out of range",
    ));
    set_class(&cluster, Some("fast")).await;
    let claim = status_reaches(&cluster, "Infeasible", "fast").await;
    assert_eq!(current_class(&claim), Some("gold"));
    assert_eq!(
        condition_message(&claim, "ModifyingVolume").as_deref(),
        Some("Modifying volume to \"fast\" failed. Waiting for retry.")
    );
    assert_eq!(
        condition(&claim, "ModifyVolumeError").and_then(|c| c.reason.as_deref()),
        Some("InvalidArgument")
    );
    assert_eq!(
        condition_message(&claim, "ModifyVolumeError").as_deref(),
        Some("iops 999999 is out of range")
    );
    assert_eq!(
        event_with(&cluster, "VolumeModifyFailed", "out of range").await,
        "rpc error: code = InvalidArgument desc = iops 999999 is out of range"
    );
    assert_eq!(volume_class(&cluster.volume().await), Some("gold"));

    cluster.driver.clear_faults();
    set_class(&cluster, Some("gold")).await;
    let claim = applied(&cluster, "gold").await;
    assert_eq!(condition_types(&claim), Vec::<String>::new());
    let last = modify_requests(&cluster).pop().unwrap();
    assert_eq!(last.mutable_parameters["iops"], "3000");
}

#[tokio::test(flavor = "multi_thread")]
async fn rolling_back_to_no_class_after_an_infeasible_one_cancels_the_modification() {
    let cluster = Cluster::start(modify_driver()).await;
    create_class(&cluster, "fast", "999999").await;
    cluster.driver.inject(Fault::error(
        Method::ControllerModifyVolume,
        Code::InvalidArgument,
        "iops 999999 is out of range",
    ));
    let _resizer = cluster.resizer(&[]);
    set_class(&cluster, Some("fast")).await;
    status_reaches(&cluster, "Infeasible", "fast").await;

    // The API server allows clearing the class: none was ever applied.
    set_class(&cluster, None).await;
    assert_eq!(
        event_with(&cluster, "VolumeModifyCanceled", "").await,
        "Cancelled modify."
    );
    let claim = cluster
        .claim_when("no ModifyingVolume", |c| {
            !condition_types(c).contains(&"ModifyingVolume".to_owned())
        })
        .await;
    // The last attempt stays on record; nothing was applied.
    assert_eq!(
        modify_status(&claim),
        Some(("Infeasible".to_owned(), "fast".to_owned()))
    );
    assert_eq!(current_class(&claim), None);
    assert_eq!(volume_class(&cluster.volume().await), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_class_created_later_is_applied_once_it_exists() {
    let cluster = Cluster::start(modify_driver()).await;
    let _resizer = cluster.resizer(&[]);
    set_class(&cluster, Some("gold")).await;
    let claim = status_reaches(&cluster, "Pending", "gold").await;
    assert_eq!(condition_types(&claim), Vec::<String>::new());
    assert_eq!(
        event_with(&cluster, "VolumeModifyFailed", "gold").await,
        "VAC \"gold\" does not exist."
    );
    assert!(modify_requests(&cluster).is_empty());

    // The default --resync-period is 10m: the class' creation itself queues the claim.
    create_class(&cluster, "gold", "3000").await;
    applied(&cluster, "gold").await;
    assert_eq!(volume_class(&cluster.volume().await), Some("gold"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transient_error_is_retried_towards_the_same_class_and_both_calls_are_measured() {
    let cluster = Cluster::start(modify_driver()).await;
    create_class(&cluster, "gold", "3000").await;
    cluster.driver.inject(
        Fault::error(
            Method::ControllerModifyVolume,
            Code::Unavailable,
            "backend busy",
        )
        .on(When::FirstN(1)),
    );
    let http = testbed_support::process::free_port().unwrap();
    let _resizer = cluster.resizer(&[&format!("--http-endpoint={http}")]);
    set_class(&cluster, Some("gold")).await;
    applied(&cluster, "gold").await;
    assert_eq!(
        event_with(&cluster, "VolumeModifyFailed", "busy").await,
        "rpc error: code = Unavailable desc = backend busy. Still modifying to VAC gold"
    );
    assert_eq!(modify_requests(&cluster).len(), 2);

    let body = eventually("metrics", TIMEOUT, async || {
        let response = testbed_support::http_client::get(http, "/metrics", Duration::from_secs(5))
            .await
            .ok()?;
        (response.status == 200 && response.body.contains("ControllerModifyVolume"))
            .then_some(response.body)
    })
    .await;
    for series in [
        r#"grpc_status_code="Unavailable",method_name="/csi.v1.Controller/ControllerModifyVolume""#,
        r#"grpc_status_code="OK",method_name="/csi.v1.Controller/ControllerModifyVolume""#,
        r#"workqueue_retries_total{name="hostpath.csi.k8s.io-pvc"}"#,
    ] {
        assert!(body.contains(series), "{series} in\n{body}");
    }
}

async fn create_secret(cluster: &Cluster, name: &str, value: &str) {
    Api::<Secret>::namespaced(cluster.client.clone(), "default")
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("default".into()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(
                    "password".to_owned(),
                    ByteString(value.as_bytes().to_vec()),
                )])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn modify_secrets_come_from_the_pv_annotations_else_the_expand_secret_and_metadata_is_added()
{
    // Claim `data` (pv-1): the modify-secret annotations; claim `data-2` (pv-2): only an
    // expand secret.
    let cluster = Cluster::start_with_pv(modify_driver(), |pv| {
        pv.metadata.annotations = Some(BTreeMap::from([
            (
                "volume.kubernetes.io/controller-modify-secret-name".to_owned(),
                "modify-secret".to_owned(),
            ),
            (
                "volume.kubernetes.io/controller-modify-secret-namespace".to_owned(),
                "default".to_owned(),
            ),
        ]));
    })
    .await;
    cluster
        .add_claim(2, |pv| expand_secret(pv, "expand-secret"))
        .await;
    create_secret(&cluster, "modify-secret", "for-modify").await;
    create_secret(&cluster, "expand-secret", "for-expand").await;
    create_class(&cluster, "gold", "3000").await;
    let _resizer = cluster.resizer(&["--extra-modify-metadata"]);
    set_class_of(&cluster, "data", Some("gold")).await;
    set_class_of(&cluster, "data-2", Some("gold")).await;

    let requests = eventually("two ControllerModifyVolume calls", TIMEOUT, async || {
        let requests = modify_requests(&cluster);
        (requests.len() == 2).then_some(requests)
    })
    .await;
    let by_volume = |id: &str| requests.iter().find(|r| r.volume_id == id).unwrap();
    assert_eq!(by_volume("vol-1").secrets["password"], "for-modify");
    assert_eq!(by_volume("vol-2").secrets["password"], "for-expand");
    let params = &by_volume("vol-2").mutable_parameters;
    let want: Value = json!({
        "iops": "3000",
        "csi.storage.k8s.io/pvc/name": "data-2",
        "csi.storage.k8s.io/pvc/namespace": "default",
        "csi.storage.k8s.io/pv/name": "pv-2",
    });
    assert_eq!(serde_json::to_value(params).unwrap(), want);
    applied(&cluster, "gold").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_modify_secret_is_a_warning_and_nothing_is_written() {
    let cluster = Cluster::start_with_pv(modify_driver(), |pv| {
        pv.metadata.annotations = Some(BTreeMap::from([
            (
                "volume.kubernetes.io/controller-modify-secret-name".to_owned(),
                "missing".to_owned(),
            ),
            (
                "volume.kubernetes.io/controller-modify-secret-namespace".to_owned(),
                "default".to_owned(),
            ),
        ]));
    })
    .await;
    create_class(&cluster, "gold", "3000").await;
    let _resizer = cluster.resizer(&[]);
    set_class(&cluster, Some("gold")).await;
    let message = event_with(&cluster, "VolumeModifyFailed", "secret").await;
    assert!(message.contains("missing"), "{message}");
    // The InProgress write came before the Secret lookup; no call was made.
    let claim = status_reaches(&cluster, "InProgress", "gold").await;
    assert_eq!(current_class(&claim), None);
    assert!(modify_requests(&cluster).is_empty());

    create_secret(&cluster, "missing", "late").await;
    applied(&cluster, "gold").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_gate_off_a_driver_that_can_modify_only_expands() {
    let cluster = Cluster::start(modify_driver()).await;
    create_class(&cluster, "gold", "3000").await;
    let mut resizer = cluster.resizer(&["--feature-gates=VolumeAttributesClass=false"]);
    resizer.wait_logged("modify: false", TIMEOUT).await.unwrap();
    cluster.request("2Gi").await;
    cluster.capacity_reaches("2Gi").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_server_without_volume_attributes_classes_turns_the_gate_off() {
    let server = ApiServer::with_config(Config {
        disabled_resources: vec!["storage.k8s.io/v1/volumeattributesclasses".into()],
        ..Config::default()
    });
    let cluster = Cluster::start_on(server, modify_driver(), |_| {}).await;
    let mut resizer = cluster.resizer(&[]);
    resizer
        .wait_logged(
            "storage.k8s.io/v1 does not serve VolumeAttributesClass: feature gate VolumeAttributesClass turned off",
            TIMEOUT,
        )
        .await
        .unwrap();
    resizer.wait_logged("modify: false", TIMEOUT).await.unwrap();
    cluster.request("2Gi").await;
    cluster.capacity_reaches("2Gi").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_that_only_modifies_runs_the_modify_controller_alone() {
    let mut config = modify_driver();
    config
        .controller_capabilities
        .retain(|c| *c != ControllerRpc::ExpandVolume);
    config.node_capabilities.clear();
    let cluster = Cluster::start(config).await;
    create_class(&cluster, "gold", "3000").await;
    let _resizer = cluster.resizer(&[]);
    set_class(&cluster, Some("gold")).await;
    applied(&cluster, "gold").await;
}

/// The `iops` of each ControllerModifyVolume so far.
fn iops_sent(cluster: &Cluster) -> Vec<String> {
    modify_requests(cluster)
        .into_iter()
        .map(|r| r.mutable_parameters["iops"].clone())
        .collect()
}

/// Waits until `more` calls were made after the first `seen` and returns their `iops`.
async fn next_calls(cluster: &Cluster, seen: usize, more: usize) -> Vec<String> {
    eventually(&format!("{more} more modify calls"), TIMEOUT, async || {
        let sent = iops_sent(cluster);
        (sent.len() >= seen + more).then(|| sent[seen..].to_vec())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_uncertain_modification_keeps_its_target_across_a_new_spec_and_a_restart() {
    let cluster = Cluster::start(modify_driver()).await;
    create_class(&cluster, "gold", "3000").await;
    create_class(&cluster, "silver", "6000").await;
    cluster.driver.inject(Fault::error(
        Method::ControllerModifyVolume,
        Code::DeadlineExceeded,
        "still working",
    ));
    let mut resizer = cluster.resizer(&[]);
    set_class(&cluster, Some("gold")).await;
    let claim = cluster
        .claim_when("ModifyVolumeError DeadlineExceeded", |c| {
            condition(c, "ModifyVolumeError").and_then(|c| c.reason.as_deref())
                == Some("DeadlineExceeded")
        })
        .await;
    assert_eq!(
        modify_status(&claim),
        Some(("InProgress".to_owned(), "gold".to_owned()))
    );
    assert_eq!(
        condition_message(&claim, "ModifyingVolume").as_deref(),
        Some("Modifying volume to \"gold\" is still in progress.")
    );

    // The driver may still be applying gold: the new spec waits.
    set_class(&cluster, Some("silver")).await;
    let seen = iops_sent(&cluster).len();
    assert!(
        next_calls(&cluster, seen, 3)
            .await
            .iter()
            .all(|i| i == "3000")
    );

    // A new process treats the InProgress claim as uncertain too.
    resizer.terminate().await.unwrap();
    let _resizer = cluster.resizer(&[]);
    let seen = iops_sent(&cluster).len();
    assert!(
        next_calls(&cluster, seen, 2)
            .await
            .iter()
            .all(|i| i == "3000")
    );

    // Once gold is through, silver follows.
    cluster.driver.clear_faults();
    let claim = applied(&cluster, "silver").await;
    assert_eq!(condition_types(&claim), Vec::<String>::new());
    let sent = iops_sent(&cluster);
    assert_eq!(
        sent[sent.len() - 2..],
        ["3000".to_owned(), "6000".to_owned()]
    );
    assert_eq!(volume_class(&cluster.volume().await), Some("silver"));
}
