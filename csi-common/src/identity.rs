//! Identity calls every sidecar makes at start-up: readiness probing, the driver name, and the
//! capability sets.
//!
//! Rust counterpart of csi-lib-utils `rpc` (`ProbeForever`, `Probe`, `GetDriverName`,
//! `GetPluginCapabilities`, `GetControllerCapabilities`, `GetGroupControllerCapabilities`).
//! Each function takes the timeout of one call; it is sent to the driver as `grpc-timeout` and
//! enforced by the connection (see [`crate::rpc_log`]), which also caps it at the connection's
//! own call timeout. A timeout beyond gRPC's maximum ([`crate::rpc_log::MAX_GRPC_TIMEOUT`], e.g.
//! `Duration::MAX`) means no deadline of the call's own.

use std::collections::BTreeMap;
use std::time::Duration;

use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::group_controller_client::GroupControllerClient;
use proto::csi::v1::identity_client::IdentityClient;
use proto::csi::v1::node_client::NodeClient;
use proto::csi::v1::{
    ControllerGetCapabilitiesRequest, GetPluginCapabilitiesRequest, GetPluginInfoRequest,
    GroupControllerGetCapabilitiesRequest, NodeGetCapabilitiesRequest, ProbeRequest,
};
use tokio::time::MissedTickBehavior;
use tonic::{Code, Status};

use crate::capabilities::{
    ControllerCapabilities, GroupControllerCapabilities, NodeCapabilities, PluginCapabilities,
};
use crate::connection::Connection;
use crate::rpc_log::MAX_GRPC_TIMEOUT;

/// Pause between two readiness probes (csi-lib-utils `probeInterval`).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Errors of the identity calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The driver answered a call with an error status (or the call failed in transport, which
    /// the connection reports as `Unavailable`, or timed out: `DeadlineExceeded`).
    #[error("CSI driver {method} call failed")]
    Call {
        /// The CSI method, e.g. `Probe`.
        method: &'static str,
        /// The status the call ended with.
        #[source]
        status: Box<Status>,
    },
    /// GetPluginInfo returned an empty name, which the CSI spec forbids (csi-lib-utils
    /// `GetDriverName` rejects it the same way). Always final.
    #[error("driver name is empty")]
    EmptyDriverName,
}

impl Error {
    fn call(method: &'static str, status: Status) -> Self {
        Self::Call {
            method,
            status: Box::new(status),
        }
    }

    /// The gRPC code of a failed call.
    pub fn code(&self) -> Option<Code> {
        match self {
            Self::Call { status, .. } => Some(status.code()),
            Self::EmptyDriverName => None,
        }
    }

    /// Whether retrying the same call cannot help ([`crate::status::is_final`] of the code; an
    /// empty driver name is final).
    pub fn is_final(&self) -> bool {
        match self {
            Self::Call { status, .. } => crate::status::is_final(status.code()),
            Self::EmptyDriverName => true,
        }
    }
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What one Probe call said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// `ready` is true or absent (CSI spec: "If not present, the caller SHALL assume that the
    /// plugin is in a ready state").
    Ready,
    /// `ready` is present and false.
    NotReady,
}

/// What GetPluginInfo returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginInfo {
    /// The driver name (never empty here).
    pub name: String,
    /// The driver's version string.
    pub vendor_version: String,
    /// Opaque driver information.
    pub manifest: BTreeMap<String, String>,
}

/// Calls Probe once (csi-lib-utils `rpc.Probe`). Livenessprobe's `/healthz` uses this on a fresh
/// connection per request.
///
/// # Errors
/// [`Error::Call`] with the call's status, including `DeadlineExceeded` when `timeout` passed.
pub async fn probe(conn: &Connection, timeout: Duration) -> Result<ProbeOutcome> {
    let mut client = IdentityClient::new(conn.channel());
    let response = client
        .probe(request(ProbeRequest {}, timeout))
        .await
        .map_err(|status| Error::call("Probe", status))?;
    Ok(match response.into_inner().ready {
        Some(false) => ProbeOutcome::NotReady,
        Some(true) | None => ProbeOutcome::Ready,
    })
}

/// Probes the driver until it is ready (csi-lib-utils `rpc.ProbeForever`).
///
/// Probes at once and then every [`PROBE_INTERVAL`] (upstream probes before it first waits for
/// its ticker), each with `attempt_timeout`, logging "Probing CSI driver for readiness" before
/// each attempt.
/// A timed-out attempt ("CSI driver probe timed out") and `ready=false` ("CSI driver is not
/// ready") are retried without limit; drop the future to stop waiting.
///
/// # Errors
/// The first [`Error::Call`] with any code other than `DeadlineExceeded` (upstream treats it as
/// fatal).
pub async fn probe_until_ready(conn: &Connection, attempt_timeout: Duration) -> Result<()> {
    // The first tick is immediate: a ready driver is found without any wait, which is most of
    // a sidecar's start-to-ready time.
    let mut ticker = tokio::time::interval(PROBE_INTERVAL);
    // Go's ticker keeps one missed tick: after a slow probe the next one follows at once.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        tracing::info!("Probing CSI driver for readiness");
        match probe(conn, attempt_timeout).await {
            Ok(ProbeOutcome::Ready) => return Ok(()),
            Ok(ProbeOutcome::NotReady) => tracing::info!("CSI driver is not ready"),
            Err(err) if err.code() == Some(Code::DeadlineExceeded) => {
                tracing::info!("CSI driver probe timed out");
            }
            Err(err) => return Err(err),
        }
    }
}

/// Calls GetPluginInfo.
///
/// # Errors
/// [`Error::Call`] when the call fails, [`Error::EmptyDriverName`] for an empty name.
pub async fn plugin_info(conn: &Connection, timeout: Duration) -> Result<PluginInfo> {
    let mut client = IdentityClient::new(conn.channel());
    let response = client
        .get_plugin_info(request(GetPluginInfoRequest {}, timeout))
        .await
        .map_err(|status| Error::call("GetPluginInfo", status))?
        .into_inner();
    if response.name.is_empty() {
        return Err(Error::EmptyDriverName);
    }
    Ok(PluginInfo {
        name: response.name,
        vendor_version: response.vendor_version,
        manifest: response.manifest.into_iter().collect(),
    })
}

/// The driver name from GetPluginInfo (csi-lib-utils `rpc.GetDriverName`).
///
/// # Errors
/// As [`plugin_info`].
pub async fn driver_name(conn: &Connection, timeout: Duration) -> Result<String> {
    plugin_info(conn, timeout).await.map(|info| info.name)
}

/// Calls GetPluginCapabilities (csi-lib-utils `rpc.GetPluginCapabilities`).
///
/// # Errors
/// [`Error::Call`] when the call fails.
pub async fn plugin_capabilities(
    conn: &Connection,
    timeout: Duration,
) -> Result<PluginCapabilities> {
    let mut client = IdentityClient::new(conn.channel());
    let response = client
        .get_plugin_capabilities(request(GetPluginCapabilitiesRequest {}, timeout))
        .await
        .map_err(|status| Error::call("GetPluginCapabilities", status))?;
    Ok(PluginCapabilities::from_response(response.get_ref()))
}

/// Calls ControllerGetCapabilities (csi-lib-utils `rpc.GetControllerCapabilities`).
///
/// # Errors
/// [`Error::Call`] when the call fails.
pub async fn controller_capabilities(
    conn: &Connection,
    timeout: Duration,
) -> Result<ControllerCapabilities> {
    let mut client = ControllerClient::new(conn.channel());
    let response = client
        .controller_get_capabilities(request(ControllerGetCapabilitiesRequest {}, timeout))
        .await
        .map_err(|status| Error::call("ControllerGetCapabilities", status))?;
    Ok(ControllerCapabilities::from_response(response.get_ref()))
}

/// Calls NodeGetCapabilities.
///
/// # Errors
/// [`Error::Call`] when the call fails.
pub async fn node_capabilities(conn: &Connection, timeout: Duration) -> Result<NodeCapabilities> {
    let mut client = NodeClient::new(conn.channel());
    let response = client
        .node_get_capabilities(request(NodeGetCapabilitiesRequest {}, timeout))
        .await
        .map_err(|status| Error::call("NodeGetCapabilities", status))?;
    Ok(NodeCapabilities::from_response(response.get_ref()))
}

/// Calls GroupControllerGetCapabilities (csi-lib-utils `rpc.GetGroupControllerCapabilities`).
///
/// # Errors
/// [`Error::Call`] when the call fails.
pub async fn group_controller_capabilities(
    conn: &Connection,
    timeout: Duration,
) -> Result<GroupControllerCapabilities> {
    let mut client = GroupControllerClient::new(conn.channel());
    let response = client
        .group_controller_get_capabilities(request(
            GroupControllerGetCapabilitiesRequest {},
            timeout,
        ))
        .await
        .map_err(|status| Error::call("GroupControllerGetCapabilities", status))?;
    Ok(GroupControllerCapabilities::from_response(
        response.get_ref(),
    ))
}

/// Wraps a message, with `timeout` as its deadline unless it is beyond what gRPC can carry
/// (tonic would panic encoding it).
fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if timeout <= MAX_GRPC_TIMEOUT {
        request.set_timeout(timeout);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_classify_finality_by_code() {
        let cases = [
            (Code::DeadlineExceeded, false),
            (Code::Unavailable, false),
            (Code::InvalidArgument, true),
        ];
        for (code, want) in cases {
            let err = Error::call("Probe", Status::new(code, "x"));
            assert_eq!(err.code(), Some(code));
            assert_eq!(err.is_final(), want, "{code:?}");
        }
        assert!(Error::EmptyDriverName.is_final());
        assert_eq!(Error::EmptyDriverName.code(), None);
    }

    #[test]
    fn huge_timeouts_are_not_sent_as_grpc_timeout() {
        let request = request((), Duration::MAX);
        assert!(request.metadata().get("grpc-timeout").is_none());
        let request = super::request((), Duration::from_secs(3));
        assert_eq!(request.metadata().get("grpc-timeout").unwrap(), "3000000u");
    }
}
