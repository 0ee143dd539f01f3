//! Table tests of `plan_provision`, plus the fixtures the PV tests share.

use super::*;
use crate::plan_error::ProvisioningState;
use csi_common::capabilities::{ControllerCapability, PluginServiceCapability};
use k8s_openapi::api::core::v1::{Node, TypedLocalObjectReference, TypedObjectReference};
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proto::csi::v1::{
    ControllerGetCapabilitiesResponse, ControllerServiceCapability, GetPluginCapabilitiesResponse,
    PluginCapability, Topology, controller_service_capability, plugin_capability,
};

/// `objects/pvc-1-pending-before-provisioning.json` without managedFields.
pub(crate) const FIXTURE_PVC: &str = r#"{
  "kind": "PersistentVolumeClaim",
  "apiVersion": "v1",
  "metadata": {
    "name": "fx-pvc",
    "namespace": "fixtures",
    "uid": "dbaa5493-3cc2-45fc-9d93-d1c6eb28560a",
    "resourceVersion": "355",
    "creationTimestamp": "2026-11-21T15:35:44Z",
    "labels": {"app": "fixtures"},
    "annotations": {
      "volume.beta.kubernetes.io/storage-provisioner": "hostpath.csi.k8s.io",
      "volume.kubernetes.io/storage-provisioner": "hostpath.csi.k8s.io"
    },
    "finalizers": ["kubernetes.io/pvc-protection"]
  },
  "spec": {
    "accessModes": ["ReadWriteOnce"],
    "resources": {"requests": {"storage": "1Gi"}},
    "storageClassName": "fixtures-hostpath",
    "volumeMode": "Filesystem"
  },
  "status": {"phase": "Pending"}
}"#;

/// `objects/storageclass-fixtures-hostpath.json` without managedFields.
pub(crate) const FIXTURE_CLASS: &str = r#"{
  "kind": "StorageClass",
  "apiVersion": "storage.k8s.io/v1",
  "metadata": {
    "name": "fixtures-hostpath",
    "uid": "9531798a-96b4-4b8a-bd74-d37ef0c0ab7f",
    "resourceVersion": "353",
    "creationTimestamp": "2026-11-21T15:35:40Z",
    "labels": {"fixtures": "true"}
  },
  "provisioner": "hostpath.csi.k8s.io",
  "parameters": {
    "csi.storage.k8s.io/fstype": "xfs",
    "fixtures.example.com/color": "blue"
  },
  "reclaimPolicy": "Delete",
  "mountOptions": ["noatime"],
  "allowVolumeExpansion": true,
  "volumeBindingMode": "Immediate"
}"#;

/// `objects/node.json`, metadata and labels only.
pub(crate) const FIXTURE_NODE: &str = r#"{
  "kind": "Node",
  "apiVersion": "v1",
  "metadata": {
    "name": "ref-node",
    "uid": "785c5fb0-5f9d-4fcc-8e5c-32dec073abf8",
    "labels": {
      "beta.kubernetes.io/os": "linux",
      "kubernetes.io/hostname": "ref-node",
      "kubernetes.io/os": "linux",
      "topology.hostpath.csi/node": "ref-node"
    }
  }
}"#;

/// `objects/csinode.json` without managedFields.
pub(crate) const FIXTURE_CSINODE: &str = r#"{
  "kind": "CSINode",
  "apiVersion": "storage.k8s.io/v1",
  "metadata": {"name": "ref-node", "uid": "5b563537-bd72-4b91-8999-dfd974ebcddb"},
  "spec": {
    "drivers": [
      {"name": "hostpath.csi.k8s.io", "nodeID": "ref-node", "topologyKeys": ["topology.hostpath.csi/node"]}
    ]
  }
}"#;

/// The CreateVolume request of `grpc/create-volume.txt` as the driver logged it.
const FIXTURE_REQUEST: &str = r#"{
  "accessibility_requirements": {
    "preferred": [{"segments": {"topology.hostpath.csi/node": "ref-node"}}],
    "requisite": [{"segments": {"topology.hostpath.csi/node": "ref-node"}}]
  },
  "capacity_range": {"required_bytes": 1073741824},
  "name": "pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a",
  "parameters": {"fixtures.example.com/color": "blue"},
  "volume_capabilities": [
    {"access_mode": {"mode": "SINGLE_NODE_MULTI_WRITER"}, "mount": {"fs_type": "xfs", "mount_flags": ["noatime"]}}
  ]
}"#;

/// The identity the captured provisioner wrote into the fixture PV.
pub(crate) const FIXTURE_IDENTITY: &str = "1795275348577-3187-hostpath.csi.k8s.io";

pub(crate) fn fixture_pvc() -> PersistentVolumeClaim {
    serde_json::from_str(FIXTURE_PVC).unwrap()
}

pub(crate) fn fixture_class() -> StorageClass {
    serde_json::from_str(FIXTURE_CLASS).unwrap()
}

pub(crate) fn fixture_cluster() -> (Vec<Node>, Vec<CSINode>) {
    (
        vec![serde_json::from_str(FIXTURE_NODE).unwrap()],
        vec![serde_json::from_str(FIXTURE_CSINODE).unwrap()],
    )
}

pub(crate) fn plugin_caps(services: &[PluginServiceCapability]) -> PluginCapabilities {
    PluginCapabilities::from_response(&GetPluginCapabilitiesResponse {
        capabilities: services
            .iter()
            .map(|s| PluginCapability {
                r#type: Some(plugin_capability::Type::Service(
                    plugin_capability::Service { r#type: *s as i32 },
                )),
            })
            .collect(),
    })
}

pub(crate) fn controller_caps(rpcs: &[ControllerCapability]) -> ControllerCapabilities {
    ControllerCapabilities::from_response(&ControllerGetCapabilitiesResponse {
        capabilities: rpcs
            .iter()
            .map(|c| ControllerServiceCapability {
                r#type: Some(controller_service_capability::Type::Rpc(
                    controller_service_capability::Rpc { r#type: *c as i32 },
                )),
            })
            .collect(),
    })
}

/// What hostpath v1.18 reported in the capture (topology, single-node modes).
pub(crate) fn hostpath_options() -> ProvisionOptions {
    ProvisionOptions {
        driver_name: "hostpath.csi.k8s.io".into(),
        volume_name_prefix: "pvc".into(),
        volume_name_uuid_length: -1,
        default_fstype: String::new(),
        extra_create_metadata: false,
        strict_topology: false,
        immediate_topology: true,
        controller_publish_readonly: false,
        provisioner_identity: FIXTURE_IDENTITY.into(),
        plugin_caps: plugin_caps(&[
            PluginServiceCapability::ControllerService,
            PluginServiceCapability::VolumeAccessibilityConstraints,
        ]),
        controller_caps: controller_caps(&[
            ControllerCapability::CreateDeleteVolume,
            ControllerCapability::PublishUnpublishVolume,
            ControllerCapability::CreateDeleteSnapshot,
            ControllerCapability::CloneVolume,
            ControllerCapability::ExpandVolume,
            ControllerCapability::SingleNodeMultiWriter,
        ]),
        data_sources: crate::request::DataSourceOptions::default(),
    }
}

fn plan(
    opts: &ProvisionOptions,
    pvc: &PersistentVolumeClaim,
    class: &StorageClass,
    selected_node: Option<&str>,
) -> Result<ProvisionPlan, PlanError> {
    let (nodes, csinodes) = fixture_cluster();
    plan_provision(
        opts,
        &ProvisionInputs {
            pvc,
            class,
            selected_node,
            topology: TopologyView {
                nodes: &nodes,
                csinodes: &csinodes,
            },
            cached_requirement: None,
        },
    )
}

fn param(class: &mut StorageClass, key: &str, value: &str) {
    class
        .parameters
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), value.to_owned());
}

#[test]
fn fixture_claim_plans_the_captured_create_volume_request() {
    let plan = plan(&hostpath_options(), &fixture_pvc(), &fixture_class(), None).unwrap();
    let got: serde_json::Value =
        serde_json::from_str(&proto::sanitize::sanitized_json(&plan.request)).unwrap();
    let want: serde_json::Value = serde_json::from_str(FIXTURE_REQUEST).unwrap();
    assert_eq!(got, want);
    assert_eq!(plan.pv_name, "pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a");
    assert_eq!(plan.requested_bytes, 1 << 30);
    assert_eq!(plan.fs_type, "xfs");
    assert!(!plan.block);
    assert_eq!(plan.provisioner_secret, None);
    assert_eq!(plan.pv_secrets, PvSecretRefs::default());
    assert_eq!(plan.topology, plan.request.accessibility_requirements);
    assert!(plan.request.secrets.is_empty());
    assert!(plan.warnings.is_empty());
}

/// A claim edit applied to the fixture claim and class.
type Edit = Box<dyn Fn(&mut ProvisionOptions, &mut PersistentVolumeClaim, &mut StorageClass)>;

fn edit(
    f: impl Fn(&mut ProvisionOptions, &mut PersistentVolumeClaim, &mut StorageClass) + 'static,
) -> Edit {
    Box::new(f)
}

fn spec(
    pvc: &mut PersistentVolumeClaim,
) -> &mut k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
    pvc.spec.get_or_insert_with(Default::default)
}

fn data_source(kind: &str, name: &str, group: Option<&str>) -> TypedLocalObjectReference {
    TypedLocalObjectReference {
        api_group: group.map(str::to_owned),
        kind: kind.to_owned(),
        name: name.to_owned(),
    }
}

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
fn bad_input_fails_with_upstream_messages_and_states() {
    use ProvisioningState::{Finished, NoChange, Reschedule};
    let no_caps = |f: fn(&mut ProvisionOptions)| edit(move |o, _, _| f(o));
    let cases: Vec<(&str, Edit, &str, ProvisioningState)> = vec![
        (
            "no CONTROLLER_SERVICE",
            no_caps(|o| o.plugin_caps = plugin_caps(&[])),
            "CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE capability is not reported",
            Finished,
        ),
        (
            "no CREATE_DELETE_VOLUME",
            no_caps(|o| o.controller_caps = controller_caps(&[])),
            "CSI driver does not support dynamic provisioning: controller CREATE_DELETE_VOLUME capability is not reported",
            Finished,
        ),
        (
            "selector",
            edit(|_, p, _| spec(p).selector = Some(LabelSelector::default())),
            "claim Selector is not supported",
            Finished,
        ),
        (
            "clone without CLONE_VOLUME reports the capability first",
            edit(|o, p, _| {
                o.controller_caps = controller_caps(&[ControllerCapability::CreateDeleteVolume]);
                spec(p).data_source = Some(data_source("PersistentVolumeClaim", "src", None));
            }),
            "CSI driver does not support clone operations: controller CLONE_VOLUME capability is not reported",
            Finished,
        ),
        (
            "snapshot without CREATE_DELETE_SNAPSHOT",
            edit(|o, p, _| {
                o.controller_caps = controller_caps(&[ControllerCapability::CreateDeleteVolume]);
                spec(p).data_source = Some(data_source(
                    "VolumeSnapshot",
                    "snap",
                    Some("snapshot.storage.k8s.io"),
                ));
            }),
            "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT capability is not reported",
            Finished,
        ),
        (
            "snapshot from the wrong API group",
            edit(|_, p, _| spec(p).data_source = Some(data_source("VolumeSnapshot", "snap", None))),
            "the PVC source does not belong to the right APIGroup. Expected snapshot.storage.k8s.io, Got ",
            Finished,
        ),
        (
            "data source without a name",
            edit(|_, p, _| {
                spec(p).data_source = Some(data_source("PersistentVolumeClaim", "", None));
            }),
            "the PVC source not found for PVC fx-pvc",
            Finished,
        ),
        (
            "cross-namespace dataSourceRef",
            edit(|_, p, _| {
                spec(p).data_source_ref = Some(TypedObjectReference {
                    api_group: None,
                    kind: "PersistentVolumeClaim".into(),
                    name: "src".into(),
                    namespace: Some("other".into()),
                });
            }),
            "dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled",
            Finished,
        ),
        (
            "VolumeAttributesClass without MODIFY_VOLUME",
            edit(|_, p, _| spec(p).volume_attributes_class_name = Some("gold".into())),
            "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is not reported",
            Finished,
        ),
        (
            "empty prefix",
            edit(|o, _, _| o.volume_name_prefix.clear()),
            "volume name prefix cannot be of length 0",
            Finished,
        ),
        (
            "uuid length 33",
            edit(|o, _, _| o.volume_name_uuid_length = 33),
            "--volume-name-uuid-length=33 is out of range: use -1 for the whole claim UID or 1..=32 characters of it",
            Finished,
        ),
        (
            "claim without UID",
            edit(|_, p, _| p.metadata.uid = None),
            "corrupted PVC object, it is missing UID",
            Finished,
        ),
        (
            "two fstype keys",
            edit(|_, _, c| param(c, "fsType", "ext4")),
            r#"fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" keys"#,
            Finished,
        ),
        (
            "malformed size",
            edit(|_, p, _| {
                spec(p)
                    .resources
                    .as_mut()
                    .unwrap()
                    .requests
                    .as_mut()
                    .unwrap()
                    .insert("storage".into(), Quantity("1Gb".into()));
            }),
            "invalid storage request \"1Gb\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            Finished,
        ),
        (
            "negative size",
            edit(|_, p, _| {
                spec(p)
                    .resources
                    .as_mut()
                    .unwrap()
                    .requests
                    .as_mut()
                    .unwrap()
                    .insert("storage".into(), Quantity("-1Gi".into()));
            }),
            "invalid storage request \"-1Gi\": quantity must not be negative",
            Finished,
        ),
        (
            "unknown access mode",
            edit(|_, p, _| {
                spec(p).access_modes =
                    Some(vec!["ReadWriteOnce".into(), "ReadWriteSometimes".into()]);
            }),
            "unsupported AccessMode combination: [ReadWriteSometimes]",
            Finished,
        ),
        (
            "unknown reserved key",
            edit(|_, _, c| param(c, "csi.storage.k8s.io/pvc/name", "forged")),
            r#"failed to strip CSI Parameters of prefixed keys: found unknown parameter key "csi.storage.k8s.io/pvc/name" with reserved namespace csi.storage.k8s.io/"#,
            Finished,
        ),
        (
            "secret template with an unknown token",
            edit(|_, _, c| {
                param(
                    c,
                    params::PREFIXED_PROVISIONER_SECRET_NAME_KEY,
                    "${pvc.uid}",
                );
                param(c, params::PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "ns");
            }),
            r#"error resolving value "${pvc.uid}": invalid tokens: ["pvc.uid"]"#,
            NoChange,
        ),
        (
            "node-stage secret without namespace",
            edit(|_, _, c| param(c, params::PREFIXED_NODE_STAGE_SECRET_NAME_KEY, "s")),
            "failed to get name and namespace template from params: either name and namespace for NodeStage secrets specified, Both must be specified",
            NoChange,
        ),
        (
            "selected node gone",
            edit(|_, p, _| {
                p.metadata
                    .annotations
                    .as_mut()
                    .unwrap()
                    .insert(crate::annotations::ANN_SELECTED_NODE.into(), "gone".into());
            }),
            r#"failed to get selected CSINode gone: csinode.storage.k8s.io "gone" not found"#,
            Reschedule,
        ),
    ];
    for (name, change, want, state) in cases {
        let mut opts = hostpath_options();
        let mut pvc = fixture_pvc();
        let mut class = fixture_class();
        change(&mut opts, &mut pvc, &mut class);
        let selected = crate::decide::selected_node(&pvc).map(str::to_owned);
        let err = plan(&opts, &pvc, &class, selected.as_deref()).expect_err(name);
        assert_eq!(err.event_message(), want, "{name}");
        assert_eq!(err.state(), state, "{name}");
        assert!(err.emits_event(), "{name}");
    }
}

#[test]
fn a_volume_attributes_class_plans_with_modify_volume() {
    let mut opts = hostpath_options();
    opts.controller_caps = controller_caps(&[
        ControllerCapability::CreateDeleteVolume,
        ControllerCapability::ModifyVolume,
    ]);
    let mut pvc = fixture_pvc();
    spec(&mut pvc).volume_attributes_class_name = Some("gold".into());
    let plan = plan(&opts, &pvc, &fixture_class(), None).unwrap();
    // The class's parameters are added once it is fetched (crate::vac).
    assert!(plan.request.mutable_parameters.is_empty());
}

#[test]
fn populator_data_sources_are_ignored_not_failed() {
    let mut pvc = fixture_pvc();
    spec(&mut pvc).data_source_ref = Some(TypedObjectReference {
        api_group: Some("populator.example.com".into()),
        kind: "Hello".into(),
        name: "h".into(),
        namespace: None,
    });
    let err = plan(&hostpath_options(), &pvc, &fixture_class(), None).unwrap_err();
    assert!(err.is_ignored());
    assert!(!err.emits_event());
    assert_eq!(
        err.to_string(),
        "data source (Hello) is not handled by the provisioner, assuming an external populator will provision it"
    );
}

#[test]
fn topology_failures_map_to_reschedule_or_no_change() {
    let opts = hostpath_options();
    let (nodes, _) = fixture_cluster();
    let run = |csinodes: &[CSINode], selected: Option<&str>| {
        plan_provision(
            &opts,
            &ProvisionInputs {
                pvc: &fixture_pvc(),
                class: &fixture_class(),
                selected_node: selected,
                topology: TopologyView {
                    nodes: &nodes,
                    csinodes,
                },
                cached_requirement: None,
            },
        )
        .unwrap_err()
    };
    // A Node that is gone while its CSINode is still cached: upstream never looks the Node up,
    // so its missing labels are what fails (spec §4.3 step 11), and nothing is rescheduled.
    let csinodes = fixture_cluster().1;
    let err = plan_provision(
        &opts,
        &ProvisionInputs {
            pvc: &fixture_pvc(),
            class: &fixture_class(),
            selected_node: Some("ref-node"),
            topology: TopologyView {
                nodes: &[],
                csinodes: &csinodes,
            },
            cached_requirement: None,
        },
    )
    .unwrap_err();
    assert_eq!(err.state(), ProvisioningState::NoChange);
    assert!(
        err.event_message().starts_with(
            "error generating accessibility requirements: topology labels from selected node map[]"
        ),
        "{err}"
    );
    let err = run(&[], Some("ref-node"));
    assert_eq!(err.state(), ProvisioningState::Reschedule);
    assert_eq!(
        err.event_message(),
        r#"failed to get selected CSINode ref-node: csinode.storage.k8s.io "ref-node" not found"#
    );
    let err = run(&[], None);
    assert_eq!(err.state(), ProvisioningState::NoChange);
    assert_eq!(
        err.event_message(),
        "error generating accessibility requirements: no available topology found"
    );
    let mut other_driver: CSINode = serde_json::from_str(FIXTURE_CSINODE).unwrap();
    other_driver.spec.drivers[0].name = "other.csi".into();
    let err = run(&[other_driver], Some("ref-node"));
    assert_eq!(err.state(), ProvisioningState::NoChange);
    assert_eq!(
        err.event_message(),
        "error generating accessibility requirements: no topology key found for node ref-node"
    );
}

#[test]
fn cached_requirement_is_sent_again_even_when_the_node_is_gone() {
    let cached = TopologyRequirement {
        requisite: vec![Topology {
            segments: [("zone".to_owned(), "z9".to_owned())].into(),
        }],
        preferred: vec![],
    };
    let plan = plan_provision(
        &hostpath_options(),
        &ProvisionInputs {
            pvc: &fixture_pvc(),
            class: &fixture_class(),
            selected_node: Some("gone"),
            topology: TopologyView {
                nodes: &[],
                csinodes: &[],
            },
            cached_requirement: Some(&cached),
        },
    )
    .unwrap();
    assert_eq!(
        plan.request.accessibility_requirements,
        Some(cached.clone())
    );
    assert_eq!(plan.topology, Some(cached));
}

#[test]
fn drivers_without_topology_get_no_requirement_and_no_node_check() {
    let mut opts = hostpath_options();
    opts.plugin_caps = plugin_caps(&[PluginServiceCapability::ControllerService]);
    let plan = plan_provision(
        &opts,
        &ProvisionInputs {
            pvc: &fixture_pvc(),
            class: &fixture_class(),
            selected_node: Some("unknown-node"),
            topology: TopologyView {
                nodes: &[],
                csinodes: &[],
            },
            cached_requirement: None,
        },
    )
    .unwrap();
    assert_eq!(plan.request.accessibility_requirements, None);
    assert_eq!(plan.topology, None);
}

fn mode_of(cap: &VolumeCapability) -> Mode {
    Mode::try_from(cap.access_mode.unwrap().mode).unwrap()
}

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
fn capabilities_follow_access_modes_volume_mode_and_fstype() {
    struct Case {
        name: &'static str,
        modes: &'static [&'static str],
        block: bool,
        single_node_caps: bool,
        class_fstype: Option<&'static str>,
        default_fstype: &'static str,
        want_modes: &'static [Mode],
        want_fs: Option<&'static str>,
    }
    let cases = [
        Case {
            name: "RWO with SINGLE_NODE_MULTI_WRITER",
            modes: &["ReadWriteOnce"],
            block: false,
            single_node_caps: true,
            class_fstype: Some("xfs"),
            default_fstype: "",
            want_modes: &[Mode::SingleNodeMultiWriter],
            want_fs: Some("xfs"),
        },
        Case {
            name: "RWO without it",
            modes: &["ReadWriteOnce"],
            block: false,
            single_node_caps: false,
            class_fstype: Some("xfs"),
            default_fstype: "",
            want_modes: &[Mode::SingleNodeWriter],
            want_fs: Some("xfs"),
        },
        Case {
            name: "RWOP with",
            modes: &["ReadWriteOncePod"],
            block: false,
            single_node_caps: true,
            class_fstype: None,
            default_fstype: "ext4",
            want_modes: &[Mode::SingleNodeSingleWriter],
            want_fs: Some("ext4"),
        },
        Case {
            name: "RWOP without",
            modes: &["ReadWriteOncePod"],
            block: false,
            single_node_caps: false,
            class_fstype: None,
            default_fstype: "",
            want_modes: &[Mode::SingleNodeWriter],
            want_fs: Some(""),
        },
        Case {
            name: "one capability per mode",
            modes: &["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce"],
            block: false,
            single_node_caps: false,
            class_fstype: None,
            default_fstype: "",
            want_modes: &[
                Mode::MultiNodeReaderOnly,
                Mode::MultiNodeMultiWriter,
                Mode::SingleNodeWriter,
            ],
            want_fs: Some(""),
        },
        Case {
            name: "block ignores fstype",
            modes: &["ReadWriteOnce"],
            block: true,
            single_node_caps: true,
            class_fstype: Some("xfs"),
            default_fstype: "ext4",
            want_modes: &[Mode::SingleNodeMultiWriter],
            want_fs: None,
        },
        Case {
            name: "no access modes, no capabilities",
            modes: &[],
            block: false,
            single_node_caps: true,
            class_fstype: None,
            default_fstype: "",
            want_modes: &[],
            want_fs: None,
        },
    ];
    for case in cases {
        let mut opts = hostpath_options();
        opts.default_fstype = case.default_fstype.to_owned();
        if !case.single_node_caps {
            opts.controller_caps = controller_caps(&[ControllerCapability::CreateDeleteVolume]);
        }
        let mut pvc = fixture_pvc();
        spec(&mut pvc).access_modes = Some(case.modes.iter().map(|m| (*m).to_owned()).collect());
        if case.block {
            spec(&mut pvc).volume_mode = Some("Block".into());
        }
        let mut class = fixture_class();
        let class_params = class.parameters.as_mut().unwrap();
        class_params.remove(params::PREFIXED_FSTYPE_KEY);
        if let Some(fs) = case.class_fstype {
            class_params.insert(params::PREFIXED_FSTYPE_KEY.into(), fs.into());
        }
        let plan = plan(&opts, &pvc, &class, None).unwrap();
        let caps = &plan.request.volume_capabilities;
        assert_eq!(
            caps.iter().map(mode_of).collect::<Vec<_>>(),
            case.want_modes,
            "{}",
            case.name
        );
        assert_eq!(plan.block, case.block, "{}", case.name);
        for cap in caps {
            match (&cap.access_type, case.want_fs) {
                (Some(AccessType::Block(_)), None) => {}
                (Some(AccessType::Mount(mount)), Some(fs)) => {
                    assert_eq!(mount.fs_type, fs, "{}", case.name);
                    assert_eq!(mount.mount_flags, ["noatime"], "{}", case.name);
                }
                other => panic!("{}: {other:?}", case.name),
            }
        }
    }
}

#[test]
fn sizes_round_up_and_default_to_zero() {
    let cases: &[(Option<&str>, i64)] = &[
        (Some("1Gi"), 1 << 30),
        (Some("1.5G"), 1_500_000_000),
        (Some("100m"), 1),
        (Some("1e3"), 1000),
        (None, 0),
    ];
    for (size, want) in cases {
        let mut pvc = fixture_pvc();
        let requests = spec(&mut pvc)
            .resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap();
        match size {
            Some(size) => requests.insert("storage".into(), Quantity((*size).into())),
            None => requests.remove("storage"),
        };
        let plan = plan(&hostpath_options(), &pvc, &fixture_class(), None).unwrap();
        assert_eq!(plan.requested_bytes, *want, "{size:?}");
        assert_eq!(plan.request.capacity_range.unwrap().required_bytes, *want);
        assert_eq!(plan.request.capacity_range.unwrap().limit_bytes, 0);
    }
}

#[test]
fn parameters_are_stripped_and_extended() {
    let mut opts = hostpath_options();
    opts.extra_create_metadata = true;
    opts.volume_name_uuid_length = 8;
    let mut class = fixture_class();
    param(&mut class, "csiProvisionerSecretName", "creds-${pvc.name}");
    param(
        &mut class,
        "csiProvisionerSecretNamespace",
        "${pvc.namespace}",
    );
    param(
        &mut class,
        params::PREFIXED_CONTROLLER_PUBLISH_SECRET_NAME_KEY,
        "publish",
    );
    param(
        &mut class,
        params::PREFIXED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY,
        "kube-system",
    );
    param(
        &mut class,
        params::PREFIXED_CONTROLLER_MODIFY_SECRET_NAME_KEY,
        "modify",
    );
    param(
        &mut class,
        params::PREFIXED_CONTROLLER_MODIFY_SECRET_NAMESPACE_KEY,
        "kube-system",
    );
    let plan = plan(&opts, &fixture_pvc(), &class, None).unwrap();
    assert_eq!(plan.pv_name, "pvc-dbaa5493");
    let mut keys: Vec<(&str, &str)> = plan
        .request
        .parameters
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            ("csi.storage.k8s.io/pv/name", "pvc-dbaa5493"),
            ("csi.storage.k8s.io/pvc/name", "fx-pvc"),
            ("csi.storage.k8s.io/pvc/namespace", "fixtures"),
            // Deprecated keys are honoured and still passed to the driver.
            ("csiProvisionerSecretName", "creds-${pvc.name}"),
            ("csiProvisionerSecretNamespace", "${pvc.namespace}"),
            ("fixtures.example.com/color", "blue"),
        ]
    );
    assert_eq!(
        plan.provisioner_secret,
        Some(SecretRef {
            name: "creds-fx-pvc".into(),
            namespace: "fixtures".into()
        })
    );
    let publish = Some(SecretRef {
        name: "publish".into(),
        namespace: "kube-system".into(),
    });
    assert_eq!(plan.pv_secrets.controller_publish, publish);
    assert_eq!(plan.pv_secrets.node_stage, None);
    assert_eq!(
        plan.pv_secrets
            .controller_modify
            .as_ref()
            .map(|s| s.name.as_str()),
        Some("modify")
    );
    assert_eq!(plan.warnings.len(), 2, "{:?}", plan.warnings);
    assert!(plan.request.secrets.is_empty());
}

#[test]
fn clone_and_snapshot_sources_are_planned_without_content_until_looked_up() {
    use crate::source::SourceKind;
    let cases = [
        (
            data_source("PersistentVolumeClaim", "src", None),
            SourceKind::Clone,
        ),
        (
            data_source("VolumeSnapshot", "snap", Some("snapshot.storage.k8s.io")),
            SourceKind::Snapshot,
        ),
    ];
    for (source, kind) in cases {
        let mut pvc = fixture_pvc();
        spec(&mut pvc).data_source = Some(source);
        let plan = plan(&hostpath_options(), &pvc, &fixture_class(), None).unwrap();
        let planned = plan.source.unwrap();
        assert_eq!(planned.kind, kind);
        assert!(!planned.cross_namespace);
        assert_eq!(plan.request.volume_content_source, None);
    }
    // dataSourceRef in another namespace plans with the gate on.
    let mut pvc = fixture_pvc();
    spec(&mut pvc).data_source_ref = Some(TypedObjectReference {
        api_group: None,
        kind: "PersistentVolumeClaim".into(),
        name: "src".into(),
        namespace: Some("other".into()),
    });
    let mut opts = hostpath_options();
    opts.data_sources.cross_namespace = true;
    let planned = plan(&opts, &pvc, &fixture_class(), None)
        .unwrap()
        .source
        .unwrap();
    assert!(planned.cross_namespace);
    assert_eq!(planned.namespace, "other");
}
