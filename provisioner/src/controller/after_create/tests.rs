#![allow(clippy::unwrap_used, clippy::expect_used)]

use proto::csi::v1::Volume;

use super::*;
use ProvisioningState::{Finished, InBackground, Reschedule};

const LIVE: Claim = Claim {
    live: true,
    may_reschedule: false,
};
const ON_NODE: Claim = Claim {
    live: true,
    may_reschedule: true,
};
const GONE: Claim = Claim {
    live: false,
    may_reschedule: false,
};

fn response() -> CreateVolumeResponse {
    CreateVolumeResponse {
        volume: Some(Volume {
            volume_id: "vol-1".into(),
            capacity_bytes: 1 << 30,
            ..Volume::default()
        }),
    }
}

#[test]
fn failures_of_a_live_claim_follow_upstream_check_error() {
    let cases = [
        // (claim, code, state)
        (LIVE, Code::Internal, Finished),
        (LIVE, Code::NotFound, Finished),
        (LIVE, Code::OutOfRange, Finished),
        (LIVE, Code::Unknown, Finished),
        (LIVE, Code::AlreadyExists, Finished),
        // The driver may still be working on it: keep the claim in progress.
        (LIVE, Code::Cancelled, InBackground),
        (LIVE, Code::DeadlineExceeded, InBackground),
        (LIVE, Code::Unavailable, InBackground),
        (LIVE, Code::Aborted, InBackground),
        (ON_NODE, Code::Aborted, InBackground),
        // Out of space: another node may have room, else it is final (not "retry later").
        (LIVE, Code::ResourceExhausted, Finished),
        (ON_NODE, Code::ResourceExhausted, Reschedule),
        (ON_NODE, Code::Internal, Finished),
    ];
    for (claim, code, state) in cases {
        let err = CsiError::status(code, "boom");
        let want = AfterCreate::Failed {
            message: format!("rpc error: code = {} desc = boom", status::code_name(code)),
            state,
        };
        assert_eq!(after_create(Err(&err), claim), want, "{claim:?} {code:?}");
    }
}

#[test]
fn invalid_argument_is_infeasible_and_never_rescheduled() {
    let err = CsiError::status(Code::InvalidArgument, "boom");
    for claim in [LIVE, ON_NODE] {
        assert_eq!(
            after_create(Err(&err), claim),
            AfterCreate::Infeasible {
                message: "Volume provisioning failed with infeasible error. Retries will be \
                          delayed. rpc error: code = InvalidArgument desc = boom"
                    .into(),
            },
            "{claim:?}"
        );
    }
}

#[test]
fn an_error_without_status_leaves_a_live_claim_in_progress() {
    let err = CsiError {
        code: None,
        message: "transport closed".into(),
    };
    assert_eq!(
        after_create(Err(&err), ON_NODE),
        AfterCreate::Failed {
            message: "transport closed".into(),
            state: InBackground,
        }
    );
}

#[test]
fn a_created_volume_of_a_live_claim_is_saved() {
    let response = response();
    for claim in [LIVE, ON_NODE] {
        assert_eq!(
            after_create(Ok(&response), claim),
            AfterCreate::Save(&response)
        );
    }
}

#[test]
fn a_claim_deleted_during_create_gets_no_pv_and_no_leaked_volume() {
    let response = response();
    assert_eq!(
        after_create(Ok(&response), GONE),
        AfterCreate::Gone(GoneCreate::Created(&response))
    );
    let still = [
        CsiError::status(Code::DeadlineExceeded, "slow"),
        CsiError::status(Code::Cancelled, "cancelled"),
        CsiError::status(Code::Unavailable, "restarting"),
        CsiError::status(Code::Aborted, "pending"),
        CsiError {
            code: None,
            message: "transport closed".into(),
        },
    ];
    for err in &still {
        assert_eq!(
            after_create(Err(err), GONE),
            AfterCreate::Gone(GoneCreate::StillCreating(err)),
            "{err}"
        );
    }
    // Final answers, including the two a live claim would treat specially.
    let nothing = [
        CsiError::status(Code::Internal, "broken"),
        CsiError::status(Code::InvalidArgument, "bad"),
        CsiError::status(Code::ResourceExhausted, "full"),
    ];
    for err in &nothing {
        for claim in [
            GONE,
            Claim {
                may_reschedule: true,
                ..GONE
            },
        ] {
            assert_eq!(
                after_create(Err(err), claim),
                AfterCreate::Gone(GoneCreate::NothingCreated(err)),
                "{err}"
            );
        }
    }
}
