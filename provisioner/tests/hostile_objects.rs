//! The hostile-object suite (issue 14, "Hostile input"): one real `csi-provisioner` against
//! the in-memory API server and the mock driver, given at once a batch of malformed
//! StorageClasses and claims, each wrong in its own way (bad parameters, secret templates
//! and references, quantities too large for a byte count, selectors, data sources that are
//! missing, unbound, too large, of the wrong mode, group or kind, unicode and control
//! characters, a huge annotation). Each must end with its own clear `ProvisioningFailed`
//! Event (or, where the input is odd but valid, a bound volume), and the batch must leave the
//! sidecar serving: a good claim created after them is bound, no CreateVolume ever carries a
//! hostile claim's name, and the log has no panic.
//!
//! Objects the real kube-apiserver refuses (a negative or missing storage request, a claim
//! name with upper case) cannot reach a sidecar and are not here; every object below is one
//! kube-apiserver v1.36 admits.

#![allow(
    clippy::unwrap_used,
    reason = "shared assertion helpers of the tests panic on failure"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::core::v1::{
    Event, PersistentVolumeClaim, TypedLocalObjectReference, TypedObjectReference,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::PostParams;
use proto::csi::v1::CreateVolumeRequest;
use testbed_mock_csi::Method;
use testbed_support::wait::within;

/// Generous: the tests run in parallel on small CI machines.
const WAIT: Duration = Duration::from_mins(1);

/// What a hostile claim must come to.
enum Outcome {
    /// A `ProvisioningFailed` Warning whose message contains this.
    Fails(&'static str),
    /// Provisioned: the input is odd but valid.
    Bound,
}

/// One hostile input: a claim named `name`, of class `h-<name>` with `parameters` (the
/// good class `fast` when `None`), changed by `edit`.
struct Case {
    name: &'static str,
    parameters: Option<&'static [(&'static str, &'static str)]>,
    edit: fn(&mut PersistentVolumeClaim),
    outcome: Outcome,
}

const SECRET_NAME: &str = "csi.storage.k8s.io/provisioner-secret-name";
const SECRET_NAMESPACE: &str = "csi.storage.k8s.io/provisioner-secret-namespace";

fn nothing(_: &mut PersistentVolumeClaim) {}

fn annotate(claim: &mut PersistentVolumeClaim, key: &str, value: String) {
    claim
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), value);
}

fn size(claim: &mut PersistentVolumeClaim, quantity: &str) {
    let spec = claim.spec.as_mut().unwrap();
    let requests = spec.resources.as_mut().unwrap().requests.as_mut().unwrap();
    requests.insert(
        "storage".to_owned(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(quantity.to_owned()),
    );
}

/// A data source as kube-apiserver stores it: `dataSource` and `dataSourceRef` both set
/// (it copies one into the other for core kinds and snapshots).
fn source(claim: &mut PersistentVolumeClaim, group: Option<&str>, kind: &str, name: &str) {
    let spec = claim.spec.as_mut().unwrap();
    spec.data_source = Some(TypedLocalObjectReference {
        api_group: group.map(str::to_owned),
        kind: kind.to_owned(),
        name: name.to_owned(),
    });
    spec.data_source_ref = Some(TypedObjectReference {
        api_group: group.map(str::to_owned),
        kind: kind.to_owned(),
        name: name.to_owned(),
        namespace: None,
    });
}

#[allow(clippy::too_many_lines, reason = "a table of cases, one entry each")]
fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "reserved-key",
            parameters: Some(&[("csi.storage.k8s.io/bogus", "x")]),
            edit: nothing,
            outcome: Outcome::Fails(
                r#"found unknown parameter key "csi.storage.k8s.io/bogus" with reserved namespace"#,
            ),
        },
        Case {
            name: "two-fstypes",
            parameters: Some(&[("fstype", "ext4"), ("csi.storage.k8s.io/fstype", "xfs")]),
            edit: nothing,
            outcome: Outcome::Fails(r#"with both "fstype" and "csi.storage.k8s.io/fstype""#),
        },
        Case {
            name: "secret-name-alone",
            parameters: Some(&[(SECRET_NAME, "creds")]),
            edit: nothing,
            outcome: Outcome::Fails("Both must be specified"),
        },
        Case {
            name: "secret-both-spellings",
            parameters: Some(&[
                (SECRET_NAME, "creds"),
                (SECRET_NAMESPACE, "default"),
                ("csiProvisionerSecretName", "creds"),
                ("csiProvisionerSecretNamespace", "default"),
            ]),
            edit: nothing,
            outcome: Outcome::Fails(r#"with both "csi" and "csi.storage.k8s.io/" keys"#),
        },
        Case {
            name: "secret-empty-name",
            parameters: Some(&[(SECRET_NAME, ""), (SECRET_NAMESPACE, "default")]),
            edit: nothing,
            outcome: Outcome::Fails("value of either namespace or name is empty"),
        },
        Case {
            name: "secret-unknown-token",
            parameters: Some(&[(SECRET_NAME, "${pvc.uid}"), (SECRET_NAMESPACE, "default")]),
            edit: nothing,
            outcome: Outcome::Fails(r#"invalid tokens: ["pvc.uid"]"#),
        },
        Case {
            name: "secret-namespace-from-claim",
            parameters: Some(&[(SECRET_NAME, "creds"), (SECRET_NAMESPACE, "${pvc.name}")]),
            edit: nothing,
            outcome: Outcome::Fails(r#"invalid tokens: ["pvc.name"]"#),
        },
        Case {
            name: "secret-namespace-from-annotation",
            parameters: Some(&[
                (SECRET_NAME, "creds"),
                (SECRET_NAMESPACE, "${pvc.annotations['team']}"),
            ]),
            edit: |c| annotate(c, "team", "kube-system".to_owned()),
            outcome: Outcome::Fails("invalid tokens"),
        },
        Case {
            name: "secret-unterminated-token",
            parameters: Some(&[(SECRET_NAME, "${pvc.name"), (SECRET_NAMESPACE, "default")]),
            edit: nothing,
            // Go's os.Expand reads an unterminated `${` as the name after it, as upstream.
            outcome: Outcome::Fails(r#"secrets "pvc.name" not found"#),
        },
        Case {
            name: "secret-name-invalid",
            parameters: Some(&[
                (SECRET_NAME, "${pvc.annotations['team']}"),
                (SECRET_NAMESPACE, "default"),
            ]),
            edit: |c| annotate(c, "team", "Not_A_Name!".to_owned()),
            outcome: Outcome::Fails(
                r#"resolved to "Not_A_Name!" which is not a valid secret name"#,
            ),
        },
        Case {
            name: "secret-name-unicode",
            parameters: Some(&[
                (SECRET_NAME, "${pvc.annotations['team']}"),
                (SECRET_NAMESPACE, "default"),
            ]),
            edit: |c| annotate(c, "team", "t\u{e9}am\u{202e}\u{7}".to_owned()),
            // Control characters are escaped in the message, as Go's %q does.
            outcome: Outcome::Fails(
                r#"resolved to "téam\u202e\a" which is not a valid secret name"#,
            ),
        },
        Case {
            name: "secret-name-too-long",
            parameters: Some(&[
                (SECRET_NAME, "${pvc.annotations['team']}"),
                (SECRET_NAMESPACE, "default"),
            ]),
            edit: |c| annotate(c, "team", "a".repeat(300)),
            outcome: Outcome::Fails("which is not a valid secret name"),
        },
        Case {
            name: "secret-name-empty-annotation",
            parameters: Some(&[
                (SECRET_NAME, "${pvc.annotations['missing']}"),
                (SECRET_NAMESPACE, "default"),
            ]),
            edit: nothing,
            outcome: Outcome::Fails(r#"invalid tokens: ["pvc.annotations['missing']"]"#),
        },
        Case {
            name: "secret-namespace-invalid",
            parameters: Some(&[(SECRET_NAME, "creds"), (SECRET_NAMESPACE, "Bad Namespace")]),
            edit: nothing,
            outcome: Outcome::Fails(r#""Bad Namespace" is not a valid namespace name"#),
        },
        Case {
            name: "secret-missing",
            parameters: Some(&[(SECRET_NAME, "absent"), (SECRET_NAMESPACE, "default")]),
            edit: nothing,
            outcome: Outcome::Fails(
                r#"error getting secret absent in namespace default: secrets "absent" not found"#,
            ),
        },
        Case {
            name: "publish-secret-token",
            parameters: Some(&[
                (
                    "csi.storage.k8s.io/controller-publish-secret-name",
                    "${pv.uid}",
                ),
                (
                    "csi.storage.k8s.io/controller-publish-secret-namespace",
                    "default",
                ),
            ]),
            edit: nothing,
            outcome: Outcome::Fails(r#"invalid tokens: ["pv.uid"]"#),
        },
        Case {
            name: "request-8ei",
            parameters: None,
            edit: |c| size(c, "8Ei"),
            outcome: Outcome::Fails(r#"invalid storage request "8Ei""#),
        },
        Case {
            name: "request-exponent",
            parameters: None,
            edit: |c| size(c, "1e40"),
            outcome: Outcome::Fails(r#"invalid storage request "1e40""#),
        },
        Case {
            name: "request-above-the-driver",
            parameters: None,
            edit: |c| size(c, "2Ti"),
            outcome: Outcome::Fails("rpc error: code = OutOfRange"),
        },
        Case {
            name: "request-milli",
            parameters: None,
            edit: |c| size(c, "1500m"),
            outcome: Outcome::Bound,
        },
        Case {
            name: "selector",
            parameters: None,
            edit: |c| {
                c.spec.as_mut().unwrap().selector = Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("tier".to_owned(), "db".to_owned())])),
                    match_expressions: None,
                });
            },
            outcome: Outcome::Fails("claim Selector is not supported"),
        },
        Case {
            name: "clone-missing",
            parameters: None,
            edit: |c| source(c, None, "PersistentVolumeClaim", "ghost"),
            outcome: Outcome::Fails(
                "PersistentVolumeClaim default/ghost specified as the data source does not exist",
            ),
        },
        Case {
            name: "clone-unbound",
            parameters: None,
            edit: |c| source(c, None, "PersistentVolumeClaim", "pending-source"),
            outcome: Outcome::Fails("is not yet bound to a PV"),
        },
        Case {
            name: "clone-too-small",
            parameters: None,
            edit: |c| source(c, None, "PersistentVolumeClaim", "big-source"),
            outcome: Outcome::Fails(
                "must be greater than or equal in size to the specified PVC data source, requested 1048576 but source is 4194304",
            ),
        },
        Case {
            name: "clone-other-mode",
            parameters: None,
            edit: |c| {
                size(c, "8Mi");
                c.spec.as_mut().unwrap().volume_mode = Some("Block".to_owned());
                source(c, None, "PersistentVolumeClaim", "big-source");
            },
            outcome: Outcome::Fails(
                "must have the same volume mode for cloning. Source is Filesystem. Requested is Block",
            ),
        },
        Case {
            name: "snapshot-missing",
            parameters: None,
            edit: |c| {
                source(
                    c,
                    Some("snapshot.storage.k8s.io"),
                    "VolumeSnapshot",
                    "ghost",
                );
            },
            outcome: Outcome::Fails(
                "VolumeSnapshot default/ghost specified as the data source does not exist",
            ),
        },
        Case {
            name: "snapshot-wrong-group",
            parameters: None,
            edit: |c| source(c, Some("example.com"), "VolumeSnapshot", "snap"),
            outcome: Outcome::Fails("Expected snapshot.storage.k8s.io, Got example.com"),
        },
        Case {
            name: "source-without-name",
            parameters: None,
            edit: |c| source(c, None, "PersistentVolumeClaim", ""),
            outcome: Outcome::Fails("the PVC source not found for PVC"),
        },
        Case {
            name: "cross-namespace-source",
            parameters: None,
            edit: |c| {
                source(c, None, "PersistentVolumeClaim", "elsewhere");
                let spec = c.spec.as_mut().unwrap();
                spec.data_source = None;
                spec.data_source_ref.as_mut().unwrap().namespace = Some("other".to_owned());
            },
            outcome: Outcome::Fails("CrossNamespaceVolumeDataSource feature is disabled"),
        },
        Case {
            name: "huge-annotation",
            parameters: None,
            edit: |c| annotate(c, "example.com/notes", "\u{1f4be}".repeat(60_000)),
            outcome: Outcome::Bound,
        },
        Case {
            name: "control-characters",
            parameters: Some(&[("note", "line\nbreak\u{0}nul\u{1b}[31mred")]),
            edit: |c| annotate(c, "example.com/notes", "\u{7}\u{8}\r\n\u{202e}".to_owned()),
            outcome: Outcome::Bound,
        },
    ]
}

fn hostile_class(name: &str, parameters: &[(&str, &str)]) -> StorageClass {
    let mut class = class(&format!("h-{name}"), "Immediate");
    class.parameters = Some(string_map(parameters));
    class
}

/// The `ProvisioningFailed` Events of claim `name`.
async fn failures(cluster: &Cluster, name: &str) -> Vec<Event> {
    let mut events = cluster.events("ProvisioningFailed").await;
    events.retain(|e| e.involved_object.name.as_deref() == Some(name));
    events
}

#[tokio::test]
async fn every_hostile_object_gets_its_own_clear_event_and_the_sidecar_keeps_serving() {
    let cluster = Cluster::with_driver(data_source_driver_config()).await;
    cluster.create_class(class("fast", "Immediate")).await;
    // Clone sources: one Pending (its class names another driver), one Bound and larger
    // than the clones asking for it.
    let mut other = class("other-driver", "Immediate");
    other.provisioner = "other.csi.k8s.io".to_owned();
    cluster.create_class(other).await;
    cluster
        .create_claim("pending-source", "other-driver", "1Mi")
        .await;
    cluster.create_claim("big-source", "fast", "4Mi").await;

    let cases = cases();
    for case in &cases {
        let class_name = match case.parameters {
            Some(parameters) => {
                cluster
                    .create_class(hostile_class(case.name, parameters))
                    .await;
                format!("h-{}", case.name)
            }
            None => "fast".to_owned(),
        };
        let mut claim = claim(case.name, &class_name, "1Mi");
        (case.edit)(&mut claim);
        cluster
            .claims()
            .create(&PostParams::default(), &claim)
            .await
            .unwrap_or_else(|err| panic!("{}: kube-apiserver admits it: {err}", case.name));
    }
    let provisioner = cluster.provisioner("csi-provisioner-0", &[]);
    cluster.bound("big-source", WAIT).await;

    let mut mismatches = Vec::new();
    for case in &cases {
        match case.outcome {
            Outcome::Fails(fragment) => {
                let what = format!(
                    "{}: a ProvisioningFailed Event with {fragment:?}",
                    case.name
                );
                let found = within(WAIT, async || {
                    failures(&cluster, case.name)
                        .await
                        .into_iter()
                        .find(|e| e.message.as_deref().is_some_and(|m| m.contains(fragment)))
                });
                // A case that times out is noted with what the claim got instead, and the
                // next case goes on: one run reports every mismatch.
                if let Some(event) = found.await {
                    assert_eq!(event.type_.as_deref(), Some("Warning"), "{}", case.name);
                } else {
                    let got: Vec<Option<String>> = failures(&cluster, case.name)
                        .await
                        .into_iter()
                        .map(|e| e.message)
                        .collect();
                    mismatches.push(format!("{what}; got {got:?}"));
                }
            }
            Outcome::Bound => {
                cluster.bound(case.name, WAIT).await;
            }
        }
    }

    assert!(mismatches.is_empty(), "{mismatches:#?}");
    // Still serving after all of it: a good claim made now is bound.
    cluster.create_claim("after-the-storm", "fast", "1Mi").await;
    cluster.bound("after-the-storm", WAIT).await;
    let failing: Vec<&str> = cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Fails(_)))
        .map(|c| c.name)
        .collect();
    assert!(failing.len() >= 25, "{} failing cases", failing.len());
    // No CreateVolume for a claim that fails before the driver; the driver's own refusal
    // (`request-above-the-driver`) is the only one that reaches it.
    let requests: Vec<CreateVolumeRequest> = cluster.driver.requests(Method::CreateVolume);
    let claims = cluster.claims();
    for name in failing.iter().filter(|n| **n != "request-above-the-driver") {
        let uid = claims.get(name).await.unwrap().metadata.uid.unwrap();
        assert!(
            !requests.iter().any(|r| r.name == format!("pvc-{uid}")),
            "{name} reached CreateVolume"
        );
    }
    let log = provisioner.log();
    assert!(!log.contains("panicked"), "{log}");
}
