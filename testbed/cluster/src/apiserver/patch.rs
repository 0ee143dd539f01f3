//! PATCH algorithms of the in-memory API server: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386), Kubernetes strategic merge patch and a simplified server-side apply.
//!
//! Everything here is a pure function from (stored object as JSON, request body) to the new
//! object; the HTTP layer (status codes, resourceVersion checks, admission) stays with the
//! caller. The semantics follow what kube-apiserver v1.36 does in
//! `k8s.io/apiserver/pkg/endpoints/handlers/patch.go`, which hands the body to evanphx/json-patch
//! (JSON and merge patch) or to `k8s.io/apimachinery/pkg/util/strategicpatch` (SMP) on the
//! unstructured form of the object. The real server then decodes the result into the typed Go
//! object; that round trip is NOT done here, so the caller has to normalise what it implies:
//! empty `omitempty` fields disappear (an SMP that removes the last finalizer leaves
//! `"finalizers": []` here), unset timestamps of conditions come back as `null`, and unknown
//! fields are dropped.

mod json_patch;
mod schema;
mod strategic;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

/// The four PATCH flavours kube-apiserver accepts, keyed by the request `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`: RFC 6902 list of operations.
    Json,
    /// `application/merge-patch+json`: RFC 7386 merge patch.
    Merge,
    /// `application/strategic-merge-patch+json`: Kubernetes strategic merge patch.
    StrategicMerge,
    /// `application/apply-patch+yaml`: server-side apply (simplified, see [`apply`]).
    Apply,
}

impl PatchType {
    /// Maps a request `Content-Type` to the patch type it names.
    ///
    /// Parameters such as `; charset=utf-8` are ignored and the media type is compared
    /// case-insensitively. Anything else, including plain `application/json` and
    /// `application/apply-patch+cbor` (which this server does not decode), is `None`: the
    /// server answers 415 Unsupported Media Type for it, as kube-apiserver does (fixtures i8,
    /// i9).
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let media_type = ct.split(';').next().unwrap_or_default().trim();
        [
            ("application/json-patch+json", PatchType::Json),
            ("application/merge-patch+json", PatchType::Merge),
            (
                "application/strategic-merge-patch+json",
                PatchType::StrategicMerge,
            ),
            ("application/apply-patch+yaml", PatchType::Apply),
        ]
        .into_iter()
        .find(|(name, _)| media_type.eq_ignore_ascii_case(name))
        .map(|(_, patch_type)| patch_type)
    }
}

/// Why a patch could not be applied; each variant maps to one HTTP status.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    /// The body is not valid JSON (or YAML for apply) or has the wrong shape: not an array of
    /// objects for JSON patch, not an object for the other types, or a malformed strategic
    /// merge directive. kube-apiserver answers 400 BadRequest.
    #[error("invalid patch: {0}")]
    Invalid(String),
    /// A well-formed JSON patch could not be applied: a `test` failed, an operation addressed
    /// a missing path, an unknown `op`. kube-apiserver answers 422 with the generic message
    /// "the server rejected our request due to an error in our request", `reason: Invalid`
    /// and empty details, without naming the operation (fixtures i3, i4).
    #[error("the server rejected our request due to an error in our request")]
    Unprocessable,
}

/// Applies `patch` (the raw request body) to `target` (the stored object as JSON) and returns
/// the new object; `target` itself is left untouched.
///
/// `kind` is the object's Kind (`PersistentVolumeClaim`, `CSINode`, ...); only strategic merge
/// patch uses it, to look up the list merge keys of that Kind.
///
/// Per type:
/// - [`PatchType::Json`]: RFC 6902, applied atomically (any failing operation leaves nothing
///   applied). `test` compares numbers by value.
/// - [`PatchType::Merge`]: RFC 7386. The body must be a JSON object (a non-object merge patch
///   would replace the whole object, which the real server then fails to decode).
/// - [`PatchType::StrategicMerge`]: apimachinery's strategic merge patch with the
///   `patchStrategy`/`patchMergeKey` tags of the Kinds the sidecars touch (see the rule table in
///   `patch/schema.rs`); lists without a tag, and all lists of unknown Kinds apart from
///   `metadata.finalizers` and `metadata.ownerReferences`, are replaced as a whole.
/// - [`PatchType::Apply`]: the body (YAML or JSON) is applied as a JSON merge patch of the
///   fields it names. Real server-side apply tracks field ownership in `managedFields`, merges
///   lists by their `x-kubernetes-list-type` and removes fields the same manager stopped
///   applying; none of that is modelled here. Checking `?fieldManager=` (fixture i12) is the
///   caller's job.
///
/// A `metadata.resourceVersion` in the body ends up in the result like any other field.
/// kube-apiserver uses it for optimistic locking (409 Conflict when it differs from the stored
/// one, fixture i10), so the CALLER must compare the result's resourceVersion with the stored
/// object's before accepting the result, and then set the new resourceVersion itself.
pub fn apply(
    patch_type: PatchType,
    kind: &str,
    target: &Value,
    patch: &[u8],
) -> Result<Value, PatchError> {
    match patch_type {
        PatchType::Json => json_patch::apply(target, &parse_json(patch)?),
        PatchType::Merge => merge_object(target, &parse_json(patch)?),
        PatchType::StrategicMerge => strategic::apply(kind, target, parse_json(patch)?),
        PatchType::Apply => merge_object(target, &parse_apply_body(patch)?),
    }
}

/// Applies an RFC 7386 JSON merge patch to `target` in place.
///
/// Objects merge recursively, `null` removes a member, and anything that is not an object
/// (arrays included) replaces the target value; a non-object patch replaces the whole
/// document.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(members) = target {
        for (key, value) in patch {
            if value.is_null() {
                members.remove(key);
            } else {
                merge_patch(members.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Deep equality in which numbers compare by value (`1` equals `1.0`), as RFC 6902 `test`
/// requires and as apimachinery's integer-normalising JSON decoder makes merge keys behave.
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, x)| y.get(key).is_some_and(|y| json_eq(x, y)))
        }
        _ => a == b,
    }
}

/// Merge patch (and simplified apply) of an object body onto the target.
fn merge_object(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(PatchError::Invalid(format!(
            "a merge patch must be a JSON object, got {}",
            type_name(patch)
        )));
    }
    let mut result = target.clone();
    merge_patch(&mut result, patch);
    Ok(result)
}

fn parse_json(body: &[u8]) -> Result<Value, PatchError> {
    serde_json::from_slice(body).map_err(|err| PatchError::Invalid(err.to_string()))
}

/// Apply bodies are YAML; JSON is tried first because it is what kube-rs and kubectl send and
/// because its error message is the more useful one for a JSON body.
fn parse_apply_body(body: &[u8]) -> Result<Value, PatchError> {
    serde_json::from_slice(body).or_else(|json_err| {
        serde_saphyr::from_slice::<Value>(body).map_err(|yaml_err| {
            PatchError::Invalid(format!(
                "apply body is neither JSON ({json_err}) nor YAML ({yaml_err})"
            ))
        })
    })
}

/// JSON type name for error messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
