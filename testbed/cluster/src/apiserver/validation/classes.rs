//! VolumeAttributesClass rules (kube-apiserver v1.36 `pkg/apis/storage/validation`
//! `ValidateVolumeAttributesClass`/`...Update` and `pkg/apis/core/validation` for the claim and
//! volume fields that name a class): the class needs a `driverName` (a qualified name) and
//! its `driverName` and `parameters` never change; a claim's
//! `spec.volumeAttributesClassName` is a class name (DNS subdomain) and cannot be cleared
//! once a class was applied (`status.currentVolumeAttributesClassName` set, the 1.34+ rule
//! that allows cancelling a class that never took effect); a PV's class cannot go back to
//! nil; `status.modifyVolumeStatus.status` is one of the three values the API knows.
//! Not modelled: the 256 kB parameter size limit and the `VolumeAttributesClass` feature gate
//! (always on, as in a 1.34+ cluster).

use serde_json::Value;

use super::field::FieldError;
use super::names::{dns1123_subdomain_errors, qualified_name_errors};

/// `ModifyVolumeStatus.status` values (core/v1 `PersistentVolumeClaimModifyVolumeStatus`).
const MODIFY_VOLUME_STATUSES: &[&str] = &["InProgress", "Infeasible", "Pending"];

/// A new class: `driverName` required and a qualified name (upstream `validateProvisioner`).
pub(super) fn class(errs: &mut Vec<FieldError>, obj: &Value) {
    match obj["driverName"].as_str().unwrap_or_default() {
        "" => errs.push(FieldError::required("driverName", "")),
        driver => {
            for msg in qualified_name_errors(&driver.to_lowercase()) {
                errs.push(FieldError::invalid("driverName", driver, msg));
            }
        }
    }
}

/// An updated class: `driverName` and `parameters` are immutable.
pub(super) fn class_update(errs: &mut Vec<FieldError>, old: &Value, new: &Value) {
    for field in ["driverName", "parameters"] {
        if old[field] != new[field] {
            errs.push(FieldError::forbidden(
                field,
                format!("updates to {field} are forbidden."),
            ));
        }
    }
}

/// A claim's spec: a non-empty `volumeAttributesClassName` must be a valid class name.
pub(super) fn claim_spec(errs: &mut Vec<FieldError>, spec: &Value) {
    if let Some(class) = spec["volumeAttributesClassName"]
        .as_str()
        .filter(|c| !c.is_empty())
    {
        for msg in dns1123_subdomain_errors(class) {
            errs.push(FieldError::invalid(
                "spec.volumeAttributesClassName",
                class,
                msg,
            ));
        }
    }
}

/// A claim update: the spec class cannot become nil or empty once
/// `status.currentVolumeAttributesClassName` is set; `modifyVolumeStatus.status` must be
/// known.
pub(super) fn claim_update(errs: &mut Vec<FieldError>, old: &Value, new: &Value) {
    let path = "spec.volumeAttributesClassName";
    let (before, after) = (
        &old["spec"]["volumeAttributesClassName"],
        &new["spec"]["volumeAttributesClassName"],
    );
    let applied = old["status"]["currentVolumeAttributesClassName"].is_string();
    if before != after && applied {
        match after.as_str() {
            None => errs.push(FieldError::forbidden(
                path,
                "update to nil is forbidden when status.currentVolumeAttributesClassName is not nil",
            )),
            Some("") => errs.push(FieldError::forbidden(
                path,
                "update to empty string is forbidden when status.currentVolumeAttributesClassName is not nil",
            )),
            Some(_) => {}
        }
    }
    claim_spec(errs, &new["spec"]);
    if let Some(status) = new["status"]["modifyVolumeStatus"].as_object() {
        let value = status
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !MODIFY_VOLUME_STATUSES.contains(&value) {
            errs.push(FieldError::not_supported(
                "status.modifyVolumeStatus.status",
                value,
                MODIFY_VOLUME_STATUSES,
            ));
        }
    }
}

/// A PV update: a class, once set, cannot go back to nil.
pub(super) fn volume_update(errs: &mut Vec<FieldError>, old: &Value, new: &Value) {
    if old["spec"]["volumeAttributesClassName"].is_string()
        && new["spec"]["volumeAttributesClassName"].is_null()
    {
        errs.push(FieldError::forbidden(
            "spec.volumeAttributesClassName",
            "update from non-nil value to nil is forbidden",
        ));
    }
}
