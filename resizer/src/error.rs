//! Why one expansion failed, and what that means for the claim: whether the driver may still
//! be working on it ([`ExpandError::is_final`]), whether the size itself is impossible
//! ([`ExpandError::is_infeasible`]) — spec sidecars.md §2.4 step 8.

use csi_common::access_modes::AccessModeError;
use csi_common::secrets::FetchError;
use csi_common::status::CsiError;
use tonic::Code;

/// A failed expansion of one volume.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExpandError {
    /// ControllerExpandVolume failed.
    #[error(transparent)]
    Csi(CsiError),
    /// The driver answered OK with less than was asked for (0 included). Nothing is written
    /// to the PV or the claim: their capacity must match what the volume has.
    #[error("CSI driver returned capacity {got} bytes, less than the requested {want} bytes")]
    CapacityTooSmall {
        /// `capacity_bytes` of the answer.
        got: i64,
        /// `required_bytes` of the request.
        want: i64,
    },
    /// The expand Secret could not be read.
    #[error(transparent)]
    Secret(FetchError),
    /// The PV's access modes have no CSI equivalent.
    #[error(transparent)]
    AccessModes(AccessModeError),
    /// The PV has an empty volume handle.
    #[error("PV has an empty volume handle")]
    NoVolumeHandle,
    /// An in-tree PV (CSI migration) that csi-translation-lib refuses to translate, or of no
    /// plugin it knows; external-resizer's and csi-translation-lib's words.
    #[error("failed to translate persistent volume: {0}")]
    Translation(Untranslatable),
}

/// Why an in-tree PV has no CSI translation.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Untranslatable {
    /// The translation refused the source.
    #[error(transparent)]
    Refused(csi_common::migration::TranslationError),
    /// Not a source of the seven migrated plugins.
    #[error("could not find in-tree plugin translation logic for {0:?}")]
    NoPlugin(String),
}

impl ExpandError {
    /// Whether the driver has stopped working on the target (csi-common's one classifier for a
    /// gRPC status; an OK answer below the target is final too). Failures before any call are
    /// not final (spec §2.4 step 8, upstream `IsFinalError`: "non-gRPC errors count as
    /// non-final"): an earlier, uncertain call may still be running on the driver, so the user
    /// lowering the request must not change the target yet.
    pub(crate) fn is_final(&self) -> bool {
        match self {
            Self::Csi(err) => err.is_final(),
            Self::CapacityTooSmall { .. } => true,
            Self::Secret(_)
            | Self::AccessModes(_)
            | Self::NoVolumeHandle
            | Self::Translation(_) => false,
        }
    }

    /// Whether the claim shows a `ControllerResizeError` condition: after a final error (as
    /// upstream), and also after our own failures before the call (a missing Secret, access
    /// modes without a CSI equivalent, an empty handle), which upstream only logs; they are the
    /// user's to fix and must show on the claim.
    pub(crate) fn shows_condition(&self) -> bool {
        self.is_final()
            || matches!(
                self,
                Self::Secret(_)
                    | Self::AccessModes(_)
                    | Self::NoVolumeHandle
                    | Self::Translation(_)
            )
    }

    /// Whether the driver said this size cannot be had (upstream `isInfeasibleError`:
    /// InvalidArgument, OutOfRange, NotFound).
    pub(crate) fn is_infeasible(&self) -> bool {
        matches!(
            self,
            Self::Csi(CsiError {
                code: Some(Code::InvalidArgument | Code::OutOfRange | Code::NotFound),
                ..
            })
        )
    }

    /// Whether the driver said the volume is in use (upstream: FAILED_PRECONDITION from
    /// ControllerExpandVolume, CSI spec "the volume is ... published and the plugin does not
    /// support online expansion").
    pub(crate) fn is_in_use(&self) -> bool {
        matches!(
            self,
            Self::Csi(CsiError {
                code: Some(Code::FailedPrecondition),
                ..
            })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_upstream() {
        let csi = |code| ExpandError::Csi(CsiError::status(code, "x"));
        let cases = [
            (csi(Code::InvalidArgument), true, true),
            (csi(Code::OutOfRange), true, true),
            (csi(Code::NotFound), true, true),
            (csi(Code::Internal), true, false),
            (csi(Code::FailedPrecondition), true, false),
            (csi(Code::DeadlineExceeded), false, false),
            (csi(Code::Unavailable), false, false),
            (csi(Code::ResourceExhausted), false, false),
            (csi(Code::Aborted), false, false),
            (csi(Code::Cancelled), false, false),
            (
                ExpandError::Csi(CsiError {
                    code: None,
                    message: "transport".into(),
                }),
                false,
                false,
            ),
            (
                ExpandError::CapacityTooSmall { got: 0, want: 1 },
                true,
                false,
            ),
            (ExpandError::NoVolumeHandle, false, false),
        ];
        for (err, is_final, infeasible) in cases {
            assert_eq!(
                err.is_in_use(),
                matches!(&err, ExpandError::Csi(e) if e.code == Some(Code::FailedPrecondition)),
                "{err}"
            );
            assert_eq!(err.is_final(), is_final, "{err}");
            assert_eq!(
                err.shows_condition(),
                is_final || matches!(err, ExpandError::NoVolumeHandle),
                "{err}"
            );
            assert_eq!(err.is_infeasible(), infeasible, "{err}");
        }
    }
}
