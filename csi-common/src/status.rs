//! One classifier of gRPC status codes: is a failed CSI call *final* (the driver is known not to
//! be working on the operation any more) or may it still be *in progress* on the driver?
//!
//! Rust counterpart of `isFinalError` in external-attacher `pkg/attacher/attacher.go`;
//! external-resizer applies the same rule to ControllerExpandVolume errors. Who asks it:
//!
//! * csi-common's identity calls ([`crate::identity`]) and the attacher and resizer, for every
//!   CSI call whose failure decides between "retry the same request" and "give up";
//! * **not** the provisioner's CreateVolume: upstream external-provisioner classifies that one
//!   with its own `checkError` (spec §4.5), which differs in one code: `ResourceExhausted` is
//!   *final* there unless the claim can be rescheduled to another node, while it is non-final
//!   here (CSI: "retry later"). Copying upstream exactly matters for the claim's state machine,
//!   so that rule lives next to it, in the provisioner's `create_error_state`, table-tested.

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
    fn code_names_match_grpc_go() {
        for (code, name, _) in ALL {
            assert_eq!(code_name(code), name);
        }
    }
}
