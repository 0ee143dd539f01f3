use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolumeClaimCondition,
    PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeSpec,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const GI: i64 = 1 << 30;
const DRIVER: &str = "hostpath.csi.k8s.io";

fn q(s: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([("storage".to_owned(), Quantity(s.to_owned()))])
}

/// A Bound claim asking for 2Gi with 1Gi, bound to `pv-1`.
fn pvc() -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-1".into()),
            resource_version: Some("10".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: Some("pv-1".into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(q("2Gi")),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            capacity: Some(q("1Gi")),
            ..Default::default()
        }),
    }
}

/// Our driver's 1Gi PV bound to `pvc()`.
fn pv() -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv-1".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(q("1Gi")),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: "vol-1".into(),
                ..Default::default()
            }),
            claim_ref: Some(ObjectReference {
                namespace: Some("ns".into()),
                name: Some("data".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with(
    mut pvc: PersistentVolumeClaim,
    f: impl FnOnce(&mut PersistentVolumeClaim),
) -> PersistentVolumeClaim {
    f(&mut pvc);
    pvc
}

fn with_pv(f: impl FnOnce(&mut PersistentVolume)) -> PersistentVolume {
    let mut pv = pv();
    f(&mut pv);
    pv
}

/// name, claim, cached PV, expected outcome.
type QualifyCase = (
    &'static str,
    PersistentVolumeClaim,
    Option<PersistentVolume>,
    Result<(), Skip>,
);

#[test]
fn which_claims_qualify() {
    let unbound = with(pvc(), |p| {
        p.status.as_mut().unwrap().phase = Some("Pending".into());
    });
    let no_volume = with(pvc(), |p| p.spec.as_mut().unwrap().volume_name = None);
    let not_growing = with(pvc(), |p| {
        p.status.as_mut().unwrap().capacity = Some(q("2Gi"));
    });
    let shrinking = with(pvc(), |p| {
        p.status.as_mut().unwrap().capacity = Some(q("3Gi"));
    });
    let delegated = with(pvc(), |p| {
        p.metadata.annotations = Some(BTreeMap::from([(
            STORAGE_RESIZER_ANNOTATION.to_owned(),
            DRIVER.to_owned(),
        )]));
    });
    let other_driver =
        with_pv(|v| v.spec.as_mut().unwrap().csi.as_mut().unwrap().driver = "other".into());
    let in_tree = with_pv(|v| v.spec.as_mut().unwrap().csi = None);
    let other_uid = with_pv(|v| {
        v.spec.as_mut().unwrap().claim_ref.as_mut().unwrap().uid = Some("uid-2".into());
    });
    let other_ns = with_pv(|v| {
        v.spec
            .as_mut()
            .unwrap()
            .claim_ref
            .as_mut()
            .unwrap()
            .namespace = Some("x".into());
    });
    let no_ref = with_pv(|v| v.spec.as_mut().unwrap().claim_ref = None);

    let cases: Vec<QualifyCase> = vec![
        ("qualifies", pvc(), Some(pv()), Ok(())),
        ("unbound", unbound, Some(pv()), Err(Skip::NoResizeNeeded)),
        (
            "no volumeName",
            no_volume,
            Some(pv()),
            Err(Skip::NoResizeNeeded),
        ),
        (
            "request == capacity",
            not_growing,
            Some(pv()),
            Err(Skip::NoResizeNeeded),
        ),
        (
            "request < capacity",
            shrinking,
            Some(pv()),
            Err(Skip::NoResizeNeeded),
        ),
        (
            "PV not cached",
            pvc(),
            None,
            Err(Skip::VolumeNotCached("pv-1".into())),
        ),
        (
            "other driver",
            pvc(),
            Some(other_driver),
            Err(Skip::NotOurs),
        ),
        ("in-tree", pvc(), Some(in_tree.clone()), Err(Skip::NotOurs)),
        (
            "in-tree delegated to a driver no in-tree plugin migrated to",
            delegated,
            Some(in_tree),
            Err(Skip::NotOurs),
        ),
        (
            "claimRef uid",
            pvc(),
            Some(other_uid),
            Err(Skip::ClaimRefMismatch("pv-1".into())),
        ),
        (
            "claimRef namespace",
            pvc(),
            Some(other_ns),
            Err(Skip::ClaimRefMismatch("pv-1".into())),
        ),
        (
            "no claimRef",
            pvc(),
            Some(no_ref),
            Err(Skip::ClaimRefMismatch("pv-1".into())),
        ),
    ];
    for (name, pvc, pv, want) in cases {
        let got = claim(&pvc, pv.as_ref(), DRIVER).map(|_| ());
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn bad_input_is_a_user_error_not_a_panic() {
    let bad_request = with(pvc(), |p| {
        p.spec
            .as_mut()
            .unwrap()
            .resources
            .as_mut()
            .unwrap()
            .requests = Some(q("2Gb"));
    });
    let err = claim(&bad_request, Some(&pv()), DRIVER).unwrap_err();
    assert!(
        matches!(
            err,
            Skip::Quantity {
                field: "spec.resources.requests.storage",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_user_error() && !err.retry());
    assert!(Skip::VolumeNotCached("pv".into()).retry());
}

#[test]
fn an_in_tree_pv_is_a_migration_drivers_when_the_claim_names_it_resizer() {
    const EBS: &str = "ebs.csi.aws.com";
    let in_tree = with_pv(|v| {
        let spec = v.spec.as_mut().unwrap();
        spec.csi = None;
        spec.aws_elastic_block_store = Some(
            k8s_openapi::api::core::v1::AWSElasticBlockStoreVolumeSource {
                volume_id: "vol-1".into(),
                ..Default::default()
            },
        );
    });
    let resizer = |name: &str| {
        with(pvc(), |p| {
            p.metadata.annotations = Some(BTreeMap::from([(
                STORAGE_RESIZER_ANNOTATION.to_owned(),
                name.to_owned(),
            )]));
        })
    };
    let cases = [
        ("named", resizer(EBS), true),
        (
            "another driver named",
            resizer("pd.csi.storage.gke.io"),
            false,
        ),
        (
            "the in-tree plugin named (migration off)",
            resizer("kubernetes.io/aws-ebs"),
            false,
        ),
        ("not named", pvc(), false),
    ];
    for (name, pvc, ours) in cases {
        let got = claim(&pvc, Some(&in_tree), EBS);
        assert_eq!(got.is_ok(), ours, "{name}: {got:?}");
        if !ours {
            assert_eq!(got, Err(Skip::NotOurs), "{name}");
        }
    }
}

#[test]
fn claim_reads_sizes_and_state() {
    let pvc = with(pvc(), |p| {
        let status = p.status.as_mut().unwrap();
        status.allocated_resources = Some(q("2Gi"));
        status.allocated_resource_statuses = Some(BTreeMap::from([(
            "storage".to_owned(),
            "ControllerResizeInProgress".to_owned(),
        )]));
        status.conditions = Some(vec![PersistentVolumeClaimCondition {
            type_: "FileSystemResizePending".into(),
            status: "True".into(),
            ..Default::default()
        }]);
    });
    assert_eq!(
        claim(&pvc, Some(&pv()), DRIVER).unwrap(),
        Claim {
            spec: 2 * GI,
            pv: GI,
            capacity: GI,
            allocated: Some(2 * GI),
            resize_status: Some("ControllerResizeInProgress".into()),
            fs_resize_pending: true,
        }
    );
}

fn row(
    spec: i64,
    pv: i64,
    allocated: Option<i64>,
    status: Option<&str>,
    fs_pending: bool,
) -> Claim {
    Claim {
        spec,
        pv,
        capacity: GI,
        allocated,
        resize_status: status.map(str::to_owned),
        fs_resize_pending: fs_pending,
    }
}

/// Every row of spec §2.4, expand-and-recover step 3.
#[test]
fn target_size_table() {
    use resize_status::{
        CONTROLLER_IN_PROGRESS as CIP, CONTROLLER_INFEASIBLE as CINF, NODE_IN_PROGRESS as NIP,
        NODE_INFEASIBLE as NINF, NODE_PENDING as NP,
    };
    let plain = History::default();
    let after_final = History {
        final_error: true,
        trivial: false,
    };
    let trivial = History {
        final_error: false,
        trivial: true,
    };
    let g = |n: i64| n * GI;
    #[rustfmt::skip]
    let cases: Vec<(&str, Claim, History, Option<i64>)> = vec![
        // pvSize < spec
        ("pv<spec, NodeResizeInfeasible → allocated", row(g(3), g(1), Some(g(2)), Some(NINF), false), plain, Some(g(2))),
        ("pv<spec, NodeResizePending, pv<allocated → allocated", row(g(3), g(1), Some(g(2)), Some(NP), false), plain, Some(g(2))),
        ("pv<spec, NodeResizePending, pv>=allocated → nothing", row(g(3), g(2), Some(g(2)), Some(NP), false), plain, None),
        ("pv<spec, NodeResizeInProgress, pv<allocated → allocated", row(g(3), g(1), Some(g(2)), Some(NIP), false), plain, Some(g(2))),
        ("pv<spec, NodeResizeInProgress, pv>=allocated → nothing", row(g(3), g(2), Some(g(2)), Some(NIP), false), plain, None),
        ("pv<spec, ControllerResizeInProgress, uncertain → allocated", row(g(2), g(1), Some(g(10)), Some(CIP), false), plain, Some(g(10))),
        ("pv<spec, ControllerResizeInProgress, after final error → spec", row(g(2), g(1), Some(g(10)), Some(CIP), false), after_final, Some(g(2))),
        ("pv<spec, ControllerResizeInfeasible → spec", row(g(2), g(1), Some(g(10)), Some(CINF), false), plain, Some(g(2))),
        ("pv<spec, no status → spec", row(g(2), g(1), None, None, false), plain, Some(g(2))),
        ("pv<spec, no status, old allocated → spec", row(g(3), g(1), Some(g(2)), None, false), plain, Some(g(3))),
        // pvSize >= spec
        ("pv>=spec, NodeResizePending → nothing", row(g(2), g(2), Some(g(2)), Some(NP), false), plain, None),
        ("pv>=spec, NodeResizeInProgress → nothing", row(g(2), g(2), Some(g(2)), Some(NIP), false), plain, None),
        ("pv>=spec, NodeResizeInfeasible → allocated", row(g(2), g(3), Some(g(3)), Some(NINF), false), plain, Some(g(3))),
        ("pv>=spec, NodeResizeInfeasible, trivial → spec", row(g(2), g(3), Some(g(3)), Some(NINF), false), trivial, Some(g(2))),
        ("pv>=spec, ControllerResizeInProgress → allocated", row(g(2), g(2), Some(g(2)), Some(CIP), false), plain, Some(g(2))),
        ("pv>=spec, ControllerResizeInfeasible → allocated", row(g(2), g(2), Some(g(4)), Some(CINF), false), plain, Some(g(4))),
        ("pv>=spec, no status, allocated → allocated", row(g(2), g(2), Some(g(2)), None, false), plain, Some(g(2))),
        ("pv>=spec, no status, no allocated, FileSystemResizePending → nothing", row(g(2), g(2), None, None, true), plain, None),
        ("pv>=spec, no status, no allocated → spec", row(g(2), g(2), None, None, false), plain, Some(g(2))),
    ];
    for (name, claim, history, want) in cases {
        assert_eq!(target(&claim, history), want, "{name}");
    }
}

#[test]
fn update_filter_follows_the_enqueue_rules() {
    let old = pvc();
    let bumped = |f: fn(&mut PersistentVolumeClaim)| {
        with(pvc(), |p| {
            p.metadata.resource_version = Some("11".into());
            f(p);
        })
    };
    let cases: Vec<(&str, PersistentVolumeClaim, bool)> = vec![
        ("resync (same resourceVersion)", pvc(), true),
        (
            "unrelated change",
            bumped(|p| p.metadata.labels = Some(BTreeMap::new())),
            false,
        ),
        (
            "request grew",
            bumped(|p| {
                p.spec
                    .as_mut()
                    .unwrap()
                    .resources
                    .as_mut()
                    .unwrap()
                    .requests = Some(q("3Gi"));
            }),
            true,
        ),
        (
            "request lowered (recovery)",
            bumped(|p| {
                p.spec
                    .as_mut()
                    .unwrap()
                    .resources
                    .as_mut()
                    .unwrap()
                    .requests = Some(q("1500Mi"));
            }),
            true,
        ),
        (
            "storage-resizer annotation",
            bumped(|p| {
                p.metadata.annotations = Some(BTreeMap::from([(
                    STORAGE_RESIZER_ANNOTATION.to_owned(),
                    DRIVER.to_owned(),
                )]));
            }),
            true,
        ),
        (
            "capacity grew",
            bumped(|p| p.status.as_mut().unwrap().capacity = Some(q("2Gi"))),
            true,
        ),
        (
            "resize status changed",
            bumped(|p| {
                p.status.as_mut().unwrap().allocated_resource_statuses = Some(BTreeMap::from([(
                    "storage".to_owned(),
                    "NodeResizeInfeasible".to_owned(),
                )]));
            }),
            true,
        ),
    ];
    for (name, new, want) in cases {
        assert_eq!(update_needs_sync(&old, &new), want, "{name}");
    }
}

#[test]
fn pre_resize_annotation_goes_once_node_expansion_is_complete() {
    let annotated = |size: &str| {
        with_pv(|v| {
            v.metadata.annotations = Some(BTreeMap::from([(
                names::PRE_RESIZE_CAPACITY.to_owned(),
                "1Gi".to_owned(),
            )]));
            v.spec.as_mut().unwrap().capacity = Some(q(size));
        })
    };
    assert!(pre_resize_annotation_done(
        &pvc(),
        &annotated("1Gi"),
        DRIVER
    ));
    assert!(!pre_resize_annotation_done(
        &pvc(),
        &annotated("1Gi"),
        "other.driver"
    ));
    assert_eq!(
        claim_of_annotated_volume(&annotated("1Gi")).as_deref(),
        Some("ns/data")
    );
    assert_eq!(claim_of_annotated_volume(&pv()), None);
    assert!(!pre_resize_annotation_done(
        &pvc(),
        &annotated("2Gi"),
        DRIVER
    ));
    assert!(!pre_resize_annotation_done(&pvc(), &pv(), DRIVER));
}

/// Spec §2.4 legacy flow: the PV is smaller than the request, or it is not but no
/// `FileSystemResizePending` says the controller part is done. Recovery fields are ignored.
#[test]
fn legacy_target_table() {
    let g = |n: i64| n * GI;
    #[rustfmt::skip]
    let cases = [
        ("pv<spec → spec", row(g(2), g(1), None, None, false), Some(g(2))),
        ("pv<spec, FileSystemResizePending → spec", row(g(3), g(2), None, None, true), Some(g(3))),
        ("pv>=spec, no FileSystemResizePending → spec (learn about node expansion)", row(g(2), g(2), None, None, false), Some(g(2))),
        ("pv>=spec, FileSystemResizePending → nothing (kubelet's turn)", row(g(2), g(2), None, None, true), None),
        ("recovery fields ignored", row(g(2), g(1), Some(g(10)), Some(resize_status::CONTROLLER_IN_PROGRESS), false), Some(g(2))),
    ];
    for (name, claim, want) in cases {
        assert_eq!(legacy_target(&claim), want, "{name}");
    }
}

/// Property tests (issue 14): the decide functions over arbitrary sizes, states and hostile
/// quantity strings. 2 × 4000 executions per run.
mod properties {
    use proptest::prelude::*;

    use super::*;

    fn status() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            Just(Some(resize_status::CONTROLLER_IN_PROGRESS.to_owned())),
            Just(Some(resize_status::CONTROLLER_INFEASIBLE.to_owned())),
            Just(Some(resize_status::NODE_PENDING.to_owned())),
            Just(Some(resize_status::NODE_IN_PROGRESS.to_owned())),
            Just(Some(resize_status::NODE_INFEASIBLE.to_owned())),
            any::<String>().prop_map(Some),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// The target is always a size the user or the API asked for: the request or the
        /// allocated size, never one the function made up.
        #[test]
        fn the_target_is_the_request_or_the_allocated_size(
            spec in 0..=i64::MAX,
            pv in 0..=i64::MAX,
            capacity in 0..=i64::MAX,
            allocated in proptest::option::of(0..=i64::MAX),
            resize_status in status(),
            fs_resize_pending: bool,
            final_error: bool,
            trivial: bool,
        ) {
            let claim = Claim { spec, pv, capacity, allocated, resize_status, fs_resize_pending };
            if let Some(size) = target(&claim, History { final_error, trivial }) {
                prop_assert!(size == spec || Some(size) == allocated, "{claim:?} -> {size}");
            }
        }

        /// Any string in the claim's and the PV's storage fields is parsed or refused as a
        /// user error; never a panic, never a negative size.
        #[test]
        fn hostile_quantities_in_claim_and_volume_are_user_errors(
            request in ".{0,40}",
            capacity in ".{0,40}",
            pv_size in "[-+0-9.eEkMGTPKi]{0,30}",
        ) {
            let pvc = with(pvc(), |c| {
                c.spec.as_mut().unwrap().resources.as_mut().unwrap().requests = Some(q(&request));
                c.status.as_mut().unwrap().capacity = Some(q(&capacity));
            });
            let pv = with_pv(|v| v.spec.as_mut().unwrap().capacity = Some(q(&pv_size)));
            match claim(&pvc, Some(&pv), DRIVER) {
                Ok(c) => prop_assert!(c.spec >= 0 && c.pv >= 0 && c.capacity >= 0),
                Err(skip) => prop_assert!(
                    skip.is_user_error() || skip == Skip::NoResizeNeeded,
                    "{skip:?}"
                ),
            }
        }
    }
}
