//! Kubernetes access modes (`ReadWriteOnce`, `ReadOnlyMany`, `ReadWriteMany`,
//! `ReadWriteOncePod`) to the CSI `VolumeCapability.AccessMode.Mode` a driver is asked for.
//!
//! Rust counterpart of csi-lib-utils `accessmodes.ToCSIAccessMode`. Which CSI mode a mode maps
//! to depends on whether the driver reports the `SINGLE_NODE_MULTI_WRITER` controller capability:
//! such a driver understands the finer single-node modes, so `ReadWriteOnce` (one node, any number
//! of writers on it) becomes SINGLE_NODE_MULTI_WRITER and `ReadWriteOncePod` (one writer)
//! becomes SINGLE_NODE_SINGLE_WRITER; older drivers get SINGLE_NODE_WRITER for both.
//!
//! The error texts are csi-lib-utils' own (including their capitals): the sidecars put them into
//! Events and VolumeAttachment errors that users and tooling already know.

use proto::csi::v1::volume_capability::access_mode::Mode;
use thiserror::Error;

use crate::capabilities::ControllerCapabilities;

/// `ReadWriteOnce`: read-write by a single node.
pub const READ_WRITE_ONCE: &str = "ReadWriteOnce";
/// `ReadOnlyMany`: read-only by many nodes.
pub const READ_ONLY_MANY: &str = "ReadOnlyMany";
/// `ReadWriteMany`: read-write by many nodes.
pub const READ_WRITE_MANY: &str = "ReadWriteMany";
/// `ReadWriteOncePod`: read-write by a single pod.
pub const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// Why a set of access modes has no CSI equivalent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AccessModeError {
    /// `ReadWriteOncePod` promises a single writer, which no other mode can share a volume with.
    #[error(
        "Kubernetes does not support use of ReadWriteOncePod with other access modes on the same PersistentVolume"
    )]
    ReadWriteOncePodWithOthers,
    /// CSI has no mode that is read-only on many nodes and read-write on one.
    #[error("CSI does not support ReadOnlyMany and ReadWriteOnce on the same PersistentVolume")]
    ReadOnlyManyWithReadWriteOnce,
    /// No known mode in the list (empty, or only unknown strings). The list is shown the way Go's
    /// `%+v` prints it: `[Foo Bar]`.
    #[error("unsupported AccessMode combination: [{}]", .modes.join(" "))]
    Unsupported {
        /// The modes as given.
        modes: Vec<String>,
    },
}

/// Shorthand for results of this module.
pub type Result<T, E = AccessModeError> = std::result::Result<T, E>;

/// Maps one access mode, as the provisioner does for each entry of a claim's `accessModes`
/// (it sends one VolumeCapability per mode rather than merging them).
pub fn single_to_csi(mode: &str, caps: &ControllerCapabilities) -> Result<Mode> {
    set_to_csi(&[mode.to_owned()], caps)
}

/// Maps the whole access-mode list of a PersistentVolume to one CSI mode, as the attacher and the
/// resizer do.
///
/// Precedence follows csi-lib-utils: `ReadWriteOncePod` must be alone; any `ReadWriteMany` wins;
/// `ReadOnlyMany` and `ReadWriteOnce` together are an error; then `ReadOnlyMany`, then
/// `ReadWriteOnce`. Duplicates and unknown strings next to a known mode are ignored.
pub fn set_to_csi(modes: &[String], caps: &ControllerCapabilities) -> Result<Mode> {
    let has = |wanted: &str| modes.iter().any(|m| m == wanted);
    let single_node_modes = caps.has_single_node_multi_writer();
    if has(READ_WRITE_ONCE_POD) {
        if modes.iter().any(|m| m != READ_WRITE_ONCE_POD) {
            return Err(AccessModeError::ReadWriteOncePodWithOthers);
        }
        return Ok(if single_node_modes {
            Mode::SingleNodeSingleWriter
        } else {
            Mode::SingleNodeWriter
        });
    }
    if has(READ_WRITE_MANY) {
        return Ok(Mode::MultiNodeMultiWriter);
    }
    match (has(READ_ONLY_MANY), has(READ_WRITE_ONCE)) {
        (true, true) => Err(AccessModeError::ReadOnlyManyWithReadWriteOnce),
        (true, false) => Ok(Mode::MultiNodeReaderOnly),
        (false, true) => Ok(if single_node_modes {
            Mode::SingleNodeMultiWriter
        } else {
            Mode::SingleNodeWriter
        }),
        (false, false) => Err(AccessModeError::Unsupported {
            modes: modes.to_vec(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::ControllerCapability;
    use proto::csi::v1::{
        ControllerGetCapabilitiesResponse, ControllerServiceCapability,
        controller_service_capability,
    };

    fn caps(single_node_multi_writer: bool) -> ControllerCapabilities {
        let mut capabilities = vec![ControllerCapability::CreateDeleteVolume];
        if single_node_multi_writer {
            capabilities.push(ControllerCapability::SingleNodeMultiWriter);
        }
        ControllerCapabilities::from_response(&ControllerGetCapabilitiesResponse {
            capabilities: capabilities
                .into_iter()
                .map(|c| ControllerServiceCapability {
                    r#type: Some(controller_service_capability::Type::Rpc(
                        controller_service_capability::Rpc { r#type: c as i32 },
                    )),
                })
                .collect(),
        })
    }

    fn modes(list: &[&str]) -> Vec<String> {
        list.iter().map(|m| (*m).to_owned()).collect()
    }

    #[test]
    fn mode_sets_map_like_csi_lib_utils() {
        use AccessModeError as E;
        let rwo_pod_error = Err(E::ReadWriteOncePodWithOthers);
        let rox_rwo_error = Err(E::ReadOnlyManyWithReadWriteOnce);
        // (modes, without SINGLE_NODE_MULTI_WRITER, with it)
        let cases: Vec<(Vec<String>, Result<Mode>, Result<Mode>)> = vec![
            (
                modes(&["ReadWriteOnce"]),
                Ok(Mode::SingleNodeWriter),
                Ok(Mode::SingleNodeMultiWriter),
            ),
            (
                modes(&["ReadWriteOncePod"]),
                Ok(Mode::SingleNodeWriter),
                Ok(Mode::SingleNodeSingleWriter),
            ),
            (
                modes(&["ReadOnlyMany"]),
                Ok(Mode::MultiNodeReaderOnly),
                Ok(Mode::MultiNodeReaderOnly),
            ),
            (
                modes(&["ReadWriteMany"]),
                Ok(Mode::MultiNodeMultiWriter),
                Ok(Mode::MultiNodeMultiWriter),
            ),
            (
                modes(&["ReadWriteMany", "ReadOnlyMany", "ReadWriteOnce"]),
                Ok(Mode::MultiNodeMultiWriter),
                Ok(Mode::MultiNodeMultiWriter),
            ),
            (
                modes(&["ReadWriteOnce", "ReadWriteOnce"]),
                Ok(Mode::SingleNodeWriter),
                Ok(Mode::SingleNodeMultiWriter),
            ),
            (
                modes(&["ReadWriteOncePod", "ReadWriteOncePod"]),
                Ok(Mode::SingleNodeWriter),
                Ok(Mode::SingleNodeSingleWriter),
            ),
            (
                modes(&["ReadWriteOncePod", "ReadWriteMany"]),
                rwo_pod_error.clone(),
                rwo_pod_error.clone(),
            ),
            (
                modes(&["ReadWriteOnce", "ReadWriteOncePod"]),
                rwo_pod_error.clone(),
                rwo_pod_error.clone(),
            ),
            (
                modes(&["ReadOnlyMany", "ReadWriteOnce"]),
                rox_rwo_error.clone(),
                rox_rwo_error.clone(),
            ),
            (
                modes(&["Bogus", "ReadWriteOnce"]),
                Ok(Mode::SingleNodeWriter),
                Ok(Mode::SingleNodeMultiWriter),
            ),
            (
                modes(&[]),
                Err(E::Unsupported { modes: vec![] }),
                Err(E::Unsupported { modes: vec![] }),
            ),
            (
                modes(&["Bogus"]),
                Err(E::Unsupported {
                    modes: modes(&["Bogus"]),
                }),
                Err(E::Unsupported {
                    modes: modes(&["Bogus"]),
                }),
            ),
        ];
        for (input, plain, single_node) in cases {
            assert_eq!(set_to_csi(&input, &caps(false)), plain, "{input:?}");
            assert_eq!(
                set_to_csi(&input, &caps(true)),
                single_node,
                "{input:?} (SNMW)"
            );
        }
    }

    #[test]
    fn single_mode_maps_each_kubernetes_mode() {
        let cases = [
            ("ReadWriteOnce", false, Mode::SingleNodeWriter),
            ("ReadWriteOnce", true, Mode::SingleNodeMultiWriter),
            ("ReadWriteOncePod", false, Mode::SingleNodeWriter),
            ("ReadWriteOncePod", true, Mode::SingleNodeSingleWriter),
            ("ReadOnlyMany", true, Mode::MultiNodeReaderOnly),
            ("ReadWriteMany", false, Mode::MultiNodeMultiWriter),
        ];
        for (mode, snmw, want) in cases {
            assert_eq!(
                single_to_csi(mode, &caps(snmw)),
                Ok(want),
                "{mode} snmw={snmw}"
            );
        }
    }

    #[test]
    fn errors_read_like_csi_lib_utils() {
        assert_eq!(
            single_to_csi("readwriteonce", &caps(false))
                .unwrap_err()
                .to_string(),
            "unsupported AccessMode combination: [readwriteonce]"
        );
        assert_eq!(
            set_to_csi(&modes(&["A", "B"]), &caps(false))
                .unwrap_err()
                .to_string(),
            "unsupported AccessMode combination: [A B]"
        );
        assert_eq!(
            set_to_csi(&[], &caps(false)).unwrap_err().to_string(),
            "unsupported AccessMode combination: []"
        );
        assert_eq!(
            AccessModeError::ReadWriteOncePodWithOthers.to_string(),
            "Kubernetes does not support use of ReadWriteOncePod with other access modes on the \
             same PersistentVolume"
        );
        assert_eq!(
            AccessModeError::ReadOnlyManyWithReadWriteOnce.to_string(),
            "CSI does not support ReadOnlyMany and ReadWriteOnce on the same PersistentVolume"
        );
    }
}
