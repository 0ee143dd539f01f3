//! The object verbs but DELETE ([`super::delete`]): GET, POST (create), PUT (update) and
//! PATCH, with kube-apiserver's semantics: optimistic concurrency on resourceVersion (409,
//! fixtures g1, i10), the status subresource split (k1-k3), finalizers (the last one removed
//! deletes the object, j4), generateName (l1-l4), dryRun, and no create into a missing
//! namespace (404, f2).

use std::sync::Arc;

use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::admission::{self, Subresource};
use super::decode::{self, FieldValidation};
use super::patch::{self, PatchError, PatchType};
use super::render;
use super::request::ResourceRequest;
use super::resources::{self, ResourceInfo};
use super::status::{ApiError, json_response};
use super::store::Inner;
use super::validation;
use super::{Shared, managed, namespaces, requests};

/// How many generated names are tried before giving up with AlreadyExists (upstream retries
/// generateName collisions a few times too).
const GENERATE_NAME_ATTEMPTS: usize = 8;

fn respond(
    code: StatusCode,
    info: &ResourceInfo,
    req: &ResourceRequest,
    obj: &Value,
    warnings: &[String],
) -> Response {
    let mut response = json_response(code, render::object(info, req.format, obj));
    for w in warnings {
        let text = format!("299 - {}", Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

/// GET of one object (or its `/status`).
pub(crate) fn get(shared: &Arc<Shared>, req: &ResourceRequest) -> Result<Response, ApiError> {
    let info = req.info;
    let storage = render::storage_info(info);
    let name = req.name();
    let stored = shared
        .store
        .lock()
        .get(storage.bucket, &req.key(name))
        .ok_or_else(|| ApiError::not_found(info, name))?;
    let view = render::to_view(info, &stored);
    Ok(respond(StatusCode::OK, info, req, &view, &[]))
}

fn content_type(req: &ResourceRequest) -> Option<&str> {
    req.headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// Who writes in `req`, as kube-apiserver's field manager names it ([`managed`]).
fn writer(req: &ResourceRequest) -> managed::Writer<'_> {
    let agent = req
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let apply = content_type(req)
        .and_then(|ct| PatchType::from_content_type(ct.split(';').next().unwrap_or("").trim()))
        .is_some_and(|t| matches!(t, PatchType::Apply));
    managed::Writer {
        manager: req
            .query
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| requests::client_of(agent)),
        operation: if apply { "Apply" } else { "Update" },
        subresource: req.subresource.as_deref().filter(|s| *s == "status"),
    }
}

/// Decode a POST/PUT body into a view-shaped object plus warnings.
fn decode_body(req: &ResourceRequest, body: &[u8]) -> Result<decode::Decoded, ApiError> {
    if !decode::is_json_content_type(content_type(req)) {
        return Err(ApiError::unsupported_body_type());
    }
    let mut object = decode::parse_json(req.info, body)?;
    decode::check_kind(req.info, &mut object, body)?;
    let validation = FieldValidation::parse(req.query.get("fieldValidation"));
    decode::check_fields(req.info, object, validation)
}

/// Put the URL namespace into the body, rejecting a different one (400, fixture h3).
fn apply_namespace(req: &ResourceRequest, obj: &mut Value) -> Result<(), ApiError> {
    let body_ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    match &req.namespace {
        Some(ns) if req.info.namespaced => {
            if !body_ns.is_empty() && body_ns != *ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            obj["metadata"]["namespace"] = json!(ns);
        }
        _ => {
            if let Some(meta) = obj["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
        }
    }
    Ok(())
}

fn invalid(info: &ResourceInfo, name: &str, errors: &[validation::FieldError]) -> ApiError {
    ApiError::invalid(info.validation_group, info.kind, name, errors)
}

/// POST to a collection.
pub(crate) fn create(
    shared: &Arc<Shared>,
    req: &ResourceRequest,
    body: &[u8],
) -> Result<Response, ApiError> {
    let info = req.info;
    let decoded = decode_body(req, body)?;
    let mut view = decoded.object;
    apply_namespace(req, &mut view)?;
    let mut inner = shared.store.lock();
    let (stored, warnings) = create_locked(&mut inner, req, view, decoded.warnings)?;
    drop(inner);
    let view = render::to_view(info, &stored);
    Ok(respond(StatusCode::CREATED, info, req, &view, &warnings))
}

/// The create path under the store lock (also used by PUT/apply that create).
fn create_locked(
    inner: &mut Inner,
    req: &ResourceRequest,
    mut view: Value,
    warnings: Vec<String>,
) -> Result<(Arc<Value>, Vec<String>), ApiError> {
    let info = req.info;
    let storage = render::storage_info(info);
    let requested_name = view["metadata"]["name"].as_str().unwrap_or("").to_owned();
    namespaces::check_active(inner, req, &requested_name)?;
    let generate = view["metadata"]["generateName"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let mut attempt = 0;
    loop {
        attempt += 1;
        // Only a generated name is tried again: the object is copied for the attempts that
        // may be followed by another, and moved into the last.
        let retried = requested_name.is_empty() && attempt < GENERATE_NAME_ATTEMPTS;
        let mut candidate = if retried {
            view.clone()
        } else {
            std::mem::take(&mut view)
        };
        if requested_name.is_empty() && !generate.is_empty() {
            candidate["metadata"]["name"] = json!(admission::generate_name(&generate));
        }
        let name = candidate["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        // events.k8s.io is validated in its own shape (fixture m7), the rest after defaulting.
        if info.view != resources::View::Native {
            let errors = validation::validate_object(info, &candidate);
            if !errors.is_empty() {
                return Err(invalid(info, &name, &errors));
            }
        }
        let mut obj = render::to_storage(info, candidate);
        admission::admit_create(storage, &mut obj, inner);
        admission::prepare_create(storage, &mut obj);
        if req.managed_fields {
            managed::record(None, &mut obj, &writer(req), &admission::now());
        }
        if info.view == resources::View::Native {
            let errors = validation::validate_object(info, &obj);
            if !errors.is_empty() {
                return Err(invalid(info, &name, &errors));
            }
        }
        let key = req.key(&name);
        if inner.get(storage.bucket, &key).is_some() {
            if requested_name.is_empty() && attempt < GENERATE_NAME_ATTEMPTS {
                continue;
            }
            return Err(ApiError::already_exists(info, &name));
        }
        if req.query.dry_run() {
            return Ok((Arc::new(obj), warnings));
        }
        return Ok((inner.insert(storage.bucket, key, obj), warnings));
    }
}

/// PUT of an object or its `/status`.
pub(crate) fn update(
    shared: &Arc<Shared>,
    req: &ResourceRequest,
    body: &[u8],
) -> Result<Response, ApiError> {
    let info = req.info;
    let name = req.name().to_owned();
    let decoded = decode_body(req, body)?;
    let mut view = decoded.object;
    let body_name = view["metadata"]["name"].as_str().unwrap_or("").to_owned();
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    view["metadata"]["name"] = json!(name);
    apply_namespace(req, &mut view)?;
    let storage = render::storage_info(info);
    let mut inner = shared.store.lock();
    let Some(old) = inner.get(storage.bucket, &req.key(&name)) else {
        if create_on_update(info) && req.subresource.is_none() {
            let (stored, warnings) = create_locked(&mut inner, req, view, decoded.warnings)?;
            drop(inner);
            let view = render::to_view(info, &stored);
            return Ok(respond(StatusCode::CREATED, info, req, &view, &warnings));
        }
        return Err(ApiError::not_found(info, &name));
    };
    check_preconditions(info, &name, &old, &view)?;
    let (result, code) = write_update(&mut inner, req, &old, view)?;
    drop(inner);
    let view = render::to_view(info, &result);
    Ok(respond(code, info, req, &view, &decoded.warnings))
}

/// Resources whose strategy allows PUT to create (`AllowCreateOnUpdate`).
fn create_on_update(info: &ResourceInfo) -> bool {
    matches!(info.plural, "leases" | "events")
}

/// resourceVersion (409 Conflict, g1/i10) and uid preconditions carried in the new object.
fn check_preconditions(
    info: &ResourceInfo,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let new_rv = new["metadata"]["resourceVersion"].as_str().unwrap_or("");
    let old_rv = old["metadata"]["resourceVersion"].as_str().unwrap_or("");
    if !new_rv.is_empty() && new_rv != old_rv {
        return Err(ApiError::conflict_modified(info, name));
    }
    let new_uid = new["metadata"]["uid"].as_str().unwrap_or("");
    let old_uid = old["metadata"]["uid"].as_str().unwrap_or("");
    if !new_uid.is_empty() && new_uid != old_uid {
        return Err(ApiError::conflict(
            info,
            name,
            &format!(
                "Precondition failed: UID in precondition: {new_uid}, UID in object meta: {old_uid}"
            ),
        ));
    }
    Ok(())
}

/// Strategy, validation and the store write shared by PUT and PATCH; `new` is view-shaped.
fn write_update(
    inner: &mut Inner,
    req: &ResourceRequest,
    old: &Arc<Value>,
    new: Value,
) -> Result<(Arc<Value>, StatusCode), ApiError> {
    let info = req.info;
    let storage = render::storage_info(info);
    let name = req.name().to_owned();
    if info.view != resources::View::Native {
        let errors = validation::validate_object(info, &new);
        if !errors.is_empty() {
            return Err(invalid(info, &name, &errors));
        }
    }
    let mut new = render::to_storage(info, new);
    let sub = match req.subresource.as_deref() {
        Some("status") => Subresource::Status,
        _ => Subresource::Main,
    };
    admission::prepare_update(storage, old, &mut new, sub);
    if req.managed_fields {
        managed::record(Some(old), &mut new, &writer(req), &admission::now());
    }
    let mut errors = Vec::new();
    if info.view == resources::View::Native {
        errors.extend(validation::validate_object(info, &new));
    }
    errors.extend(validation::validate_update(storage, old, &new));
    if !errors.is_empty() {
        return Err(invalid(info, &name, &errors));
    }
    let key = req.key(&name);
    // `new` at the old resourceVersion.
    let mut unchanged = new;
    unchanged["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    if unchanged == **old {
        // Upstream skips the write when nothing changed: same object, same resourceVersion.
        return Ok((Arc::clone(old), StatusCode::OK));
    }
    let finalizers_gone = unchanged["metadata"]["finalizers"]
        .as_array()
        .is_none_or(Vec::is_empty);
    if !old["metadata"]["deletionTimestamp"].is_null() && finalizers_gone {
        // The last finalizer went: the object is deleted now. The answer is the updated
        // object at the old resourceVersion (fixture j4); watchers get DELETED with the last
        // stored state (fixture b1).
        if !req.query.dry_run() {
            inner.remove(storage.bucket, key);
            namespaces::finish_if_empty(inner, req.namespace.as_deref());
        }
        return Ok((Arc::new(unchanged), StatusCode::OK));
    }
    if req.query.dry_run() {
        return Ok((Arc::new(unchanged), StatusCode::OK));
    }
    // The store stamps the new resourceVersion.
    Ok((
        inner.replace(storage.bucket, key, unchanged),
        StatusCode::OK,
    ))
}

/// PATCH of an object or its `/status`.
pub(crate) fn patch(
    shared: &Arc<Shared>,
    req: &ResourceRequest,
    body: &[u8],
) -> Result<Response, ApiError> {
    let info = req.info;
    let name = req.name().to_owned();
    let patch_type = content_type(req)
        .and_then(|ct| PatchType::from_content_type(ct.split(';').next().unwrap_or("").trim()))
        .ok_or_else(ApiError::unsupported_patch_type)?;
    if matches!(patch_type, PatchType::Apply)
        && req.query.get("fieldManager").is_none_or(str::is_empty)
    {
        return Err(ApiError::invalid_options(
            "PatchOptions",
            &[validation::FieldError::required(
                "fieldManager",
                "is required for apply patch",
            )],
        ));
    }
    let storage = render::storage_info(info);
    let mut inner = shared.store.lock();
    let Some(old) = inner.get(storage.bucket, &req.key(&name)) else {
        if matches!(patch_type, PatchType::Apply) && req.subresource.is_none() {
            // Server-side apply creates missing objects.
            let mut view = decode::parse_json(info, body)?;
            decode::check_kind(info, &mut view, body)?;
            let validation = FieldValidation::parse(req.query.get("fieldValidation"));
            let decoded = decode::check_fields(info, view, validation)?;
            let mut view = decoded.object;
            view["metadata"]["name"] = json!(name);
            apply_namespace(req, &mut view)?;
            let (stored, warnings) = create_locked(&mut inner, req, view, decoded.warnings)?;
            drop(inner);
            let view = render::to_view(info, &stored);
            return Ok(respond(StatusCode::CREATED, info, req, &view, &warnings));
        }
        return Err(ApiError::not_found(info, &name));
    };
    let old_view = render::to_view(info, &old);
    let patched = patch::apply(patch_type, info.kind, &old_view, body).map_err(|e| match e {
        PatchError::Invalid(msg) => ApiError::bad_request(msg),
        PatchError::Unprocessable => ApiError::generic_invalid(),
    })?;
    let mut patched = patched;
    decode::check_kind(info, &mut patched, body)?;
    let validation = FieldValidation::parse(req.query.get("fieldValidation"));
    let decoded = decode::check_fields(info, patched, validation)?;
    let mut patched = decoded.object;
    patched["metadata"]["name"] = json!(name);
    if let Some(ns) = &req.namespace {
        patched["metadata"]["namespace"] = json!(ns);
    }
    check_preconditions(info, &name, &old, &patched)?;
    let (result, code) = write_update(&mut inner, req, &old, patched)?;
    drop(inner);
    let view = render::to_view(info, &result);
    Ok(respond(code, info, req, &view, &decoded.warnings))
}
