//! Whole-binary tests: `csi-provisioner` against a driver whose CreateVolume answers OK with
//! garbage (issue 14, "a driver returning garbage"). Each case: a Warning Event naming the
//! problem (or the documented CSI meaning of the value), no panic (the process keeps serving
//! `/metrics` and provisions the next claim), and no orphaned volume: every volume left in the
//! driver is the volume of a PV.

#![allow(
    clippy::unwrap_used,
    reason = "shared assertion helpers of the tests panic on failure"
)]

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::core::v1::PersistentVolume;
use testbed_mock_csi::{
    Action, DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY, Fault, Garbage, Method, When,
};

/// Generous: the tests run in parallel on small CI machines.
const SHORT: Duration = Duration::from_secs(30);

/// A cluster with an Immediate class "fast" and a running provisioner; `garbage` answers the
/// CreateVolume calls selected by `when`.
async fn start(garbage: Garbage, when: When) -> (Cluster, Provisioner) {
    let cluster = Cluster::start().await;
    cluster.driver.inject(Fault {
        method: Method::CreateVolume,
        when,
        action: Action::Garbage(garbage),
    });
    cluster.create_class(class("fast", "Immediate")).await;
    let provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    (cluster, provisioner)
}

/// The Warning `ProvisioningFailed` Event's message, once one appears.
async fn failed_message(cluster: &Cluster) -> String {
    let event = cluster.first_event("ProvisioningFailed", SHORT).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    event.message.unwrap()
}

/// The process still works: `/metrics` answers and a further claim is bound.
async fn still_provisions(cluster: &Cluster, provisioner: &Provisioner) {
    provisioner.wait_serving().await;
    cluster.create_claim("after", "fast", "1Gi").await;
    cluster.bound("after", SHORT).await;
}

/// No orphan: the driver holds exactly the volumes of the PVs.
async fn every_driver_volume_has_a_pv(cluster: &Cluster) {
    let pvs = cluster
        .volumes()
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items;
    let mut handles: Vec<String> = pvs.iter().map(handle).collect();
    handles.sort();
    let mut ids: Vec<String> = cluster
        .driver
        .volumes()
        .into_iter()
        .map(|v| v.volume_id)
        .collect();
    ids.sort();
    assert_eq!(ids, handles, "driver volumes vs PV handles");
}

fn handle(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .unwrap()
        .csi
        .as_ref()
        .unwrap()
        .volume_handle
        .clone()
}

#[tokio::test]
async fn an_empty_volume_id_is_a_warning_and_the_retry_binds_the_volume_it_created() {
    let (cluster, provisioner) = start(Garbage::EmptyVolumeId, When::Nth(1)).await;
    cluster.create_claim("claim", "fast", "1Gi").await;
    assert_eq!(
        failed_message(&cluster).await,
        "CreateVolume response has a volume with an empty volume_id"
    );
    // The retry repeats CreateVolume with the same name: the driver answers with the volume it
    // made the first time, so one volume serves the claim.
    cluster.bound("claim", SHORT).await;
    still_provisions(&cluster, &provisioner).await;
    every_driver_volume_has_a_pv(&cluster).await;
}

#[tokio::test]
async fn a_created_capacity_below_the_request_is_deleted_and_retried() {
    let (cluster, provisioner) = start(Garbage::CreatedCapacity(1024), When::Nth(1)).await;
    cluster.create_claim("claim", "fast", "1Gi").await;
    assert_eq!(
        failed_message(&cluster).await,
        "created volume capacity 1024 less than requested capacity 1073741824"
    );
    let (_, pv) = cluster.bound("claim", SHORT).await;
    assert_eq!(cluster.driver.call_count(Method::DeleteVolume), 1);
    assert_eq!(
        pv.spec.unwrap().capacity.unwrap()["storage"].0,
        "1Gi",
        "the retried volume's size"
    );
    still_provisions(&cluster, &provisioner).await;
    every_driver_volume_has_a_pv(&cluster).await;
}

#[tokio::test]
async fn a_negative_created_capacity_is_deleted_and_retried() {
    let (cluster, provisioner) = start(Garbage::CreatedCapacity(-1), When::Nth(1)).await;
    cluster.create_claim("claim", "fast", "1Gi").await;
    assert_eq!(
        failed_message(&cluster).await,
        "created volume capacity -1 less than requested capacity 1073741824"
    );
    cluster.bound("claim", SHORT).await;
    still_provisions(&cluster, &provisioner).await;
    every_driver_volume_has_a_pv(&cluster).await;
}

#[tokio::test]
async fn a_zero_created_capacity_is_unknown_and_the_pv_gets_the_requested_size() {
    // CSI spec, Volume.capacity_bytes: "The value of this field MAY be 0 if the capacity is
    // unknown"; upstream then writes the requested size.
    let (cluster, provisioner) = start(Garbage::CreatedCapacity(0), When::Every).await;
    cluster.create_claim("claim", "fast", "1Gi").await;
    let (_, pv) = cluster.bound("claim", SHORT).await;
    assert_eq!(pv.spec.unwrap().capacity.unwrap()["storage"].0, "1Gi");
    still_provisions(&cluster, &provisioner).await;
    every_driver_volume_has_a_pv(&cluster).await;
}

#[tokio::test]
async fn a_topology_key_that_is_no_label_key_is_deleted_and_retried() {
    let garbage = Garbage::Topology {
        segments: 1,
        key: "not a/label/key".into(),
        value: "x".into(),
    };
    let (cluster, provisioner) = start(garbage, When::Nth(1)).await;
    cluster.create_claim("claim", "fast", "1Gi").await;
    let message = failed_message(&cluster).await;
    assert!(
        message.starts_with(
            "CreateVolume returned an invalid accessible topology: key \"not a/label/key\""
        ),
        "{message}"
    );
    let (_, pv) = cluster.bound("claim", SHORT).await;
    assert_eq!(cluster.driver.call_count(Method::DeleteVolume), 1);
    let affinity = serde_json::to_value(pv.spec.unwrap().node_affinity).unwrap();
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
        DEFAULT_TOPOLOGY_KEY
    );
    still_provisions(&cluster, &provisioner).await;
    every_driver_volume_has_a_pv(&cluster).await;
}

#[tokio::test]
async fn forty_thousand_distinct_zones_are_too_large_for_a_pv_and_are_deleted_and_retried() {
    // One node selector term per zone: about 3.8 MB of PV, above kube-apiserver's 3 MiB
    // request limit, so it could never be saved (upstream retries the save forever).
    let garbage = Garbage::DistinctTopologies {
        segments: 40_000,
        key: DEFAULT_TOPOLOGY_KEY.into(),
    };
    let (cluster, provisioner) = start(garbage, When::Nth(1)).await;
    cluster.create_claim("claim", "fast", "1Gi").await;
    let message = failed_message(&cluster).await;
    assert!(
        message.starts_with("CreateVolume returned a volume whose PersistentVolume would be ")
            && message.ends_with(
                "bytes, above kube-apiserver's request limit of 3145728 bytes (accessible topologies: 40000, volume context entries: 0)"
            ),
        "{message}"
    );
    let (_, pv) = cluster.bound("claim", SHORT).await;
    assert_eq!(cluster.driver.call_count(Method::DeleteVolume), 1);
    let affinity = serde_json::to_value(pv.spec.unwrap().node_affinity).unwrap();
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{affinity}"
    );
    still_provisions(&cluster, &provisioner).await;
    every_driver_volume_has_a_pv(&cluster).await;
}

#[tokio::test]
async fn ten_thousand_identical_segments_make_one_node_selector_term() {
    let garbage = Garbage::Topology {
        segments: 10_000,
        key: DEFAULT_TOPOLOGY_KEY.into(),
        value: DEFAULT_NODE_ID.into(),
    };
    let (cluster, provisioner) = start(garbage, When::Every).await;
    cluster.create_claim("claim", "fast", "1Gi").await;
    let (_, pv) = cluster.bound("claim", SHORT).await;
    let affinity = serde_json::to_value(pv.spec.unwrap().node_affinity).unwrap();
    let terms = affinity["required"]["nodeSelectorTerms"]
        .as_array()
        .unwrap();
    assert_eq!(terms.len(), 1, "{affinity}");
    still_provisions(&cluster, &provisioner).await;
    every_driver_volume_has_a_pv(&cluster).await;
}

#[tokio::test]
async fn an_empty_topology_segment_gives_a_pv_without_node_affinity() {
    // Upstream drops empty segments; an affinity without terms would be refused by the API
    // server, so the PV has none.
    let garbage = Garbage::Topology {
        segments: 1,
        key: String::new(),
        value: String::new(),
    };
    let (cluster, provisioner) = start(garbage, When::Every).await;
    cluster.create_claim("claim", "fast", "1Gi").await;
    let (_, pv) = cluster.bound("claim", SHORT).await;
    assert_eq!(pv.spec.unwrap().node_affinity, None);
    still_provisions(&cluster, &provisioner).await;
    every_driver_volume_has_a_pv(&cluster).await;
}

/// DeleteVolume answers no fields (CSI spec: `DeleteVolumeResponse {}`), so the only garbage
/// it can return is in its status: here a megabyte of error message on every call. The PV
/// stays (no volume is forgotten), each failure is a Warning naming the driver's code, the
/// memory stays bounded while the retries go on, and the volume is deleted once the driver
/// answers. Before the client accepted grpc-go's 16 MiB of headers, such a message broke the
/// connection and the sidecar exited 1 ("Lost connection"), again after every restart.
#[tokio::test]
async fn a_megabyte_delete_volume_error_is_a_warning_and_the_volume_is_deleted_later() {
    let cluster = Cluster::start().await;
    cluster.create_class(class("fast", "Immediate")).await;
    let provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    cluster.create_claim("data", "fast", "1Gi").await;
    let (_, volume) = cluster.bound("data", SHORT).await;
    let pv = volume.metadata.name.unwrap();
    cluster.driver.inject(Fault::error(
        Method::DeleteVolume,
        tonic::Code::Internal,
        "x".repeat(1 << 20),
    ));
    cluster.delete_claim("data").await;
    let failed = eventually("three failed DeleteVolume calls", SHORT, async || {
        (cluster.driver.call_count(Method::DeleteVolume) >= 3).then_some(())
    });
    failed.await;
    let warning = cluster.first_event("VolumeFailedDelete", SHORT).await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let message = warning.message.unwrap();
    assert!(
        message.starts_with("rpc error: code = Internal desc = xxx"),
        "{}",
        &message[..80.min(message.len())]
    );
    assert!(cluster.volumes().get_opt(&pv).await.unwrap().is_some());
    let rss = provisioner
        .metric("process_resident_memory_bytes")
        .await
        .unwrap();
    assert!(rss < 256.0 * 1024.0 * 1024.0, "RSS {rss} bytes");
    cluster.driver.clear_faults();
    cluster.volume_gone(&pv, SHORT).await;
    assert!(cluster.driver.volumes().is_empty());
    // The whole message, as upstream's Event has it (the correlator keeps only hashes).
    assert!(message.len() > 1 << 20, "{} bytes", message.len());
}
