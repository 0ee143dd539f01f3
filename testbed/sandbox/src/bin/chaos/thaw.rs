//! What a leader thawed past its renew deadline asked of the driver, read from its `-v=5` log:
//! every call that changes volumes must have been refused by its fence (csi-common `fence`,
//! `rpc_log`), since a standby already leads and may be acting on the same volumes.

use k8s_openapi::jiff::Timestamp;

/// The Controller methods that change what the driver holds, named as the call log names
/// them. A list of its own rather than csi-common's, so that the check does not share a
/// mistake with what it checks.
const VOLUME_CHANGING: [&str; 8] = [
    "/csi.v1.Controller/CreateVolume",
    "/csi.v1.Controller/DeleteVolume",
    "/csi.v1.Controller/ControllerPublishVolume",
    "/csi.v1.Controller/ControllerUnpublishVolume",
    "/csi.v1.Controller/ControllerExpandVolume",
    "/csi.v1.Controller/ControllerModifyVolume",
    "/csi.v1.Controller/CreateSnapshot",
    "/csi.v1.Controller/DeleteSnapshot",
];

/// What `rpc_log` logs (TRACE) as a call starts, before the fence is asked.
const CALL: &str = "GRPC call method=";

/// What `rpc_log` logs (DEBUG) for each call its fence refused.
const FENCED: &str = "CSI call not sent: no longer the leader";

/// Volume-changing calls a replica started after a moment, and how many of them its fence
/// refused.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Calls {
    pub(crate) started: usize,
    pub(crate) refused: usize,
}

impl Calls {
    /// The calls that went to the driver.
    pub(crate) fn sent(&self) -> usize {
        self.started.saturating_sub(self.refused)
    }
}

/// The volume-changing calls logged in `log` at or after `since` (each line starts with its
/// RFC 3339 time; lines without one are skipped).
pub(crate) fn calls_since(log: &str, since: Timestamp) -> Calls {
    let mut calls = Calls::default();
    for line in log.lines() {
        let Some(at) = line
            .split_whitespace()
            .next()
            .and_then(|t| t.parse::<Timestamp>().ok())
        else {
            continue;
        };
        if at < since {
            continue;
        }
        if let Some((_, rest)) = line.split_once(CALL) {
            let method = rest.split_whitespace().next().unwrap_or_default();
            if VOLUME_CHANGING.contains(&method) {
                calls.started += 1;
            }
        } else if line.contains(FENCED) {
            calls.refused += 1;
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_volume_changing_calls_after_the_moment_count() {
        let log = "\
2026-12-06T02:46:30.300000Z TRACE csi_common::rpc_log: GRPC call method=/csi.v1.Controller/CreateVolume request={}
2026-12-06T02:46:30.338769Z TRACE csi_common::rpc_log: GRPC call method=/csi.v1.Controller/CreateVolume request={\"name\":\"a\"}
2026-12-06T02:46:30.339672Z DEBUG csi_common::rpc_log: CSI call not sent: no longer the leader method=/csi.v1.Controller/CreateVolume
2026-12-06T02:46:30.340000Z TRACE csi_common::rpc_log: GRPC call method=/csi.v1.Controller/ListVolumes request={}
2026-12-06T02:46:30.341000Z TRACE csi_common::rpc_log: GRPC call method=/csi.v1.Identity/Probe request={}
a continuation line without a time
2026-12-06T02:46:30.342230Z TRACE csi_common::rpc_log: GRPC call method=/csi.v1.Controller/ControllerExpandVolume request={}
";
        let since: Timestamp = "2026-12-06T02:46:30.338Z".parse().unwrap();
        let calls = calls_since(log, since);
        // The CreateVolume before the moment, the read and the probe do not count; of the two
        // volume-changing calls after it, one was refused.
        assert_eq!(
            calls,
            Calls {
                started: 2,
                refused: 1
            }
        );
        assert_eq!(calls.sent(), 1);
        assert_eq!(
            calls_since(log, "2026-12-07T00:00:00Z".parse().unwrap()).started,
            0
        );
    }
}
