//! DELETE of one object and of a collection (`deletecollection`), with kube-apiserver's
//! semantics: uid and resourceVersion preconditions (409, fixtures j6, j7), finalizers and
//! deletionTimestamp (j1-j5: an object with finalizers is only marked), the answer an object
//! or a Status as the resource's strategy says, dryRun, and a namespace's termination.

use std::sync::Arc;

use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use super::request::ResourceRequest;
use super::resources::DeleteResponse;
use super::status::{ApiError, json_response, success_status};
use super::store::{self, Inner};
use super::{Shared, admission, namespaces, render};

/// DeleteOptions from the body and query.
struct DeleteOptions {
    uid: Option<String>,
    resource_version: Option<String>,
    dry_run: bool,
}

fn delete_options(req: &ResourceRequest, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let opts: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let pre = &opts["preconditions"];
    let dry_run = req.query.dry_run()
        || opts["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        uid: pre["uid"].as_str().map(str::to_owned),
        resource_version: pre["resourceVersion"].as_str().map(str::to_owned),
        dry_run,
    })
}

/// DELETE of one object.
pub(crate) fn one(
    shared: &Arc<Shared>,
    req: &ResourceRequest,
    body: &[u8],
) -> Result<Response, ApiError> {
    let name = req.name().to_owned();
    if req.subresource.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let opts = delete_options(req, body)?;
    let mut inner = shared.store.lock();
    let (code, body) = delete_locked(&mut inner, req, &name, &opts)?;
    drop(inner);
    Ok(json_response(code, body))
}

fn delete_locked(
    inner: &mut Inner,
    req: &ResourceRequest,
    name: &str,
    opts: &DeleteOptions,
) -> Result<(StatusCode, Vec<u8>), ApiError> {
    let info = req.info;
    let storage = render::storage_info(info);
    let key = req.key(name);
    let old = inner
        .get(storage.bucket, &key)
        .ok_or_else(|| ApiError::not_found(info, name))?;
    let old_uid = old["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    if let Some(uid) = &opts.uid
        && *uid != old_uid
    {
        return Err(ApiError::precondition_failed(
            info,
            name,
            &format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({old_uid}). The object might have been deleted and then recreated"
            ),
        ));
    }
    let old_rv = old["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    if let Some(rv) = &opts.resource_version
        && *rv != old_rv
    {
        return Err(ApiError::precondition_failed(
            info,
            name,
            &format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({old_rv}). The object might have been modified"
            ),
        ));
    }
    let has_finalizers = old["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    let is_namespace = storage.plural == "namespaces" && storage.group.is_empty();
    if has_finalizers || is_namespace {
        if !old["metadata"]["deletionTimestamp"].is_null() {
            // Already terminating: nothing changes (fixture j3).
            return Ok((
                StatusCode::OK,
                render::object(info, req.format, &render::to_view(info, &old)),
            ));
        }
        let mut terminating = (*old).clone();
        terminating["metadata"]["deletionTimestamp"] = json!(admission::now());
        terminating["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        if is_namespace {
            terminating["status"]["phase"] = json!("Terminating");
        }
        if opts.dry_run {
            return Ok((
                StatusCode::OK,
                render::object(info, req.format, &render::to_view(info, &terminating)),
            ));
        }
        let stored = inner.replace(storage.bucket, key, terminating);
        if is_namespace {
            namespaces::terminate(inner, name);
        }
        let view = render::to_view(info, &stored);
        return Ok((StatusCode::OK, render::object(info, req.format, &view)));
    }
    if !opts.dry_run {
        inner.remove(storage.bucket, key);
        namespaces::finish_if_empty(inner, req.namespace.as_deref());
    }
    let body = match info.delete_response {
        DeleteResponse::Object => render::object(info, req.format, &render::to_view(info, &old)),
        DeleteResponse::Status => {
            let mut b = super::status::status_bytes(&success_status(info, name, &old_uid));
            b.push(b'\n');
            b
        }
    };
    Ok((StatusCode::OK, body))
}

/// DELETE on a collection (`deletecollection`): every matching object, finalizers honoured;
/// answers with the list of affected objects.
pub(crate) fn collection(
    shared: &Arc<Shared>,
    req: &ResourceRequest,
    body: &[u8],
) -> Result<Response, ApiError> {
    let info = req.info;
    if info.plural == "namespaces" {
        return Err(ApiError::method_not_allowed());
    }
    let opts = delete_options(req, body)?;
    let (labels, fields) = super::list::selectors(req)?;
    let storage = render::storage_info(info);
    let mut inner = shared.store.lock();
    let prefix = store::prefix(req.namespace.as_deref());
    let mut items = Vec::new();
    for (_, obj) in inner.range(storage.bucket, &prefix) {
        if !(labels.matches(&obj) && fields.matches(&obj)) {
            continue;
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let ns = obj["metadata"]["namespace"].as_str().map(str::to_owned);
        let one = ResourceRequest {
            info,
            namespace: ns,
            name: Some(name.clone()),
            subresource: None,
            query: req.query.clone(),
            headers: req.headers.clone(),
            format: req.format,
            managed_fields: req.managed_fields,
        };
        delete_locked(&mut inner, &one, &name, &opts)?;
        items.push(obj);
    }
    let metadata = json!({"resourceVersion": inner.rv().to_string()});
    drop(inner);
    let views: Vec<_> = items.iter().map(|obj| render::to_view(info, obj)).collect();
    Ok(json_response(
        StatusCode::OK,
        render::list(info, req.format, &metadata, &views),
    ))
}
