use super::*;
use crate::request::tests::{
    controller_caps, fixture_class, fixture_cluster, fixture_pvc, hostpath_options, plugin_caps,
};
use crate::request::{TopologyView, plan_provision};
use crate::{params, plan_error::ProvisioningState};
use csi_common::capabilities::{ControllerCapability, PluginServiceCapability};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use proto::csi::v1::{Topology, Volume, VolumeContentSource};

/// `objects/pv-0-created-by-provisioner.json`.
const FIXTURE_PV: &str = r#"{
  "kind": "PersistentVolume",
  "apiVersion": "v1",
  "metadata": {
    "name": "pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a",
    "uid": "e53a3fcd-672e-40ed-a167-7a8c6bc87f93",
    "resourceVersion": "360",
    "creationTimestamp": "2026-11-21T15:35:48Z",
    "annotations": {
      "pv.kubernetes.io/provisioned-by": "hostpath.csi.k8s.io",
      "volume.kubernetes.io/provisioner-deletion-secret-name": "",
      "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""
    },
    "finalizers": [
      "external-provisioner.volume.kubernetes.io/finalizer",
      "kubernetes.io/pv-protection"
    ],
    "managedFields": [{"manager": "csi-provisioner", "operation": "Update", "apiVersion": "v1"}]
  },
  "spec": {
    "capacity": {"storage": "1Gi"},
    "csi": {
      "driver": "hostpath.csi.k8s.io",
      "volumeHandle": "39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e",
      "fsType": "xfs",
      "volumeAttributes": {
        "fixtures.example.com/color": "blue",
        "storage.kubernetes.io/csiProvisionerIdentity": "1795275348577-3187-hostpath.csi.k8s.io"
      }
    },
    "accessModes": ["ReadWriteOnce"],
    "claimRef": {
      "kind": "PersistentVolumeClaim",
      "namespace": "fixtures",
      "name": "fx-pvc",
      "uid": "dbaa5493-3cc2-45fc-9d93-d1c6eb28560a",
      "apiVersion": "v1",
      "resourceVersion": "355"
    },
    "persistentVolumeReclaimPolicy": "Delete",
    "storageClassName": "fixtures-hostpath",
    "mountOptions": ["noatime"],
    "volumeMode": "Filesystem",
    "nodeAffinity": {
      "required": {
        "nodeSelectorTerms": [
          {"matchExpressions": [{"key": "topology.hostpath.csi/node", "operator": "In", "values": ["ref-node"]}]}
        ]
      }
    }
  },
  "status": {"phase": "Pending", "lastPhaseTransitionTime": "2026-11-21T15:35:48Z"}
}"#;

/// The response of `grpc/create-volume.txt`.
fn fixture_response() -> CreateVolumeResponse {
    CreateVolumeResponse {
        volume: Some(Volume {
            capacity_bytes: 1_073_741_824,
            volume_id: "39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e".into(),
            volume_context: [("fixtures.example.com/color".to_owned(), "blue".to_owned())].into(),
            content_source: None,
            accessible_topology: vec![Topology {
                segments: [(
                    "topology.hostpath.csi/node".to_owned(),
                    "ref-node".to_owned(),
                )]
                .into(),
            }],
        }),
    }
}

fn build(
    opts: &ProvisionOptions,
    pvc: &PersistentVolumeClaim,
    class: &StorageClass,
    response: &CreateVolumeResponse,
) -> Result<PersistentVolume, BuildPvError> {
    let (nodes, csinodes) = fixture_cluster();
    let inputs = ProvisionInputs {
        pvc,
        class,
        selected_node: None,
        topology: TopologyView {
            nodes: &nodes,
            csinodes: &csinodes,
        },
        cached_requirement: None,
    };
    let plan = plan_provision(opts, &inputs).unwrap();
    build_pv(opts, &inputs, &plan, response)
}

/// Drops what kube-apiserver adds when it stores a PV.
fn without_server_fields(mut pv: serde_json::Value) -> serde_json::Value {
    let metadata = pv["metadata"].as_object_mut().unwrap();
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
    ] {
        metadata.remove(field);
    }
    // The PV protection admission plugin adds its finalizer on create.
    metadata["finalizers"]
        .as_array_mut()
        .unwrap()
        .retain(|f| f != "kubernetes.io/pv-protection");
    pv.as_object_mut().unwrap().remove("status");
    pv
}

#[test]
fn fixture_volume_builds_the_captured_pv() {
    let pv = build(
        &hostpath_options(),
        &fixture_pvc(),
        &fixture_class(),
        &fixture_response(),
    )
    .unwrap();
    let got = serde_json::to_value(&pv).unwrap();
    let want = without_server_fields(serde_json::from_str(FIXTURE_PV).unwrap());
    assert_eq!(got, want);
}

#[test]
fn capacity_comes_from_the_response() {
    let opts = hostpath_options();
    let with_capacity = |bytes: i64| {
        let mut response = fixture_response();
        response.volume.as_mut().unwrap().capacity_bytes = bytes;
        build(&opts, &fixture_pvc(), &fixture_class(), &response)
    };
    let storage = |pv: PersistentVolume| pv.spec.unwrap().capacity.unwrap()["storage"].0.clone();
    assert_eq!(storage(with_capacity(2 << 30).unwrap()), "2Gi");
    assert_eq!(storage(with_capacity(1_500_000_000).unwrap()), "1500000000");
    // 0 means "unknown" in CSI: the requested size is recorded.
    assert_eq!(storage(with_capacity(0).unwrap()), "1Gi");
    let err = with_capacity(1 << 29).unwrap_err();
    assert_eq!(
        err,
        BuildPvError::CapacityTooSmall {
            volume_id: "39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e".into(),
            created: 536_870_912,
            requested: 1_073_741_824,
        }
    );
    assert_eq!(
        err.to_string(),
        "created volume capacity 536870912 less than requested capacity 1073741824"
    );
    assert_eq!(err.state(), ProvisioningState::InBackground);
    assert_eq!(
        err.cleanup_volume_id(),
        Some("39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e")
    );
    assert_eq!(
        err.with_cleanup_failure("pvc-1", "rpc error: code = Internal desc = busy"),
        "created volume capacity 536870912 less than requested capacity 1073741824. Cleanup of \
         volume pvc-1 failed, volume is orphaned: rpc error: code = Internal desc = busy"
    );
}

#[test]
fn unusable_responses_are_retried_in_background() {
    let opts = hostpath_options();
    let err = build(
        &opts,
        &fixture_pvc(),
        &fixture_class(),
        &CreateVolumeResponse { volume: None },
    )
    .unwrap_err();
    assert_eq!(err, BuildPvError::NoVolume);
    assert_eq!(err.cleanup_volume_id(), None);
    let mut response = fixture_response();
    response.volume.as_mut().unwrap().volume_id.clear();
    let err = build(&opts, &fixture_pvc(), &fixture_class(), &response).unwrap_err();
    assert_eq!(err, BuildPvError::EmptyVolumeId);
    assert_eq!(err.state(), ProvisioningState::InBackground);

    let err = BuildPvError::ContentSourceMissing {
        volume_id: "v".into(),
    };
    assert_eq!(
        err.with_cleanup_failure("pvc-1", "boom"),
        "volume content source missing. cleanup of volume pvc-1 failed, volume is orphaned: boom"
    );
}

#[test]
fn a_topology_key_kube_apiserver_refuses_makes_the_volume_unusable() {
    let opts = hostpath_options();
    let with_key = |key: &str| {
        let mut response = fixture_response();
        response.volume.as_mut().unwrap().accessible_topology = vec![Topology {
            segments: [(key.to_owned(), "x".to_owned())].into(),
        }];
        build(&opts, &fixture_pvc(), &fixture_class(), &response)
    };
    assert!(with_key("topology.example.com/zone").is_ok());
    assert!(with_key("zone").is_ok());
    for bad in ["not a/label/key", "a/b/c", "", "Upper.Case/zone", "-zone"] {
        let err = with_key(bad).unwrap_err();
        assert_eq!(
            err,
            BuildPvError::InvalidTopologyKey {
                volume_id: "39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e".into(),
                key: bad.into(),
            },
            "{bad:?}"
        );
        assert_eq!(err.state(), ProvisioningState::InBackground);
        assert_eq!(
            err.cleanup_volume_id(),
            Some("39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e")
        );
    }
    assert_eq!(
        with_key("a/b/c").unwrap_err().to_string(),
        "CreateVolume returned an invalid accessible topology: key \"a/b/c\" is not a qualified name ([prefix/]name)"
    );
}

#[test]
fn a_pv_above_kube_apiservers_request_limit_makes_the_volume_unusable() {
    let opts = hostpath_options();
    // `zones` distinct zones: one node selector term each, about 100 bytes of JSON per term.
    let with_zones = |zones: usize| {
        let mut response = fixture_response();
        response.volume.as_mut().unwrap().accessible_topology = (0..zones)
            .map(|i| Topology {
                segments: [(
                    "topology.hostpath.csi/node".to_owned(),
                    format!("zone-{i:05}"),
                )]
                .into(),
            })
            .collect();
        build(&opts, &fixture_pvc(), &fixture_class(), &response)
    };
    let pv = with_zones(10_000).unwrap();
    let bytes = serde_json::to_vec(&pv).unwrap().len();
    assert!(
        (500_000..MAX_REQUEST_BODY_BYTES).contains(&bytes),
        "{bytes}"
    );
    let err = with_zones(40_000).unwrap_err();
    let BuildPvError::TooLarge {
        volume_id,
        bytes,
        topologies,
        context,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(volume_id, "39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e");
    assert!(*bytes > MAX_REQUEST_BODY_BYTES, "{bytes}");
    assert_eq!((*topologies, *context), (40_000, 1));
    assert_eq!(err.state(), ProvisioningState::InBackground);
    assert_eq!(err.cleanup_volume_id(), Some(volume_id.as_str()));
    assert!(
        err.to_string()
            .starts_with("CreateVolume returned a volume whose PersistentVolume would be ")
    );
    assert!(
        err.to_string()
            .ends_with("above kube-apiserver's request limit of 3145728 bytes (accessible topologies: 40000, volume context entries: 1)"),
        "{err}"
    );

    // A volume context as large does the same.
    let mut response = fixture_response();
    response
        .volume
        .as_mut()
        .unwrap()
        .volume_context
        .insert("blob".into(), "x".repeat(MAX_REQUEST_BODY_BYTES));
    let err = build(&opts, &fixture_pvc(), &fixture_class(), &response).unwrap_err();
    assert!(matches!(err, BuildPvError::TooLarge { .. }), "{err:?}");
}

#[test]
fn claims_with_a_data_source_need_a_content_source_in_the_response() {
    let opts = hostpath_options();
    let pvc = fixture_pvc();
    let class = fixture_class();
    let (nodes, csinodes) = fixture_cluster();
    let inputs = ProvisionInputs {
        pvc: &pvc,
        class: &class,
        selected_node: None,
        topology: TopologyView {
            nodes: &nodes,
            csinodes: &csinodes,
        },
        cached_requirement: None,
    };
    let mut plan = plan_provision(&opts, &inputs).unwrap();
    // Without a content source in the request, none is needed in the response.
    assert!(build_pv(&opts, &inputs, &plan, &fixture_response()).is_ok());
    // The controller filled the request's content source (clone or restore).
    plan.request.volume_content_source = Some(VolumeContentSource { r#type: None });
    let err = build_pv(&opts, &inputs, &plan, &fixture_response()).unwrap_err();
    assert_eq!(err.to_string(), "volume content source missing");
    let mut response = fixture_response();
    response.volume.as_mut().unwrap().content_source = Some(VolumeContentSource { r#type: None });
    assert!(build_pv(&opts, &inputs, &plan, &response).is_ok());
}

#[test]
fn read_only_only_for_a_lone_read_only_many_with_the_flag() {
    let cases: &[(&[&str], bool, Option<bool>)] = &[
        (&["ReadOnlyMany"], true, Some(true)),
        (&["ReadOnlyMany"], false, None),
        (&["ReadOnlyMany", "ReadWriteMany"], true, None),
        (&["ReadWriteOnce"], true, None),
    ];
    for (modes, flag, want) in cases {
        let mut opts = hostpath_options();
        opts.controller_publish_readonly = *flag;
        let mut pvc = fixture_pvc();
        pvc.spec.as_mut().unwrap().access_modes =
            Some(modes.iter().map(|m| (*m).to_owned()).collect());
        let pv = build(&opts, &pvc, &fixture_class(), &fixture_response()).unwrap();
        assert_eq!(
            pv.spec.unwrap().csi.unwrap().read_only,
            *want,
            "{modes:?} {flag}"
        );
    }
}

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
fn pv_carries_secrets_mode_policy_and_attributes() {
    let mut opts = hostpath_options();
    // Without VOLUME_ACCESSIBILITY_CONSTRAINTS there is no nodeAffinity, whatever the driver says.
    opts.plugin_caps = plugin_caps(&[PluginServiceCapability::ControllerService]);
    opts.controller_caps = controller_caps(&[ControllerCapability::CreateDeleteVolume]);
    let mut pvc = fixture_pvc();
    let claim_spec = pvc.spec.as_mut().unwrap();
    claim_spec.volume_mode = Some("Block".into());
    claim_spec.storage_class_name = None;
    pvc.metadata.annotations.as_mut().unwrap().insert(
        crate::annotations::ANN_BETA_STORAGE_CLASS.into(),
        "fixtures-hostpath".into(),
    );
    let mut class = fixture_class();
    class.reclaim_policy = Some("Retain".into());
    class.mount_options = None;
    let class_params = class.parameters.as_mut().unwrap();
    for (key, value) in [
        (params::PREFIXED_PROVISIONER_SECRET_NAME_KEY, "prov"),
        (
            params::PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY,
            "${pvc.namespace}",
        ),
        (params::PREFIXED_NODE_STAGE_SECRET_NAME_KEY, "stage"),
        (params::PREFIXED_NODE_STAGE_SECRET_NAMESPACE_KEY, "ns1"),
        (params::PREFIXED_NODE_PUBLISH_SECRET_NAME_KEY, "publish"),
        (params::PREFIXED_NODE_PUBLISH_SECRET_NAMESPACE_KEY, "ns2"),
        (
            params::PREFIXED_CONTROLLER_PUBLISH_SECRET_NAME_KEY,
            "cpublish",
        ),
        (
            params::PREFIXED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY,
            "ns3",
        ),
        (
            params::PREFIXED_CONTROLLER_EXPAND_SECRET_NAME_KEY,
            "cexpand",
        ),
        (
            params::PREFIXED_CONTROLLER_EXPAND_SECRET_NAMESPACE_KEY,
            "ns4",
        ),
        (params::PREFIXED_NODE_EXPAND_SECRET_NAME_KEY, "nexpand"),
        (params::PREFIXED_NODE_EXPAND_SECRET_NAMESPACE_KEY, "ns5"),
        (params::PREFIXED_CONTROLLER_MODIFY_SECRET_NAME_KEY, "modify"),
        (
            params::PREFIXED_CONTROLLER_MODIFY_SECRET_NAMESPACE_KEY,
            "ns6",
        ),
    ] {
        class_params.insert(key.into(), value.into());
    }
    let mut response = fixture_response();
    // The driver's context wins over the identity key.
    response.volume.as_mut().unwrap().volume_context.insert(
        crate::annotations::PROVISIONER_ID_KEY.into(),
        "driver-says".into(),
    );
    let pv = build(&opts, &pvc, &class, &response).unwrap();
    let json = serde_json::to_value(&pv).unwrap();
    assert_eq!(
        json["metadata"]["annotations"],
        serde_json::json!({
            "pv.kubernetes.io/provisioned-by": "hostpath.csi.k8s.io",
            "volume.kubernetes.io/provisioner-deletion-secret-name": "prov",
            "volume.kubernetes.io/provisioner-deletion-secret-namespace": "fixtures",
            "volume.kubernetes.io/controller-modify-secret-name": "modify",
            "volume.kubernetes.io/controller-modify-secret-namespace": "ns6",
        })
    );
    let spec = &json["spec"];
    assert_eq!(spec["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(spec["volumeMode"], "Block");
    assert_eq!(spec["storageClassName"], "fixtures-hostpath");
    assert!(spec.get("nodeAffinity").is_none(), "{spec}");
    assert!(spec.get("mountOptions").is_none(), "{spec}");
    let csi = &spec["csi"];
    assert!(
        csi.get("fsType").is_none(),
        "block volumes have no fsType: {csi}"
    );
    assert_eq!(
        csi["nodeStageSecretRef"],
        serde_json::json!({"name": "stage", "namespace": "ns1"})
    );
    assert_eq!(
        csi["nodePublishSecretRef"],
        serde_json::json!({"name": "publish", "namespace": "ns2"})
    );
    assert_eq!(
        csi["controllerPublishSecretRef"],
        serde_json::json!({"name": "cpublish", "namespace": "ns3"})
    );
    assert_eq!(
        csi["controllerExpandSecretRef"],
        serde_json::json!({"name": "cexpand", "namespace": "ns4"})
    );
    assert_eq!(
        csi["nodeExpandSecretRef"],
        serde_json::json!({"name": "nexpand", "namespace": "ns5"})
    );
    assert_eq!(
        csi["volumeAttributes"][crate::annotations::PROVISIONER_ID_KEY],
        "driver-says"
    );
    assert_eq!(
        json["metadata"]["finalizers"],
        serde_json::json!([PV_FINALIZER])
    );
}

#[test]
fn empty_fstype_is_left_out() {
    let mut class = fixture_class();
    class
        .parameters
        .as_mut()
        .unwrap()
        .remove(params::PREFIXED_FSTYPE_KEY);
    let pv = build(
        &hostpath_options(),
        &fixture_pvc(),
        &class,
        &fixture_response(),
    )
    .unwrap();
    assert_eq!(pv.spec.unwrap().csi.unwrap().fs_type, None);
}

#[test]
fn the_claims_volume_attributes_class_names_the_pvs() {
    let mut opts = hostpath_options();
    opts.controller_caps = controller_caps(&[
        ControllerCapability::CreateDeleteVolume,
        ControllerCapability::ModifyVolume,
    ]);
    for (name, want) in [(Some("gold"), Some("gold")), (Some(""), None), (None, None)] {
        let mut pvc = fixture_pvc();
        pvc.spec.as_mut().unwrap().volume_attributes_class_name = name.map(str::to_owned);
        let pv = build(&opts, &pvc, &fixture_class(), &fixture_response()).unwrap();
        assert_eq!(
            pv.spec.unwrap().volume_attributes_class_name.as_deref(),
            want,
            "{name:?}"
        );
    }
}
