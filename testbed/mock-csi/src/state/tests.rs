use std::collections::BTreeMap;

use proto::csi::v1 as csi;
use tonic::Code;

use super::*;
use crate::config::{DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY};

const GI: i64 = 1 << 30;

fn mount_cap() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: Some(csi::volume_capability::AccessType::Mount(
            csi::volume_capability::MountVolume::default(),
        )),
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter.into(),
        }),
    }
}

fn block_cap() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: Some(csi::volume_capability::AccessType::Block(
            csi::volume_capability::BlockVolume::default(),
        )),
        ..mount_cap()
    }
}

fn create(name: &str, required: i64, limit: i64) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.to_owned(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: required,
            limit_bytes: limit,
        }),
        volume_capabilities: vec![mount_cap()],
        ..Default::default()
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, Status>) -> Code {
    r.expect_err("expected an error").code()
}

fn created(t: &mut VolumeTable, cfg: &MockDriverConfig, name: &str, size: i64) -> csi::Volume {
    t.create_volume(cfg, create(name, size, 0))
        .expect("create")
        .volume
        .expect("volume")
}

#[test]
fn create_volume_is_idempotent_by_name() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let first = created(&mut t, &cfg, "pvc-1", GI);
    let again = created(&mut t, &cfg, "pvc-1", GI);
    assert_eq!(first, again);
    assert_eq!(t.snapshot().len(), 1);
    assert_eq!(first.capacity_bytes, GI);
    assert_eq!(first.volume_id, volume_id_for("pvc-1"));
}

#[test]
fn create_volume_with_same_name_but_bigger_size_is_already_exists() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    created(&mut t, &cfg, "pvc-1", GI);
    assert_eq!(
        code(t.create_volume(&cfg, create("pvc-1", 2 * GI, 0))),
        Code::AlreadyExists
    );
    // A limit below the existing size is just as incompatible.
    assert_eq!(
        code(t.create_volume(&cfg, create("pvc-1", 0, GI / 2))),
        Code::AlreadyExists
    );
    // A smaller requirement is satisfied by the existing volume.
    assert!(t.create_volume(&cfg, create("pvc-1", GI / 2, 0)).is_ok());
}

#[test]
fn create_volume_rejects_missing_name_capabilities_and_bad_ranges() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    assert_eq!(
        code(t.create_volume(&cfg, create("", GI, 0))),
        Code::InvalidArgument
    );
    let no_caps = csi::CreateVolumeRequest {
        volume_capabilities: vec![],
        ..create("a", GI, 0)
    };
    assert_eq!(code(t.create_volume(&cfg, no_caps)), Code::InvalidArgument);
    let mixed = csi::CreateVolumeRequest {
        volume_capabilities: vec![mount_cap(), block_cap()],
        ..create("a", GI, 0)
    };
    assert_eq!(code(t.create_volume(&cfg, mixed)), Code::InvalidArgument);
    assert_eq!(
        code(t.create_volume(&cfg, create("a", 2 * GI, GI))),
        Code::InvalidArgument
    );
    assert_eq!(
        code(t.create_volume(&cfg, create("a", -1, 0))),
        Code::InvalidArgument
    );
    assert!(t.snapshot().is_empty());
}

#[test]
fn create_volume_above_the_maximum_size_is_out_of_range_with_host_path_message() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let err = t
        .create_volume(&cfg, create("big", 2 << 40, 0))
        .expect_err("too big");
    assert_eq!(err.code(), Code::OutOfRange);
    assert_eq!(
        err.message(),
        "Requested capacity 2199023255552 exceeds maximum allowed 1099511627776"
    );
}

#[test]
fn create_volume_beyond_total_capacity_is_resource_exhausted() {
    let cfg = MockDriverConfig {
        total_capacity: Some(3 * GI),
        ..MockDriverConfig::default()
    };
    let mut t = VolumeTable::default();
    created(&mut t, &cfg, "a", 2 * GI);
    assert_eq!(
        code(t.create_volume(&cfg, create("b", 2 * GI, 0))),
        Code::ResourceExhausted
    );
    created(&mut t, &cfg, "b", GI);
}

#[test]
fn capacity_is_rounded_up_to_the_allocation_unit_within_the_limit() {
    let cfg = MockDriverConfig {
        allocation_unit: GI,
        ..MockDriverConfig::default()
    };
    let mut t = VolumeTable::default();
    assert_eq!(created(&mut t, &cfg, "a", 1).capacity_bytes, GI);
    assert_eq!(
        code(t.create_volume(&cfg, create("b", 1, GI / 2))),
        Code::OutOfRange
    );
    // No range: the default size; only a limit: the default size capped by the limit.
    let none = csi::CreateVolumeRequest {
        capacity_range: None,
        ..create("c", 0, 0)
    };
    let vol = t.create_volume(&cfg, none).unwrap().volume.unwrap();
    assert_eq!(vol.capacity_bytes, cfg.default_volume_size);
    let cfg = MockDriverConfig::default();
    assert_eq!(
        t.create_volume(&cfg, create("d", 0, 100))
            .unwrap()
            .volume
            .unwrap()
            .capacity_bytes,
        100
    );
}

#[test]
fn created_volumes_carry_the_configured_topology_and_echo_parameters() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let mut req = create("a", GI, 0);
    req.parameters.insert("color".into(), "blue".into());
    let vol = t.create_volume(&cfg, req).unwrap().volume.unwrap();
    assert_eq!(vol.accessible_topology.len(), 1);
    assert_eq!(
        vol.accessible_topology[0]
            .segments
            .get(DEFAULT_TOPOLOGY_KEY)
            .map(String::as_str),
        Some(DEFAULT_NODE_ID)
    );
    assert_eq!(
        vol.volume_context.get("color").map(String::as_str),
        Some("blue")
    );

    let no_vac = MockDriverConfig {
        plugin_capabilities: vec![PluginCapability::Service(PluginService::ControllerService)],
        ..MockDriverConfig::default()
    };
    assert!(
        created(&mut t, &no_vac, "b", GI)
            .accessible_topology
            .is_empty()
    );
}

#[test]
fn create_volume_with_unsatisfiable_requisite_topology_is_resource_exhausted() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let mut req = create("a", GI, 0);
    req.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![csi::Topology {
            segments: [(DEFAULT_TOPOLOGY_KEY.to_owned(), "other-node".to_owned())]
                .into_iter()
                .collect(),
        }],
        preferred: vec![],
    });
    assert_eq!(
        code(t.create_volume(&cfg, req.clone())),
        Code::ResourceExhausted
    );
    req.accessibility_requirements
        .as_mut()
        .unwrap()
        .requisite
        .push(csi::Topology {
            segments: [(DEFAULT_TOPOLOGY_KEY.to_owned(), DEFAULT_NODE_ID.to_owned())]
                .into_iter()
                .collect(),
        });
    assert!(t.create_volume(&cfg, req).is_ok());
}

fn with_sources() -> MockDriverConfig {
    let mut cfg = MockDriverConfig::default();
    cfg.controller_capabilities.extend([
        ControllerRpc::CloneVolume,
        ControllerRpc::CreateDeleteSnapshot,
    ]);
    cfg
}

fn snapshot_source(id: &str) -> csi::VolumeContentSource {
    csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: id.to_owned(),
            },
        )),
    }
}

fn cut(t: &mut VolumeTable, cfg: &MockDriverConfig, name: &str, source: &str) -> csi::Snapshot {
    t.create_snapshot(
        cfg,
        &csi::CreateSnapshotRequest {
            name: name.to_owned(),
            source_volume_id: source.to_owned(),
            ..Default::default()
        },
    )
    .expect("snapshot")
    .snapshot
    .expect("snapshot")
}

#[test]
fn snapshots_are_idempotent_by_name_and_need_an_existing_source() {
    let cfg = with_sources();
    let mut t = VolumeTable::default();
    let src = created(&mut t, &cfg, "src", GI);
    let other = created(&mut t, &cfg, "other", GI);
    let snap = cut(&mut t, &cfg, "s1", &src.volume_id);
    assert!(snap.ready_to_use);
    assert_eq!(snap.size_bytes, GI);
    assert_eq!(snap.source_volume_id, src.volume_id);
    assert!(snap.creation_time.is_some());
    assert_eq!(cut(&mut t, &cfg, "s1", &src.volume_id), snap);
    let request = |name: &str, source: &str| csi::CreateSnapshotRequest {
        name: name.to_owned(),
        source_volume_id: source.to_owned(),
        ..Default::default()
    };
    let cases = [
        (request("s1", &other.volume_id), Code::AlreadyExists),
        (request("s2", "missing"), Code::NotFound),
        (request("", &src.volume_id), Code::InvalidArgument),
        (request("s3", ""), Code::InvalidArgument),
    ];
    for (req, want) in cases {
        assert_eq!(code(t.create_snapshot(&cfg, &req)), want, "{req:?}");
    }
    let no_caps = MockDriverConfig::default();
    assert_eq!(
        code(t.create_snapshot(&no_caps, &request("s4", &src.volume_id))),
        Code::Unimplemented
    );
    // Deleting is idempotent.
    for _ in 0..2 {
        let req = csi::DeleteSnapshotRequest {
            snapshot_id: snap.snapshot_id.clone(),
            ..Default::default()
        };
        t.delete_snapshot(&cfg, &req).unwrap();
    }
    assert!(t.snapshots().is_empty());
}

#[test]
fn restoring_follows_the_csi_size_and_existence_rules() {
    let cfg = with_sources();
    let mut t = VolumeTable::default();
    let src = created(&mut t, &cfg, "src", 2 * GI);
    let snap = cut(&mut t, &cfg, "s1", &src.volume_id);
    let restore = |name: &str, required: i64, limit: i64, id: &str| {
        let mut req = create(name, required, limit);
        req.volume_content_source = Some(snapshot_source(id));
        req
    };
    let cases = [
        (restore("r1", GI, 0, &snap.snapshot_id), Code::OutOfRange),
        (restore("r2", 0, GI, &snap.snapshot_id), Code::OutOfRange),
        (restore("r3", 2 * GI, 0, "missing"), Code::NotFound),
    ];
    for (req, want) in cases {
        assert_eq!(code(t.create_volume(&cfg, req.clone())), want, "{req:?}");
    }
    let restored = t
        .create_volume(&cfg, restore("r4", 0, 0, &snap.snapshot_id))
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(
        restored.capacity_bytes,
        2 * GI,
        "no size asked: the source's"
    );
    assert_eq!(
        restored.content_source,
        Some(snapshot_source(&snap.snapshot_id))
    );
    // Without CREATE_DELETE_SNAPSHOT the source kind is not supported.
    let no_caps = MockDriverConfig::default();
    assert_eq!(
        code(t.create_volume(&no_caps, restore("r5", 2 * GI, 0, &snap.snapshot_id))),
        Code::InvalidArgument
    );
}

#[test]
fn cloning_needs_an_existing_source_volume_no_smaller_than_the_clone() {
    let cfg = with_sources();
    let mut t = VolumeTable::default();
    let src = created(&mut t, &cfg, "src", GI);
    let clone_of = |id: &str| csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Volume(
            csi::volume_content_source::VolumeSource {
                volume_id: id.to_owned(),
            },
        )),
    };
    let mut req = create("clone", GI, 0);
    req.volume_content_source = Some(clone_of("missing"));
    assert_eq!(code(t.create_volume(&cfg, req.clone())), Code::NotFound);
    req.volume_content_source = Some(clone_of(&src.volume_id));
    let vol = t.create_volume(&cfg, req.clone()).unwrap().volume.unwrap();
    assert_eq!(vol.content_source, Some(clone_of(&src.volume_id)));
    let mut small = create("small-clone", GI / 2, 0);
    small.volume_content_source = Some(clone_of(&src.volume_id));
    assert_eq!(code(t.create_volume(&cfg, small)), Code::OutOfRange);
    let mut unsupported = create("clone-2", GI, 0);
    unsupported.volume_content_source = Some(clone_of(&src.volume_id));
    assert_eq!(
        code(t.create_volume(&MockDriverConfig::default(), unsupported)),
        Code::InvalidArgument
    );
}

#[test]
fn rpcs_without_their_capability_are_unimplemented() {
    let cfg = MockDriverConfig {
        controller_capabilities: vec![],
        node_capabilities: vec![],
        ..MockDriverConfig::default()
    };
    let mut t = VolumeTable::default();
    t.upsert(MockVolume::new("v", GI));
    assert_eq!(
        code(t.create_volume(&cfg, create("a", GI, 0))),
        Code::Unimplemented
    );
    let delete = csi::DeleteVolumeRequest {
        volume_id: "v".into(),
        ..Default::default()
    };
    assert_eq!(code(t.delete_volume(&cfg, &delete)), Code::Unimplemented);
    let publish = csi::ControllerPublishVolumeRequest {
        volume_id: "v".into(),
        node_id: DEFAULT_NODE_ID.into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    };
    assert_eq!(
        code(t.controller_publish(&cfg, &publish)),
        Code::Unimplemented
    );
    assert_eq!(
        code(t.list_volumes(&cfg, &csi::ListVolumesRequest::default())),
        Code::Unimplemented
    );
    assert_eq!(
        code(t.get_capacity(&cfg, &csi::GetCapacityRequest::default())),
        Code::Unimplemented
    );
    let stage = csi::NodeStageVolumeRequest {
        volume_id: "v".into(),
        staging_target_path: "/stage".into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    };
    assert_eq!(code(t.node_stage(&cfg, &stage)), Code::Unimplemented);
}

#[test]
fn delete_volume_of_an_unknown_id_is_ok() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    for _ in 0..2 {
        let req = csi::DeleteVolumeRequest {
            volume_id: vol.volume_id.clone(),
            ..Default::default()
        };
        assert!(t.delete_volume(&cfg, &req).is_ok());
    }
    assert!(t.snapshot().is_empty());
    let empty = csi::DeleteVolumeRequest::default();
    assert_eq!(code(t.delete_volume(&cfg, &empty)), Code::InvalidArgument);
}

fn publish(volume_id: &str, node_id: &str) -> csi::ControllerPublishVolumeRequest {
    csi::ControllerPublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    }
}

#[test]
fn controller_publish_checks_volume_and_node_and_is_idempotent() {
    let cfg = MockDriverConfig {
        publish_context: BTreeMap::from([("device".to_owned(), "/dev/mock".to_owned())]),
        extra_node_ids: vec!["node-2".into()],
        ..MockDriverConfig::default()
    };
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    let err = t
        .controller_publish(&cfg, &publish("fx-no-such-volume", DEFAULT_NODE_ID))
        .expect_err("unknown volume");
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(
        err.message(),
        "volume id fx-no-such-volume does not exist in the volumes list"
    );
    assert_eq!(
        code(t.controller_publish(&cfg, &publish(&vol.volume_id, "stranger"))),
        Code::NotFound
    );
    assert_eq!(
        code(t.controller_publish(&cfg, &publish(&vol.volume_id, ""))),
        Code::InvalidArgument
    );
    for _ in 0..2 {
        let resp = t
            .controller_publish(&cfg, &publish(&vol.volume_id, DEFAULT_NODE_ID))
            .unwrap();
        assert_eq!(
            resp.publish_context.get("device").map(String::as_str),
            Some("/dev/mock")
        );
    }
    t.controller_publish(&cfg, &publish(&vol.volume_id, "node-2"))
        .unwrap();
    let mut readonly = publish(&vol.volume_id, DEFAULT_NODE_ID);
    readonly.readonly = true;
    assert_eq!(
        code(t.controller_publish(&cfg, &readonly)),
        Code::AlreadyExists
    );
    let nodes: Vec<_> = t.snapshot()[0].published_nodes.keys().cloned().collect();
    assert_eq!(nodes, [DEFAULT_NODE_ID, "node-2"]);
}

#[test]
fn controller_publish_beyond_max_volumes_per_node_is_resource_exhausted() {
    let cfg = MockDriverConfig {
        max_volumes_per_node: 1,
        ..MockDriverConfig::default()
    };
    let mut t = VolumeTable::default();
    let a = created(&mut t, &cfg, "a", GI);
    let b = created(&mut t, &cfg, "b", GI);
    t.controller_publish(&cfg, &publish(&a.volume_id, DEFAULT_NODE_ID))
        .unwrap();
    assert_eq!(
        code(t.controller_publish(&cfg, &publish(&b.volume_id, DEFAULT_NODE_ID))),
        Code::ResourceExhausted
    );
}

#[test]
fn controller_unpublish_is_idempotent_and_ok_for_unknown_volumes() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    t.controller_publish(&cfg, &publish(&vol.volume_id, DEFAULT_NODE_ID))
        .unwrap();
    let unpublish = |id: &str, node: &str| csi::ControllerUnpublishVolumeRequest {
        volume_id: id.into(),
        node_id: node.into(),
        ..Default::default()
    };
    for _ in 0..2 {
        t.controller_unpublish(&cfg, &unpublish(&vol.volume_id, DEFAULT_NODE_ID))
            .unwrap();
    }
    assert!(t.snapshot()[0].published_nodes.is_empty());
    t.controller_unpublish(&cfg, &unpublish("fx-no-such-volume", DEFAULT_NODE_ID))
        .unwrap();
    assert_eq!(
        code(t.controller_unpublish(&cfg, &unpublish(&vol.volume_id, "stranger"))),
        Code::NotFound
    );
}

fn expand(volume_id: &str, required: i64) -> csi::ControllerExpandVolumeRequest {
    csi::ControllerExpandVolumeRequest {
        volume_id: volume_id.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: required,
            limit_bytes: 0,
        }),
        ..Default::default()
    }
}

#[test]
fn controller_expand_grows_never_shrinks_and_reports_node_expansion() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    let resp = t
        .controller_expand(&cfg, &expand(&vol.volume_id, 2 * GI))
        .unwrap();
    assert_eq!(
        (resp.capacity_bytes, resp.node_expansion_required),
        (2 * GI, true)
    );
    let resp = t
        .controller_expand(&cfg, &expand(&vol.volume_id, GI))
        .unwrap();
    assert_eq!(resp.capacity_bytes, 2 * GI);
    assert_eq!(t.snapshot()[0].capacity_bytes, 2 * GI);
    assert_eq!(
        code(t.controller_expand(&cfg, &expand("missing", GI))),
        Code::NotFound
    );
    let err = t
        .controller_expand(&cfg, &expand(&vol.volume_id, 2 << 40))
        .expect_err("too big");
    assert_eq!(err.code(), Code::OutOfRange);
    assert_eq!(
        err.message(),
        "Requested capacity 2199023255552 exceeds maximum allowed 1099511627776"
    );
}

#[test]
fn offline_only_expansion_of_a_published_volume_is_failed_precondition() {
    let cfg = MockDriverConfig {
        plugin_capabilities: vec![
            PluginCapability::Service(PluginService::ControllerService),
            PluginCapability::VolumeExpansion(VolumeExpansion::Offline),
        ],
        ..MockDriverConfig::default()
    };
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    t.controller_publish(&cfg, &publish(&vol.volume_id, DEFAULT_NODE_ID))
        .unwrap();
    assert_eq!(
        code(t.controller_expand(&cfg, &expand(&vol.volume_id, 2 * GI))),
        Code::FailedPrecondition
    );
}

fn list(t: &VolumeTable, cfg: &MockDriverConfig, max: i32, token: &str) -> (Vec<String>, String) {
    let resp = t
        .list_volumes(
            cfg,
            &csi::ListVolumesRequest {
                max_entries: max,
                starting_token: token.to_owned(),
            },
        )
        .unwrap();
    let ids = resp
        .entries
        .into_iter()
        .map(|e| e.volume.unwrap().volume_id)
        .collect();
    (ids, resp.next_token)
}

#[test]
fn list_volumes_pages_in_creation_order() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let ids: Vec<String> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| created(&mut t, &cfg, n, GI).volume_id)
        .collect();
    assert_eq!(list(&t, &cfg, 0, ""), (ids.clone(), String::new()));
    let (page1, token1) = list(&t, &cfg, 2, "");
    let (page2, token2) = list(&t, &cfg, 2, &token1);
    let (page3, token3) = list(&t, &cfg, 2, &token2);
    assert_eq!([page1, page2, page3].concat(), ids);
    assert_eq!(token3, "");
    assert_eq!(
        code(t.list_volumes(
            &cfg,
            &csi::ListVolumesRequest {
                max_entries: 1,
                starting_token: "bogus".into()
            }
        )),
        Code::Aborted
    );
    assert_eq!(
        code(t.list_volumes(
            &cfg,
            &csi::ListVolumesRequest {
                max_entries: -1,
                starting_token: String::new()
            }
        )),
        Code::InvalidArgument
    );
}

/// What the table's indexes must keep of a list: deleting keeps the others in creation order,
/// a deleted name can be created again (at the end), and an inserted volume replaces one of
/// the same id in its place.
#[test]
fn deleting_and_inserting_keep_creation_order_and_names() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let [a, b, c] = ["a", "b", "c"].map(|n| created(&mut t, &cfg, n, GI).volume_id);
    t.delete_volume(
        &cfg,
        &csi::DeleteVolumeRequest {
            volume_id: b.clone(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(list(&t, &cfg, 0, "").0, [a.clone(), c.clone()]);
    assert!(t.by_name("b").is_none());
    let b_again = created(&mut t, &cfg, "b", 2 * GI).volume_id;
    assert_eq!(list(&t, &cfg, 0, "").0, [a.clone(), c.clone(), b_again]);
    // Found by name: the same volume, no new entry.
    assert_eq!(created(&mut t, &cfg, "a", GI).volume_id, a);
    assert_eq!(t.snapshot().len(), 3);
    // Replaced by id in place; a volume inserted without a name is not found by one.
    t.upsert(MockVolume::new(c.clone(), 5 * GI));
    assert_eq!(list(&t, &cfg, 0, "").0[1], c);
    assert_eq!(t.by_id(&c).map(|v| v.capacity_bytes), Some(5 * GI));
    assert!(t.by_name("c").is_none());
    t.upsert(MockVolume::new("static", GI));
    assert!(t.by_name("").is_none());
    assert_eq!(
        list(&t, &cfg, 0, "").0.last().map(String::as_str),
        Some("static")
    );
}

#[test]
fn list_volumes_reports_published_nodes_with_that_capability() {
    let mut cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    t.controller_publish(&cfg, &publish(&vol.volume_id, DEFAULT_NODE_ID))
        .unwrap();
    let status = |t: &VolumeTable, cfg: &MockDriverConfig| {
        t.list_volumes(cfg, &csi::ListVolumesRequest::default())
            .unwrap()
            .entries[0]
            .status
            .clone()
    };
    assert_eq!(status(&t, &cfg), None);
    cfg.controller_capabilities
        .push(ControllerRpc::ListVolumesPublishedNodes);
    assert_eq!(
        status(&t, &cfg).unwrap().published_node_ids,
        [DEFAULT_NODE_ID.to_owned()]
    );
}

#[test]
fn get_capacity_reports_what_is_left_and_zero_for_foreign_topology() {
    let cfg = MockDriverConfig {
        total_capacity: Some(10 * GI),
        max_volume_size: 4 * GI,
        ..MockDriverConfig::default()
    };
    let mut t = VolumeTable::default();
    created(&mut t, &cfg, "a", 3 * GI);
    let resp = t
        .get_capacity(&cfg, &csi::GetCapacityRequest::default())
        .unwrap();
    assert_eq!(resp.available_capacity, 7 * GI);
    assert_eq!(resp.maximum_volume_size, Some(4 * GI));
    let elsewhere = csi::GetCapacityRequest {
        accessible_topology: Some(csi::Topology {
            segments: [(DEFAULT_TOPOLOGY_KEY.to_owned(), "other".to_owned())]
                .into_iter()
                .collect(),
        }),
        ..Default::default()
    };
    assert_eq!(
        t.get_capacity(&cfg, &elsewhere).unwrap().available_capacity,
        0
    );
    let unlimited = MockDriverConfig::default();
    let resp = t
        .get_capacity(&unlimited, &csi::GetCapacityRequest::default())
        .unwrap();
    assert_eq!(resp.available_capacity, unlimited.max_volume_size);
}

#[test]
fn get_capacity_per_kind_parameter_subtracts_volumes_of_that_kind_like_host_path() {
    let cfg = MockDriverConfig {
        capacity_by_kind: BTreeMap::from([("fast".into(), 10 * GI), ("slow".into(), 100 * GI)]),
        max_volume_size: 4 * GI,
        ..MockDriverConfig::default()
    };
    let mut t = VolumeTable::default();
    let mut req = create("a", 3 * GI, 0);
    req.parameters.insert("kind".into(), "fast".into());
    t.create_volume(&cfg, req).unwrap();
    let of_kind = |kind: Option<&str>| {
        let request = csi::GetCapacityRequest {
            parameters: kind
                .map(|k| ("kind".to_owned(), k.to_owned()))
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let resp = t.get_capacity(&cfg, &request).unwrap();
        (resp.available_capacity, resp.maximum_volume_size)
    };
    assert_eq!(of_kind(Some("fast")), (7 * GI, Some(4 * GI)));
    assert_eq!(of_kind(Some("slow")), (100 * GI, Some(4 * GI)));
    assert_eq!(of_kind(Some("unknown")), (0, Some(0)));
    assert_eq!(of_kind(None), (0, Some(0)));
}

#[test]
fn a_broken_driver_answers_get_capacity_with_the_configured_values() {
    let cfg = MockDriverConfig {
        capacity_answer: Some((-5, None)),
        ..MockDriverConfig::default()
    };
    let resp = VolumeTable::default()
        .get_capacity(&cfg, &csi::GetCapacityRequest::default())
        .unwrap();
    assert_eq!(resp.available_capacity, -5);
    assert_eq!(resp.maximum_volume_size, None);
}

#[test]
fn node_publish_requires_staging_when_the_node_stages() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    let node_publish = csi::NodePublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        staging_target_path: "/stage".into(),
        target_path: "/target".into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    };
    assert_eq!(
        code(t.node_publish(&cfg, &node_publish)),
        Code::FailedPrecondition
    );
    let stage = csi::NodeStageVolumeRequest {
        volume_id: vol.volume_id.clone(),
        staging_target_path: "/stage".into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    };
    t.node_stage(&cfg, &stage).unwrap();
    t.node_publish(&cfg, &node_publish).unwrap();
    let snap = &t.snapshot()[0];
    assert!(snap.staged_paths.contains("/stage") && snap.published_paths.contains("/target"));
    let unpublish = csi::NodeUnpublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        target_path: "/target".into(),
    };
    t.node_unpublish(&unpublish).unwrap();
    assert!(t.snapshot()[0].published_paths.is_empty());
}

#[test]
fn volume_ids_are_deterministic_per_name_and_distinct_across_names() {
    assert_eq!(volume_id_for("pvc-1"), volume_id_for("pvc-1"));
    assert_ne!(volume_id_for("pvc-1"), volume_id_for("pvc-2"));
    let id = volume_id_for("pvc-1");
    let groups: Vec<usize> = id.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12]);
}

/// A config with the optional RPCs that the default leaves off: ControllerGetVolume,
/// ControllerModifyVolume, volume conditions and NodeGetVolumeStats.
fn with_optional_rpcs() -> MockDriverConfig {
    let mut cfg = MockDriverConfig::default();
    cfg.controller_capabilities.extend([
        ControllerRpc::GetVolume,
        ControllerRpc::ModifyVolume,
        ControllerRpc::VolumeCondition,
    ]);
    cfg.node_capabilities
        .extend([NodeRpc::GetVolumeStats, NodeRpc::VolumeCondition]);
    cfg
}

// CSI spec, CreateVolumeRequest.mutable_parameters: only for a driver with MODIFY_VOLUME, which
// keeps them as the volume's mutable parameters (what ControllerModifyVolume later replaces).
#[test]
fn create_volume_keeps_mutable_parameters_only_with_modify_volume() {
    let mut request = create("pvc-m", GI, 0);
    request.mutable_parameters = [("iops".to_owned(), "300".to_owned())].into();
    let mut t = VolumeTable::default();
    assert_eq!(
        code(t.create_volume(&MockDriverConfig::default(), request.clone())),
        Code::InvalidArgument
    );
    assert!(t.snapshot().is_empty());
    let cfg = with_optional_rpcs();
    let volume = t.create_volume(&cfg, request).unwrap().volume.unwrap();
    let stored = &t.snapshot()[0];
    assert_eq!(stored.volume_id, volume.volume_id);
    assert_eq!(
        stored.mutable_parameters,
        BTreeMap::from([("iops".to_owned(), "300".to_owned())])
    );
    assert!(stored.parameters.is_empty(), "not mixed into parameters");
}

// CSI spec, ValidateVolumeCapabilities: volume_id and volume_capabilities are REQUIRED
// (INVALID_ARGUMENT), an unknown volume is NOT_FOUND, and `confirmed` echoes what was
// validated. A capability without an access type is refused as csi-driver-host-path does.
#[test]
fn validate_volume_capabilities_confirms_known_volumes_and_echoes_the_request() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    let request = |volume_id: &str, caps: Vec<csi::VolumeCapability>| {
        csi::ValidateVolumeCapabilitiesRequest {
            volume_id: volume_id.into(),
            volume_capabilities: caps,
            parameters: [("type".to_owned(), "fast".to_owned())]
                .into_iter()
                .collect(),
            ..Default::default()
        }
    };
    let confirmed = t
        .validate_capabilities(request(&vol.volume_id, vec![mount_cap()]))
        .unwrap()
        .confirmed
        .expect("confirmed");
    assert_eq!(confirmed.volume_capabilities, [mount_cap()]);
    assert_eq!(
        confirmed.parameters.get("type").map(String::as_str),
        Some("fast")
    );
    assert_eq!(
        code(t.validate_capabilities(request("", vec![mount_cap()]))),
        Code::InvalidArgument
    );
    assert_eq!(
        code(t.validate_capabilities(request(&vol.volume_id, vec![]))),
        Code::InvalidArgument
    );
    assert_eq!(
        code(t.validate_capabilities(request("missing", vec![mount_cap()]))),
        Code::NotFound
    );
    let no_access_type = csi::VolumeCapability {
        access_type: None,
        ..mount_cap()
    };
    assert_eq!(
        code(t.validate_capabilities(request(&vol.volume_id, vec![no_access_type]))),
        Code::InvalidArgument
    );
}

// CSI spec, ControllerGetVolume: only with the GET_VOLUME capability; an unknown volume is
// NOT_FOUND; `status.published_node_ids` lists the nodes the volume is published to and
// `volume_condition` is set only with the VOLUME_CONDITION capability.
#[test]
fn controller_get_volume_reports_the_volume_its_nodes_and_its_condition() {
    let cfg = with_optional_rpcs();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    t.controller_publish(&cfg, &publish(&vol.volume_id, DEFAULT_NODE_ID))
        .unwrap();
    let get = csi::ControllerGetVolumeRequest {
        volume_id: vol.volume_id.clone(),
    };
    let got = t.controller_get_volume(&cfg, &get).unwrap();
    assert_eq!(got.volume.as_ref(), Some(&vol));
    let status = got.status.expect("status");
    assert_eq!(status.published_node_ids, [DEFAULT_NODE_ID]);
    assert!(!status.volume_condition.expect("condition").abnormal);

    let missing = csi::ControllerGetVolumeRequest {
        volume_id: "missing".into(),
    };
    assert_eq!(
        code(t.controller_get_volume(&cfg, &missing)),
        Code::NotFound
    );

    let without_condition = MockDriverConfig {
        controller_capabilities: vec![ControllerRpc::GetVolume],
        ..MockDriverConfig::default()
    };
    let status = t
        .controller_get_volume(&without_condition, &get)
        .unwrap()
        .status
        .expect("status");
    assert_eq!(status.volume_condition, None);
    assert_eq!(
        code(t.controller_get_volume(&MockDriverConfig::default(), &get)),
        Code::Unimplemented
    );
}

// CSI spec, ControllerModifyVolume: only with the MODIFY_VOLUME capability; volume_id and
// mutable_parameters are REQUIRED; an unknown volume is NOT_FOUND. The mock keeps the new
// parameters, so a test can see what the resizer asked for.
#[test]
fn controller_modify_volume_stores_the_mutable_parameters() {
    let cfg = with_optional_rpcs();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    let modify = |volume_id: &str, params: &[(&str, &str)]| csi::ControllerModifyVolumeRequest {
        volume_id: volume_id.into(),
        mutable_parameters: params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    };
    t.controller_modify(&cfg, &modify(&vol.volume_id, &[("iops", "3000")]))
        .unwrap();
    assert_eq!(
        t.snapshot()[0]
            .mutable_parameters
            .get("iops")
            .map(String::as_str),
        Some("3000")
    );
    assert_eq!(
        code(t.controller_modify(&cfg, &modify(&vol.volume_id, &[]))),
        Code::InvalidArgument
    );
    assert_eq!(
        code(t.controller_modify(&cfg, &modify("missing", &[("iops", "1")]))),
        Code::NotFound
    );
    assert_eq!(
        code(t.controller_modify(
            &MockDriverConfig::default(),
            &modify(&vol.volume_id, &[("iops", "1")])
        )),
        Code::Unimplemented
    );
}

// CSI spec, NodeStageVolume / NodeUnstageVolume: staging_target_path is REQUIRED; staging an
// unknown volume is NOT_FOUND; both are idempotent, and unstaging a volume that is not staged
// at that path replies OK.
#[test]
fn node_stage_and_unstage_are_idempotent() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    let stage = |volume_id: &str, path: &str| csi::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: path.into(),
        volume_capability: Some(mount_cap()),
        ..Default::default()
    };
    let unstage = |volume_id: &str, path: &str| csi::NodeUnstageVolumeRequest {
        volume_id: volume_id.into(),
        staging_target_path: path.into(),
    };
    t.node_stage(&cfg, &stage(&vol.volume_id, "/stage"))
        .unwrap();
    t.node_stage(&cfg, &stage(&vol.volume_id, "/stage"))
        .unwrap();
    assert_eq!(t.snapshot()[0].staged_paths.len(), 1);
    assert_eq!(
        code(t.node_stage(&cfg, &stage("missing", "/stage"))),
        Code::NotFound
    );
    assert_eq!(
        code(t.node_stage(&cfg, &stage(&vol.volume_id, ""))),
        Code::InvalidArgument
    );
    t.node_unstage(&cfg, &unstage(&vol.volume_id, "/stage"))
        .unwrap();
    t.node_unstage(&cfg, &unstage(&vol.volume_id, "/stage"))
        .unwrap();
    t.node_unstage(&cfg, &unstage("missing", "/stage")).unwrap();
    assert!(t.snapshot()[0].staged_paths.is_empty());
    assert_eq!(
        code(t.node_unstage(&cfg, &unstage(&vol.volume_id, ""))),
        Code::InvalidArgument
    );
}

// CSI spec, NodeUnpublishVolume: target_path is REQUIRED; an unknown volume is NOT_FOUND;
// unpublishing a volume that is not published at the target path replies OK.
#[test]
fn node_unpublish_is_idempotent_and_not_found_for_unknown_volumes() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    let unpublish = |volume_id: &str, path: &str| csi::NodeUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        target_path: path.into(),
    };
    t.node_unpublish(&unpublish(&vol.volume_id, "/never-published"))
        .unwrap();
    assert_eq!(
        code(t.node_unpublish(&unpublish("missing", "/target"))),
        Code::NotFound
    );
    assert_eq!(
        code(t.node_unpublish(&unpublish(&vol.volume_id, ""))),
        Code::InvalidArgument
    );
}

// CSI spec, NodeGetVolumeStats: only with the GET_VOLUME_STATS capability; volume_path is
// REQUIRED; an unknown volume is NOT_FOUND; `volume_condition` only with VOLUME_CONDITION.
#[test]
fn node_get_volume_stats_reports_the_capacity_in_bytes() {
    let cfg = with_optional_rpcs();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    let stats = |volume_id: &str, path: &str| csi::NodeGetVolumeStatsRequest {
        volume_id: volume_id.into(),
        volume_path: path.into(),
        ..Default::default()
    };
    let got = t
        .node_volume_stats(&cfg, &stats(&vol.volume_id, "/target"))
        .unwrap();
    assert_eq!(
        got.usage,
        [csi::VolumeUsage {
            available: GI,
            total: GI,
            used: 0,
            unit: csi::volume_usage::Unit::Bytes.into(),
        }]
    );
    assert!(!got.volume_condition.expect("condition").abnormal);
    assert_eq!(
        code(t.node_volume_stats(&cfg, &stats("missing", "/target"))),
        Code::NotFound
    );
    assert_eq!(
        code(t.node_volume_stats(&cfg, &stats(&vol.volume_id, ""))),
        Code::InvalidArgument
    );
    assert_eq!(
        code(t.node_volume_stats(
            &MockDriverConfig::default(),
            &stats(&vol.volume_id, "/target")
        )),
        Code::Unimplemented
    );
}

// CSI spec, NodeExpandVolume: only with the node EXPAND_VOLUME capability; volume_path is
// REQUIRED; an unknown volume is NOT_FOUND. The reply carries the size ControllerExpandVolume
// gave the volume.
#[test]
fn node_expand_volume_reports_the_size_the_controller_expanded_to() {
    let cfg = MockDriverConfig::default();
    let mut t = VolumeTable::default();
    let vol = created(&mut t, &cfg, "a", GI);
    t.controller_expand(&cfg, &expand(&vol.volume_id, 2 * GI))
        .unwrap();
    let node_expand = |volume_id: &str, path: &str| csi::NodeExpandVolumeRequest {
        volume_id: volume_id.into(),
        volume_path: path.into(),
        ..Default::default()
    };
    assert_eq!(
        t.node_expand(&cfg, &node_expand(&vol.volume_id, "/target"))
            .unwrap()
            .capacity_bytes,
        2 * GI
    );
    assert_eq!(
        code(t.node_expand(&cfg, &node_expand("missing", "/target"))),
        Code::NotFound
    );
    assert_eq!(
        code(t.node_expand(&cfg, &node_expand(&vol.volume_id, ""))),
        Code::InvalidArgument
    );
    let without = MockDriverConfig {
        node_capabilities: vec![],
        ..MockDriverConfig::default()
    };
    assert_eq!(
        code(t.node_expand(&without, &node_expand(&vol.volume_id, "/target"))),
        Code::Unimplemented
    );
}
