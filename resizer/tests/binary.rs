//! Whole-binary tests of `csi-resizer` against the in-memory API server and the mock CSI
//! driver: the claim is bound by hand (no controller-manager), kubelet's part of node
//! expansion is written by the test where a flow needs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use testbed_mock_csi::{ControllerRpc, Fault, Method, MockDriverConfig, When};
use testbed_support::wait::eventually;
use tonic::Code;

use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn online_expansion_without_node_expansion_completes_the_claim() {
    let cluster = Cluster::start(no_node_expansion()).await;
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;

    let claim = cluster.capacity_reaches("2Gi").await;
    assert_eq!(allocated(&claim).as_deref(), Some("2Gi"));
    assert_eq!(resize_status(&claim), None, "the key is removed when done");
    assert!(
        condition_types(&claim).is_empty(),
        "{:?}",
        condition_types(&claim)
    );
    assert_eq!(
        annotation(
            &claim.metadata,
            "volume.kubernetes.io/node-expansion-not-required"
        ),
        Some("true")
    );
    let pv = cluster.volume().await;
    assert_eq!(pv_capacity(&pv), "2Gi");
    assert_eq!(
        pre_resize_capacity(&pv),
        None,
        "only when node expansion is required"
    );
    assert_eq!(
        cluster.driver.volume("vol-1").unwrap().capacity_bytes,
        2 * GI
    );
    assert_eq!(cluster.expand_requests(), [2 * GI]);

    let success = cluster.event("VolumeResizeSuccessful").await;
    assert_eq!(success.message.as_deref(), Some("Resize volume succeeded"));
    assert_eq!(success.type_.as_deref(), Some("Normal"));
    assert_eq!(
        success.source.and_then(|s| s.component).as_deref(),
        Some("external-resizer hostpath.csi.k8s.io")
    );
    let resizing = cluster.event("Resizing").await;
    assert_eq!(
        resizing.message.as_deref(),
        Some("External resizer is resizing volume pv-1")
    );
    // Upstream #414: no transient FileSystemResizePending (nor its event) when the driver said
    // node expansion is not required; the success event above came after any such event.
    assert!(cluster.events("FileSystemResizeRequired").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn node_expansion_stays_pending_for_kubelet_and_the_pre_resize_annotation_goes_after() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;

    let claim = cluster.resize_status_reaches("NodeResizePending").await;
    assert_eq!(
        capacity(&claim).as_deref(),
        Some("1Gi"),
        "kubelet's to write"
    );
    assert_eq!(allocated(&claim).as_deref(), Some("2Gi"));
    assert!(condition_types(&claim).contains(&"FileSystemResizePending".to_owned()));
    assert_eq!(
        condition_message(&claim, "FileSystemResizePending").as_deref(),
        Some(
            "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
        )
    );
    let pv = cluster.volume().await;
    assert_eq!(pv_capacity(&pv), "2Gi");
    assert_eq!(pre_resize_capacity(&pv), Some("1Gi"));
    let required = cluster.event("FileSystemResizeRequired").await;
    assert_eq!(
        required.message.as_deref(),
        Some("Require file system resize of volume on node")
    );

    // kubelet finishes NodeExpandVolume and writes the claim's status.
    cluster
        .claims()
        .patch_status(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "capacity": {"storage": "2Gi"},
                "allocatedResourceStatuses": null,
                "conditions": null,
            }})),
        )
        .await
        .unwrap();
    eventually("pre-resize-capacity removed", TIMEOUT, async || {
        let pv = cluster.volume().await;
        annotation(
            &pv.metadata,
            "volume.alpha.kubernetes.io/pre-resize-capacity",
        )
        .is_none()
        .then_some(())
    })
    .await;
    assert!(cluster.events("VolumeResizeSuccessful").await.is_empty());
    assert_eq!(cluster.expand_requests(), [2 * GI]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_infeasible_size_waits_in_the_slow_set_until_the_user_lowers_the_request() {
    let cluster = Cluster::start(MockDriverConfig {
        max_volume_size: 5 * GI,
        ..no_node_expansion()
    })
    .await;
    // A long slow-retry window: the recovery below must not wait for it.
    let _resizer = cluster.resizer(&["--retry-interval-max=10m"]);
    cluster.request("10Gi").await;

    let claim = cluster
        .resize_status_reaches("ControllerResizeInfeasible")
        .await;
    assert_eq!(allocated(&claim).as_deref(), Some("10Gi"));
    let message = condition_message(&claim, "ControllerResizeError").unwrap();
    assert!(
        message.starts_with(
            "failed to expand pvc with resize volume \"pv-1\" by resizer \"hostpath.csi.k8s.io\" failed: rpc error: code = OutOfRange"
        ),
        "{message}"
    );
    let failed = cluster.event("VolumeResizeFailed").await;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert!(failed.message.unwrap().contains("code = OutOfRange"));

    // As kube-apiserver: not down to status.capacity (Kubernetes does not shrink volumes).
    let refused = cluster
        .claims()
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 422 && s.message.contains("can not be less than status.capacity")),
        "{refused}"
    );
    cluster.request("3Gi").await;
    let claim = cluster.capacity_reaches("3Gi").await;
    assert_eq!(allocated(&claim).as_deref(), Some("3Gi"));
    assert!(
        condition_types(&claim).is_empty(),
        "{:?}",
        condition_types(&claim)
    );
    assert_eq!(pv_capacity(&cluster.volume().await), "3Gi");
    // One infeasible attempt (the slow set held the retries), then the lowered size.
    assert_eq!(cluster.expand_requests(), [10 * GI, 3 * GI]);
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_transient_error_the_allocated_size_is_kept_even_if_the_request_drops() {
    let cluster = Cluster::start(no_node_expansion()).await;
    cluster.fail_expansions(Code::DeadlineExceeded, "context deadline exceeded");
    let _resizer = cluster.resizer(&[]);
    cluster.request("3Gi").await;
    let failed = cluster.event("VolumeResizeFailed").await;
    assert!(failed.message.unwrap().contains("DeadlineExceeded"));
    let claim = cluster.claim().await;
    assert_eq!(allocated(&claim).as_deref(), Some("3Gi"));
    assert_eq!(
        resize_status(&claim).as_deref(),
        Some("ControllerResizeInProgress")
    );
    assert!(
        !condition_types(&claim).contains(&"ControllerResizeError".to_owned()),
        "an uncertain error is not a final one"
    );

    // The user lowers the request, but the driver may still be growing the volume to 3Gi.
    cluster.request("2Gi").await;
    eventually("a retry after the request dropped", TIMEOUT, async || {
        (cluster.expand_requests().len() >= 3).then_some(())
    })
    .await;
    cluster.driver.clear_faults();
    let claim = cluster.capacity_reaches("3Gi").await;
    assert_eq!(allocated(&claim).as_deref(), Some("3Gi"));
    assert_eq!(pv_capacity(&cluster.volume().await), "3Gi");
    assert!(
        cluster.expand_requests().iter().all(|size| *size == 3 * GI),
        "{:?}",
        cluster.expand_requests()
    );
    // Upstream #474: success is reported once, after the call that succeeded.
    cluster.event("VolumeResizeSuccessful").await;
    let ok_calls = cluster
        .driver
        .calls_of(Method::ControllerExpandVolume)
        .into_iter()
        .filter(|c| c.code == Some(Code::Ok))
        .count();
    assert_eq!(ok_calls, 1);
    assert_eq!(cluster.events("VolumeResizeSuccessful").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trivial_resizer_grows_the_pv_without_a_controller_call() {
    let mut config = MockDriverConfig::default();
    config
        .controller_capabilities
        .retain(|c| *c != ControllerRpc::ExpandVolume);
    let cluster = Cluster::start(config).await;
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;

    let claim = cluster.resize_status_reaches("NodeResizePending").await;
    assert!(condition_types(&claim).contains(&"FileSystemResizePending".to_owned()));
    assert_eq!(pv_capacity(&cluster.volume().await), "2Gi");
    cluster.event("FileSystemResizeRequired").await;
    assert_eq!(cluster.driver.call_count(Method::ControllerExpandVolume), 0);
    assert_eq!(cluster.driver.call_count(Method::NodeGetCapabilities), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_expand_secret_is_a_condition_and_an_event() {
    let cluster =
        Cluster::start_with_pv(no_node_expansion(), |pv| expand_secret(pv, "expand-secret")).await;
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;
    let claim = cluster.controller_resize_error().await;
    let message = condition_message(&claim, "ControllerResizeError").unwrap();
    assert!(
        message.contains("error getting secret expand-secret in namespace default"),
        "{message}"
    );
    assert_eq!(
        resize_status(&claim).as_deref(),
        Some("ControllerResizeInProgress")
    );
    let failed = cluster.event("VolumeResizeFailed").await;
    assert!(failed.message.unwrap().contains("expand-secret"));
    assert_eq!(cluster.driver.call_count(Method::ControllerExpandVolume), 0);
}

fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn lease_metrics_and_health_use_upstreams_names() {
    let cluster = Cluster::start(no_node_expansion()).await;
    cluster.driver.inject(
        Fault::error(
            Method::ControllerExpandVolume,
            Code::Internal,
            "backend down",
        )
        .on(When::FirstN(1)),
    );
    let http = free_port();
    let endpoint = format!("--http-endpoint={http}");
    let _resizer = cluster.resizer(&[
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
            .get_opt("external-resizer-hostpath-csi-k8s-io")
            .await
            .ok()
            .flatten()
    })
    .await;
    cluster.request("2Gi").await;
    cluster.capacity_reaches("2Gi").await;
    let body = eventually("metrics", TIMEOUT, async || {
        let response = testbed_support::http_client::get(http, "/metrics", Duration::from_secs(5))
            .await
            .ok()?;
        (response.status == 200 && response.body.contains("ControllerExpandVolume"))
            .then_some(response.body)
    })
    .await;
    for family in [
        r#"workqueue_adds_total{name="hostpath.csi.k8s.io-pvc"}"#,
        r#"workqueue_retries_total{name="hostpath.csi.k8s.io-pvc"}"#,
        r#"grpc_status_code="Internal",method_name="/csi.v1.Controller/ControllerExpandVolume""#,
        r#"grpc_status_code="OK",method_name="/csi.v1.Controller/ControllerExpandVolume""#,
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

async fn exit_code(args: &[&str]) -> (Option<i32>, String) {
    let output = tokio::process::Command::new(BIN)
        .args(args)
        .output()
        .await
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_flags_and_unsupported_features_exit_with_clear_codes() {
    for (args, code, text) in [
        (&["--no-such-flag"][..], 2, "no-such-flag"),
        (&["--timeout=5"], 2, "timeout"),
        (&["--workers=0"], 1, "--workers"),
        (
            &["--http-endpoint=:1", "--metrics-address=:2"],
            1,
            "metrics-address",
        ),
        (
            &["--feature-gates=RecoverVolumeExpansionFailure=false"],
            2,
            "not supported yet",
        ),
        (&["-version"], 0, " v0."),
    ] {
        let (got, output) = exit_code(args).await;
        assert_eq!(got, Some(code), "{args:?}: {output}");
        assert!(output.contains(text), "{args:?}: {output}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_that_cannot_expand_is_fatal() {
    let mut config = MockDriverConfig::default();
    config
        .controller_capabilities
        .retain(|c| *c != ControllerRpc::ExpandVolume);
    config.node_capabilities.clear();
    let cluster = Cluster::start(config).await;
    let mut resizer = cluster.resizer(&[]);
    let status = resizer.wait_exit(TIMEOUT).await.unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(
        resizer
            .log_text()
            .contains("neither supports controller resize nor modify")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_tree_volume_delegated_to_the_driver_gets_a_clear_event() {
    let cluster = Cluster::start_with_pv(no_node_expansion(), |pv| {
        let spec = pv.spec.as_mut().unwrap();
        spec.csi = None;
        spec.host_path = Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
            path: "/data".into(),
            ..Default::default()
        });
    })
    .await;
    cluster
        .claims()
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "volume.kubernetes.io/storage-resizer": DRIVER,
            }}})),
        )
        .await
        .unwrap();
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;
    let failed = cluster.event("VolumeResizeFailed").await;
    assert_eq!(
        failed.message.as_deref(),
        Some(
            "expanding in-tree volume \"pv-1\" through CSI migration is not supported yet by this csi-resizer"
        )
    );
    assert_eq!(cluster.driver.call_count(Method::ControllerExpandVolume), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_claims_grown_at_once_all_reach_their_size() {
    const CLAIMS: usize = 100;
    let cluster = Cluster::start(no_node_expansion()).await;
    for n in 2..=CLAIMS {
        cluster.add_claim(n, |_| {}).await;
    }
    let _resizer = cluster.resizer(&["--kube-api-qps=200", "--kube-api-burst=400"]);
    for n in 1..=CLAIMS {
        cluster.request_of(&claim_name(n), "2Gi").await;
    }
    eventually("every claim at 2Gi", Duration::from_mins(1), async || {
        let claims = cluster.claims().list(&ListParams::default()).await.ok()?;
        let done = claims
            .items
            .iter()
            .filter(|c| capacity(c).as_deref() == Some("2Gi"))
            .count();
        (done == CLAIMS).then_some(())
    })
    .await;
    for n in 1..=CLAIMS {
        assert_eq!(
            cluster
                .driver
                .volume(&format!("vol-{n}"))
                .unwrap()
                .capacity_bytes,
            2 * GI
        );
    }
    // One expansion per claim: no stale copy made a second call.
    assert_eq!(cluster.expand_requests().len(), CLAIMS);
    // The events are written in the background after the claims.
    eventually("a VolumeResizeSuccessful per claim", TIMEOUT, async || {
        (cluster.events("VolumeResizeSuccessful").await.len() == CLAIMS).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn losing_the_driver_connection_exits_1_with_the_termination_message_text() {
    let cluster = Cluster::start(no_node_expansion()).await;
    let mut resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;
    cluster.capacity_reaches("2Gi").await;
    cluster.driver.stop().await.unwrap();
    let status = resizer.wait_exit(TIMEOUT).await.unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(
        resizer
            .log_text()
            .contains("Lost connection to CSI driver, exiting")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_final_error_lowering_the_request_changes_the_target() {
    let cluster = Cluster::start(no_node_expansion()).await;
    cluster.fail_expansions(Code::Internal, "backend refused");
    let _resizer = cluster.resizer(&[]);
    cluster.request("10Gi").await;
    let claim = cluster.controller_resize_error().await;
    // Final but not infeasible: the status stays in progress, no slow set.
    assert_eq!(
        resize_status(&claim).as_deref(),
        Some("ControllerResizeInProgress")
    );
    assert!(
        condition_message(&claim, "ControllerResizeError")
            .unwrap()
            .contains("code = Internal desc = backend refused")
    );

    // The driver stopped working on 10Gi, so the user's lower request is the new target.
    cluster.request("3Gi").await;
    eventually("an attempt at 3Gi", TIMEOUT, async || {
        cluster.expand_requests().contains(&(3 * GI)).then_some(())
    })
    .await;
    // Only now may an attempt succeed: before, a sync from a cache that has not seen the
    // lowered request yet may still (rightly) try 10Gi.
    cluster.driver.clear_faults();
    let claim = cluster.capacity_reaches("3Gi").await;
    assert_eq!(allocated(&claim).as_deref(), Some("3Gi"));
    assert!(condition_types(&claim).is_empty());
    let sizes = cluster.expand_requests();
    let first = sizes.iter().position(|s| *s == 3 * GI).unwrap();
    assert!(sizes[..first].iter().all(|s| *s == 10 * GI), "{sizes:?}");
    assert!(sizes[first..].iter().all(|s| *s == 3 * GI), "{sizes:?}");
}
