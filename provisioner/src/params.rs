//! StorageClass `parameters`: the reserved `csi.storage.k8s.io/` keys the provisioner consumes,
//! the deprecated un-prefixed spellings it still honours, fsType resolution, and the map that is
//! finally sent as CreateVolume `parameters` (spec §3).
//!
//! The reserved keys configure the provisioner itself (fsType, secret references) and never reach
//! the driver; any other key under the reserved prefix is refused, so a typo such as
//! `csi.storage.k8s.io/fs-type` fails loudly instead of being silently dropped. The deprecated
//! keys (`fstype`, `csiProvisionerSecretName`, ...) are honoured AND passed through, as upstream
//! does for backwards compatibility.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use thiserror::Error;

/// The reserved prefix of StorageClass parameters meant for the provisioner.
pub(crate) const CSI_PARAMETER_PREFIX: &str = "csi.storage.k8s.io/";
/// fsType of mount volumes.
pub(crate) const PREFIXED_FSTYPE_KEY: &str = "csi.storage.k8s.io/fstype";
/// Deprecated fsType key, matched case-insensitively.
pub(crate) const DEPRECATED_FSTYPE_KEY: &str = "fstype";
/// Default secret name for every kind without its own keys.
pub(crate) const PREFIXED_DEFAULT_SECRET_NAME_KEY: &str = "csi.storage.k8s.io/secret-name";
/// Default secret namespace.
pub(crate) const PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY: &str =
    "csi.storage.k8s.io/secret-namespace";
/// Secret for CreateVolume/DeleteVolume.
pub(crate) const PREFIXED_PROVISIONER_SECRET_NAME_KEY: &str =
    "csi.storage.k8s.io/provisioner-secret-name";
/// Namespace of the provisioner secret.
pub(crate) const PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY: &str =
    "csi.storage.k8s.io/provisioner-secret-namespace";
/// Secret for ControllerPublishVolume (PV `controllerPublishSecretRef`).
pub(crate) const PREFIXED_CONTROLLER_PUBLISH_SECRET_NAME_KEY: &str =
    "csi.storage.k8s.io/controller-publish-secret-name";
/// Namespace of the controller-publish secret.
pub(crate) const PREFIXED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY: &str =
    "csi.storage.k8s.io/controller-publish-secret-namespace";
/// Secret for NodeStageVolume (PV `nodeStageSecretRef`).
pub(crate) const PREFIXED_NODE_STAGE_SECRET_NAME_KEY: &str =
    "csi.storage.k8s.io/node-stage-secret-name";
/// Namespace of the node-stage secret.
pub(crate) const PREFIXED_NODE_STAGE_SECRET_NAMESPACE_KEY: &str =
    "csi.storage.k8s.io/node-stage-secret-namespace";
/// Secret for NodePublishVolume (PV `nodePublishSecretRef`).
pub(crate) const PREFIXED_NODE_PUBLISH_SECRET_NAME_KEY: &str =
    "csi.storage.k8s.io/node-publish-secret-name";
/// Namespace of the node-publish secret.
pub(crate) const PREFIXED_NODE_PUBLISH_SECRET_NAMESPACE_KEY: &str =
    "csi.storage.k8s.io/node-publish-secret-namespace";
/// Secret for ControllerExpandVolume (PV `controllerExpandSecretRef`).
pub(crate) const PREFIXED_CONTROLLER_EXPAND_SECRET_NAME_KEY: &str =
    "csi.storage.k8s.io/controller-expand-secret-name";
/// Namespace of the controller-expand secret.
pub(crate) const PREFIXED_CONTROLLER_EXPAND_SECRET_NAMESPACE_KEY: &str =
    "csi.storage.k8s.io/controller-expand-secret-namespace";
/// Secret for NodeExpandVolume (PV `nodeExpandSecretRef`).
pub(crate) const PREFIXED_NODE_EXPAND_SECRET_NAME_KEY: &str =
    "csi.storage.k8s.io/node-expand-secret-name";
/// Namespace of the node-expand secret.
pub(crate) const PREFIXED_NODE_EXPAND_SECRET_NAMESPACE_KEY: &str =
    "csi.storage.k8s.io/node-expand-secret-namespace";
/// Secret for ControllerModifyVolume (PV annotations, read by external-resizer).
pub(crate) const PREFIXED_CONTROLLER_MODIFY_SECRET_NAME_KEY: &str =
    "csi.storage.k8s.io/controller-modify-secret-name";
/// Namespace of the controller-modify secret.
pub(crate) const PREFIXED_CONTROLLER_MODIFY_SECRET_NAMESPACE_KEY: &str =
    "csi.storage.k8s.io/controller-modify-secret-namespace";

/// Deprecated provisioner secret name key (honoured, not stripped).
pub(crate) const DEPRECATED_PROVISIONER_SECRET_NAME_KEY: &str = "csiProvisionerSecretName";
/// Deprecated provisioner secret namespace key.
pub(crate) const DEPRECATED_PROVISIONER_SECRET_NAMESPACE_KEY: &str =
    "csiProvisionerSecretNamespace";
/// Deprecated controller-publish secret name key.
pub(crate) const DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAME_KEY: &str =
    "csiControllerPublishSecretName";
/// Deprecated controller-publish secret namespace key.
pub(crate) const DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY: &str =
    "csiControllerPublishSecretNamespace";
/// Deprecated node-stage secret name key.
pub(crate) const DEPRECATED_NODE_STAGE_SECRET_NAME_KEY: &str = "csiNodeStageSecretName";
/// Deprecated node-stage secret namespace key.
pub(crate) const DEPRECATED_NODE_STAGE_SECRET_NAMESPACE_KEY: &str = "csiNodeStageSecretNamespace";
/// Deprecated node-publish secret name key.
pub(crate) const DEPRECATED_NODE_PUBLISH_SECRET_NAME_KEY: &str = "csiNodePublishSecretName";
/// Deprecated node-publish secret namespace key.
pub(crate) const DEPRECATED_NODE_PUBLISH_SECRET_NAMESPACE_KEY: &str =
    "csiNodePublishSecretNamespace";

/// `--extra-create-metadata`: the claim's name.
pub(crate) const PVC_NAME_KEY: &str = "csi.storage.k8s.io/pvc/name";
/// `--extra-create-metadata`: the claim's namespace.
pub(crate) const PVC_NAMESPACE_KEY: &str = "csi.storage.k8s.io/pvc/namespace";
/// `--extra-create-metadata`: the PV (and CSI volume) name.
pub(crate) const PV_NAME_KEY: &str = "csi.storage.k8s.io/pv/name";

/// The 17 reserved keys the provisioner consumes and strips before CreateVolume.
pub(crate) const RESERVED_KEYS: [&str; 17] = [
    PREFIXED_FSTYPE_KEY,
    PREFIXED_DEFAULT_SECRET_NAME_KEY,
    PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY,
    PREFIXED_PROVISIONER_SECRET_NAME_KEY,
    PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY,
    PREFIXED_CONTROLLER_PUBLISH_SECRET_NAME_KEY,
    PREFIXED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY,
    PREFIXED_NODE_STAGE_SECRET_NAME_KEY,
    PREFIXED_NODE_STAGE_SECRET_NAMESPACE_KEY,
    PREFIXED_NODE_PUBLISH_SECRET_NAME_KEY,
    PREFIXED_NODE_PUBLISH_SECRET_NAMESPACE_KEY,
    PREFIXED_CONTROLLER_EXPAND_SECRET_NAME_KEY,
    PREFIXED_CONTROLLER_EXPAND_SECRET_NAMESPACE_KEY,
    PREFIXED_NODE_EXPAND_SECRET_NAME_KEY,
    PREFIXED_NODE_EXPAND_SECRET_NAMESPACE_KEY,
    PREFIXED_CONTROLLER_MODIFY_SECRET_NAME_KEY,
    PREFIXED_CONTROLLER_MODIFY_SECRET_NAMESPACE_KEY,
];

/// A StorageClass parameter problem (upstream's texts).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum ParamError {
    /// More than one fsType key (deprecated spellings in any case, or deprecated + prefixed).
    #[error(
        r#"fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" keys"#
    )]
    FsTypeConflict,
    /// A key under the reserved prefix that is not one of [`RESERVED_KEYS`].
    #[error(r#"found unknown parameter key "{key}" with reserved namespace csi.storage.k8s.io/"#)]
    UnknownReservedKey {
        /// The offending key.
        key: String,
    },
}

/// The fsType for mount volumes: the class's (either spelling, exactly one), else
/// `--default-fstype`, else empty (no fsType sent).
///
/// An empty value under the key counts as "not set" and falls back to the default, as upstream.
pub(crate) fn fs_type(
    params: &BTreeMap<String, String>,
    default_fstype: &str,
) -> Result<String, ParamError> {
    let mut found = params
        .iter()
        .filter(|(key, _)| is_deprecated_fstype_key(key) || *key == PREFIXED_FSTYPE_KEY);
    let value = found.next().map(|(_, value)| value.clone());
    if found.next().is_some() {
        return Err(ParamError::FsTypeConflict);
    }
    Ok(match value {
        Some(value) if !value.is_empty() => value,
        _ => default_fstype.to_owned(),
    })
}

fn is_deprecated_fstype_key(key: &str) -> bool {
    key.eq_ignore_ascii_case(DEPRECATED_FSTYPE_KEY)
}

/// The CreateVolume `parameters`: every key outside the reserved prefix verbatim, the reserved
/// ones dropped; an unknown reserved key is an error (even `csi.storage.k8s.io/pvc/name`, which
/// only `--extra-create-metadata` may set, afterwards).
///
/// Keys are checked in sorted order, so the error names the same key every time (Go's map order
/// is random).
pub(crate) fn strip_reserved(
    params: &BTreeMap<String, String>,
) -> Result<HashMap<String, String>, ParamError> {
    let mut out = HashMap::with_capacity(params.len());
    for (key, value) in params {
        if key.starts_with(CSI_PARAMETER_PREFIX) {
            if !RESERVED_KEYS.contains(&key.as_str()) {
                return Err(ParamError::UnknownReservedKey { key: key.clone() });
            }
        } else {
            out.insert(key.clone(), value.clone());
        }
    }
    Ok(out)
}

/// Adds the `--extra-create-metadata` keys (after stripping, so users cannot forge them).
pub(crate) fn add_extra_create_metadata<S: BuildHasher>(
    parameters: &mut HashMap<String, String, S>,
    pvc_name: &str,
    pvc_namespace: &str,
    pv_name: &str,
) {
    parameters.insert(PVC_NAME_KEY.to_owned(), pvc_name.to_owned());
    parameters.insert(PVC_NAMESPACE_KEY.to_owned(), pvc_namespace.to_owned());
    parameters.insert(PV_NAME_KEY.to_owned(), pv_name.to_owned());
}

/// The warning upstream logs for a deprecated key (`deprecationWarning`).
pub(crate) fn deprecation_warning(deprecated: &str, replacement: &str) -> String {
    format!(
        r#""{deprecated}" is deprecated and will be removed in a future release, please use "{replacement}" instead"#
    )
}

/// One warning per deprecated key the class uses, for the controller to log (upstream logs them
/// at warning level while resolving fsType and secrets).
pub(crate) fn deprecated_key_warnings(params: &BTreeMap<String, String>) -> Vec<String> {
    const SECRET_KEYS: [(&str, &str); 8] = [
        (
            DEPRECATED_PROVISIONER_SECRET_NAME_KEY,
            PREFIXED_PROVISIONER_SECRET_NAME_KEY,
        ),
        (
            DEPRECATED_PROVISIONER_SECRET_NAMESPACE_KEY,
            PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY,
        ),
        (
            DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAME_KEY,
            PREFIXED_CONTROLLER_PUBLISH_SECRET_NAME_KEY,
        ),
        (
            DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY,
            PREFIXED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY,
        ),
        (
            DEPRECATED_NODE_STAGE_SECRET_NAME_KEY,
            PREFIXED_NODE_STAGE_SECRET_NAME_KEY,
        ),
        (
            DEPRECATED_NODE_STAGE_SECRET_NAMESPACE_KEY,
            PREFIXED_NODE_STAGE_SECRET_NAMESPACE_KEY,
        ),
        (
            DEPRECATED_NODE_PUBLISH_SECRET_NAME_KEY,
            PREFIXED_NODE_PUBLISH_SECRET_NAME_KEY,
        ),
        (
            DEPRECATED_NODE_PUBLISH_SECRET_NAMESPACE_KEY,
            PREFIXED_NODE_PUBLISH_SECRET_NAMESPACE_KEY,
        ),
    ];
    let mut warnings: Vec<String> = params
        .keys()
        .filter(|key| is_deprecated_fstype_key(key))
        // Upstream names the canonical spelling, whatever case the class used.
        .map(|_| deprecation_warning(DEPRECATED_FSTYPE_KEY, PREFIXED_FSTYPE_KEY))
        .collect();
    warnings.extend(
        SECRET_KEYS
            .iter()
            .filter(|(deprecated, _)| params.contains_key(*deprecated))
            .map(|(deprecated, replacement)| deprecation_warning(deprecated, replacement)),
    );
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    #[allow(clippy::type_complexity, reason = "table test rows are tuples")]
    fn fs_type_takes_one_spelling_then_the_default() {
        let cases: Vec<(&str, Vec<(&str, &str)>, &str, Result<&str, ParamError>)> = vec![
            ("nothing set", vec![], "", Ok("")),
            ("default only", vec![], "ext4", Ok("ext4")),
            (
                "prefixed",
                vec![(PREFIXED_FSTYPE_KEY, "xfs")],
                "ext4",
                Ok("xfs"),
            ),
            ("deprecated", vec![("fstype", "btrfs")], "", Ok("btrfs")),
            (
                "deprecated camel case",
                vec![("fsType", "ext3")],
                "",
                Ok("ext3"),
            ),
            (
                "deprecated upper case",
                vec![("FSTYPE", "ext2")],
                "",
                Ok("ext2"),
            ),
            (
                "empty value falls back",
                vec![(PREFIXED_FSTYPE_KEY, "")],
                "ext4",
                Ok("ext4"),
            ),
            (
                "deprecated and prefixed",
                vec![("fstype", "ext4"), (PREFIXED_FSTYPE_KEY, "xfs")],
                "",
                Err(ParamError::FsTypeConflict),
            ),
            (
                "two deprecated spellings",
                vec![("fsType", "ext4"), ("fstype", "ext4")],
                "",
                Err(ParamError::FsTypeConflict),
            ),
            (
                "other keys ignored",
                vec![("csi.storage.k8s.io/fsType", "x"), ("fs-type", "y")],
                "",
                Ok(""),
            ),
        ];
        for (name, params, default, want) in cases {
            assert_eq!(
                fs_type(&map(&params), default),
                want.map(str::to_owned),
                "{name}"
            );
        }
    }

    #[test]
    fn fs_type_conflict_reads_like_upstream() {
        assert_eq!(
            ParamError::FsTypeConflict.to_string(),
            r#"fstype specified in parameters with both "fstype" and "csi.storage.k8s.io/fstype" keys"#
        );
    }

    #[test]
    fn every_reserved_key_is_stripped_and_others_pass_through() {
        let mut params: BTreeMap<String, String> = RESERVED_KEYS
            .iter()
            .map(|k| ((*k).to_owned(), "value".to_owned()))
            .collect();
        params.extend(map(&[
            ("type", "ssd"),
            ("fstype", "ext4"),
            (DEPRECATED_PROVISIONER_SECRET_NAME_KEY, "s"),
            (DEPRECATED_PROVISIONER_SECRET_NAMESPACE_KEY, "ns"),
            ("csi.storage.k8s.io", "no slash, not reserved"),
            ("example.com/csi.storage.k8s.io/x", "prefix elsewhere"),
        ]));
        let stripped = strip_reserved(&params).unwrap();
        let mut keys: Vec<&str> = stripped.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "csi.storage.k8s.io",
                "csiProvisionerSecretName",
                "csiProvisionerSecretNamespace",
                "example.com/csi.storage.k8s.io/x",
                "fstype",
                "type",
            ]
        );
        assert_eq!(stripped["type"], "ssd");
        assert_eq!(RESERVED_KEYS.len(), 17);
    }

    #[test]
    fn unknown_reserved_keys_are_rejected() {
        for key in [
            "csi.storage.k8s.io/pvc/name",
            "csi.storage.k8s.io/pv/name",
            "csi.storage.k8s.io/fs-type",
            "csi.storage.k8s.io/FSTYPE",
            "csi.storage.k8s.io/",
        ] {
            let err = strip_reserved(&map(&[(key, "x"), ("type", "ssd")])).unwrap_err();
            assert_eq!(
                err,
                ParamError::UnknownReservedKey {
                    key: key.to_owned()
                }
            );
            assert_eq!(
                err.to_string(),
                format!(
                    r#"found unknown parameter key "{key}" with reserved namespace csi.storage.k8s.io/"#
                )
            );
        }
    }

    #[test]
    fn extra_create_metadata_adds_three_keys() {
        let mut parameters = strip_reserved(&map(&[("type", "ssd")])).unwrap();
        add_extra_create_metadata(&mut parameters, "claim", "ns", "pvc-1");
        assert_eq!(parameters.len(), 4);
        assert_eq!(parameters[PVC_NAME_KEY], "claim");
        assert_eq!(parameters[PVC_NAMESPACE_KEY], "ns");
        assert_eq!(parameters[PV_NAME_KEY], "pvc-1");
    }

    #[test]
    fn deprecated_keys_produce_upstream_warnings() {
        let warnings = deprecated_key_warnings(&map(&[
            ("fsType", "ext4"),
            (DEPRECATED_NODE_STAGE_SECRET_NAME_KEY, "s"),
            (PREFIXED_FSTYPE_KEY, "x"),
        ]));
        assert_eq!(
            warnings,
            [
                r#""fstype" is deprecated and will be removed in a future release, please use "csi.storage.k8s.io/fstype" instead"#,
                r#""csiNodeStageSecretName" is deprecated and will be removed in a future release, please use "csi.storage.k8s.io/node-stage-secret-name" instead"#,
            ]
        );
        assert!(deprecated_key_warnings(&map(&[(PREFIXED_FSTYPE_KEY, "x")])).is_empty());
    }
}
