//! `Status` response bodies and the error type every handler returns.
//!
//! The shapes are copied from kube-apiserver v1.36.2 (golden fixtures `http/e*`, `f*`, `g*`, `h*`,
//! `i*`, `j*`): `details.kind` is the resource plural for 404/409/403 but the Kind for 422 and the
//! DELETE precondition 409, `details.group` is omitted for the core group, and every JSON body
//! ends with a newline.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use super::resources::ResourceInfo;
use super::validation::FieldError;

/// A failed API request: an HTTP status plus the `Status` object sent as the body.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code (also `status.code` in the body).
    pub code: u16,
    /// `status.reason`, e.g. `NotFound`; `None` omits the field.
    pub reason: Option<&'static str>,
    /// `status.message`.
    pub message: String,
    /// `status.details`, `None` omits the field.
    pub details: Option<Box<Value>>,
    /// `status.metadata` (a fresh continue token on an expired continue, fixture c3).
    pub metadata: Map<String, Value>,
    /// Extra response headers (`Retry-After` on 504, fixture c5).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    fn new(code: u16, reason: Option<&'static str>, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            metadata: Map::new(),
            headers: Vec::new(),
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// 404 for a missing object: `persistentvolumeclaims "x" not found`, details use the plural.
    pub(crate) fn not_found(info: &ResourceInfo, name: &str) -> Self {
        Self::new(
            404,
            Some("NotFound"),
            format!("{} \"{name}\" not found", info.qualified()),
        )
        .with_details(plural_details(info.group, info.plural, name))
    }

    /// 404 for a missing object of another resource (the namespace of a create, fixture f2).
    pub(crate) fn not_found_in(group: &str, plural: &str, name: &str) -> Self {
        let qualified = qualify(group, plural);
        Self::new(
            404,
            Some("NotFound"),
            format!("{qualified} \"{name}\" not found"),
        )
        .with_details(plural_details(group, plural, name))
    }

    /// 404 for a path the server does not serve (fixture e4).
    pub(crate) fn unknown_path() -> Self {
        Self::new(
            404,
            Some("NotFound"),
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 AlreadyExists on create (fixture f1).
    pub(crate) fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        Self::new(
            409,
            Some("AlreadyExists"),
            format!("{} \"{name}\" already exists", info.qualified()),
        )
        .with_details(plural_details(info.group, info.plural, name))
    }

    /// 409 Conflict for a stale `metadata.resourceVersion` on PUT or PATCH (fixtures g1, i10).
    pub(crate) fn conflict_modified(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a custom tail (`Operation cannot be fulfilled on <resource> "<name>": <why>`).
    pub(crate) fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            Some("Conflict"),
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                info.qualified()
            ),
        )
        .with_details(plural_details(info.group, info.plural, name))
    }

    /// 409 Conflict for a failed DELETE precondition: here the Kind is used (fixtures j6, j7).
    pub(crate) fn precondition_failed(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            Some("Conflict"),
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                info.kind
            ),
        )
        .with_details(kind_details(info.group, info.kind, name))
    }

    /// 422 Invalid with one cause per field error (fixtures h1, h2, l4, m7, m9).
    pub(crate) fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let joined = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            let parts: Vec<String> = errors.iter().map(ToString::to_string).collect();
            format!("[{}]", parts.join(", "))
        };
        let causes: Vec<Value> = errors.iter().map(FieldError::cause).collect();
        let mut details = kind_details(group, kind, name);
        if name.is_empty()
            && let Some(map) = details.as_object_mut()
        {
            map.remove("name");
        }
        details["causes"] = Value::Array(causes);
        Self::new(
            422,
            Some("Invalid"),
            format!("{} \"{name}\" is invalid: {joined}", qualify(group, kind)),
        )
        .with_details(details)
    }

    /// 422 with the generic message a failed JSON-patch `test` gets (fixtures i3, i4).
    pub(crate) fn generic_invalid() -> Self {
        Self::new(
            422,
            Some("Invalid"),
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({}))
    }

    /// 400 BadRequest without details (fixtures g4, h3, h4, h5, h6, h8).
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, Some("BadRequest"), message)
    }

    /// 413 for a write whose body is above the server's limit: apimachinery's
    /// `NewRequestEntityTooLargeError("limit is <bytes>")`, as the generic API server's
    /// `limitedReadBody` answers past `MaxRequestBodyBytes`.
    pub(crate) fn request_entity_too_large(limit: usize) -> Self {
        Self::new(
            413,
            Some("RequestEntityTooLarge"),
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 for a PATCH with a content type that is not a patch type (fixtures i8, i9).
    pub(crate) fn unsupported_patch_type() -> Self {
        Self::new(
            415,
            Some("UnsupportedMediaType"),
            "415: Unsupported Media Type",
        )
        .with_details(json!({}))
    }

    /// 415 for a POST/PUT body in a format the server cannot decode (fixture i15).
    pub(crate) fn unsupported_body_type() -> Self {
        Self::new(
            415,
            Some("UnsupportedMediaType"),
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )
    }

    /// 403 Forbidden, e.g. a create in a namespace that is being terminated.
    pub(crate) fn forbidden(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            403,
            Some("Forbidden"),
            format!("{} \"{name}\" is forbidden: {why}", info.qualified()),
        )
        .with_details(plural_details(info.group, info.plural, name))
    }

    /// 405 for a verb the resource does not support.
    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            Some("MethodNotAllowed"),
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// 410 Expired for a LIST at a compacted resourceVersion (fixture c2).
    pub(crate) fn list_too_old() -> Self {
        Self::new(
            410,
            Some("Expired"),
            "The resourceVersion for the provided list is too old.",
        )
    }

    /// 410 Expired for a continue token older than the compaction point (fixture c3).
    pub(crate) fn continue_too_old(fresh_token: String) -> Self {
        let mut err = Self::new(
            410,
            Some("Expired"),
            "The provided continue parameter is too old to display a consistent list result. You \
             can start a new list without the continue parameter, or use the continue token in \
             this response to retrieve the remainder of the results. Continuing with the provided \
             token results in an inconsistent list - objects that were created, modified, or \
             deleted between the time the first chunk was returned and now may show up in the \
             list.",
        );
        err.metadata
            .insert("continue".to_owned(), Value::String(fresh_token));
        err
    }

    /// 504 for a resourceVersion newer than the store after waiting (fixture c5).
    pub(crate) fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut err = Self::new(
            504,
            Some("Timeout"),
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1
        }));
        err.headers.push(("retry-after", "1".to_owned()));
        err
    }

    /// A Status for an injected fault: `code` with the reason the real server uses for it.
    pub(crate) fn injected(code: u16) -> Self {
        let reason = match code {
            400 => Some("BadRequest"),
            401 => Some("Unauthorized"),
            403 => Some("Forbidden"),
            404 => Some("NotFound"),
            409 => Some("Conflict"),
            410 => Some("Expired"),
            422 => Some("Invalid"),
            429 => Some("TooManyRequests"),
            500 => Some("InternalError"),
            503 => Some("ServiceUnavailable"),
            504 => Some("Timeout"),
            _ => None,
        };
        let mut err = Self::new(code, reason, format!("injected fault: HTTP {code}"));
        if code == 429 {
            err.headers.push(("retry-after", "1".to_owned()));
        }
        err
    }

    /// 422 Invalid for list/watch options (fixtures d3, d5): group meta.k8s.io, kind ListOptions.
    pub(crate) fn invalid_options(kind: &str, errors: &[FieldError]) -> Self {
        Self::invalid("meta.k8s.io", kind, "", errors)
    }

    /// The `Status` object as JSON (for a body, or inside a watch `ERROR` event).
    pub fn to_status(&self) -> Value {
        let mut status = Map::new();
        status.insert("kind".into(), json!("Status"));
        status.insert("apiVersion".into(), json!("v1"));
        status.insert("metadata".into(), Value::Object(self.metadata.clone()));
        status.insert("status".into(), json!("Failure"));
        status.insert("message".into(), json!(self.message));
        if let Some(reason) = self.reason {
            status.insert("reason".into(), json!(reason));
        }
        if let Some(details) = &self.details {
            status.insert("details".into(), (**details).clone());
        }
        status.insert("code".into(), json!(self.code));
        Value::Object(status)
    }

    /// The Status serialized in the server's field order.
    pub fn to_json_bytes(&self) -> Vec<u8> {
        status_bytes(&self.to_status())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = self.to_json_bytes();
        body.push(b'\n');
        let mut response = json_response(
            StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body,
        );
        for (name, value) in &self.headers {
            if let Ok(value) = HeaderValue::from_str(value) {
                response.headers_mut().insert(*name, value);
            }
        }
        response
    }
}

/// A `Status` with `status: Success` (DELETE of a resource that does not return the object,
/// fixtures j11, j12).
pub(crate) fn success_status(info: &ResourceInfo, name: &str, uid: &str) -> Value {
    let mut details = plural_details(info.group, info.plural, name);
    details["uid"] = json!(uid);
    let mut status = Map::new();
    status.insert("kind".into(), json!("Status"));
    status.insert("apiVersion".into(), json!("v1"));
    status.insert("metadata".into(), json!({}));
    status.insert("status".into(), json!("Success"));
    status.insert("details".into(), details);
    Value::Object(status)
}

/// Serialize a Status object in kube-apiserver's field order (Go struct order down to the
/// causes: `reason`, `message`, `field`).
pub(crate) fn status_bytes(status: &Value) -> Vec<u8> {
    const ORDER: &[&str] = &[
        "kind",
        "apiVersion",
        "metadata",
        "status",
        "message",
        "reason",
        "details",
        "code",
    ];
    const DETAILS: &[&str] = &[
        "name",
        "group",
        "kind",
        "uid",
        "causes",
        "retryAfterSeconds",
    ];
    const CAUSE: &[&str] = &["reason", "message", "field"];
    let mut out = Vec::new();
    super::encode::write_ordered(&mut out, status, &|path| match path {
        [] => Some(ORDER),
        ["details"] => Some(DETAILS),
        ["details", "causes", "[]"] => Some(CAUSE),
        _ => None,
    });
    out
}

/// The same in the indented form kube-apiserver uses for 406 answers (fixture i16).
pub(crate) fn status_pretty(status: &Value) -> Vec<u8> {
    const ORDER: &[&str] = &[
        "kind",
        "apiVersion",
        "metadata",
        "status",
        "message",
        "reason",
        "details",
        "code",
    ];
    let map = status.as_object().cloned().unwrap_or_default();
    let lines: Vec<String> = ORDER
        .iter()
        .filter_map(|k| map.get(*k).map(|v| format!("  \"{k}\": {v}")))
        .collect();
    format!("{{\n{}\n}}", lines.join(",\n")).into_bytes()
}

/// A 200/201 JSON response with the headers kube-apiserver sends.
pub(crate) fn json_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = code;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

fn qualify(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

fn plural_details(group: &str, plural: &str, name: &str) -> Value {
    kind_details(group, plural, name)
}

fn kind_details(group: &str, kind: &str, name: &str) -> Value {
    let mut details = Map::new();
    details.insert("name".into(), json!(name));
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(kind));
    Value::Object(details)
}
