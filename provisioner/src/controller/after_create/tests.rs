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

fn failed(code: Code) -> AfterCreate<'static> {
    AfterCreate::Failed {
        message: format!("rpc error: code = {} desc = boom", status::code_name(code)),
        state: Finished,
    }
}

fn with_state(step: AfterCreate<'static>, state: ProvisioningState) -> AfterCreate<'static> {
    match step {
        AfterCreate::Failed { message, .. } => AfterCreate::Failed { message, state },
        other => other,
    }
}

#[test]
fn failures_of_a_live_claim_follow_upstream_check_error() {
    let cases = [
        // (claim, code, step)
        (LIVE, Code::Internal, failed(Code::Internal)),
        (LIVE, Code::NotFound, failed(Code::NotFound)),
        (LIVE, Code::OutOfRange, failed(Code::OutOfRange)),
        (LIVE, Code::Unknown, failed(Code::Unknown)),
        (LIVE, Code::AlreadyExists, failed(Code::AlreadyExists)),
        // The driver may still be working on it: keep the claim in progress.
        (
            LIVE,
            Code::Cancelled,
            with_state(failed(Code::Cancelled), InBackground),
        ),
        (
            LIVE,
            Code::DeadlineExceeded,
            with_state(failed(Code::DeadlineExceeded), InBackground),
        ),
        (
            LIVE,
            Code::Unavailable,
            with_state(failed(Code::Unavailable), InBackground),
        ),
        (
            LIVE,
            Code::Aborted,
            with_state(failed(Code::Aborted), InBackground),
        ),
        (
            ON_NODE,
            Code::Aborted,
            with_state(failed(Code::Aborted), InBackground),
        ),
        // Out of space: another node may have room, else it is final (not "retry later").
        (
            LIVE,
            Code::ResourceExhausted,
            failed(Code::ResourceExhausted),
        ),
        (
            ON_NODE,
            Code::ResourceExhausted,
            with_state(failed(Code::ResourceExhausted), Reschedule),
        ),
        (ON_NODE, Code::Internal, failed(Code::Internal)),
        // Infeasible: slow retry, never a reschedule.
        (
            ON_NODE,
            Code::InvalidArgument,
            AfterCreate::Infeasible {
                message: "Volume provisioning failed with infeasible error. Retries will be \
                          delayed. rpc error: code = InvalidArgument desc = boom"
                    .into(),
            },
        ),
    ];
    for (claim, code, want) in cases {
        let err = CsiError::status(code, "boom");
        assert_eq!(after_create(Err(&err), claim), want, "{claim:?} {code:?}");
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
