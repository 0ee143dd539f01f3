//! Whole-binary tests of `csi-resizer` against the in-memory API server and the mock CSI
//! driver: the claim is bound by hand (no controller-manager), kubelet's part of node
//! expansion is written by the test where a flow needs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use proto::csi::v1::ControllerExpandVolumeRequest;
use serde_json::json;
use testbed_mock_csi::{
    ControllerRpc, Fault, Method, MockDriverConfig, PluginCapability, PluginService,
    VolumeExpansion,
};
use testbed_support::leader::FAST_LEADER_ELECTION;
use testbed_support::process::ChildProcess;
use testbed_support::wait::eventually;
use tonic::Code;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn online_expansion_without_node_expansion_completes_the_claim() {
    let cluster = Cluster::start(no_node_expansion()).await;
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;

    let claim = cluster.capacity_reaches("2Gi").await;
    assert_eq!(allocated(&claim).as_deref(), Some("2Gi"));
    assert_eq!(resize_status(&claim), None, "the key is removed when done");
    assert_eq!(condition_types(&claim), Vec::<String>::new());
    assert_eq!(not_required(&claim), Some("true"));
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

/// kube-apiserver sends a write's watch events apart from its answer: while the answer to the
/// PV's new size is held back (the in-memory API server holds it), the resizer's informers see
/// that PV and then the claim asking for more. Each size is expanded once and the claim reaches
/// the second.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_grown_again_before_its_pv_write_returns_expands_each_size_once() {
    let cluster = Cluster::start(no_node_expansion()).await;
    let held = cluster
        .server
        .faults()
        .hold_answers("patch", "persistentvolumes", 1);
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;
    // The PV's new size is stored, its answer still held back.
    eventually("the PV at 2Gi", TIMEOUT, async || {
        (pv_capacity(&cluster.volume().await) == "2Gi").then_some(())
    })
    .await;
    cluster.request("3Gi").await;
    held.release();
    let claim = cluster.capacity_reaches("3Gi").await;
    assert_eq!(allocated(&claim).as_deref(), Some("3Gi"));
    assert_eq!(pv_capacity(&cluster.volume().await), "3Gi");
    assert_eq!(cluster.expand_requests(), [2 * GI, 3 * GI]);
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
    // Upstream's text (fixtures/traffic, 15:36:23): the error alone after the prefix.
    assert!(
        message.starts_with("failed to expand pvc with rpc error: code = OutOfRange"),
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

const LEGACY: &str = "--feature-gates=RecoverVolumeExpansionFailure=false";

/// The legacy flow (spec §2.4): a failure is a Warning event only, then the request is
/// expanded and written as `status.capacity` with none of the recovery fields.
#[tokio::test(flavor = "multi_thread")]
async fn the_legacy_flow_expands_without_recovery_fields() {
    let cluster = Cluster::start(no_node_expansion()).await;
    cluster.fail_first_expansion();
    let _resizer = cluster.resizer(&[LEGACY]);
    cluster.request("2Gi").await;
    let claim = cluster.capacity_reaches("2Gi").await;
    let failed = cluster.event("VolumeResizeFailed").await;
    assert!(
        failed.message.as_deref().unwrap().contains("backend down"),
        "{failed:?}"
    );
    assert_eq!(allocated(&claim), None);
    assert_eq!(resize_status(&claim), None);
    assert_eq!(condition_types(&claim), Vec::<String>::new());
    assert_eq!(not_required(&claim), None);
    assert_eq!(pv_capacity(&cluster.volume().await), "2Gi");
    assert_eq!(cluster.expand_requests(), [2 * GI, 2 * GI]);
    cluster.event("VolumeResizeSuccessful").await;
}

/// The legacy flow with node expansion: `FileSystemResizePending` (no resize status), the PV
/// grown with the pre-resize annotation.
#[tokio::test(flavor = "multi_thread")]
async fn the_legacy_flow_leaves_node_expansion_to_kubelet() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let _resizer = cluster.resizer(&[LEGACY]);
    cluster.request("2Gi").await;
    let claim = cluster
        .claim_when("FileSystemResizePending", |c| {
            condition_types(c).contains(&"FileSystemResizePending".to_owned())
        })
        .await;
    assert_eq!(resize_status(&claim), None);
    assert_eq!(allocated(&claim), None);
    assert_eq!(
        capacity(&claim).as_deref(),
        Some("1Gi"),
        "kubelet writes it"
    );
    cluster.event("FileSystemResizeRequired").await;
    let pv = cluster.volume().await;
    assert_eq!(pv_capacity(&pv), "2Gi");
    assert_eq!(pre_resize_capacity(&pv), Some("1Gi"));
    assert_eq!(cluster.expand_requests(), [2 * GI]);
}

/// An offline-only driver (VolumeExpansion OFFLINE, upstream #62/#44/#81) is not called while
/// a pod uses the claim. When the pod is deleted the pod watch queues the claim at once
/// (upstream #175): with the backoff and the resync both at minutes, only that brings the
/// claim back within the test's timeout.
#[tokio::test(flavor = "multi_thread")]
async fn an_offline_driver_waits_for_the_pod_and_expands_as_soon_as_it_is_deleted() {
    let cluster = Cluster::start(MockDriverConfig {
        plugin_capabilities: vec![
            PluginCapability::Service(PluginService::ControllerService),
            PluginCapability::VolumeExpansion(VolumeExpansion::Offline),
        ],
        ..no_node_expansion()
    })
    .await;
    cluster.pod_using_data("web").await;
    let _resizer = cluster.resizer(&[
        "--handle-volume-inuse-error=true",
        "--retry-interval-start=5m",
        "--retry-interval-max=5m",
    ]);
    cluster.request("2Gi").await;
    eventually("the in-use event", TIMEOUT, async || {
        (cluster.in_use_events().await >= 1).then_some(())
    })
    .await;
    let claim = cluster.claim().await;
    assert_eq!(allocated(&claim).as_deref(), Some("2Gi"));
    assert_eq!(
        cluster.driver.call_count(Method::ControllerExpandVolume),
        0,
        "the gate runs before the call in the same sync"
    );

    cluster.delete_pod("web").await;
    cluster.capacity_reaches("2Gi").await;
    assert_eq!(cluster.expand_requests(), [2 * GI]);
    assert_eq!(pv_capacity(&cluster.volume().await), "2Gi");
}

/// Upstream's in-use gate: after FAILED_PRECONDITION the driver is not asked again while a
/// pod uses the claim, however often the claim is retried; once the pod is gone it is.
#[tokio::test(flavor = "multi_thread")]
async fn after_failed_precondition_the_driver_is_not_called_again_while_a_pod_exists() {
    let cluster = Cluster::start(no_node_expansion()).await;
    cluster.fail_expansions(Code::FailedPrecondition, "volume is published");
    cluster.pod_using_data("web").await;
    let _resizer = cluster.resizer(&["--handle-volume-inuse-error=true"]);
    cluster.request("2Gi").await;
    // Retries every 100ms..1s: three gated retries prove the gate holds across retries.
    eventually("three gated retries", TIMEOUT, async || {
        (cluster.in_use_events().await >= 3).then_some(())
    })
    .await;
    assert_eq!(cluster.driver.call_count(Method::ControllerExpandVolume), 1);

    cluster.driver.clear_faults();
    cluster.delete_pod("web").await;
    cluster.capacity_reaches("2Gi").await;
    assert_eq!(cluster.expand_requests(), [2 * GI, 2 * GI]);
}

/// With `--handle-volume-inuse-error=false` (upstream's meaning) no pod is looked at: the
/// driver is asked again on each retry, and an offline-only driver is called too.
#[tokio::test(flavor = "multi_thread")]
async fn without_the_in_use_gate_the_driver_is_asked_on_each_retry() {
    let cluster = Cluster::start(no_node_expansion()).await;
    cluster.fail_expansions(Code::FailedPrecondition, "volume is published");
    cluster.pod_using_data("web").await;
    let _resizer = cluster.resizer(&[]);
    cluster.request("2Gi").await;
    eventually("three calls", TIMEOUT, async || {
        (cluster.driver.call_count(Method::ControllerExpandVolume) >= 3).then_some(())
    })
    .await;
    assert_eq!(cluster.in_use_events().await, 0);
}

const LEASE: &str = "external-resizer-hostpath-csi-k8s-io";

/// Few workers and slow calls so the burst is still running when the leader dies; enough QPS
/// that the client's token bucket does not set the pace.
fn replica_args() -> Vec<&'static str> {
    let mut args = vec!["--workers=3", "--kube-api-qps=100", "--kube-api-burst=200"];
    args.extend(FAST_LEADER_ELECTION);
    args
}

/// ControllerExpandVolume calls per volume ID.
fn expansions(cluster: &Cluster) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for request in cluster
        .driver
        .requests::<ControllerExpandVolumeRequest>(Method::ControllerExpandVolume)
    {
        *counts.entry(request.volume_id).or_default() += 1;
    }
    counts
}

/// Names of the claims whose `status.capacity` is 2Gi.
async fn grown(cluster: &Cluster) -> Option<Vec<String>> {
    let list = cluster.claims().list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter(|c| capacity(c).as_deref() == Some("2Gi"))
            .filter_map(|c| c.metadata.name)
            .collect(),
    )
}

/// Kills `leader` once a quarter of the `count` claims are at 2Gi; the claims at 2Gi right
/// after the kill (successes the old leader recorded).
async fn kill_when_a_quarter_is_done(
    cluster: &Cluster,
    leader: &mut ChildProcess,
    count: usize,
) -> Vec<String> {
    eventually("a quarter of the burst done", TIMEOUT, async || {
        grown(cluster).await.filter(|done| done.len() >= count / 4)
    })
    .await;
    leader.kill();
    let done = grown(cluster).await.unwrap();
    assert!(
        done.len() < count,
        "the burst was over before the leader died; nothing was tested"
    );
    done
}

/// The leader dies by SIGKILL (no Lease release) in the middle of a burst of expansions. The
/// standby takes the Lease once it expires and finishes the burst. A claim whose status
/// already says 2Gi is never expanded again (its request equals its capacity). A claim whose
/// call succeeded but whose status was not yet written may be expanded a second time:
/// ControllerExpandVolume is idempotent (CSI spec), and nothing else tells the new leader.
#[tokio::test(flavor = "multi_thread")]
async fn a_standby_finishes_a_burst_after_the_leader_is_killed_without_expanding_twice() {
    const COUNT: usize = 30;
    let cluster = Cluster::start(no_node_expansion()).await;
    for n in 2..=COUNT {
        cluster.add_claim(n, |_| {}).await;
    }
    cluster.driver.inject(Fault::delay(
        Method::ControllerExpandVolume,
        Duration::from_millis(300),
    ));
    let holder = async || {
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            cluster.client.clone(),
            "default",
        )
        .get_opt(LEASE)
        .await
        .ok()??
        .spec?
        .holder_identity
    };
    let mut first = cluster.replica("replica-a", &replica_args());
    eventually("replica-a leads", TIMEOUT, async || {
        (holder().await.as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    let _second = cluster.replica("replica-b", &replica_args());
    for n in 1..=COUNT {
        cluster.request_of(&claim_name(n), "2Gi").await;
    }
    let done_before = kill_when_a_quarter_is_done(&cluster, &mut first, COUNT).await;
    let expanded_before = expansions(&cluster);

    eventually("replica-b leads", Duration::from_secs(30), async || {
        (holder().await.as_deref() == Some("replica-b")).then_some(())
    })
    .await;
    eventually("every claim at 2Gi", Duration::from_mins(1), async || {
        grown(&cluster)
            .await
            .filter(|done| done.len() == COUNT)
            .map(drop)
    })
    .await;

    let expanded = expansions(&cluster);
    for n in 1..=COUNT {
        let volume = format!("vol-{n}");
        assert_eq!(
            cluster.driver.volume(&volume).unwrap().capacity_bytes,
            2 * GI,
            "{volume}"
        );
    }
    for name in &done_before {
        let n: usize = name.strip_prefix("data-").map_or(1, |n| n.parse().unwrap());
        let volume = format!("vol-{n}");
        assert_eq!(
            expanded.get(&volume),
            expanded_before.get(&volume),
            "{volume} was expanded again after its claim was marked 2Gi"
        );
        assert_eq!(expanded.get(&volume), Some(&1), "{volume}");
    }
    let total: usize = expanded.values().sum();
    // At most the calls in flight at the kill (3 workers) are repeated.
    assert!(
        total <= COUNT + 3,
        "{total} expansions for {COUNT} claims: {expanded:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn lease_metrics_and_health_use_upstreams_names() {
    let cluster = Cluster::start(no_node_expansion()).await;
    cluster.fail_first_expansion();
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
async fn bad_flags_exit_with_clear_codes() {
    for (args, code, text) in [
        (&["--no-such-flag"][..], 2, "no-such-flag"),
        (&["--timeout=5"], 2, "timeout"),
        (&["--workers=0"], 1, "--workers"),
        (
            &["--http-endpoint=:1", "--metrics-address=:2"],
            1,
            "metrics-address",
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

/// client-go's elector gives up after `--leader-election-renew-deadline` of failed renewals and
/// the sidecar exits (upstream `klog.Fatal`, here exit 1 from `main`): a replica that cannot
/// prove it leads must stop acting before another one takes over.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_that_cannot_be_renewed_exits_1() {
    let cluster = Cluster::start(no_node_expansion()).await;
    let mut resizer = cluster.replica("replica-a", &FAST_LEADER_ELECTION);
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        cluster.client.clone(),
        "default",
    );
    eventually("replica-a holds the Lease", TIMEOUT, async || {
        let lease = leases
            .get_opt("external-resizer-hostpath-csi-k8s-io")
            .await
            .ok()??;
        (lease.spec?.holder_identity.as_deref() == Some("replica-a")).then_some(())
    })
    .await;
    cluster.request("2Gi").await;
    cluster.capacity_reaches("2Gi").await;
    for verb in ["update", "patch", "get"] {
        cluster
            .server
            .faults()
            .fail(verb, "leases", 500, usize::MAX);
    }
    let status = resizer.wait_exit(TIMEOUT).await.unwrap();
    assert_eq!(status.code(), Some(1));
    let log = resizer.log_text();
    assert!(log.contains("stopped leading"), "{log}");
}
