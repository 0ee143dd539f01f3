//! What a provisioning attempt does once CreateVolume has answered: a pure decision over the
//! answer and the claim, carried out by the claim controller ([`super::claim`]).
//!
//! The rules are upstream's (external-provisioner `Provision` and `checkError`, spec §4.5,
//! §4.7, §4.8), plus one of ours for claims deleted while the call ran (#486, #1469 upstream):
//! no PV is ever written for them, and a volume the driver made is deleted.

use csi_common::status::{self, CreateVolumeFailure, CsiError};
use proto::csi::v1::CreateVolumeResponse;
use tonic::Code;

use crate::plan_error::ProvisioningState;

/// The claim as it stands when CreateVolume returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    /// Still in the cache with the same UID and not being deleted.
    pub(crate) live: bool,
    /// Can be moved to another node: `--feature-gates=Topology=true` and the claim has a
    /// selected node.
    pub(crate) may_reschedule: bool,
}

/// The next step after CreateVolume for a live or a deleted claim.
#[derive(Debug, PartialEq)]
pub(crate) enum AfterCreate<'a> {
    /// Success: build the PV from the response and save it (or delete a volume that cannot be
    /// used; building the PV decides that).
    Save(&'a CreateVolumeResponse),
    /// InvalidArgument, upstream's "infeasible" (spec §4.8): no CSI call for this claim and
    /// class until `--retry-interval-max` has passed, a `ProvisioningFailed` Event with
    /// `message`, the claim no longer in progress.
    Infeasible {
        /// The Event message.
        message: String,
    },
    /// Any other failure: a `ProvisioningFailed` Event with `message`, then `state`.
    Failed {
        /// The Event message (grpc-go's text of the error).
        message: String,
        /// Finished, InBackground or Reschedule.
        state: ProvisioningState,
    },
    /// The claim was deleted while the call ran.
    Gone(GoneCreate<'a>),
}

/// CreateVolume's answer for a claim that is gone.
#[derive(Debug, PartialEq)]
pub(crate) enum GoneCreate<'a> {
    /// The driver made the volume: remember its id and delete it.
    Created(&'a CreateVolumeResponse),
    /// The driver may still be creating it: repeat the same request until a definite answer.
    StillCreating(&'a CsiError),
    /// The driver made nothing: forget the claim.
    NothingCreated(&'a CsiError),
}

/// Decides what follows CreateVolume's `result` for `claim`.
pub(crate) fn after_create<'a>(
    result: Result<&'a CreateVolumeResponse, &'a CsiError>,
    claim: Claim,
) -> AfterCreate<'a> {
    if !claim.live {
        return AfterCreate::Gone(after_gone_create(result));
    }
    match result {
        Ok(response) => AfterCreate::Save(response),
        Err(err) if err.code == Some(Code::InvalidArgument) => AfterCreate::Infeasible {
            message: format!(
                "Volume provisioning failed with infeasible error. Retries will be delayed. {err}"
            ),
        },
        Err(err) => AfterCreate::Failed {
            message: err.to_string(),
            state: create_error_state(err, claim.may_reschedule),
        },
    }
}

/// Decides what follows CreateVolume's `result` for a claim that is gone: a deleted claim cannot
/// be rescheduled, so only "may the driver still be creating it" matters.
pub(crate) fn after_gone_create<'a>(
    result: Result<&'a CreateVolumeResponse, &'a CsiError>,
) -> GoneCreate<'a> {
    match result {
        Ok(response) => GoneCreate::Created(response),
        Err(err) if create_error_state(err, false) == ProvisioningState::InBackground => {
            GoneCreate::StillCreating(err)
        }
        Err(err) => GoneCreate::NothingCreated(err),
    }
}

/// The state upstream's `checkError` gives a failed CreateVolume, as
/// [`status::create_volume_failure`] classifies it.
fn create_error_state(err: &CsiError, may_reschedule: bool) -> ProvisioningState {
    match status::create_volume_failure(err.code, may_reschedule) {
        CreateVolumeFailure::InProgress => ProvisioningState::InBackground,
        CreateVolumeFailure::Final => ProvisioningState::Finished,
        CreateVolumeFailure::Reschedule => ProvisioningState::Reschedule,
    }
}

#[cfg(test)]
mod tests;
