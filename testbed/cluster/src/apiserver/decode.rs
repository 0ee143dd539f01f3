//! Decoding request bodies the way kube-apiserver does before any validation: content type
//! (415, fixture i15), JSON syntax (400, h4), kind and apiVersion (400, h5), field types and
//! quantities (400, h6), and unknown fields (`fieldValidation`: Warn by default drops them and
//! adds a `Warning` header, Strict answers 400, Ignore drops them silently: h7-h9).
//!
//! Unknown fields are found by decoding into the typed k8s-openapi struct of the same API
//! version (v1.36, the fixtures' version) and comparing the round trip with the input: whatever
//! the typed struct dropped is a field the real server's schema does not know either.

use k8s_openapi::api;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::quantity;
use super::resources::ResourceInfo;
use super::status::ApiError;

/// The `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop unknown fields and warn (the server default, fixture h9).
    #[default]
    Warn,
    /// Reject unknown fields with 400 (fixture h8).
    Strict,
}

impl FieldValidation {
    /// Parse the query value (unknown values fall back to the default).
    pub(crate) fn parse(s: Option<&str>) -> Self {
        match s {
            Some("Ignore") => Self::Ignore,
            Some("Strict") => Self::Strict,
            _ => Self::Warn,
        }
    }
}

/// A decoded body plus the warnings to send back.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The object, unknown fields removed.
    pub(crate) object: Value,
    /// `Warning` header texts.
    pub(crate) warnings: Vec<String>,
}

/// Whether a request content type carries JSON we can decode.
pub(crate) fn is_json_content_type(content_type: Option<&str>) -> bool {
    match content_type {
        None => true,
        Some(ct) => {
            let media = ct
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            // YAML is accepted when it is JSON (a subset of YAML): that is what kubectl sends.
            matches!(
                media.as_str(),
                "application/json" | "application/yaml" | "" | "*/*"
            )
        }
    }
}

/// Parse JSON as upstream's decoder reports it (`unexpected end of JSON input`, fixture h4).
pub(crate) fn parse_json(info: &ResourceInfo, body: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(unrecognized(
            info,
            body,
            "json: cannot unmarshal non-object into Go value of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }",
        )),
        Err(e) if e.is_eof() => Err(unrecognized(info, body, "unexpected end of JSON input")),
        Err(e) => Err(unrecognized(info, body, &e.to_string())),
    }
}

fn unrecognized(info: &ResourceInfo, body: &[u8], why: &str) -> ApiError {
    let head: String = String::from_utf8_lossy(&body[..body.len().min(30)]).into_owned();
    let tail = if body.len() > 30 { " ..." } else { "" };
    ApiError::bad_request(format!(
        "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {why} ({head}{tail})",
        info.kind
    ))
}

/// The internal group name upstream prints in conversion errors (`core.PersistentVolumeClaim`).
fn internal_group(info: &ResourceInfo) -> &str {
    if info.group.is_empty() {
        "core"
    } else {
        info.group.split('.').next().unwrap_or(info.group)
    }
}

/// Check `kind`/`apiVersion` of a body against the URL's resource, filling them in when absent.
pub(crate) fn check_kind(
    info: &ResourceInfo,
    object: &mut Value,
    body: &[u8],
) -> Result<(), ApiError> {
    let api_version = info.api_version();
    let kind = object["kind"].as_str().unwrap_or("").to_owned();
    let version = object["apiVersion"].as_str().unwrap_or("").to_owned();
    if kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'Kind' is missing in '{}'",
            String::from_utf8_lossy(body)
        )));
    }
    if kind != info.kind || (!version.is_empty() && version != api_version) {
        let shown_version = if version.is_empty() {
            api_version.clone()
        } else {
            version.clone()
        };
        let short_version = shown_version.rsplit('/').next().unwrap_or(&shown_version);
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{short_version}\" cannot be handled as a {}: converting ({short_version}.{kind}) to ({}.{}): unknown conversion",
            info.kind,
            internal_group(info),
            info.kind
        )));
    }
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".to_owned(), Value::String(api_version));
    }
    Ok(())
}

fn cannot_handle(info: &ResourceInfo, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{} in version \"{}\" cannot be handled as a {}: {why}",
        info.kind, info.version, info.kind
    ))
}

/// Typed checks after [`check_kind`]: field types, quantities, unknown fields.
pub(crate) fn check_fields(
    info: &ResourceInfo,
    mut object: Value,
    validation: FieldValidation,
) -> Result<Decoded, ApiError> {
    check_quantities(info, &object).map_err(|e| cannot_handle(info, e.message()))?;
    let mut unknown = Vec::new();
    if let Some(typed) = round_trip(info, &object) {
        let typed = typed.map_err(|e| cannot_handle(info, &e))?;
        strip_unknown(&mut object, &typed, "", &mut unknown);
    }
    let mut warnings = Vec::new();
    if !unknown.is_empty() {
        let texts: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        match validation {
            FieldValidation::Strict => {
                return Err(cannot_handle(
                    info,
                    &format!("strict decoding error: {}", texts.join(", ")),
                ));
            }
            FieldValidation::Warn => warnings = texts,
            FieldValidation::Ignore => {}
        }
    }
    Ok(Decoded { object, warnings })
}

fn typed<T: DeserializeOwned + Serialize>(object: &Value) -> Result<Value, String> {
    // Deserialized from the borrowed tree: no copy of the object first.
    let t = T::deserialize(object).map_err(|e| e.to_string())?;
    serde_json::to_value(&t).map_err(|e| e.to_string())
}

/// Decode into the k8s-openapi type of the resource and encode again; `None` for custom
/// resources (no schema here: kept as sent).
fn round_trip(info: &ResourceInfo, object: &Value) -> Option<Result<Value, String>> {
    use api::{coordination, core, events, storage};
    Some(match (info.group, info.plural) {
        ("", "configmaps") => typed::<core::v1::ConfigMap>(object),
        ("", "events") => typed::<core::v1::Event>(object),
        ("", "namespaces") => typed::<core::v1::Namespace>(object),
        ("", "nodes") => typed::<core::v1::Node>(object),
        ("", "persistentvolumeclaims") => typed::<core::v1::PersistentVolumeClaim>(object),
        ("", "persistentvolumes") => typed::<core::v1::PersistentVolume>(object),
        ("", "pods") => typed::<core::v1::Pod>(object),
        ("", "secrets") => typed::<core::v1::Secret>(object),
        ("coordination.k8s.io", "leases") => typed::<coordination::v1::Lease>(object),
        ("events.k8s.io", "events") => typed::<events::v1::Event>(object),
        ("storage.k8s.io", "csidrivers") => typed::<storage::v1::CSIDriver>(object),
        ("storage.k8s.io", "csinodes") => typed::<storage::v1::CSINode>(object),
        ("storage.k8s.io", "csistoragecapacities") if info.version == "v1beta1" => {
            // v1beta1 has v1's fields: check it as v1 and keep the version sent.
            let mut as_v1 = object.clone();
            as_v1["apiVersion"] = Value::from("storage.k8s.io/v1");
            typed::<storage::v1::CSIStorageCapacity>(&as_v1).map(|mut typed| {
                typed["apiVersion"] = object["apiVersion"].clone();
                typed
            })
        }
        ("storage.k8s.io", "csistoragecapacities") => {
            typed::<storage::v1::CSIStorageCapacity>(object)
        }
        ("storage.k8s.io", "storageclasses") => typed::<storage::v1::StorageClass>(object),
        ("storage.k8s.io", "volumeattachments") => typed::<storage::v1::VolumeAttachment>(object),
        ("storage.k8s.io", "volumeattributesclasses") => {
            typed::<storage::v1::VolumeAttributesClass>(object)
        }
        _ => return None,
    })
}

/// Remove from `object` every non-null field `typed` does not have, recording its path.
fn strip_unknown(object: &mut Value, typed: &Value, path: &str, unknown: &mut Vec<String>) {
    match (object, typed) {
        (Value::Object(map), Value::Object(known)) => {
            let mut drop = Vec::new();
            for (k, v) in map.iter_mut() {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match known.get(k) {
                    Some(t) => strip_unknown(v, t, &child, unknown),
                    None if v.is_null() => {}
                    None => {
                        unknown.push(child);
                        drop.push(k.clone());
                    }
                }
            }
            for k in drop {
                map.remove(&k);
            }
        }
        (Value::Array(items), Value::Array(known)) => {
            for (i, (v, t)) in items.iter_mut().zip(known).enumerate() {
                strip_unknown(v, t, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Quantity-valued maps and fields of the kinds served.
fn check_quantities(info: &ResourceInfo, object: &Value) -> Result<(), quantity::QuantityError> {
    let maps: &[&[&str]] = match (info.group, info.plural) {
        ("", "persistentvolumeclaims") => &[
            &["spec", "resources", "requests"],
            &["spec", "resources", "limits"],
            &["status", "capacity"],
            &["status", "allocatedResources"],
        ],
        ("", "persistentvolumes") => &[&["spec", "capacity"]],
        ("", "nodes") => &[&["status", "capacity"], &["status", "allocatable"]],
        _ => &[],
    };
    for path in maps {
        let mut v = object;
        for p in *path {
            v = &v[*p];
        }
        if let Some(map) = v.as_object() {
            for q in map.values() {
                check_quantity(q)?;
            }
        }
    }
    if info.plural == "csistoragecapacities" {
        for field in ["capacity", "maximumVolumeSize"] {
            check_quantity(&object[field])?;
        }
    }
    Ok(())
}

fn check_quantity(v: &Value) -> Result<(), quantity::QuantityError> {
    match v {
        Value::String(s) => quantity::parse(s).map(|_| ()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources;
    use serde_json::json;

    fn pvcs() -> &'static ResourceInfo {
        resources::find("", "v1", "persistentvolumeclaims").unwrap()
    }

    #[test]
    fn a_truncated_body_is_reported_like_upstream() {
        let body = br#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"#;
        let err = parse_json(pvcs(), body).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "the object provided is unrecognized (must be of type PersistentVolumeClaim): couldn't get version/kind; json parse error: unexpected end of JSON input ({\"apiVersion\":\"v1\",\"kind\":\"Per ...)"
        );
    }

    #[test]
    fn a_configmap_body_for_pvcs_is_a_bad_request() {
        let mut obj = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}});
        let err = check_kind(pvcs(), &mut obj, b"").unwrap_err();
        assert_eq!(
            err.message,
            "ConfigMap in version \"v1\" cannot be handled as a PersistentVolumeClaim: converting (v1.ConfigMap) to (core.PersistentVolumeClaim): unknown conversion"
        );
    }

    #[test]
    fn unknown_fields_warn_by_default_and_fail_when_strict() {
        let obj = json!({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"x"},
            "spec":{"accessModes":["ReadWriteOnce"],"bogusField":1,"resources":{"requests":{"storage":"1Gi"}}}});
        let warned = check_fields(pvcs(), obj.clone(), FieldValidation::Warn).unwrap();
        assert_eq!(
            warned.warnings,
            vec!["unknown field \"spec.bogusField\"".to_owned()]
        );
        assert!(warned.object["spec"].get("bogusField").is_none());
        let err = check_fields(pvcs(), obj, FieldValidation::Strict).unwrap_err();
        assert_eq!(
            err.message,
            "PersistentVolumeClaim in version \"v1\" cannot be handled as a PersistentVolumeClaim: strict decoding error: unknown field \"spec.bogusField\""
        );
    }

    #[test]
    fn a_bad_quantity_is_a_decode_error() {
        let obj = json!({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"x"},
            "spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1GB"}}}});
        let err = check_fields(pvcs(), obj, FieldValidation::Warn).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.ends_with("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"), "{}", err.message);
    }
}
