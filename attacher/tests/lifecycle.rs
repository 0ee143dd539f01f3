//! Whole-binary tests of how `csi-attacher` ends: exit 1 on a lost driver connection and on a
//! lost Lease (spec §1.2, §5.2, §5.4: kubelet restarts the container), exit 0 on SIGTERM with
//! the Lease handed back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{Cluster, LEASE, TIMEOUT};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use testbed_mock_csi::MockDriverConfig;
use testbed_support::leader::FAST_LEADER_ELECTION;
use testbed_support::process::{ChildProcess, Signal};

async fn exit_code(attacher: &mut ChildProcess) -> Option<i32> {
    attacher.wait_exit(TIMEOUT).await.unwrap().code()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_driver_connection_exits_1() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let mut attacher = cluster.attacher();
    // Attached first: the connection was up and in use.
    cluster.attached().await;
    cluster.driver.stop().await.unwrap();
    assert_eq!(exit_code(&mut attacher).await, Some(1));
    let log = attacher.log_text();
    assert!(log.contains("Lost connection"), "{log}");
}

/// client-go's elector gives up after `--leader-election-renew-deadline` of failed renewals and
/// the sidecar exits (upstream `klog.Fatal`, here exit 1 from `main`): a replica that cannot
/// prove it leads must stop acting before another one takes over.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_that_cannot_be_renewed_exits_1() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let mut attacher = cluster.replica("replica-a", &FAST_LEADER_ELECTION);
    cluster.wait_leading("replica-a", TIMEOUT).await;
    cluster.attached().await;
    for verb in ["update", "patch", "get"] {
        cluster
            .server
            .faults()
            .fail(verb, "leases", 500, usize::MAX);
    }
    assert_eq!(exit_code(&mut attacher).await, Some(1));
    let log = attacher.log_text();
    assert!(log.contains("stopped leading"), "{log}");
    cluster.server.faults().clear();
    let lease = Api::<Lease>::namespaced(cluster.client.clone(), "default")
        .get(LEASE)
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("replica-a"),
        "the API server refused every write, so the Lease still names the old holder"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_0_and_hands_the_lease_back() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    let mut attacher = cluster.replica("replica-a", &FAST_LEADER_ELECTION);
    cluster.wait_leading("replica-a", TIMEOUT).await;
    let va = cluster.attached().await;
    attacher.signal(Signal::TERM).unwrap();
    assert_eq!(exit_code(&mut attacher).await, Some(0));
    assert_eq!(
        cluster.lease_holder().await.unwrap_or_default(),
        "",
        "released, so a standby takes over at once"
    );
    // A standby started now leads at once (no lease-duration wait) and detaches.
    let _standby = cluster.replica("replica-b", &FAST_LEADER_ELECTION);
    cluster.wait_leading("replica-b", TIMEOUT).await;
    cluster.detached(va.metadata.name.as_deref().unwrap()).await;
    assert!(!cluster.published_volume("vol-1"));
}
