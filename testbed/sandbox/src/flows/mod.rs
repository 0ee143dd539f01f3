//! The flows the sandbox walks through, in order. A flow is an `async fn(&Sandbox) ->
//! FlowResult` that drives the stack (objects through [`Sandbox::client`], processes through
//! the sandbox) and checks what the sidecars and the controller-manager stand-in did.
//!
//! # Adding a flow
//!
//! 1. Write `async fn my_flow(sb: &Sandbox) -> FlowResult` in a module of this directory
//!    (e.g. `provisioning.rs` for "dynamic provisioning"). Return `Ok(notes)` with one line
//!    per observation worth reading in the report (what happened and how long it took),
//!    [`FlowError::Skipped`] when a sidecar it needs is not built ([`require_sidecar`]), and
//!    [`FlowError::Failed`] with the reason when a check does not hold. Bound every wait
//!    ([`wait_for`]); the runner also gives up after [`super::FLOW_TIMEOUT`].
//! 2. Add one line to [`all`]: `flow("dynamic provisioning", |sb| Box::pin(provisioning::run(sb)))`.
//!    Order matters: flows share the sandbox, and flows that disrupt it (driver restart) go
//!    last.
//! 3. If the flow needs a new sidecar binary, add it to [`super::sidecars::known`].

mod attachment;
mod binding;
mod capacity;
mod expansion;
mod liveness;
mod modification;
mod provisioning;
mod registration;
mod sources;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::Sandbox;

/// Notes of a passed flow, one line each.
pub type FlowResult = Result<Vec<String>, FlowError>;

/// The future a flow returns.
pub type FlowFuture<'a> = Pin<Box<dyn Future<Output = FlowResult> + 'a>>;

/// Why a flow did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowError {
    /// A check did not hold; the text says which and what was seen.
    Failed(String),
    /// The flow could not run (e.g. a sidecar binary is not built yet).
    Skipped(String),
}

/// One named flow.
#[derive(Clone, Copy)]
pub struct Flow {
    /// Name shown in the report.
    pub name: &'static str,
    /// The flow.
    pub run: for<'a> fn(&'a Sandbox) -> FlowFuture<'a>,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A flow entry (keeps [`all`] to one line per flow).
pub fn flow(name: &'static str, run: for<'a> fn(&'a Sandbox) -> FlowFuture<'a>) -> Flow {
    Flow { name, run }
}

/// Every flow, in run order.
pub fn all() -> Vec<Flow> {
    vec![
        flow("livenessprobe healthy", |sb| {
            Box::pin(liveness::healthy(sb))
        }),
        flow("PVC annotated by the controller-manager stand-in", |sb| {
            Box::pin(binding::annotated(sb))
        }),
        flow("manual static binding", |sb| {
            Box::pin(binding::static_binding(sb))
        }),
        flow("node-driver-registrar registration with kubelet", |sb| {
            Box::pin(registration::registered(sb))
        }),
        flow("dynamic provisioning", |sb| {
            Box::pin(provisioning::provisioned(sb))
        }),
        flow("clone from a claim", |sb| Box::pin(sources::cloned(sb))),
        flow("restore from a VolumeSnapshot", |sb| {
            Box::pin(sources::restored(sb))
        }),
        flow("storage capacity tracking", |sb| {
            Box::pin(capacity::tracked(sb))
        }),
        flow("attach and detach", |sb| {
            Box::pin(attachment::attached_and_detached(sb))
        }),
        flow("volume expansion", |sb| Box::pin(expansion::expanded(sb))),
        flow("volume modification", |sb| {
            Box::pin(modification::modified(sb))
        }),
        flow("deletion", |sb| Box::pin(provisioning::deleted(sb))),
        // Disrupts every sidecar's driver connection: keep it last.
        flow("driver restart -> probe 500 then 200", |sb| {
            Box::pin(liveness::driver_restart(sb))
        }),
    ]
}

/// The `--http-endpoint` of `binary`, or [`FlowError::Skipped`] when it is not running.
///
/// # Errors
/// [`FlowError::Skipped`].
pub fn require_sidecar(sb: &Sandbox, binary: &str) -> Result<std::net::SocketAddr, FlowError> {
    sb.sidecar_endpoint(binary)
        .ok_or_else(|| FlowError::Skipped(format!("{binary} not built yet (or not running)")))
}

/// Polls `check` every 50 ms until it yields `Some`, for at most `timeout`.
///
/// # Errors
/// [`FlowError::Failed`] naming `what` (and the last observation, when `check` keeps one in
/// `last`) when time runs out.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T, FlowError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(FlowError::Failed(format!(
                "timed out after {timeout:?} waiting for {what}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The reasons of the events on claim `claim` (in the sandbox namespace) that `relevant`
/// keeps, once one of them is `wanted`. Events are written asynchronously and may trail the
/// change that caused them a little, hence the short wait.
///
/// # Errors
/// [`FlowError::Failed`] when no `wanted` event shows up within 5 s.
pub(crate) async fn claim_event_reasons(
    sb: &Sandbox,
    claim: &str,
    relevant: fn(&str) -> bool,
    wanted: &str,
) -> Result<Vec<String>, FlowError> {
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(sb.client().clone(), crate::NAMESPACE);
    wait_for(
        &format!("a {wanted} event for {claim}"),
        Duration::from_secs(5),
        || async {
            let reasons: Vec<String> = events
                .list(&kube::api::ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(claim))
                .filter_map(|e| e.reason)
                .filter(|r| relevant(r))
                .collect();
            reasons.iter().any(|r| r == wanted).then_some(reasons)
        },
    )
    .await
}

/// Milliseconds since `start`.
pub(crate) fn ms_since(start: tokio::time::Instant) -> u128 {
    start.elapsed().as_millis()
}

/// Sum of the samples of metric `name` whose labels include all of `labels`, in a Prometheus
/// text exposition; `None` when no sample matches.
pub fn metric_value(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in body.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        if !labels
            .iter()
            .all(|(k, v)| label_text.contains(&format!("{k}=\"{v}\"")))
        {
            continue;
        }
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

/// A failed step: `what` and why.
pub(crate) fn failed(what: &str, err: impl std::fmt::Display) -> FlowError {
    FlowError::Failed(format!("{what}: {err}"))
}

/// Requires that `sidecar`'s `/metrics` at `addr` counts at least one successful call of
/// `method` (gRPC full path) in `csi_sidecar_operations_seconds`; the note for the report.
///
/// # Errors
/// [`FlowError::Failed`] when `/metrics` cannot be read or counts none.
pub(crate) async fn require_successful_call(
    addr: std::net::SocketAddr,
    sidecar: &str,
    method: &str,
) -> Result<String, FlowError> {
    let metrics = testbed_support::http_client::get(addr, "/metrics", Duration::from_secs(5))
        .await
        .map_err(|e| failed("GET /metrics", e))?;
    let calls = metric_value(
        &metrics.body,
        "csi_sidecar_operations_seconds_count",
        &[("method_name", method), ("grpc_status_code", "OK")],
    )
    .unwrap_or(0.0);
    if calls < 1.0 {
        return Err(FlowError::Failed(format!(
            "{sidecar} /metrics counts {calls} successful {method} calls"
        )));
    }
    Ok(format!(
        "{sidecar} /metrics: successful {method} calls {calls}"
    ))
}

/// Metric families worth showing in the report.
const HIGHLIGHTED: &[&str] = &[
    "csi_sidecar_operations_seconds_count",
    "leader_election_master_status",
    "controller_",
    "workqueue_adds_total",
    "workqueue_depth",
    "process_start_time_seconds",
];

/// The `/metrics` lines (samples, no comments) of the `HIGHLIGHTED` families.
pub fn metric_highlights(body: &str) -> Vec<String> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| HIGHLIGHTED.iter().any(|h| l.starts_with(h)))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "\
# HELP csi_sidecar_operations_seconds Duration
csi_sidecar_operations_seconds_count{driver_name=\"d\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Identity/Probe\"} 3
csi_sidecar_operations_seconds_count{driver_name=\"d\",grpc_status_code=\"Unavailable\",method_name=\"/csi.v1.Identity/Probe\"} 2
csi_sidecar_operations_seconds_sum{driver_name=\"d\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Identity/Probe\"} 0.01
process_start_time_seconds 1.7e+09
";

    #[test]
    fn metric_values_are_summed_over_matching_label_sets() {
        let probe = ("method_name", "/csi.v1.Identity/Probe");
        assert_eq!(
            metric_value(BODY, "csi_sidecar_operations_seconds_count", &[probe]),
            Some(5.0)
        );
        assert_eq!(
            metric_value(
                BODY,
                "csi_sidecar_operations_seconds_count",
                &[probe, ("grpc_status_code", "OK")]
            ),
            Some(3.0)
        );
        assert_eq!(
            metric_value(BODY, "process_start_time_seconds", &[]),
            Some(1.7e9)
        );
        assert_eq!(
            metric_value(BODY, "csi_sidecar_operations_seconds", &[]),
            None
        );
    }

    #[test]
    fn highlights_keep_samples_of_interesting_families_only() {
        let lines = metric_highlights(BODY);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines.iter().all(|l| !l.contains("_sum")));
    }
}
