//! StorageClass parameters (spec §3): the `csi.storage.k8s.io/` keys the provisioner consumes
//! never reach the driver, an unknown key under that prefix is refused, every other key passes
//! verbatim, and the `--extra-create-metadata` keys cannot be forged by the class.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{config, hostile};
use crate::params::{
    CSI_PARAMETER_PREFIX, DEPRECATED_PROVISIONER_SECRET_NAME_KEY, PREFIXED_FSTYPE_KEY, PV_NAME_KEY,
    PVC_NAME_KEY, PVC_NAMESPACE_KEY, ParamError, RESERVED_KEYS, add_extra_create_metadata, fs_type,
    strip_reserved,
};

/// Keys a class may hold: reserved ones, unknown ones under the prefix (the metadata keys
/// among them), fsType spellings, deprecated keys, and anything.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(RESERVED_KEYS.to_vec()).prop_map(str::to_owned),
        hostile().prop_map(|s| format!("{CSI_PARAMETER_PREFIX}{s}")),
        proptest::sample::select(vec![
            PVC_NAME_KEY,
            PV_NAME_KEY,
            "fstype",
            "FsType",
            "FSTYPE",
            DEPRECATED_PROVISIONER_SECRET_NAME_KEY,
            "csi.storage.k8s.io",
            "CSI.storage.k8s.io/fstype",
        ])
        .prop_map(str::to_owned),
        hostile(),
    ]
}

fn class_params() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(key(), hostile(), 0..8)
}

proptest! {
    #![proptest_config(config(1000))]

    /// CreateVolume's parameters are the class's minus the reserved keys; any other key under
    /// the reserved prefix is an error naming the first such key (in sorted order, so the same
    /// one every time).
    #[test]
    fn reserved_keys_are_stripped_and_unknown_reserved_keys_refused(params in class_params()) {
        let unknown = params
            .keys()
            .find(|k| k.starts_with(CSI_PARAMETER_PREFIX) && !RESERVED_KEYS.contains(&k.as_str()));
        match strip_reserved(&params) {
            Ok(stripped) => {
                prop_assert!(unknown.is_none(), "{unknown:?} accepted");
                prop_assert!(stripped.keys().all(|k| !k.starts_with(CSI_PARAMETER_PREFIX)));
                let kept: BTreeMap<String, String> = params
                    .iter()
                    .filter(|(k, _)| !k.starts_with(CSI_PARAMETER_PREFIX))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                prop_assert_eq!(stripped.into_iter().collect::<BTreeMap<_, _>>(), kept);
            }
            Err(ParamError::UnknownReservedKey { key }) => {
                prop_assert_eq!(Some(&key), unknown);
            }
            Err(other) => prop_assert!(false, "{other}"),
        }
    }

    /// `--extra-create-metadata` keys are the claim's and PV's, whatever the class says.
    #[test]
    fn extra_create_metadata_cannot_be_forged(
        params in class_params(),
        claim in hostile(),
        namespace in hostile(),
        pv in hostile(),
    ) {
        if let Ok(mut stripped) = strip_reserved(&params) {
            add_extra_create_metadata(&mut stripped, &claim, &namespace, &pv);
            prop_assert_eq!(&stripped[PVC_NAME_KEY], &claim);
            prop_assert_eq!(&stripped[PVC_NAMESPACE_KEY], &namespace);
            prop_assert_eq!(&stripped[PV_NAME_KEY], &pv);
        }
    }

    /// fsType: exactly one key (`fstype` in any case, or the prefixed one) gives its value, an
    /// empty value or none gives `--default-fstype`, two or more are an error.
    #[test]
    fn one_fstype_key_at_most(params in class_params(), default in hostile()) {
        let keys: Vec<&String> = params
            .keys()
            .filter(|k| k.eq_ignore_ascii_case("fstype") || *k == PREFIXED_FSTYPE_KEY)
            .collect();
        match (fs_type(&params, &default), keys.as_slice()) {
            (Err(ParamError::FsTypeConflict), [_, _, ..]) => {}
            (Ok(fs), []) => prop_assert_eq!(fs, default),
            (Ok(fs), [key]) if params[*key].is_empty() => prop_assert_eq!(fs, default),
            (Ok(fs), [key]) => prop_assert_eq!(&fs, &params[*key]),
            (result, keys) => prop_assert!(false, "{keys:?}: {result:?}"),
        }
    }
}
