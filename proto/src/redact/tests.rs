use std::collections::{BTreeSet, HashMap};

use prost_reflect::DescriptorPool;

use super::{SECRET_BEARING_MESSAGES, STRIPPED};
use crate::csi::v1;

const SECRET_KEY: &str = "secret-key-7f3a";
const SECRET_VALUE: &str = "secret-value-9c1e";

fn secrets() -> HashMap<String, String> {
    HashMap::from([(SECRET_KEY.to_owned(), SECRET_VALUE.to_owned())])
}

fn assert_hidden(message: &str, debug: &str) {
    assert!(debug.starts_with(message), "{debug}");
    assert!(debug.contains(&format!("secrets: {STRIPPED}")), "{debug}");
    assert!(!debug.contains(SECRET_KEY), "secret key leaked: {debug}");
    assert!(
        !debug.contains(SECRET_VALUE),
        "secret value leaked: {debug}"
    );
}

macro_rules! debug_hides_secrets {
    ($($test:ident: $message:ident,)*) => {
        $(
            #[test]
            fn $test() {
                let message = v1::$message { secrets: secrets(), ..Default::default() };
                assert_hidden(stringify!($message), &format!("{message:?}"));
                // The alternate (pretty) form goes through the same impl.
                assert_hidden(stringify!($message), &format!("{message:#?}"));
            }
        )*
    };
}

debug_hides_secrets! {
    create_volume_request_debug_hides_secrets: CreateVolumeRequest,
    delete_volume_request_debug_hides_secrets: DeleteVolumeRequest,
    controller_publish_volume_request_debug_hides_secrets: ControllerPublishVolumeRequest,
    controller_unpublish_volume_request_debug_hides_secrets: ControllerUnpublishVolumeRequest,
    validate_volume_capabilities_request_debug_hides_secrets: ValidateVolumeCapabilitiesRequest,
    controller_modify_volume_request_debug_hides_secrets: ControllerModifyVolumeRequest,
    create_snapshot_request_debug_hides_secrets: CreateSnapshotRequest,
    delete_snapshot_request_debug_hides_secrets: DeleteSnapshotRequest,
    list_snapshots_request_debug_hides_secrets: ListSnapshotsRequest,
    get_snapshot_request_debug_hides_secrets: GetSnapshotRequest,
    controller_expand_volume_request_debug_hides_secrets: ControllerExpandVolumeRequest,
    node_stage_volume_request_debug_hides_secrets: NodeStageVolumeRequest,
    node_publish_volume_request_debug_hides_secrets: NodePublishVolumeRequest,
    node_expand_volume_request_debug_hides_secrets: NodeExpandVolumeRequest,
    create_volume_group_snapshot_request_debug_hides_secrets: CreateVolumeGroupSnapshotRequest,
    delete_volume_group_snapshot_request_debug_hides_secrets: DeleteVolumeGroupSnapshotRequest,
    get_volume_group_snapshot_request_debug_hides_secrets: GetVolumeGroupSnapshotRequest,
    get_metadata_allocated_request_debug_hides_secrets: GetMetadataAllocatedRequest,
    get_metadata_delta_request_debug_hides_secrets: GetMetadataDeltaRequest,
}

#[test]
fn debug_prints_every_field_other_than_the_secrets() {
    let request = v1::NodeStageVolumeRequest {
        volume_id: "vol-1".to_owned(),
        publish_context: HashMap::from([("device".to_owned(), "/dev/sdb".to_owned())]),
        staging_target_path: "/staging".to_owned(),
        volume_capability: Some(v1::VolumeCapability {
            access_type: Some(v1::volume_capability::AccessType::Mount(
                v1::volume_capability::MountVolume {
                    fs_type: "xfs".to_owned(),
                    ..Default::default()
                },
            )),
            access_mode: None,
        }),
        secrets: secrets(),
        volume_context: HashMap::from([("color".to_owned(), "blue".to_owned())]),
    };
    let debug = format!("{request:?}");
    assert_hidden("NodeStageVolumeRequest", &debug);
    for visible in ["vol-1", "/dev/sdb", "/staging", "xfs", "blue"] {
        assert!(debug.contains(visible), "{visible} missing from {debug}");
    }
    // Declaration order is kept: secrets sits between volume_capability and volume_context.
    let secrets_at = debug.find("secrets").expect("secrets printed");
    assert!(debug.find("volume_capability").expect("printed") < secrets_at);
    assert!(secrets_at < debug.find("volume_context").expect("printed"));
}

#[test]
fn every_message_with_a_csi_secret_field_has_a_redacting_debug() {
    // Walks the same descriptor set the code was generated from, so a spec update that
    // adds a secret-bearing message fails here until the message is added above.
    let pool = DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET).expect("valid descriptor set");
    let secret = pool
        .get_extension_by_name("csi.v1.csi_secret")
        .expect("csi_secret is declared");
    let mut from_descriptor = BTreeSet::new();
    for message in pool.all_messages() {
        for field in message.fields() {
            if field.options().get_extension(&secret).as_bool() == Some(true) {
                // The impls print every field but `secrets`; another secret name would leak.
                assert_eq!(field.name(), "secrets", "in {}", message.full_name());
                from_descriptor.insert(message.full_name().to_owned());
            }
        }
    }
    let covered: BTreeSet<String> = SECRET_BEARING_MESSAGES
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(covered, from_descriptor);
    assert_eq!(
        covered.len(),
        19,
        "CSI v1.12.0 has 19 secret-bearing requests"
    );
}
