use std::collections::HashMap;

use prost::Message as _;

use super::{base64, sanitized_json, sanitized_json_by_name};
use crate::csi::v1;
use crate::csi::v1::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
use crate::pluginregistration::v1 as registration;

fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn topology() -> v1::Topology {
    v1::Topology {
        segments: map(&[("topology.hostpath.csi/node", "ref-node")]),
    }
}

fn mount_capability() -> v1::VolumeCapability {
    v1::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "xfs".to_owned(),
            mount_flags: vec!["noatime".to_owned()],
            volume_mount_group: String::new(),
        })),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeMultiWriter.into(),
        }),
    }
}

/// The CreateVolume request csi-provisioner v6.3.0 sent in the fixture capture, as the
/// hostpath driver logged it through protosanitizer (grpc/all-calls.jsonl).
#[test]
fn create_volume_request_renders_like_the_upstream_log() {
    let request = v1::CreateVolumeRequest {
        name: "pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a".to_owned(),
        capacity_range: Some(v1::CapacityRange {
            required_bytes: 1_073_741_824,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_capability()],
        parameters: map(&[("fixtures.example.com/color", "blue")]),
        accessibility_requirements: Some(v1::TopologyRequirement {
            requisite: vec![topology()],
            preferred: vec![topology()],
        }),
        ..Default::default()
    };
    assert_eq!(
        sanitized_json(&request),
        r#"{"accessibility_requirements":{"preferred":[{"segments":{"topology.hostpath.csi/node":"ref-node"}}],"requisite":[{"segments":{"topology.hostpath.csi/node":"ref-node"}}]},"capacity_range":{"required_bytes":1073741824},"name":"pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a","parameters":{"fixtures.example.com/color":"blue"},"volume_capabilities":[{"access_mode":{"mode":"SINGLE_NODE_MULTI_WRITER"},"mount":{"fs_type":"xfs","mount_flags":["noatime"]}}]}"#
    );
}

#[test]
fn create_volume_request_secrets_are_stripped_and_other_fields_kept() {
    let request = v1::CreateVolumeRequest {
        name: "pvc-1".to_owned(),
        parameters: map(&[("type", "fast")]),
        secrets: map(&[("password", "hunter2"), ("user", "admin")]),
        ..Default::default()
    };
    let json = sanitized_json(&request);
    assert_eq!(
        json,
        r#"{"name":"pvc-1","parameters":{"type":"fast"},"secrets":"***stripped***"}"#
    );
    for leaked in ["password", "hunter2", "user", "admin"] {
        assert!(!json.contains(leaked), "{leaked} leaked: {json}");
    }
}

#[test]
fn node_stage_volume_request_strips_secrets_next_to_nested_messages() {
    let request = v1::NodeStageVolumeRequest {
        volume_id: "vol-1".to_owned(),
        publish_context: map(&[("device", "/dev/sdb")]),
        staging_target_path: "/var/lib/kubelet/staging".to_owned(),
        volume_capability: Some(mount_capability()),
        secrets: map(&[("chap-secret", "s3cr3t")]),
        volume_context: map(&[("color", "blue")]),
    };
    let json = sanitized_json(&request);
    assert_eq!(
        json,
        r#"{"publish_context":{"device":"/dev/sdb"},"secrets":"***stripped***","staging_target_path":"/var/lib/kubelet/staging","volume_capability":{"access_mode":{"mode":"SINGLE_NODE_MULTI_WRITER"},"mount":{"fs_type":"xfs","mount_flags":["noatime"]}},"volume_context":{"color":"blue"},"volume_id":"vol-1"}"#
    );
    assert!(
        !json.contains("chap-secret") && !json.contains("s3cr3t"),
        "{json}"
    );
}

#[test]
fn empty_secret_map_is_left_out_like_every_unset_field() {
    // Upstream only overwrites secrets that are present (fixture DeleteVolume lines
    // have no "secrets" key).
    let request = v1::DeleteVolumeRequest {
        volume_id: "39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e".to_owned(),
        secrets: HashMap::new(),
    };
    assert_eq!(
        sanitized_json(&request),
        r#"{"volume_id":"39d5bfc9-e5c1-11f1-9a92-6a32d2d0897e"}"#
    );
}

#[test]
fn message_without_secrets_renders_unchanged() {
    let response = v1::ControllerExpandVolumeResponse {
        capacity_bytes: 2_147_483_648,
        node_expansion_required: true,
    };
    assert_eq!(
        sanitized_json(&response),
        r#"{"capacity_bytes":2147483648,"node_expansion_required":true}"#
    );

    let info = v1::NodeGetInfoResponse {
        node_id: "ref-node".to_owned(),
        max_volumes_per_node: 0,
        accessible_topology: Some(topology()),
    };
    assert_eq!(
        sanitized_json(&info),
        r#"{"accessible_topology":{"segments":{"topology.hostpath.csi/node":"ref-node"}},"node_id":"ref-node"}"#
    );
}

#[test]
fn oneof_members_and_enums_render_by_name() {
    use v1::plugin_capability::{Service, Type, service};
    let response = v1::GetPluginCapabilitiesResponse {
        capabilities: [
            service::Type::ControllerService,
            service::Type::GroupControllerService,
            service::Type::VolumeAccessibilityConstraints,
        ]
        .into_iter()
        .map(|t| v1::PluginCapability {
            r#type: Some(Type::Service(Service { r#type: t.into() })),
        })
        .collect(),
    };
    assert_eq!(
        sanitized_json(&response),
        r#"{"capabilities":[{"service":{"type":"CONTROLLER_SERVICE"}},{"service":{"type":"GROUP_CONTROLLER_SERVICE"}},{"service":{"type":"VOLUME_ACCESSIBILITY_CONSTRAINTS"}}]}"#
    );
}

#[test]
fn empty_message_renders_as_empty_object() {
    assert_eq!(sanitized_json(&v1::ProbeRequest {}), "{}");
    assert_eq!(sanitized_json(&v1::CreateVolumeRequest::default()), "{}");
    // A set but empty sub-message still shows, as in upstream logs.
    let probe = v1::ProbeResponse { ready: Some(false) };
    assert_eq!(sanitized_json(&probe), r#"{"ready":{}}"#);
}

#[test]
fn unknown_enum_numbers_render_as_numbers() {
    let mode = AccessMode { mode: 42 };
    assert_eq!(sanitized_json(&mode), r#"{"mode":42}"#);
}

#[test]
fn strings_are_escaped_like_go_encoding_json() {
    let request = v1::DeleteVolumeRequest {
        volume_id: "a\"b\\c\nd<e>&f\u{1}\u{8}\u{2028}é".to_owned(),
        secrets: HashMap::new(),
    };
    assert_eq!(
        sanitized_json(&request),
        r#"{"volume_id":"a\"b\\c\nd\u003ce\u003e\u0026f\u0001\b\u2028é"}"#
    );
}

#[test]
fn by_name_works_on_encoded_bytes() {
    let request = v1::ControllerPublishVolumeRequest {
        volume_id: "vol-1".to_owned(),
        node_id: "ref-node".to_owned(),
        readonly: true,
        secrets: map(&[("k", "v")]),
        ..Default::default()
    };
    let json = sanitized_json_by_name(
        "csi.v1.ControllerPublishVolumeRequest",
        &request.encode_to_vec(),
    );
    assert_eq!(
        json.as_deref(),
        Some(
            r#"{"node_id":"ref-node","readonly":true,"secrets":"***stripped***","volume_id":"vol-1"}"#
        )
    );
}

#[test]
fn by_name_rejects_unknown_types_and_garbage() {
    assert_eq!(sanitized_json_by_name("csi.v1.NoSuchMessage", &[]), None);
    // Field 1 as a length-delimited string that runs past the end of the buffer.
    assert_eq!(
        sanitized_json_by_name("csi.v1.DeleteVolumeRequest", &[0x0a, 0x05, b'a']),
        None
    );
}

#[test]
fn plugin_registration_messages_render_too() {
    let info = registration::PluginInfo {
        r#type: "CSIPlugin".to_owned(),
        name: "hostpath.csi.k8s.io".to_owned(),
        endpoint: "/csi/csi.sock".to_owned(),
        supported_versions: vec!["1.0.0".to_owned()],
    };
    assert_eq!(
        sanitized_json(&info),
        r#"{"endpoint":"/csi/csi.sock","name":"hostpath.csi.k8s.io","supported_versions":["1.0.0"],"type":"CSIPlugin"}"#
    );
}

#[test]
fn messages_outside_the_descriptor_set_print_no_content() {
    let timestamp = prost_types::Timestamp {
        seconds: 12,
        nanos: 0,
    };
    // google.protobuf.Timestamp is in the set (as an import), so it renders.
    assert_eq!(sanitized_json(&timestamp), r#"{"seconds":12}"#);
    let any = prost_types::Any {
        type_url: "x".to_owned(),
        value: b"secret".to_vec(),
    };
    let json = sanitized_json(&any);
    assert!(json.starts_with("<<google.protobuf.Any"), "{json}");
    assert!(!json.contains("secret"), "{json}");
}

#[test]
fn bytes_render_as_standard_base64() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
}
