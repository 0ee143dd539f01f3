//! The events the controller-manager stand-in's decisions produce. They are written by
//! csi-common's client-go style recorder ([`csi_common::events::EventRecorder`]), the one every
//! sidecar uses: kube-controller-manager's recorder is client-go's too (POST a new Event named
//! `<object>.<hex nanoseconds>`, then a strategic-merge PATCH of `count`, `lastTimestamp` and
//! `message` when it repeats; fixture `traffic/kube-controller-manager-volume-requests.txt`),
//! and its broadcaster writes one Event at a time, waiting for each answer
//! ([`csi_common::events::EventRecorder::one_at_a_time`]; a sidecar's writer keeps several in
//! flight).

pub use csi_common::events::EventType;

/// One event to record: type, reason (PascalCase, upstream string) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Normal or Warning.
    pub type_: EventType,
    /// Upstream reason string, e.g. `ExternalProvisioning`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

impl EventSpec {
    /// A Normal event.
    pub fn normal(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason,
            message: message.into(),
        }
    }

    /// A Warning event.
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            reason,
            message: message.into(),
        }
    }
}
