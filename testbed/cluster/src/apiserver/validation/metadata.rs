//! Checks of `metadata` every kind shares: upstream `ValidateObjectMeta` (name or
//! generateName, namespace, labels, annotations, finalizers) and `ValidateObjectMetaUpdate`.

use serde_json::Value;

use super::field::{FieldError, quote};
use super::names::{
    dns1123_label_errors, dns1123_subdomain_errors, label_value_errors, qualified_name_errors,
};
use crate::apiserver::resources::ResourceInfo;

/// apimachinery's `TotalAnnotationSizeLimitB`: the bytes of all annotation keys and values of
/// one object together.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// Metadata checks common to every kind (upstream `ValidateObjectMeta`).
pub(crate) fn validate_metadata(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    let generate_name = meta["generateName"].as_str().unwrap_or("");
    let name_errors = |s: &str| {
        if info.plural == "namespaces" {
            dns1123_label_errors(s)
        } else if info.bucket == "events" {
            // Event names are only checked as path segments upstream.
            path_segment_errors(s)
        } else {
            dns1123_subdomain_errors(s)
        }
    };
    if !generate_name.is_empty() {
        // Upstream masks one trailing '-' of a prefix before checking it.
        let masked = generate_name
            .strip_suffix('-')
            .map_or_else(|| generate_name.to_owned(), |p| format!("{p}a"));
        for e in name_errors(&masked) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                generate_name,
                e,
            ));
        }
    }
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for e in name_errors(name) {
            errs.push(FieldError::invalid("metadata.name", name, e));
        }
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (k, v) in labels {
            for e in qualified_name_errors(k) {
                errs.push(FieldError::invalid("metadata.labels", k, e));
            }
            let v = v.as_str().unwrap_or("");
            for e in label_value_errors(v) {
                errs.push(FieldError::invalid("metadata.labels", v, e));
            }
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        for k in annotations.keys() {
            for e in qualified_name_errors(&k.to_ascii_lowercase()) {
                errs.push(FieldError::invalid("metadata.annotations", k, e));
            }
        }
        // apimachinery's ValidateAnnotationsSize: keys and values together, in bytes.
        let total: usize = annotations
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if total > TOTAL_ANNOTATION_SIZE_LIMIT {
            errs.push(FieldError::too_long(
                "metadata.annotations",
                TOTAL_ANNOTATION_SIZE_LIMIT,
            ));
        }
    }
    if let Some(finalizers) = meta["finalizers"].as_array() {
        for (i, f) in finalizers.iter().enumerate() {
            let f = f.as_str().unwrap_or("");
            let field = format!("metadata.finalizers[{i}]");
            let errors = qualified_name_errors(f);
            if !errors.is_empty() {
                for e in errors {
                    errs.push(FieldError::invalid(&field, f, e));
                }
            } else if !f.contains('/')
                && !["kubernetes", "orphan", "foregroundDeletion"].contains(&f)
            {
                errs.push(FieldError::invalid(
                    &field,
                    f,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
    errs
}

fn path_segment_errors(s: &str) -> Vec<String> {
    if s == "." || s == ".." {
        return vec![format!("may not be '{s}'")];
    }
    for bad in ['/', '%'] {
        if s.contains(bad) {
            return vec![format!("may not contain '{bad}'")];
        }
    }
    Vec::new()
}

/// Metadata checks of an update (upstream `ValidateObjectMetaUpdate`).
pub(crate) fn validate_metadata_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !old["metadata"]["deletionTimestamp"].is_null() {
        let old_f = string_list(&old["metadata"]["finalizers"]);
        let added: Vec<String> = string_list(&new["metadata"]["finalizers"])
            .into_iter()
            .filter(|f| !old_f.contains(f))
            .collect();
        if !added.is_empty() {
            let rendered: Vec<String> = added.iter().map(|f| quote(f)).collect();
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    rendered.join(", ")
                ),
            ));
        }
    }
    errs
}

/// The strings of a JSON array (non-strings skipped).
pub(crate) fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
