//! Kind-specific checks of the kinds the sidecars write (PVC, PV, VolumeAttachment, Lease,
//! StorageClass, CSIStorageCapacity, CSINode, Events): upstream `Validate<Kind>` on create
//! and `Validate<Kind>Update` on update.

use serde_json::Value;

use super::classes;
use super::field::FieldError;
use super::metadata::{string_list, validate_metadata, validate_metadata_update};
use super::names::qualified_name_errors;
use crate::apiserver::quantity;
use crate::apiserver::resources::{ResourceInfo, View};

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

/// kube-apiserver `maxAttachedVolumeMetadataSize`: bytes of all keys and values of a
/// VolumeAttachment's `status.attachmentMetadata` together.
const MAX_ATTACHMENT_METADATA_BYTES: usize = 256 * 1024;
/// kube-apiserver `maxVolumeErrorMessageSize`: bytes of `status.attachError.message` and
/// `status.detachError.message`.
const MAX_VOLUME_ERROR_MESSAGE_BYTES: usize = 1024;

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

/// The keys of a PV's `spec.nodeAffinity` (kube-apiserver `ValidateVolumeNodeAffinity` ->
/// `validateNodeSelectorRequirement`: each key a label name, else 422). A driver's topology key
/// reaches the PV this way, so an invalid one makes the PV unsavable.
fn node_affinity_keys(errs: &mut Vec<FieldError>, spec: &Value) {
    let terms = spec["nodeAffinity"]["required"]["nodeSelectorTerms"].as_array();
    for (t, term) in terms.into_iter().flatten().enumerate() {
        let expressions = term["matchExpressions"].as_array();
        for (e, expression) in expressions.into_iter().flatten().enumerate() {
            let key = expression["key"].as_str().unwrap_or_default();
            let field = format!(
                "spec.nodeAffinity.required.nodeSelectorTerms[{t}].matchExpressions[{e}].key"
            );
            for msg in qualified_name_errors(key) {
                errs.push(FieldError::invalid(field.clone(), key, msg));
            }
        }
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
            classes::claim_spec(&mut errs, spec);
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
            node_affinity_keys(&mut errs, spec);
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
            volume_attachment_status(&mut errs, &obj["status"]);
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
            // ValidateCSIStorageCapacity: `capacity` (not `maximumVolumeSize`) must not be
            // negative (ValidateNonnegativeQuantity).
            if let Some(q) = obj["capacity"].as_str()
                && quantity::parse(q).is_ok_and(|parsed| parsed.is_negative())
            {
                errs.push(FieldError::invalid(
                    "capacity",
                    q,
                    "must be greater than or equal to 0",
                ));
            }
        }
        ("storage.k8s.io", "volumeattributesclasses") => classes::class(&mut errs, obj),
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

/// Upstream `validateVolumeAttachmentStatus`: the only limits are sizes (the metadata is the
/// driver's opaque publish context, so its keys are not checked).
fn volume_attachment_status(errs: &mut Vec<FieldError>, status: &Value) {
    if let Some(metadata) = status["attachmentMetadata"].as_object() {
        let size: usize = metadata
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if size > MAX_ATTACHMENT_METADATA_BYTES {
            errs.push(FieldError::too_long(
                "status.attachmentMetadata",
                MAX_ATTACHMENT_METADATA_BYTES,
            ));
        }
    }
    for field in ["attachError", "detachError"] {
        if status[field]["message"]
            .as_str()
            .is_some_and(|m| m.len() > MAX_VOLUME_ERROR_MESSAGE_BYTES)
        {
            errs.push(FieldError::too_long(
                format!("status.{field}.message"),
                MAX_VOLUME_ERROR_MESSAGE_BYTES,
            ));
        }
    }
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

/// The claim resize statuses kube-apiserver accepts (core/v1 `ClaimResourceStatus`).
const CLAIM_RESOURCE_STATUSES: &[&str] = &[
    "ControllerResizeInProgress",
    "ControllerResizeInfeasible",
    "NodeResizeInProgress",
    "NodeResizeInfeasible",
    "NodeResizePending",
];

/// kube-apiserver `ValidatePersistentVolumeClaimUpdate` with RecoverVolumeExpansionFailure
/// (GA, on): a request may be lowered (to recover from a failed expansion) but must stay above
/// the old `status.capacity` ("field can not be less than status.capacity", checked with
/// `newSize.Cmp(statusSize) <= 0`, so equal is refused too).
fn pvc_request_not_below_capacity(errs: &mut Vec<FieldError>, old: &Value, new: &Value) {
    let size = |v: &Value| {
        v.as_str()
            .and_then(|q| quantity::parse(q).ok())
            .map(|q| q.value)
    };
    let new_size = size(&new["spec"]["resources"]["requests"]["storage"]);
    let old_size = size(&old["spec"]["resources"]["requests"]["storage"]);
    let status_size = size(&old["status"]["capacity"]["storage"]);
    if let (Some(new_size), Some(old_size), Some(status_size)) = (new_size, old_size, status_size)
        && new_size < old_size
        && new_size <= status_size
    {
        errs.push(FieldError::forbidden(
            "spec.resources.requests.storage",
            "field can not be less than status.capacity",
        ));
    }
}

/// kube-apiserver `ValidatePersistentVolumeClaimStatusUpdate`: `allocatedResources` and
/// `allocatedResourceStatuses` take only the `storage` key, the first a quantity not below
/// zero, the second one of [`CLAIM_RESOURCE_STATUSES`].
fn pvc_allocated_status(errs: &mut Vec<FieldError>, status: &Value) {
    storage_key_only(
        errs,
        &status["allocatedResources"],
        "status.allocatedResources",
        |v| {
            let q = v.as_str().unwrap_or_default();
            match quantity::parse(q) {
                Ok(parsed) if !parsed.is_negative() => None,
                _ => Some((q.to_owned(), None)),
            }
        },
    );
    storage_key_only(
        errs,
        &status["allocatedResourceStatuses"],
        "status.allocatedResourceStatuses",
        |v| {
            let v = v.as_str().unwrap_or_default();
            (!CLAIM_RESOURCE_STATUSES.contains(&v))
                .then(|| (v.to_owned(), Some(CLAIM_RESOURCE_STATUSES)))
        },
    );
}

/// Each key of the map `map` at `path` must be `storage`; `bad_value` says what is wrong with
/// a value: the value and the supported values (`NotSupported`), or none of them (an
/// `Invalid` "must be greater than or equal to 0").
fn storage_key_only(
    errs: &mut Vec<FieldError>,
    map: &Value,
    path: &str,
    bad_value: impl Fn(&Value) -> Option<(String, Option<&'static [&'static str]>)>,
) {
    for (key, value) in map.as_object().into_iter().flatten() {
        let field = format!("{path}[{key}]");
        if key != "storage" {
            errs.push(FieldError::not_supported(field, key, &["storage"]));
            continue;
        }
        match bad_value(value) {
            None => {}
            Some((v, Some(supported))) => {
                errs.push(FieldError::not_supported(field, &v, supported));
            }
            Some((v, None)) => errs.push(FieldError::invalid(
                field,
                &v,
                "must be greater than or equal to 0",
            )),
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
            pvc_request_not_below_capacity(&mut errs, old, new);
            pvc_allocated_status(&mut errs, &new["status"]);
            classes::claim_update(&mut errs, old, new);
        }
        ("", "persistentvolumes") => classes::volume_update(&mut errs, old, new),
        ("storage.k8s.io", "volumeattributesclasses") => {
            classes::class_update(&mut errs, old, new);
            classes::class(&mut errs, new);
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
