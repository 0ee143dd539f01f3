//! Whole-binary tests: `csi-resizer` against a driver whose ControllerExpandVolume answers OK
//! with a capacity of 0 or below the request (issue 14, "a driver returning garbage"): a
//! Warning Event naming both sizes, nothing below the request written to the PV or the claim,
//! the expansion retried to the requested size, and the process still working (it serves
//! `/metrics` and expands the next claim).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use testbed_mock_csi::{Action, Fault, Garbage, Method, When};
use testbed_support::wait::eventually;

use crate::support::*;

/// Runs one garbage answer to a 1Gi -> 2Gi expansion and checks the outcome.
async fn garbage_then_good(answered: i64) {
    let cluster = Cluster::start(no_node_expansion()).await;
    cluster.driver.inject(Fault {
        method: Method::ControllerExpandVolume,
        when: When::Nth(1),
        action: Action::Garbage(Garbage::ExpandedCapacity(answered)),
    });
    let http = free_port();
    let _resizer = cluster.resizer(&[&format!("--http-endpoint={http}")]);
    cluster.request("2Gi").await;

    let failed = cluster.event("VolumeResizeFailed").await;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    let message = failed.message.unwrap();
    assert!(
        message.contains(&format!(
            "CSI driver returned capacity {answered} bytes, less than the requested 2147483648 bytes"
        )),
        "{message}"
    );
    // The retry answers the volume's real size; only that is written.
    cluster.capacity_reaches("2Gi").await;
    assert_eq!(pv_capacity(&cluster.volume().await), "2Gi");
    assert_eq!(cluster.expand_requests(), [2 * GI, 2 * GI]);

    eventually("/metrics served", TIMEOUT, async || {
        testbed_support::http_client::get(http, "/metrics", Duration::from_secs(5))
            .await
            .ok()
            .filter(|r| r.status == 200)
    })
    .await;
    cluster.add_claim(2, |_| {}).await;
    cluster.request_of("data-2", "2Gi").await;
    eventually("data-2 expanded", TIMEOUT, async || {
        let claim = cluster.claims().get("data-2").await.ok()?;
        (capacity(&claim).as_deref() == Some("2Gi")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expanded_capacity_of_zero_is_a_warning_and_the_retry_completes() {
    garbage_then_good(0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expanded_capacity_below_the_request_is_a_warning_and_the_retry_completes() {
    garbage_then_good(GI).await;
}
