//! The name of a provisioned volume: `<--volume-name-prefix>-<claim UID>`.
//!
//! The same string is the CSI `CreateVolumeRequest.name` (the driver's idempotency key, so every
//! retry for a claim must produce it again) and the PersistentVolume name.

use crate::plan_error::PlanError;

/// Builds the volume name for a claim (upstream `makeVolumeName`).
///
/// `uuid_length` -1 keeps the whole UID with its dashes (`pvc-dbaa5493-3cc2-...`); a positive
/// value keeps that many characters of the UID with the dashes removed (`pvc-dbaa5493`).
/// Upstream slices without a bounds check and panics on the first claim for a length above the
/// UID's 32 hex characters or below -1; here those are errors. Zero is refused too: upstream
/// would produce `pvc-`, a name kube-apiserver rejects only after the volume was created.
pub(crate) fn volume_name(
    prefix: &str,
    pvc_uid: &str,
    uuid_length: i64,
) -> Result<String, PlanError> {
    if prefix.is_empty() {
        return Err(PlanError::EmptyVolumeNamePrefix);
    }
    if pvc_uid.is_empty() {
        return Err(PlanError::MissingUid);
    }
    if uuid_length == -1 {
        return Ok(format!("{prefix}-{pvc_uid}"));
    }
    let compact: String = pvc_uid.chars().filter(|&c| c != '-').collect();
    let available = compact.chars().count();
    let length = usize::try_from(uuid_length)
        .ok()
        .filter(|&n| (1..=available).contains(&n))
        .ok_or(PlanError::UuidLengthOutOfRange {
            length: uuid_length,
            available,
        })?;
    let kept: String = compact.chars().take(length).collect();
    Ok(format!("{prefix}-{kept}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "dbaa5493-3cc2-45fc-9d93-d1c6eb28560a";

    #[test]
    fn volume_name_follows_prefix_and_uuid_length() {
        let cases: &[(&str, i64, &str)] = &[
            ("pvc", -1, "pvc-dbaa5493-3cc2-45fc-9d93-d1c6eb28560a"),
            ("pvc", 8, "pvc-dbaa5493"),
            ("pvc", 1, "pvc-d"),
            ("pvc", 12, "pvc-dbaa54933cc2"),
            ("pvc", 32, "pvc-dbaa54933cc245fc9d93d1c6eb28560a"),
            ("my-driver", 16, "my-driver-dbaa54933cc245fc"),
        ];
        for &(prefix, length, want) in cases {
            assert_eq!(
                volume_name(prefix, UID, length).unwrap(),
                want,
                "{prefix} {length}"
            );
        }
    }

    #[test]
    fn volume_name_refuses_what_upstream_would_panic_on() {
        for length in [0, 33, 100, -2, i64::MIN, i64::MAX] {
            let err = volume_name("pvc", UID, length).unwrap_err();
            assert!(
                matches!(err, PlanError::UuidLengthOutOfRange { length: l, available: 32 } if l == length),
                "{length}: {err:?}"
            );
        }
        assert_eq!(
            volume_name("pvc", UID, 33).unwrap_err().to_string(),
            "--volume-name-uuid-length=33 is out of range: use -1 for the whole claim UID or \
             1..=32 characters of it"
        );
        // A short (malformed) UID bounds the length by what it has.
        assert!(volume_name("pvc", "ab-c", 3).is_ok());
        assert!(matches!(
            volume_name("pvc", "ab-c", 4),
            Err(PlanError::UuidLengthOutOfRange { available: 3, .. })
        ));
    }

    #[test]
    fn volume_name_needs_a_prefix_and_a_uid() {
        assert_eq!(
            volume_name("", UID, -1).unwrap_err().to_string(),
            "volume name prefix cannot be of length 0"
        );
        assert_eq!(
            volume_name("pvc", "", -1).unwrap_err().to_string(),
            "corrupted PVC object, it is missing UID"
        );
        assert!(matches!(
            volume_name("pvc", "", 8),
            Err(PlanError::MissingUid)
        ));
    }
}
