//! livenessprobe flows: `/healthz` answers from CSI Probe, and follows the driver going away
//! and coming back (what kubelet relies on to restart a wedged driver container).

use std::time::Duration;

use super::{FlowError, FlowResult, ms_since, require_sidecar, wait_for};
use crate::Sandbox;
use testbed_support::http_client;

const PROBE: (&str, &str) = ("method_name", "/csi.v1.Identity/Probe");
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

async fn healthz(addr: std::net::SocketAddr) -> Result<(u16, String), FlowError> {
    http_client::get(addr, "/healthz", HTTP_TIMEOUT)
        .await
        .map(|r| (r.status, r.body))
        .map_err(|e| FlowError::Failed(format!("GET /healthz failed: {e}")))
}

async fn probe_count(addr: std::net::SocketAddr, code: Option<&str>) -> Result<f64, FlowError> {
    let metrics = http_client::get(addr, "/metrics", HTTP_TIMEOUT)
        .await
        .map_err(|e| FlowError::Failed(format!("GET /metrics failed: {e}")))?;
    if metrics.status != 200 {
        return Err(FlowError::Failed(format!(
            "GET /metrics answered {}",
            metrics.status
        )));
    }
    let mut labels = vec![PROBE];
    if let Some(code) = code {
        labels.push(("grpc_status_code", code));
    }
    Ok(super::metric_value(
        &metrics.body,
        "csi_sidecar_operations_seconds_count",
        &labels,
    )
    .unwrap_or(0.0))
}

/// `GET /healthz` is 200 `ok` and the Probe calls show up in `/metrics`.
pub(super) async fn healthy(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, "livenessprobe")?;
    let start = tokio::time::Instant::now();
    let (status, body) = healthz(addr).await?;
    if status != 200 || body != "ok" {
        return Err(FlowError::Failed(format!(
            "GET /healthz answered {status} {body:?}, want 200 \"ok\""
        )));
    }
    let mut notes = vec![format!(
        "GET /healthz -> {status} {body:?} in {} ms",
        ms_since(start)
    )];
    let ok_probes = probe_count(addr, Some("OK")).await?;
    if ok_probes < 1.0 {
        return Err(FlowError::Failed(
            "/metrics has no successful Probe in csi_sidecar_operations_seconds_count".into(),
        ));
    }
    notes.push(format!(
        "csi_sidecar_operations_seconds_count{{method_name=\"/csi.v1.Identity/Probe\",grpc_status_code=\"OK\"}} = {ok_probes}"
    ));
    Ok(notes)
}

/// Stop the driver: `/healthz` turns 500; start it again: back to 200.
pub(super) async fn driver_restart(sb: &Sandbox) -> FlowResult {
    let addr = require_sidecar(sb, "livenessprobe")?;
    let (status, _) = healthz(addr).await?;
    if status != 200 {
        return Err(FlowError::Failed(format!(
            "/healthz was {status} before the restart"
        )));
    }
    let mut notes = Vec::new();

    let start = tokio::time::Instant::now();
    sb.stop_driver()
        .await
        .map_err(|e| FlowError::Failed(format!("cannot stop the driver: {e}")))?;
    notes.push(format!(
        "driver stopped (SIGTERM) in {} ms",
        ms_since(start)
    ));

    let start = tokio::time::Instant::now();
    let (status, body) = wait_for("/healthz to fail", Duration::from_secs(15), || async {
        match healthz(addr).await {
            Ok((status, body)) if status == 500 => Some((status, body)),
            _ => None,
        }
    })
    .await?;
    notes.push(format!(
        "GET /healthz -> {status} {body:?} after {} ms",
        ms_since(start)
    ));

    let start = tokio::time::Instant::now();
    sb.start_driver()
        .await
        .map_err(|e| FlowError::Failed(format!("cannot restart the driver: {e}")))?;
    notes.push(format!("driver restarted in {} ms", ms_since(start)));

    let start = tokio::time::Instant::now();
    let (status, body) = wait_for("/healthz to recover", Duration::from_secs(15), || async {
        match healthz(addr).await {
            Ok((200, body)) => Some((200, body)),
            _ => None,
        }
    })
    .await?;
    notes.push(format!(
        "GET /healthz -> {status} {body:?} after {} ms",
        ms_since(start)
    ));
    // Sidecars that exited on the lost connection (as upstream's do) come back, as kubelet
    // would restart their containers.
    let restarted = sb
        .restart_exited_sidecars()
        .await
        .map_err(|e| FlowError::Failed(format!("cannot restart an exited sidecar: {e}")))?;
    if !restarted.is_empty() {
        notes.push(format!(
            "restarted sidecars that exited on the lost connection: {}",
            restarted.join(", ")
        ));
    }
    let ok = probe_count(addr, Some("OK")).await?;
    notes.push(format!("successful Probe calls in /metrics so far: {ok}"));
    Ok(notes)
}
