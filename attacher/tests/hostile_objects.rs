//! The hostile-object suite of csi-attacher (issue 14, "Hostile input"), like csi-provisioner's
//! and csi-resizer's `hostile_objects.rs`: one real `csi-attacher` against the in-memory API
//! server and the mock driver, given at once VolumeAttachments that are wrong in their own way
//! (a PV missing, not CSI, in-tree and refused by the translation, being deleted, with access
//! modes CSI cannot express, with a missing publish Secret; a node without a CSINode, or whose
//! CSINode lacks the driver; a volume or node the driver does not know) and odd but valid ones (a 253-character name, 200 KB of
//! annotations, an inline volume, unicode volume attributes and many mount options). Each wrong
//! one must get its own `status.attachError` and `FailedAttachVolume` Warning with a clear
//! message, no finalizer, and must delete at once; none refused before the driver may reach
//! ControllerPublishVolume; each odd one must attach; a good VolumeAttachment made after all of
//! them must attach too, and the log must have no panic.
//!
//! Every object is one kube-apiserver admits: its validation refuses a VolumeAttachment with
//! both or neither of `persistentVolumeName` and `inlineVolumeSpec` (the in-memory server copies
//! that check), a PV with ReadWriteOncePod beside other modes, or without access modes, so those
//! are not cases here.

#![allow(
    clippy::unwrap_used,
    reason = "shared assertion helpers of the tests panic on failure"
)]

use std::collections::BTreeMap;

use crate::support::*;
use k8s_openapi::api::core::v1::{
    AzureDiskVolumeSource, Event, NFSVolumeSource, PersistentVolume, PersistentVolumeSpec,
    SecretReference,
};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeDriver, CSINodeSpec, VolumeAttachment, VolumeAttachmentSource,
    VolumeAttachmentSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use testbed_cluster::kcm::attach_detach;
use testbed_mock_csi::{DEFAULT_NODE_ID, MockDriverConfig, MockVolume};
use testbed_support::wait::{eventually, within};

/// What a hostile VolumeAttachment must come to.
enum Outcome {
    /// `status.attachError` and a `FailedAttachVolume` Warning containing this.
    Fails(&'static str),
    /// `status.attached`.
    Attaches,
}

/// Where a case fails: before any CSI call, or in the driver.
#[derive(PartialEq)]
enum Stage {
    BeforeTheDriver,
    Driver,
}

/// One VolumeAttachment `name` on `node` for `source`, with `pv` created first (its volume is
/// put in the driver unless `driver_knows_volume` is false).
struct Case {
    name: String,
    node: &'static str,
    source: VolumeAttachmentSource,
    pv: Option<PersistentVolume>,
    driver_knows_volume: bool,
    annotations: BTreeMap<String, String>,
    stage: Stage,
    outcome: Outcome,
}

impl Case {
    /// A VA named `name` for PV `name` (CSI, handle `vol-<name>`) on the default node.
    fn new(name: &str, outcome: Outcome) -> Self {
        Self {
            name: name.to_owned(),
            node: DEFAULT_NODE_ID,
            source: pv_source(name),
            pv: Some(pv(name, &format!("vol-{name}"))),
            driver_knows_volume: true,
            annotations: BTreeMap::new(),
            stage: Stage::BeforeTheDriver,
            outcome,
        }
    }

    fn spec(mut self, change: impl FnOnce(&mut PersistentVolumeSpec)) -> Self {
        change(self.pv.as_mut().unwrap().spec.as_mut().unwrap());
        self
    }

    fn not_csi(self, change: impl FnOnce(&mut PersistentVolumeSpec)) -> Self {
        self.spec(|spec| {
            spec.csi = None;
            change(spec);
        })
    }
}

/// The nodes of the cases beside the default one: one with no CSINode, one whose CSINode has
/// only another driver, one whose CSINode has this driver under a node ID the driver does not
/// serve.
const NO_CSINODE: &str = "node-without-csinode";
const OTHER_DRIVER_ONLY: &str = "node-with-another-driver";
const FOREIGN_NODE_ID: &str = "node-the-driver-does-not-serve";

fn cases() -> Vec<Case> {
    let mut cases = refused();
    cases.extend(odd_but_valid());
    cases
}

/// The wrong ones.
fn refused() -> Vec<Case> {
    let mut pv_deleting = Case::new(
        "pv-deleting",
        Outcome::Fails(r#"PersistentVolume "pv-deleting" is marked for deletion"#),
    );
    pv_deleting.pv.as_mut().unwrap().metadata.finalizers = Some(vec!["example.com/hold".into()]);
    vec![
        Case {
            pv: None,
            ..Case::new(
                "pv-missing",
                Outcome::Fails(r#"persistentvolume "pv-missing" not found"#),
            )
        },
        Case::new(
            "pv-nfs",
            Outcome::Fails("pv spec contained non-csi source that was not migrated"),
        )
        .not_csi(|spec| {
            spec.nfs = Some(NFSVolumeSource {
                server: "nfs.example.com".into(),
                path: "/export".into(),
                ..Default::default()
            });
        }),
        Case::new(
            "pv-in-tree",
            Outcome::Fails(
                "failed to translate in tree pv to CSI: kind(Shared) is not supported in csi migration",
            ),
        )
        .not_csi(|spec| {
            spec.azure_disk = Some(AzureDiskVolumeSource {
                disk_name: "disk-1".into(),
                disk_uri: "/subscriptions/s/disks/disk-1".into(),
                kind: Some("Shared".into()),
                ..Default::default()
            });
        }),
        pv_deleting,
        Case::new(
            "rox-and-rwo",
            Outcome::Fails(
                "CSI does not support ReadOnlyMany and ReadWriteOnce on the same PersistentVolume",
            ),
        )
        .spec(|spec| {
            spec.access_modes = Some(vec!["ReadOnlyMany".into(), "ReadWriteOnce".into()]);
        }),
        Case::new(
            "secret-missing",
            Outcome::Fails(r#"failed to load secret "default/absent": "#),
        )
        .spec(|spec| {
            spec.csi.as_mut().unwrap().controller_publish_secret_ref = Some(SecretReference {
                name: Some("absent".into()),
                namespace: Some("default".into()),
            });
        }),
        Case {
            node: NO_CSINODE,
            ..Case::new(
                "no-csinode",
                Outcome::Fails(r#"csinode.storage.k8s.io "node-without-csinode" not found"#),
            )
        },
        Case {
            node: OTHER_DRIVER_ONLY,
            ..Case::new(
                "driver-not-on-node",
                Outcome::Fails(
                    "CSINode node-with-another-driver does not contain driver hostpath.csi.k8s.io",
                ),
            )
        },
        Case {
            driver_knows_volume: false,
            stage: Stage::Driver,
            ..Case::new(
                "unknown-to-driver",
                Outcome::Fails(
                    "rpc error: code = NotFound desc = volume id vol-unknown-to-driver does not exist in the volumes list",
                ),
            )
        },
        Case {
            node: FOREIGN_NODE_ID,
            stage: Stage::Driver,
            ..Case::new(
                "node-unknown-to-driver",
                Outcome::Fails("rpc error: code = NotFound desc = Not matching Node ID foreign-id"),
            )
        },
    ]
}

fn odd_but_valid() -> Vec<Case> {
    let inline_spec = PersistentVolumeSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        csi: Some(csi_source("vol-inline")),
        ..Default::default()
    };
    vec![
        Case::new(&format!("long-{}", "n".repeat(248)), Outcome::Attaches),
        Case {
            annotations: BTreeMap::from([
                ("example.com/notes".to_owned(), "\u{1f4be}".repeat(50_000)),
                (
                    "example.com/control".to_owned(),
                    "\u{1b}[31m\t\r\n".to_owned(),
                ),
            ]),
            ..Case::new("huge-annotations", Outcome::Attaches)
        },
        Case {
            source: VolumeAttachmentSource {
                persistent_volume_name: None,
                inline_volume_spec: Some(inline_spec),
            },
            pv: None,
            ..Case::new("inline", Outcome::Attaches)
        },
        Case::new("odd-attributes", Outcome::Attaches).spec(|spec| {
            spec.csi.as_mut().unwrap().volume_attributes = Some(
                (0..200)
                    .map(|i| (format!("ключ-{i}"), format!("значение \u{1f4be} {i}")))
                    .collect(),
            );
            spec.mount_options = Some((0..200).map(|i| format!("opt{i}=\u{e9}")).collect());
        }),
    ]
}

/// The CSINodes of the extra nodes.
fn csi_nodes() -> Vec<CSINode> {
    let node = |name: &str, driver: &str, node_id: &str| CSINode {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: CSINodeSpec {
            drivers: vec![CSINodeDriver {
                name: driver.into(),
                node_id: node_id.into(),
                ..Default::default()
            }],
        },
    };
    vec![
        node(OTHER_DRIVER_ONLY, "other.example.com", OTHER_DRIVER_ONLY),
        node(FOREIGN_NODE_ID, DRIVER, "foreign-id"),
    ]
}

/// The `FailedAttachVolume` Events about VolumeAttachment `name`.
async fn failures(cluster: &Cluster, name: &str) -> Vec<Event> {
    let mut events = cluster.events("FailedAttachVolume").await;
    events.retain(|e| e.involved_object.name.as_deref() == Some(name));
    events
}

async fn create(cluster: &Cluster, case: &Case) {
    if let Some(pv) = &case.pv {
        if case.driver_knows_volume {
            cluster.add_pv(pv.clone()).await;
        } else {
            cluster
                .volumes()
                .create(&PostParams::default(), pv)
                .await
                .unwrap();
        }
    }
    let va = VolumeAttachment {
        metadata: ObjectMeta {
            name: Some(case.name.clone()),
            annotations: Some(case.annotations.clone()),
            ..Default::default()
        },
        spec: VolumeAttachmentSpec {
            attacher: DRIVER.into(),
            node_name: case.node.into(),
            source: case.source.clone(),
        },
        status: None,
    };
    cluster
        .attachments()
        .create(&PostParams::default(), &va)
        .await
        .unwrap();
}

/// What `case` came to, if not what it must.
async fn check(cluster: &Cluster, case: &Case) -> Option<String> {
    match case.outcome {
        Outcome::Fails(fragment) => {
            let saved = within(TIMEOUT, async || {
                let error = cluster
                    .attachments()
                    .get(&case.name)
                    .await
                    .ok()?
                    .status?
                    .attach_error?;
                error.message.filter(|m| m.contains(fragment))
            });
            let Some(message) = saved.await else {
                let got = cluster.attachments().get(&case.name).await.unwrap().status;
                return Some(format!(
                    "{}: an attachError with {fragment:?}; got {got:?}",
                    case.name
                ));
            };
            let warned = within(TIMEOUT, async || {
                failures(cluster, &case.name).await.into_iter().find(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.message.as_deref().is_some_and(|m| m.contains(fragment))
                })
            });
            if warned.await.is_none() {
                return Some(format!(
                    "{}: a FailedAttachVolume Warning with {message:?}",
                    case.name
                ));
            }
        }
        Outcome::Attaches => {
            if let Err(err) =
                attach_detach::wait_attached(&cluster.client, &case.name, TIMEOUT).await
            {
                return Some(format!("{}: attached; got {err}", case.name));
            }
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn every_hostile_attachment_gets_its_own_clear_error_and_the_sidecar_keeps_serving() {
    let cluster = Cluster::start(MockDriverConfig::default()).await;
    for node in csi_nodes() {
        cluster.server.put_object(&node).unwrap();
    }
    cluster
        .driver
        .insert_volume(MockVolume::new("vol-inline", 1 << 30));
    let cases = cases();
    for case in &cases {
        create(&cluster, case).await;
    }
    cluster
        .volumes()
        .delete("pv-deleting", &DeleteParams::default())
        .await
        .unwrap();
    // Ten VolumeAttachments retried every second (the harness's --retry-interval-max=1s), each
    // retry a status write and an Event: at the default 5 requests a second the client's token
    // bucket, not the attacher, would set how soon the last Event is written.
    let attacher = cluster.attacher_with(&["--kube-api-qps=50", "--kube-api-burst=100"]);

    let mut mismatches = Vec::new();
    for case in &cases {
        mismatches.extend(check(&cluster, case).await);
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");

    // Still serving: a VolumeAttachment made now attaches.
    let good = cluster.attached().await;
    assert!(good.status.unwrap().attached);

    // Refused before the driver: no ControllerPublishVolume for their volumes.
    let published: Vec<String> = cluster
        .publish_requests()
        .into_iter()
        .map(|r| r.volume_id)
        .collect();
    for case in &cases {
        if case.stage == Stage::BeforeTheDriver && matches!(case.outcome, Outcome::Fails(_)) {
            let handle = format!("vol-{}", case.name);
            assert!(
                !published.contains(&handle),
                "{} reached the driver",
                case.name
            );
        }
    }
    // The odd attributes reached the driver as they are.
    let odd = cluster.last_publish_of("vol-odd-attributes");
    assert_eq!(odd.volume_context.len(), 200);
    assert_eq!(odd.volume_context["ключ-7"], "значение \u{1f4be} 7");

    // Every VolumeAttachment refused before the driver has no finalizer; every one whose
    // volume the driver can release goes when deleted. The one on a node the driver does not
    // serve cannot be unpublished (the driver answers NotFound for the node): upstream retries
    // that forever with a detachError and keeps the finalizer (sidecars.md, detach flow 7), and
    // so does this attacher, so the volume is never dropped while it may still be attached.
    for case in &cases {
        if !matches!(case.outcome, Outcome::Fails(_)) {
            continue;
        }
        let va = cluster.attachments().get(&case.name).await.unwrap();
        if case.stage == Stage::BeforeTheDriver {
            assert!(!has_our_finalizer(&va.metadata), "{}", case.name);
        }
        if case.name == "node-unknown-to-driver" {
            continue;
        }
        cluster.delete_va(&case.name).await;
    }
    cluster
        .attachments()
        .delete("node-unknown-to-driver", &DeleteParams::default())
        .await
        .unwrap();
    let stuck = eventually(
        "a detachError for node-unknown-to-driver",
        TIMEOUT,
        async || {
            let va = cluster
                .attachments()
                .get("node-unknown-to-driver")
                .await
                .ok()?;
            let message = va.status?.detach_error?.message?;
            has_our_finalizer(&va.metadata).then_some(message)
        },
    )
    .await;
    assert!(
        stuck.starts_with("rpc error: code = NotFound desc = Node ID foreign-id does not match"),
        "{stuck}"
    );
    let log = attacher.log_text();
    assert!(!log.contains("panicked"), "{log}");
}
