//! The modify controller's decisions, as pure functions (spec sidecars.md §2.5, external-resizer
//! `pkg/modifycontroller`): which claims it acts on and what it does next (`decide`), the claim
//! status each step leaves (`transition`), the ControllerModifyVolume request (`request`) and
//! why a modification failed (`error`). `crate::controller::modify` carries them out.

pub(crate) mod decide;
pub(crate) mod error;
pub(crate) mod request;
pub(crate) mod transition;
