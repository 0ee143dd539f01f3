//! One classifier of gRPC status codes: is a failed CSI call *final* (the driver is known not to
//! be working on the operation any more) or may it still be *in progress* on the driver? And
//! [`CsiError`], a failed call as the sidecars keep it: the code that classification needs and
//! the text grpc-go prints.
//!
//! Rust counterpart of `isFinalError` in external-attacher `pkg/attacher/attacher.go`;
//! external-resizer applies the same rule to ControllerExpandVolume errors. Who asks what:
//!
//! * csi-common's identity calls ([`crate::identity`]) and the attacher and resizer ask
//!   [`is_final`] / [`CsiError::is_final`] for every CSI call whose failure decides between
//!   "retry the same request" and "give up";
//! * the provisioner's CreateVolume asks [`create_volume_failure`]: upstream
//!   external-provisioner classifies that one with its own `checkError` (spec §4.5), which
//!   differs in one code: `ResourceExhausted` is *final* there (or a reason to reschedule the
//!   claim to another node), while it is non-final for everyone else (CSI: "retry later").
//!   The claim's state machine depends on copying upstream exactly, so the exception is written
//!   here, next to the rule it departs from, and table-tested against it.
//!
//! ```
//! use csi_common::status::{self, CreateVolumeFailure, CsiError};
//! use tonic::Code;
//!
//! let err = CsiError::status(Code::ResourceExhausted, "no space left");
//! assert_eq!(err.to_string(), "rpc error: code = ResourceExhausted desc = no space left");
//! assert!(!err.is_final());
//! assert_eq!(
//!     status::create_volume_failure(err.code, false),
//!     CreateVolumeFailure::Final
//! );
//! ```

use std::fmt;

use tonic::Code;

/// Whether a CSI call that failed with `code` is final.
///
/// A final error means the driver has stopped working on the request: the sidecar may record the
/// failure and forget the operation. A non-final error means the request may still be running on
/// the driver (it timed out, was cancelled, or the driver asked us to come back later), so the
/// sidecar must keep treating the operation as in progress and retry it with the same arguments;
/// forgetting it could leak a volume that the driver creates after we gave up.
///
/// `Code::Ok` is not an error; it is reported as final because nothing is left in progress.
#[allow(
    clippy::match_same_arms,
    reason = "one arm per reason, each citing why the code is not final"
)]
pub fn is_final(code: Code) -> bool {
    match code {
        // The caller's deadline or cancellation says nothing about what the driver did: the
        // operation may complete after we stopped waiting (CSI spec, "Timeouts").
        Code::Cancelled | Code::DeadlineExceeded => false,
        // The driver (or the connection to it) is temporarily unable to serve the call; the
        // request may or may not have been received.
        Code::Unavailable => false,
        // CSI spec: ResourceExhausted and Aborted ("operation pending for volume") ask the caller
        // to retry later; an operation for the same volume may still be running.
        Code::ResourceExhausted | Code::Aborted => false,
        Code::Ok
        | Code::Unknown
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::Internal
        | Code::DataLoss
        | Code::Unauthenticated => true,
    }
}

/// Like [`is_final`] for an error that may not carry a gRPC status at all (`None`).
///
/// Upstream treats a non-status error (for example a context deadline hit on the client side
/// before any status arrived) as not final.
pub fn is_final_error(code: Option<Code>) -> bool {
    code.is_some_and(is_final)
}

/// The gRPC code name as grpc-go's `codes.Code.String()` spells it.
///
/// These strings are label values of `csi_sidecar_operations_seconds{grpc_status_code}` and
/// appear in VolumeAttachment `status.attachError.errorCode`; dashboards match on them, so they
/// must stay byte-for-byte identical to Go's (note `Canceled` with one `l`, `OK` in capitals).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// A failed CSI call: the gRPC code (what classification needs) and the message.
///
/// Displays like grpc-go's status errors (`rpc error: code = Internal desc = ...`), because
/// upstream puts that text into Events (`ProvisioningFailed`, `VolumeFailedDelete`), VolumeAttachment
/// `attachError`s, PVC conditions and `/healthz` bodies, and users search for it. An error without
/// a status shows its message alone, as Go prints a plain error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CsiError {
    /// The gRPC code; `None` when the call failed without a status (upstream then assumes the
    /// operation may still be running).
    pub code: Option<Code>,
    /// The status message (or the transport error's text).
    pub message: String,
}

impl CsiError {
    /// An error with a gRPC status code.
    pub fn status(code: Code, message: impl Into<String>) -> Self {
        Self {
            code: Some(code),
            message: message.into(),
        }
    }

    /// Whether the driver is known to have stopped working on the request ([`is_final_error`]
    /// of the code).
    pub fn is_final(&self) -> bool {
        is_final_error(self.code)
    }
}

impl fmt::Display for CsiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(
                f,
                "rpc error: code = {} desc = {}",
                code_name(code),
                self.message
            ),
            None => f.write_str(&self.message),
        }
    }
}

impl From<tonic::Status> for CsiError {
    fn from(status: tonic::Status) -> Self {
        Self::from(&status)
    }
}

impl From<&tonic::Status> for CsiError {
    fn from(status: &tonic::Status) -> Self {
        Self::status(status.code(), status.message())
    }
}

/// How a failed CreateVolume ends ([`create_volume_failure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateVolumeFailure {
    /// The driver may still be creating the volume: repeat the same request.
    InProgress,
    /// The driver is not creating the volume.
    Final,
    /// Final on the claim's selected node: let the scheduler pick another one.
    Reschedule,
}

/// Classifies a failed CreateVolume as external-provisioner's `checkError` does (spec §4.5).
///
/// The same rule as [`is_final_error`] with one exception: `ResourceExhausted` means the
/// volume cannot be created where it was asked for (CSI spec, CreateVolume errors), so it is
/// [`Reschedule`](CreateVolumeFailure::Reschedule) when the caller may move the claim to another
/// node (`may_reschedule`: topology is on and the claim has a selected node) and
/// [`Final`](CreateVolumeFailure::Final) otherwise, never "in progress".
pub fn create_volume_failure(code: Option<Code>, may_reschedule: bool) -> CreateVolumeFailure {
    match code {
        Some(Code::ResourceExhausted) if may_reschedule => CreateVolumeFailure::Reschedule,
        Some(Code::ResourceExhausted) => CreateVolumeFailure::Final,
        code if is_final_error(code) => CreateVolumeFailure::Final,
        _ => CreateVolumeFailure::InProgress,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [(Code, &str, bool); 17] = [
        (Code::Ok, "OK", true),
        (Code::Cancelled, "Canceled", false),
        (Code::Unknown, "Unknown", true),
        (Code::InvalidArgument, "InvalidArgument", true),
        (Code::DeadlineExceeded, "DeadlineExceeded", false),
        (Code::NotFound, "NotFound", true),
        (Code::AlreadyExists, "AlreadyExists", true),
        (Code::PermissionDenied, "PermissionDenied", true),
        (Code::ResourceExhausted, "ResourceExhausted", false),
        (Code::FailedPrecondition, "FailedPrecondition", true),
        (Code::Aborted, "Aborted", false),
        (Code::OutOfRange, "OutOfRange", true),
        (Code::Unimplemented, "Unimplemented", true),
        (Code::Internal, "Internal", true),
        (Code::Unavailable, "Unavailable", false),
        (Code::DataLoss, "DataLoss", true),
        (Code::Unauthenticated, "Unauthenticated", true),
    ];

    #[test]
    fn every_code_is_classified_like_upstream_is_final_error() {
        for (code, _, final_) in ALL {
            assert_eq!(is_final(code), final_, "{code:?}");
            assert_eq!(is_final_error(Some(code)), final_, "{code:?}");
        }
    }

    #[test]
    fn an_error_without_a_grpc_status_is_not_final() {
        assert!(!is_final_error(None));
    }

    #[test]
    fn create_volume_failures_follow_external_provisioner_check_error() {
        use CreateVolumeFailure::{Final, InProgress, Reschedule};
        assert_eq!(create_volume_failure(None, true), InProgress);
        for (code, _, final_) in ALL {
            let want = match code {
                Code::ResourceExhausted => Final,
                _ if final_ => Final,
                _ => InProgress,
            };
            assert_eq!(create_volume_failure(Some(code), false), want, "{code:?}");
            let want = if code == Code::ResourceExhausted {
                Reschedule
            } else {
                want
            };
            assert_eq!(create_volume_failure(Some(code), true), want, "{code:?}");
        }
    }

    #[test]
    fn errors_display_like_grpc_go_status_errors() {
        let err = CsiError::status(
            Code::OutOfRange,
            "Requested capacity 2199023255552 exceeds maximum allowed 1099511627776",
        );
        assert_eq!(
            err.to_string(),
            "rpc error: code = OutOfRange desc = Requested capacity 2199023255552 exceeds maximum allowed 1099511627776"
        );
        let err = CsiError::from(tonic::Status::cancelled("gone"));
        assert_eq!(err.to_string(), "rpc error: code = Canceled desc = gone");
        assert!(!err.is_final());
        let err = CsiError {
            code: None,
            message: "transport closed".into(),
        };
        assert_eq!(err.to_string(), "transport closed");
        assert!(!err.is_final());
        assert!(CsiError::status(Code::Internal, "x").is_final());
    }

    #[test]
    fn code_names_match_grpc_go() {
        for (code, name, _) in ALL {
            assert_eq!(code_name(code), name);
        }
    }
}
