//! What a resource request is, once routed: the resource, namespace, name and subresource
//! from the path, the query parameters and the negotiated representation. A leaf that the
//! verb handlers, listing, watching and rendering all read; routing builds it.

use std::collections::HashMap;

use http::HeaderMap;

use super::resources::ResourceInfo;
use super::store;

/// The requested representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The object or list itself.
    Object,
    /// `meta.k8s.io/v1` Table (kubectl get).
    Table,
    /// `PartialObjectMetadata(List)` (metadata-only clients).
    Metadata,
}

/// Query parameters (last value wins).
#[derive(Debug, Default, Clone)]
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    pub(crate) fn parse(raw: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(raw.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// A parameter, `None` when absent.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A boolean parameter (`true`/`1`).
    pub(crate) fn flag(&self, key: &str) -> Option<bool> {
        self.get(key).map(|v| matches!(v, "true" | "1" | "True"))
    }

    /// `dryRun=All`.
    pub(crate) fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }
}

/// A request for a resource, parsed from the path.
#[derive(Debug)]
pub(crate) struct ResourceRequest {
    /// The resource.
    pub(crate) info: &'static ResourceInfo,
    /// Namespace from the path (namespaced resources; `None` lists across namespaces).
    pub(crate) namespace: Option<String>,
    /// Object name from the path.
    pub(crate) name: Option<String>,
    /// Subresource (`status`), if any.
    pub(crate) subresource: Option<String>,
    /// Query parameters.
    pub(crate) query: Query,
    /// Request headers.
    pub(crate) headers: HeaderMap,
    /// Response representation.
    pub(crate) format: Format,
    /// Whether writes record `managedFields` ([`super::Config::managed_fields`]).
    pub(crate) managed_fields: bool,
}

impl ResourceRequest {
    /// The object name from the path (empty for a collection).
    pub(crate) fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The store key of object `name` in the request's namespace.
    pub(crate) fn key(&self, name: &str) -> String {
        store::key(self.namespace.as_deref(), name)
    }
}
