//! Discovery: `/version`, `/api`, `/apis`, `/apis/<group>`, the per-version resource lists
//! (fixtures n1-n7) and aggregated discovery (`APIGroupDiscoveryList`, fixtures n8, n9), all
//! generated from the resource registry so `kubectl get` and kube-rs discovery work.
//!
//! A minimal OpenAPI v3 (`/openapi/v3`) is served too: only the PATCH operation of every
//! resource, tagged with its group/version/kind and the `fieldValidation` parameter. That is
//! what kubectl looks up to decide that the server validates fields itself (so `kubectl
//! create -f` sends `fieldValidation=Strict` instead of downloading schemas); there are no
//! schemas.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::Value;

use super::Config;
use super::resources::{self, ResourceInfo};
use super::status::{ApiError, json_response};

/// Group order of `/apis`: built-in groups in kube-apiserver's order, custom resources last.
const GROUP_ORDER: &[&str] = &[
    "events.k8s.io",
    "storage.k8s.io",
    "coordination.k8s.io",
    "snapshot.storage.k8s.io",
    "gateway.networking.k8s.io",
];

/// JSON object with fields in the given order; values are already-encoded JSON.
fn obj(fields: &[(&str, String)]) -> String {
    let inner: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::String((*k).to_owned())))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn s(v: &str) -> String {
    Value::String(v.to_owned()).to_string()
}

fn strings(items: &[&str]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

fn array(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

fn respond(body: String) -> Response {
    let mut bytes = body.into_bytes();
    bytes.push(b'\n');
    json_response(StatusCode::OK, bytes)
}

fn groups_in_order() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = GROUP_ORDER.to_vec();
    for g in resources::groups() {
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    groups
}

/// GET /version: indented and without a trailing newline (fixture n1).
pub(crate) fn version() -> Response {
    let platform = format!(
        "{}/{}",
        std::env::consts::OS,
        match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }
    );
    let body = format!(
        "{{\n  \"major\": \"1\",\n  \"minor\": \"36\",\n  \"emulationMajor\": \"1\",\n  \"emulationMinor\": \"36\",\n  \"minCompatibilityMajor\": \"1\",\n  \"minCompatibilityMinor\": \"35\",\n  \"gitVersion\": \"v1.36.2\",\n  \"gitCommit\": \"testbed-in-memory\",\n  \"gitTreeState\": \"clean\",\n  \"buildDate\": \"1970-01-01T00:00:00Z\",\n  \"goVersion\": \"none (Rust in-memory API server)\",\n  \"compiler\": \"rustc\",\n  \"platform\": \"{platform}\"\n}}"
    );
    json_response(StatusCode::OK, body.into_bytes())
}

/// Which aggregated discovery version the client accepts, if any.
fn aggregated(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    for range in accept.split(',') {
        let params: Vec<&str> = range.split(';').map(str::trim).collect();
        if !params.contains(&"as=APIGroupDiscoveryList")
            || !params.contains(&"g=apidiscovery.k8s.io")
        {
            continue;
        }
        if params.contains(&"v=v2") {
            return Some("v2");
        }
        if params.contains(&"v=v2beta1") {
            return Some("v2beta1");
        }
    }
    None
}

fn aggregated_response(version: &str, items: &[String]) -> Response {
    let body = obj(&[
        ("kind", s("APIGroupDiscoveryList")),
        ("apiVersion", s(&format!("apidiscovery.k8s.io/{version}"))),
        ("metadata", "{}".to_owned()),
        ("items", array(items)),
    ]);
    let mut response = respond(body);
    let ct = format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList");
    if let Ok(v) = HeaderValue::from_str(&ct) {
        response.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    response
}

/// GET /api.
pub(crate) fn api(headers: &HeaderMap, config: &Config) -> Response {
    if let Some(v) = aggregated(headers) {
        return aggregated_response(v, &[discovery_group("", config)]);
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    respond(obj(&[
        ("kind", s("APIVersions")),
        ("versions", strings(&["v1"])),
        (
            "serverAddressByClientCIDRs",
            array(&[obj(&[
                ("clientCIDR", s("0.0.0.0/0")),
                ("serverAddress", s(host)),
            ])]),
        ),
    ]))
}

/// The versions of `group` that `config` serves a resource of, in registry order (v1 first,
/// as kube-apiserver lists the preferred version first).
fn served_versions(group: &str, config: &Config) -> Vec<&'static str> {
    let mut versions: Vec<&'static str> = Vec::new();
    for r in resources::all() {
        if r.group == group && r.served(config) && !versions.contains(&r.version) {
            versions.push(r.version);
        }
    }
    versions
}

fn group_version_ref(group: &str, version: &str) -> String {
    obj(&[
        ("groupVersion", s(&format!("{group}/{version}"))),
        ("version", s(version)),
    ])
}

fn api_group(group: &str, config: &Config) -> Vec<(&'static str, String)> {
    let versions: Vec<String> = served_versions(group, config)
        .into_iter()
        .map(|v| group_version_ref(group, v))
        .collect();
    let preferred = versions
        .first()
        .cloned()
        .unwrap_or_else(|| group_version_ref(group, resources::group_version_of(group)));
    vec![
        ("name", s(group)),
        ("versions", array(&versions)),
        ("preferredVersion", preferred),
    ]
}

/// GET /apis.
pub(crate) fn apis(headers: &HeaderMap, config: &Config) -> Response {
    let groups = groups_in_order();
    if let Some(v) = aggregated(headers) {
        let items: Vec<String> = groups.iter().map(|g| discovery_group(g, config)).collect();
        return aggregated_response(v, &items);
    }
    let items: Vec<String> = groups.iter().map(|g| obj(&api_group(g, config))).collect();
    respond(obj(&[
        ("kind", s("APIGroupList")),
        ("apiVersion", s("v1")),
        ("groups", array(&items)),
    ]))
}

/// GET /apis/<group>.
pub(crate) fn group(group: &str, config: &Config) -> Response {
    if !resources::groups().contains(&group) {
        return ApiError::unknown_path().into_response();
    }
    let mut fields = vec![("kind", s("APIGroup")), ("apiVersion", s("v1"))];
    fields.extend(api_group(group, config));
    respond(obj(&fields))
}

fn sub_verbs() -> String {
    strings(&["get", "patch", "update"])
}

/// Subresources of a resource as (name, verbs).
fn subresources(r: &ResourceInfo) -> Vec<(&'static str, String)> {
    let mut subs = Vec::new();
    if r.plural == "namespaces" && r.group.is_empty() {
        subs.push(("finalize", strings(&["update"])));
    }
    if r.status_subresource {
        subs.push(("status", sub_verbs()));
    }
    subs
}

fn resource_entry(r: &ResourceInfo) -> String {
    let mut fields = vec![
        ("name", s(r.plural)),
        ("singularName", s(r.singular)),
        ("namespaced", r.namespaced.to_string()),
        ("kind", s(r.kind)),
        ("verbs", strings(r.verbs)),
    ];
    if !r.short_names.is_empty() {
        fields.push(("shortNames", strings(r.short_names)));
    }
    if !r.categories.is_empty() {
        fields.push(("categories", strings(r.categories)));
    }
    if let Some(hash) = r.storage_version_hash {
        fields.push(("storageVersionHash", s(hash)));
    }
    obj(&fields)
}

/// GET /api/v1 and /apis/<group>/<version>: the APIResourceList, without the `disabled`
/// resources.
pub(crate) fn group_version(group: &str, version: &str, config: &Config) -> Response {
    let list: Vec<&ResourceInfo> = resources::all()
        .iter()
        .filter(|r| r.group == group && r.version == version && r.served(config))
        .collect();
    if list.is_empty() {
        return ApiError::unknown_path().into_response();
    }
    let mut entries: Vec<(String, String)> = Vec::new();
    for r in &list {
        entries.push((r.plural.to_owned(), resource_entry(r)));
        for (sub, verbs) in subresources(r) {
            let name = format!("{}/{sub}", r.plural);
            let entry = obj(&[
                ("name", s(&name)),
                ("singularName", s("")),
                ("namespaced", r.namespaced.to_string()),
                ("kind", s(r.kind)),
                ("verbs", verbs),
            ]);
            entries.push((name, entry));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let items: Vec<String> = entries.into_iter().map(|(_, e)| e).collect();
    respond(obj(&[
        ("kind", s("APIResourceList")),
        ("apiVersion", s("v1")),
        ("groupVersion", s(&group_version)),
        ("resources", array(&items)),
    ]))
}

/// One `APIGroupDiscovery` item of aggregated discovery.
fn discovery_group(group: &str, config: &Config) -> String {
    let versions: Vec<String> = served_versions(group, config)
        .into_iter()
        .map(|version| discovery_version(group, version, config))
        .collect();
    let metadata = if group.is_empty() {
        "{}".to_owned()
    } else {
        obj(&[("name", s(group))])
    };
    obj(&[("metadata", metadata), ("versions", array(&versions))])
}

/// One `APIVersionDiscovery` of aggregated discovery: the served resources of `group/version`.
fn discovery_version(group: &str, version: &str, config: &Config) -> String {
    let mut list: Vec<&ResourceInfo> = resources::all()
        .iter()
        .filter(|r| r.group == group && r.version == version && r.served(config))
        .collect();
    list.sort_by_key(|r| r.plural);
    let response_kind =
        |kind: &str| obj(&[("group", s("")), ("version", s("")), ("kind", s(kind))]);
    let resources: Vec<String> = list
        .iter()
        .map(|r| {
            let mut fields = vec![
                ("resource", s(r.plural)),
                ("responseKind", response_kind(r.kind)),
                (
                    "scope",
                    s(if r.namespaced {
                        "Namespaced"
                    } else {
                        "Cluster"
                    }),
                ),
                ("singularResource", s(r.singular)),
                ("verbs", strings(r.verbs)),
            ];
            if !r.short_names.is_empty() {
                fields.push(("shortNames", strings(r.short_names)));
            }
            if !r.categories.is_empty() {
                fields.push(("categories", strings(r.categories)));
            }
            let subs: Vec<String> = subresources(r)
                .into_iter()
                .map(|(sub, verbs)| {
                    obj(&[
                        ("subresource", s(sub)),
                        ("responseKind", response_kind(r.kind)),
                        ("verbs", verbs),
                    ])
                })
                .collect();
            if !subs.is_empty() {
                fields.push(("subresources", array(&subs)));
            }
            obj(&fields)
        })
        .collect();
    obj(&[
        ("version", s(version)),
        ("resources", array(&resources)),
        ("freshness", s("Current")),
    ])
}

fn group_version_path(r: &ResourceInfo) -> String {
    if r.group.is_empty() {
        format!("api/{}", r.version)
    } else {
        format!("apis/{}/{}", r.group, r.version)
    }
}

/// GET /openapi/v3: the index of per-group-version documents.
pub(crate) fn openapi_root() -> Response {
    let mut paths: Vec<String> = resources::all().iter().map(group_version_path).collect();
    paths.dedup();
    let entries: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            (
                p.clone(),
                obj(&[(
                    "serverRelativeURL",
                    s(&format!("/openapi/v3/{p}?hash=testbed")),
                )]),
            )
        })
        .collect();
    let fields: Vec<(&str, String)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    respond(obj(&[("paths", obj(&fields))]))
}

/// GET /openapi/v3/<group version>: PATCH operations with their GVK and `fieldValidation`.
pub(crate) fn openapi_group_version(path: &str) -> Response {
    let list: Vec<&ResourceInfo> = resources::all()
        .iter()
        .filter(|r| group_version_path(r) == path)
        .collect();
    if list.is_empty() {
        return ApiError::unknown_path().into_response();
    }
    let entries: Vec<(String, String)> = list
        .iter()
        .map(|r| {
            let url = if r.namespaced {
                format!("/{path}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
            } else {
                format!("/{path}/{}/{{name}}", r.plural)
            };
            let gvk = obj(&[
                ("group", s(r.group)),
                ("version", s(r.version)),
                ("kind", s(r.kind)),
            ]);
            let param = obj(&[
                ("name", s("fieldValidation")),
                ("in", s("query")),
                ("schema", obj(&[("type", s("string"))])),
            ]);
            let patch = obj(&[
                ("operationId", s(&format!("patch{}", r.kind))),
                ("parameters", array(&[param])),
                ("responses", "{}".to_owned()),
                ("x-kubernetes-action", s("patch")),
                ("x-kubernetes-group-version-kind", gvk),
            ]);
            (url, obj(&[("patch", patch)]))
        })
        .collect();
    let fields: Vec<(&str, String)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    respond(obj(&[
        ("openapi", s("3.0.0")),
        (
            "info",
            obj(&[("title", s("Kubernetes")), ("version", s("v1.36.2"))]),
        ),
        ("paths", obj(&fields)),
    ]))
}
