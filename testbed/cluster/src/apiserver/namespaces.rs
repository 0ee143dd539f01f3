//! The namespace lifecycle: NamespaceLifecycle admission (no new content in a missing or
//! terminating namespace, 404 / 403, fixture f2) and the namespace controller's work, done at
//! once instead of in the background: a deleted namespace's objects are deleted (those with
//! finalizers only get a deletionTimestamp), and the namespace goes when it is empty.

use serde_json::json;

use super::admission;
use super::request::ResourceRequest;
use super::resources;
use super::status::ApiError;
use super::store::{self, Inner};

/// NamespaceLifecycle admission: the namespace must exist and not be terminating.
pub(crate) fn check_active(
    inner: &Inner,
    req: &ResourceRequest,
    name: &str,
) -> Result<(), ApiError> {
    let Some(ns) = req.namespace.as_deref().filter(|_| req.info.namespaced) else {
        return Ok(());
    };
    let namespace = inner
        .get("namespaces", &store::key(None, ns))
        .ok_or_else(|| ApiError::not_found_in("", "namespaces", ns))?;
    if !namespace["metadata"]["deletionTimestamp"].is_null() {
        return Err(ApiError::forbidden(
            req.info,
            name,
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        ));
    }
    Ok(())
}

/// The namespace controller's work, done at once: delete every object in the namespace
/// (objects with finalizers only get their deletionTimestamp), then the namespace when empty.
pub(crate) fn terminate(inner: &mut Inner, namespace: &str) {
    let prefix = store::prefix(Some(namespace));
    for info in resources::all()
        .iter()
        .filter(|r| r.namespaced && r.view == resources::View::Native)
    {
        for (key, obj) in inner.range(info.bucket, &prefix) {
            let finalizers = obj["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty());
            if !finalizers {
                inner.remove(info.bucket, key);
            } else if obj["metadata"]["deletionTimestamp"].is_null() {
                let mut o = (*obj).clone();
                o["metadata"]["deletionTimestamp"] = json!(admission::now());
                o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                inner.replace(info.bucket, key, o);
            }
        }
    }
    finish_if_empty(inner, Some(namespace));
}

/// Remove a terminating namespace once nothing is left in it.
pub(crate) fn finish_if_empty(inner: &mut Inner, namespace: Option<&str>) {
    let Some(ns) = namespace else { return };
    let key = store::key(None, ns);
    let Some(obj) = inner.get("namespaces", &key) else {
        return;
    };
    if obj["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let prefix = store::prefix(Some(ns));
    let empty = resources::all()
        .iter()
        .filter(|r| r.namespaced && r.view == resources::View::Native)
        .all(|r| inner.range(r.bucket, &prefix).is_empty());
    if empty {
        inner.remove("namespaces", key);
    }
}
