//! Why one ControllerModifyVolume attempt failed (spec sidecars.md §2.5 steps 6 and 8): the
//! driver's gRPC status, which decides the claim's status, or our own failure before the
//! call, which leaves the claim as it is.

use csi_common::secrets::FetchError;
use csi_common::status::CsiError;

/// A failed modification of one volume.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ModifyError {
    /// ControllerModifyVolume failed.
    #[error(transparent)]
    Csi(CsiError),
    /// The modify (or expand) Secret could not be read.
    #[error(transparent)]
    Secret(FetchError),
    /// The PV has no `spec.csi` or an empty volume handle.
    #[error("PV is not a CSI volume with a volume handle")]
    NotCsi,
}

impl ModifyError {
    /// The driver's status, when the driver answered with one: only then does the claim's
    /// status change (upstream returns other errors "without status changes").
    pub(crate) fn status(&self) -> Option<&CsiError> {
        match self {
            Self::Csi(err) if err.code.is_some() => Some(err),
            Self::Csi(_) | Self::Secret(_) | Self::NotCsi => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    #[test]
    fn only_a_driver_status_changes_the_claim() {
        let with_code = ModifyError::Csi(CsiError::status(Code::Internal, "x"));
        assert_eq!(
            with_code.status().and_then(|e| e.code),
            Some(Code::Internal)
        );
        let transport = ModifyError::Csi(CsiError {
            code: None,
            message: "transport".into(),
        });
        assert!(transport.status().is_none());
        assert!(ModifyError::NotCsi.status().is_none());
        assert_eq!(
            ModifyError::NotCsi.to_string(),
            "PV is not a CSI volume with a volume handle"
        );
    }
}
