//! LIST: resourceVersion semantics (unset = consistent, `0` = any and `limit` ignored, `N` =
//! not older than N, `Exact`), label/field selectors, and `limit`/`continue` pagination with
//! kube-apiserver's token format (fixtures a1-a7, c2, c3, c5, d5).
//!
//! Pages after the first are served from the state at the first page's resourceVersion, rebuilt
//! from the store history, so a paginated list is as consistent as against etcd; once that
//! history is compacted the continue token expires with 410 and a fresh "inconsistent" token.

use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::StatusCode;
use serde_json::{Value, json};

use super::Shared;
use super::render;
use super::request::ResourceRequest;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::{ApiError, json_response};
use super::store;
use super::validation::FieldError;

/// How long a LIST waits for a future resourceVersion before answering 504 (fixture c5).
const FUTURE_RV_WAIT: Duration = Duration::from_secs(3);

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContinueToken {
    /// List resourceVersion (-1: inconsistent continuation at the current state).
    pub(crate) rv: i64,
    /// Key (relative to the list prefix) after which to continue.
    pub(crate) start: String,
}

impl ContinueToken {
    /// base64url (no padding) of `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}`.
    pub(crate) fn encode(&self) -> String {
        // Field order matters for byte equality with upstream tokens: write it by hand.
        let start = Value::String(format!("{}\u{0}", self.start)).to_string();
        let json = format!(
            "{{\"v\":\"meta.k8s.io/v1\",\"rv\":{},\"start\":{start}}}",
            self.rv
        );
        URL_SAFE_NO_PAD.encode(json)
    }

    /// Decode a token from a client.
    pub(crate) fn decode(token: &str) -> Result<Self, String> {
        let bytes = URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|e| format!("continue key is not valid: {e}"))?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("continue key is not valid: {e}"))?;
        if v["v"] != "meta.k8s.io/v1" {
            return Err(
                "continue key is not valid: server does not recognize this encoded key".to_owned(),
            );
        }
        let rv = v["rv"].as_i64().ok_or("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")?;
        let start = v["start"].as_str().unwrap_or("");
        Ok(Self {
            rv,
            start: start.strip_suffix('\u{0}').unwrap_or(start).to_owned(),
        })
    }
}

/// Parsed resourceVersion parameter of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadRv {
    /// Unset: the most recent state.
    Latest,
    /// "0": any state (the most recent here).
    Any,
    /// A number.
    At(u64),
}

/// Parse `resourceVersion`; the error is the 400 message.
pub(crate) fn parse_rv(v: Option<&str>) -> Result<ReadRv, ApiError> {
    match v {
        None | Some("") => Ok(ReadRv::Latest),
        Some("0") => Ok(ReadRv::Any),
        Some(s) => s
            .parse::<u64>()
            .map(ReadRv::At)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}"))),
    }
}

/// Parse both selectors of a request.
pub(crate) fn selectors(req: &ResourceRequest) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(req.query.get("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(req.info, req.query.get("fieldSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

/// Wait (at most [`FUTURE_RV_WAIT`]) until the store has reached `rv`.
async fn wait_for_rv(shared: &Shared, rv: u64) -> Result<(), ApiError> {
    let deadline = tokio::time::Instant::now() + FUTURE_RV_WAIT;
    loop {
        let current = shared.store.lock().rv();
        if current >= rv {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::too_large_resource_version(rv, current));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// GET on a collection without `watch`.
pub(crate) async fn list(
    shared: &Arc<Shared>,
    req: &ResourceRequest,
) -> Result<Response, ApiError> {
    let q = &req.query;
    let rv_match = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    let rv_param = q.get("resourceVersion").filter(|s| !s.is_empty());
    let mut option_errors = Vec::new();
    if rv_match.is_some() && rv_param.is_none() {
        option_errors.push(FieldError::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if q.flag("sendInitialEvents").is_some() {
        option_errors.push(FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    if rv_match == Some("Exact") && rv_param == Some("0") {
        option_errors.push(FieldError::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ));
    }
    if let Some(m) = rv_match
        && !matches!(m, "Exact" | "NotOlderThan")
    {
        option_errors.push(FieldError::not_supported(
            "resourceVersionMatch",
            m,
            &["Exact", "NotOlderThan"],
        ));
    }
    if !option_errors.is_empty() {
        return Err(ApiError::invalid_options("ListOptions", &option_errors));
    }
    let (labels, fields) = selectors(req)?;
    let rv = parse_rv(rv_param)?;
    let continue_token = q.get("continue").filter(|s| !s.is_empty());
    if continue_token.is_some() && rv_param.is_some() {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let mut limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    if rv == ReadRv::Any {
        // Served from the watch cache upstream, which ignores limit (fixture a6).
        limit = None;
    }
    if let ReadRv::At(n) = rv {
        wait_for_rv(shared, n).await?;
    }
    let info = req.info;
    let storage = render::storage_info(info);
    let prefix = store::prefix(req.namespace.as_deref());
    let inner = shared.store.lock();
    let current = inner.rv();
    let token = continue_token
        .map(ContinueToken::decode)
        .transpose()
        .map_err(ApiError::bad_request)?;
    let (list_rv, objects) = match (&token, rv, rv_match) {
        (Some(t), _, _) if t.rv < 0 => (current, inner.range(storage.bucket, &prefix)),
        (Some(t), _, _) => {
            let at = u64::try_from(t.rv).unwrap_or(0);
            if let Ok(objects) = inner.range_at(storage.bucket, &prefix, at) {
                (at, objects)
            } else {
                let fresh = ContinueToken {
                    rv: -1,
                    start: t.start.trim_start_matches('/').to_owned(),
                };
                return Err(ApiError::continue_too_old(fresh.encode()));
            }
        }
        (None, ReadRv::At(n), Some("Exact")) => match inner.range_at(storage.bucket, &prefix, n) {
            Ok(objects) => (n, objects),
            Err(_) => return Err(ApiError::list_too_old()),
        },
        (None, _, _) => (current, inner.range(storage.bucket, &prefix)),
    };
    let start_after = token.as_ref().map(|t| {
        // Keys are relative to the list prefix, with the leading '/'.
        let rel = if t.start.starts_with('/') {
            t.start.clone()
        } else {
            format!("/{}", t.start)
        };
        format!("{}{}", prefix.trim_end_matches('/'), rel)
    });
    drop(inner);
    Ok(page(
        req,
        objects,
        start_after.as_deref(),
        limit,
        list_rv,
        (&labels, &fields),
    ))
}

fn page(
    req: &ResourceRequest,
    objects: Vec<(String, Arc<Value>)>,
    start_after: Option<&str>,
    limit: Option<usize>,
    list_rv: u64,
    (labels, fields): (&LabelSelector, &FieldSelector),
) -> Response {
    let info = req.info;
    let prefix = store::prefix(req.namespace.as_deref());
    let mut items = Vec::new();
    let mut last_key = None;
    let mut more = false;
    let mut remaining = 0usize;
    for (key, obj) in objects {
        if start_after.is_some_and(|s| key.as_str() <= s) {
            continue;
        }
        if limit.is_some_and(|l| items.len() >= l) {
            more = true;
            remaining += 1;
            continue;
        }
        if labels.matches(&obj) && fields.matches(&obj) {
            items.push(obj);
            last_key = Some(key);
        }
    }
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if more && let Some(key) = last_key {
        let rel = key
            .strip_prefix(prefix.trim_end_matches('/'))
            .unwrap_or(&key)
            .to_owned();
        let token = ContinueToken {
            rv: i64::try_from(list_rv).unwrap_or(i64::MAX),
            start: rel,
        };
        metadata["continue"] = json!(token.encode());
        // Upstream only counts the rest when no selector filters it.
        if labels.is_empty() && fields.is_empty() {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    let views: Vec<_> = items.iter().map(|obj| render::to_view(info, obj)).collect();
    let body = render::list(info, req.format, &metadata, &views);
    json_response(StatusCode::OK, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_match_the_upstream_format() {
        // The token of fixture a1.
        let token = ContinueToken {
            rv: 488,
            start: "/fx-list-a".to_owned(),
        };
        assert_eq!(
            token.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDg4LCJzdGFydCI6Ii9meC1saXN0LWFcdTAwMDAifQ"
        );
        assert_eq!(ContinueToken::decode(&token.encode()).unwrap(), token);
        // The fresh inconsistent token of fixture c3.
        let fresh = ContinueToken {
            rv: -1,
            start: "fx-list-a".to_owned(),
        };
        assert_eq!(
            fresh.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZngtbGlzdC1hXHUwMDAwIn0"
        );
        assert!(ContinueToken::decode("not-a-token").is_err());
    }
}
