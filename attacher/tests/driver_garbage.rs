//! Whole-binary tests: `csi-attacher` against a driver whose ControllerPublishVolume answers OK
//! with a 1 MiB publish context (issue 14, "a driver returning garbage"): a Warning Event
//! naming the size, no panic (the process keeps serving `/metrics` and attaches the next
//! volume), and the volume published by that call is not lost: the retry records it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use testbed_mock_csi::{Action, Fault, Garbage, Method, MockDriverConfig, When};
use testbed_support::wait::eventually;

use crate::support::{Cluster, TIMEOUT, free_port, metrics};

#[tokio::test(flavor = "multi_thread")]
async fn a_one_mib_publish_context_is_a_warning_and_the_retry_attaches() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    cluster.driver.inject(Fault {
        method: Method::ControllerPublishVolume,
        when: When::Nth(1),
        action: Action::Garbage(Garbage::PublishContextBytes(1 << 20)),
    });
    let http = free_port();
    let _attacher = cluster.attacher_with(&[&format!("--http-endpoint={http}")]);

    let name = cluster.request_attach("pv-1").await;
    let event = cluster.event_about(&name, "FailedAttachVolume").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let message = event.message.unwrap();
    assert!(
        message.contains(
            "the driver's publish context has 1048583 bytes of keys and values, more than the 262144"
        ),
        "{message}"
    );
    // The retry's publish answers normally: the VA is attached, so the volume the first call
    // published is recorded, not lost.
    testbed_cluster::kcm::attach_detach::wait_attached(&cluster.client, &name, TIMEOUT)
        .await
        .unwrap();
    assert!(cluster.published());

    eventually("/metrics served", TIMEOUT, async || metrics(http).await).await;
    cluster.add_volume("pv-2", "vol-2").await;
    let va = cluster.attached_pv("pv-2").await;
    assert!(va.status.unwrap().attached);
    assert!(cluster.published_volume("vol-2"));
}
