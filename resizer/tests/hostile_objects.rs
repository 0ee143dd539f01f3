//! The hostile-object suite of csi-resizer (issue 14, "Hostile input"), like csi-provisioner's
//! `hostile_objects.rs`: one real `csi-resizer` against the in-memory API server and the mock
//! driver, given at once bound claims whose expansion is wrong in its own way (requests and
//! PV sizes beyond a byte count, a PV bound to another claim, a missing expansion Secret, a
//! size beyond the driver; in-tree PVs the translation refuses are `tests/migration.rs`'s) and odd but valid ones
//! (fractional and exponent quantities, a huge annotation). Each wrong one must get its own
//! `VolumeResizeFailed` Warning with a clear message, and never a ControllerExpandVolume but
//! where the driver's own refusal is the point; each odd one must reach its size; a good
//! claim grown after all of them must too, and the log must have no panic.
//!
//! Every object is one kube-apiserver admits (quantities are validated as quantities, not as
//! byte counts; a claim's request may only grow, which every case does).

#![allow(
    clippy::unwrap_used,
    reason = "shared assertion helpers of the tests panic on failure"
)]

use std::collections::BTreeMap;

use crate::support::*;
use k8s_openapi::api::core::v1::{Event, PersistentVolume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use proto::csi::v1::ControllerExpandVolumeRequest;
use serde_json::json;
use testbed_mock_csi::Method;
use testbed_support::wait::{eventually, within};

/// What a hostile claim must come to.
enum Outcome {
    /// A `VolumeResizeFailed` Warning whose message contains this.
    Fails(&'static str),
    /// `status.capacity` reaches the request (compared as bytes).
    Grows,
}

/// Claim `data-<n>` bound to `pv-<n>` (changed by `pv`), its request set to `request`.
struct Case {
    name: &'static str,
    pv: fn(&mut PersistentVolume),
    request: &'static str,
    outcome: Outcome,
}

fn keep(_: &mut PersistentVolume) {}

fn pv_size(pv: &mut PersistentVolume, size: &str) {
    pv.spec.as_mut().unwrap().capacity = Some(BTreeMap::from([(
        "storage".to_owned(),
        Quantity(size.to_owned()),
    )]));
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "request-8ei",
            pv: keep,
            request: "8Ei",
            outcome: Outcome::Fails(
                r#"invalid spec.resources.requests.storage "8Ei": quantity is larger than 9223372036854775807 bytes"#,
            ),
        },
        Case {
            name: "request-exponent",
            pv: keep,
            request: "1e40",
            outcome: Outcome::Fails(
                r#"invalid spec.resources.requests.storage "1e40": quantity is larger than"#,
            ),
        },
        Case {
            name: "pv-size-overflow",
            pv: |pv| pv_size(pv, "1e40"),
            request: "2Gi",
            outcome: Outcome::Fails(r#"invalid spec.capacity.storage "1e40""#),
        },
        Case {
            name: "secret-missing",
            pv: |pv| expand_secret(pv, "absent"),
            request: "2Gi",
            outcome: Outcome::Fails(
                r#"failed: error getting secret absent in namespace default: secrets "absent" not found"#,
            ),
        },
        Case {
            name: "above-the-driver",
            pv: keep,
            request: "2Ti",
            outcome: Outcome::Fails("failed: rpc error: code = OutOfRange"),
        },
        Case {
            name: "fraction",
            pv: keep,
            request: "1.5Gi",
            outcome: Outcome::Grows,
        },
        Case {
            name: "exponent",
            pv: keep,
            request: "2e9",
            outcome: Outcome::Grows,
        },
    ]
}

/// The `VolumeResizeFailed` Events of claim `name`.
async fn failures(cluster: &Cluster, name: &str) -> Vec<Event> {
    let mut events = cluster.events("VolumeResizeFailed").await;
    events.retain(|e| e.involved_object.name.as_deref() == Some(name));
    events
}

#[tokio::test(flavor = "multi_thread")]
async fn every_hostile_expansion_gets_its_own_clear_event_and_the_sidecar_keeps_serving() {
    let cluster = Cluster::start(no_node_expansion()).await;
    let cases = cases();
    // Claim 1 (`data`) is the good one, grown at the end; the cases are claims 2...
    for (n, case) in (2..).zip(&cases) {
        cluster.add_claim(n, case.pv).await;
        cluster
            .claims()
            .patch(
                &claim_name(n),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "test.csi.k8s.io/case": case.name,
                    "example.com/notes": "\u{1f4be}".repeat(50_000),
                }}})),
            )
            .await
            .unwrap();
    }
    let resizer = cluster.resizer(&[]);
    for (n, case) in (2..).zip(&cases) {
        cluster.request_of(&claim_name(n), case.request).await;
    }

    let mut mismatches = Vec::new();
    for (n, case) in (2..).zip(&cases) {
        let name = claim_name(n);
        match case.outcome {
            Outcome::Fails(fragment) => {
                let what = format!("{}: a VolumeResizeFailed with {fragment:?}", case.name);
                let found = within(TIMEOUT, async || {
                    failures(&cluster, &name)
                        .await
                        .into_iter()
                        .find(|e| e.message.as_deref().is_some_and(|m| m.contains(fragment)))
                });
                // A case that times out is noted with what the claim got instead, and the
                // next case goes on: one run reports every mismatch.
                if let Some(event) = found.await {
                    assert_eq!(event.type_.as_deref(), Some("Warning"), "{}", case.name);
                } else {
                    let got: Vec<Option<String>> = failures(&cluster, &name)
                        .await
                        .into_iter()
                        .map(|e| e.message)
                        .collect();
                    mismatches.push(format!("{what}; got {got:?}"));
                }
            }
            Outcome::Grows => {
                let want = csi_common::quantity::parse_bytes(case.request).unwrap();
                let what = format!("{}: status.capacity of {want} bytes", case.name);
                eventually(&what, TIMEOUT, async || {
                    let claim = cluster.claims().get(&name).await.ok()?;
                    let have = csi_common::quantity::parse_bytes(&capacity(&claim)?).ok()?;
                    (have >= want).then_some(())
                })
                .await;
            }
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");

    // Still serving: the good claim grows.
    cluster.request("2Gi").await;
    cluster.capacity_reaches("2Gi").await;
    // No ControllerExpandVolume for a claim refused before the driver: the calls are the
    // good claim's, the odd ones', and the driver's own refusal.
    let handles: Vec<String> = cluster
        .driver
        .requests::<ControllerExpandVolumeRequest>(Method::ControllerExpandVolume)
        .into_iter()
        .map(|r| r.volume_id)
        .collect();
    for (n, case) in (2..).zip(&cases) {
        if matches!(case.outcome, Outcome::Fails(_)) && case.name != "above-the-driver" {
            let handle = format!("vol-{n}");
            assert!(
                !handles.contains(&handle),
                "{} reached the driver",
                case.name
            );
        }
    }
    let volumes = Api::<PersistentVolume>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(volumes.items.len(), cases.len() + 1);
    let log = resizer.log_text();
    assert!(!log.contains("panicked"), "{log}");
}
