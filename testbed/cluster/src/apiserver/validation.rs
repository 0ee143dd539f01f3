//! Validation that answers 422 Invalid with one cause per field, as kube-apiserver v1.36.2 does
//! (fixtures h1, h2, l4, m7, m9): object names, metadata (labels, annotations, finalizers),
//! and the required fields of the kinds the sidecars write (PVC, PV, VolumeAttachment, Lease,
//! StorageClass, CSIStorageCapacity, CSINode, Events). Messages follow upstream's
//! `field.Error` wording so a sidecar that logs them logs what it would log in a real cluster.

use serde_json::{Value, json};

use super::quantity;
use super::resources::{ResourceInfo, View};

/// Upstream `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorType {
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueNotSupported`.
    NotSupported,
}

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    /// Error type.
    pub(crate) kind: ErrorType,
    /// Field path, e.g. `metadata.name`.
    pub(crate) field: String,
    /// The offending value as Go prints it (`"x"` for strings), for Invalid/NotSupported.
    pub(crate) value: Option<String>,
    /// The explanation.
    pub(crate) detail: String,
}

impl FieldError {
    /// `field: Required value[: detail]`.
    pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: ErrorType::Required,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field: Invalid value: "v": detail` for a string value.
    pub(crate) fn invalid(
        field: impl Into<String>,
        value: &str,
        detail: impl Into<String>,
    ) -> Self {
        Self::invalid_raw(field, quote(value), detail)
    }

    /// `field: Invalid value: <v>: detail` with the value already rendered.
    pub(crate) fn invalid_raw(
        field: impl Into<String>,
        value: String,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind: ErrorType::Invalid,
            field: field.into(),
            value: Some(value),
            detail: detail.into(),
        }
    }

    /// `field: Forbidden: detail`.
    pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: ErrorType::Forbidden,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field: Unsupported value: "v": supported values: "a", "b"`.
    pub(crate) fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        Self {
            kind: ErrorType::NotSupported,
            field: field.into(),
            value: Some(quote(value)),
            detail: format!("supported values: {}", list.join(", ")),
        }
    }

    fn reason(&self) -> &'static str {
        match self.kind {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::NotSupported => "FieldValueNotSupported",
        }
    }

    /// The message without the field path.
    pub(crate) fn message(&self) -> String {
        let head = match self.kind {
            ErrorType::Required => "Required value".to_owned(),
            ErrorType::Forbidden => "Forbidden".to_owned(),
            ErrorType::Invalid => {
                format!("Invalid value: {}", self.value.as_deref().unwrap_or("null"))
            }
            ErrorType::NotSupported => {
                format!(
                    "Unsupported value: {}",
                    self.value.as_deref().unwrap_or("null")
                )
            }
        };
        if self.detail.is_empty() {
            head
        } else {
            format!("{head}: {}", self.detail)
        }
    }

    /// The `details.causes[]` entry.
    pub(crate) fn cause(&self) -> Value {
        json!({"reason": self.reason(), "message": self.message(), "field": self.field})
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message())
    }
}

/// Go's `%q` for the ASCII names we deal with.
pub(crate) fn quote(s: &str) -> String {
    format!("{s:?}")
}

const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Errors of upstream `IsDNS1123Subdomain`.
pub(crate) fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if !s.split('.').all(is_dns1123_label) {
        errs.push(DNS1123_SUBDOMAIN_ERR.to_owned());
    }
    errs
}

/// Errors of upstream `IsDNS1123Label`.
pub(crate) fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is_dns1123_label(s) {
        errs.push(DNS1123_LABEL_ERR.to_owned());
    }
    errs
}

fn is_qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Errors of upstream `IsQualifiedName` (label and annotation keys, finalizers).
pub(crate) fn qualified_name_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if s.matches('/').count() > 1 {
        errs.push(format!("a qualified name {QUALIFIED_NAME_ERR} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"));
        return errs;
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errs.push("prefix part must be non-empty".to_owned());
        } else {
            for e in dns1123_subdomain_errors(prefix) {
                errs.push(format!("prefix part {e}"));
            }
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else {
        if name.len() > 63 {
            errs.push("name part must be no more than 63 characters".to_owned());
        }
        if !is_qualified_part(name) {
            errs.push(format!("name part {QUALIFIED_NAME_ERR}"));
        }
    }
    errs
}

fn label_value_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !s.is_empty() && !is_qualified_part(s) {
        errs.push(LABEL_VALUE_ERR.to_owned());
    }
    errs
}

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

/// Volume sources of a PersistentVolume (exactly one must be set).
const SOURCES: &[&str] = &[
    "csi",
    "hostPath",
    "nfs",
    "local",
    "iscsi",
    "fc",
    "rbd",
    "cephfs",
    "azureDisk",
    "azureFile",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flexVolume",
    "cinder",
    "flocker",
    "vsphereVolume",
    "quobyte",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const VOLUME_MODES: &[&str] = &["Block", "Filesystem"];

fn access_modes(errs: &mut Vec<FieldError>, spec: &Value, field: &str) {
    let modes = string_list(&spec["accessModes"]);
    if modes.is_empty() {
        errs.push(FieldError::required(
            field,
            "at least 1 access mode is required",
        ));
    }
    for m in &modes {
        if !ACCESS_MODES.contains(&m.as_str()) {
            errs.push(FieldError::not_supported(field, m, ACCESS_MODES));
        }
    }
    if modes.iter().any(|m| m == "ReadWriteOncePod") && modes.len() > 1 {
        errs.push(FieldError::forbidden(
            field,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

fn positive_quantity(errs: &mut Vec<FieldError>, v: &Value, field: &str) {
    match v.as_str() {
        None => errs.push(FieldError::required(field, "")),
        Some(q) => match quantity::parse(q) {
            Ok(parsed) if parsed.is_positive() => {}
            _ => errs.push(FieldError::invalid(field, q, "must be greater than zero")),
        },
    }
}

fn required_str(errs: &mut Vec<FieldError>, v: &Value, field: &str) {
    if v.as_str().is_none_or(str::is_empty) {
        errs.push(FieldError::required(field, ""));
    }
}

/// Kind-specific checks of a new object (upstream `Validate<Kind>`), after defaulting.
#[allow(
    clippy::too_many_lines,
    reason = "one match arm per kind, read as a table"
)]
pub(crate) fn validate_object(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    let mut errs = validate_metadata(info, obj);
    let spec = &obj["spec"];
    match (info.group, info.plural) {
        ("", "persistentvolumeclaims") => {
            access_modes(&mut errs, spec, "spec.accessModes");
            match spec["resources"]["requests"].get("storage") {
                None => errs.push(FieldError::required("spec.resources[storage]", "")),
                Some(q) => positive_quantity(&mut errs, q, "spec.resources[storage]"),
            }
            if let Some(mode) = spec["volumeMode"].as_str()
                && !VOLUME_MODES.contains(&mode)
            {
                errs.push(FieldError::not_supported(
                    "spec.volumeMode",
                    mode,
                    VOLUME_MODES,
                ));
            }
        }
        ("", "persistentvolumes") => {
            access_modes(&mut errs, spec, "spec.accessModes");
            match spec["capacity"].get("storage") {
                None => errs.push(FieldError::required("spec.capacity", "")),
                Some(q) => positive_quantity(&mut errs, q, "spec.capacity[storage]"),
            }
            let sources = SOURCES
                .iter()
                .filter(|s| spec.get(**s).is_some_and(|v| !v.is_null()))
                .count();
            if sources == 0 {
                errs.push(FieldError::required("spec", "must specify a volume type"));
            } else if sources > 1 {
                errs.push(FieldError::forbidden(
                    "spec",
                    "may not specify more than 1 volume type",
                ));
            }
            if spec.get("csi").is_some_and(Value::is_object) {
                required_str(&mut errs, &spec["csi"]["driver"], "spec.csi.driver");
                required_str(
                    &mut errs,
                    &spec["csi"]["volumeHandle"],
                    "spec.csi.volumeHandle",
                );
            }
            if let Some(policy) = spec["persistentVolumeReclaimPolicy"].as_str() {
                const POLICIES: &[&str] = &["Delete", "Recycle", "Retain"];
                if !POLICIES.contains(&policy) {
                    errs.push(FieldError::not_supported(
                        "spec.persistentVolumeReclaimPolicy",
                        policy,
                        POLICIES,
                    ));
                }
            }
        }
        ("storage.k8s.io", "volumeattachments") => {
            required_str(&mut errs, &spec["attacher"], "spec.attacher");
            required_str(&mut errs, &spec["nodeName"], "spec.nodeName");
            let source = &spec["source"];
            let pv = source["persistentVolumeName"]
                .as_str()
                .is_some_and(|s| !s.is_empty());
            let inline = source.get("inlineVolumeSpec").is_some_and(|v| !v.is_null());
            if pv == inline {
                errs.push(FieldError::required(
                    "spec.source",
                    "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
                ));
            }
        }
        ("storage.k8s.io", "storageclasses") => {
            required_str(&mut errs, &obj["provisioner"], "provisioner");
            if let Some(policy) = obj["reclaimPolicy"].as_str() {
                const POLICIES: &[&str] = &["Delete", "Retain"];
                if !POLICIES.contains(&policy) {
                    errs.push(FieldError::not_supported("reclaimPolicy", policy, POLICIES));
                }
            }
            if let Some(mode) = obj["volumeBindingMode"].as_str() {
                const MODES: &[&str] = &["Immediate", "WaitForFirstConsumer"];
                if !MODES.contains(&mode) {
                    errs.push(FieldError::not_supported("volumeBindingMode", mode, MODES));
                }
            }
        }
        ("storage.k8s.io", "csistoragecapacities") => {
            required_str(&mut errs, &obj["storageClassName"], "storageClassName");
        }
        ("storage.k8s.io", "csinodes") => {
            if let Some(drivers) = spec["drivers"].as_array() {
                for (i, d) in drivers.iter().enumerate() {
                    required_str(&mut errs, &d["name"], &format!("spec.drivers[{i}].name"));
                    required_str(
                        &mut errs,
                        &d["nodeID"],
                        &format!("spec.drivers[{i}].nodeID"),
                    );
                }
            }
        }
        ("coordination.k8s.io", "leases") => {
            if let Some(d) = spec["leaseDurationSeconds"].as_i64()
                && d <= 0
            {
                errs.push(FieldError::invalid_raw(
                    "spec.leaseDurationSeconds",
                    d.to_string(),
                    "must be greater than 0",
                ));
            }
            if let Some(t) = spec["leaseTransitions"].as_i64()
                && t < 0
            {
                errs.push(FieldError::invalid_raw(
                    "spec.leaseTransitions",
                    t.to_string(),
                    "must be greater than or equal to 0",
                ));
            }
        }
        ("" | "events.k8s.io", "events") => validate_event(info, obj, &mut errs),
        ("", "pods") if spec["containers"].as_array().is_none_or(Vec::is_empty) => {
            errs.push(FieldError::required("spec.containers", ""));
        }
        _ => {}
    }
    errs
}

/// Event checks; `obj` is in the view's own shape (fixtures m7, m8, m9).
fn validate_event(info: &ResourceInfo, obj: &Value, errs: &mut Vec<FieldError>) {
    let namespace = obj["metadata"]["namespace"].as_str().unwrap_or("");
    match info.view {
        View::EventsV1 => {
            // Upstream reports only the missing eventTime although reportingController,
            // reportingInstance and action are required too (fixture m7).
            if obj["eventTime"].is_null() {
                errs.push(FieldError::required("eventTime", ""));
            }
        }
        View::Native => {
            // Core/v1 does not restrict `type` (fixture m8) but checks the namespace (m9).
            if let Some(ns) = obj["involvedObject"]["namespace"].as_str()
                && !ns.is_empty()
                && ns != namespace
            {
                errs.push(FieldError::invalid(
                    "involvedObject.namespace",
                    ns,
                    "does not match event.namespace",
                ));
            }
        }
    }
}

/// Kind-specific checks of an update, `old` and `new` both in storage shape.
pub(crate) fn validate_update(info: &ResourceInfo, old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errs = validate_metadata_update(old, new);
    match (info.group, info.plural) {
        ("", "persistentvolumeclaims") => {
            let mut old_spec = old["spec"].clone();
            let mut new_spec = new["spec"].clone();
            // Only resources.requests, volumeAttributesClassName and a first volumeName may change.
            for spec in [&mut old_spec, &mut new_spec] {
                if let Some(map) = spec.as_object_mut() {
                    map.remove("volumeAttributesClassName");
                    if let Some(res) = map.get_mut("resources").and_then(Value::as_object_mut) {
                        res.remove("requests");
                    }
                }
            }
            if old["spec"]["volumeName"].as_str().unwrap_or("").is_empty() {
                for spec in [&mut old_spec, &mut new_spec] {
                    if let Some(map) = spec.as_object_mut() {
                        map.remove("volumeName");
                    }
                }
            }
            if old_spec != new_spec {
                errs.push(FieldError::forbidden(
                    "spec",
                    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
                ));
            }
        }
        ("storage.k8s.io", "volumeattachments") if old["spec"] != new["spec"] => {
            errs.push(FieldError::invalid_raw(
                "spec",
                "{...}".to_owned(),
                "field is immutable",
            ));
        }
        ("storage.k8s.io", "storageclasses") => {
            for field in [
                "parameters",
                "provisioner",
                "reclaimPolicy",
                "volumeBindingMode",
            ] {
                if old[field] != new[field] {
                    errs.push(FieldError::forbidden(
                        field,
                        format!("updates to {field} are forbidden."),
                    ));
                }
            }
        }
        ("storage.k8s.io", "csistoragecapacities") => {
            for field in ["storageClassName", "nodeTopology"] {
                if old[field] != new[field] {
                    errs.push(FieldError::invalid_raw(
                        field,
                        "{...}".to_owned(),
                        "field is immutable",
                    ));
                }
            }
        }
        _ => {}
    }
    errs
}

#[cfg(test)]
mod tests;
