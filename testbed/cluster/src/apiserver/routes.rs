//! Request routing: one axum fallback handler parses Kubernetes API paths itself (core
//! `/api/v1/...`, groups `/apis/<group>/<version>/...`, namespaced or not, with an optional
//! subresource), applies injected faults, negotiates `Accept` (406 as fixture i16) and hands
//! the request to the verb handlers.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode, header};

use super::request::{Format, Query, ResourceRequest};
use super::requests::Permission;
use super::resources::{self, ResourceInfo};
use super::status::ApiError;
use super::{Shared, delete, discovery, handlers, list, requests, watch};

/// Largest request body accepted: the generic API server's `MaxRequestBodyBytes`, 3 MiB (twice
/// etcd's default 1.5 MiB request limit). etcd's own limit on the stored protobuf is not copied:
/// this server stores JSON and does not know the protobuf size.
const MAX_BODY: usize = 3 * 1024 * 1024;

enum Route {
    Version,
    OpenApiRoot,
    OpenApi(String),
    Health,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    Resource {
        info: &'static ResourceInfo,
        namespace: Option<String>,
        name: Option<String>,
        subresource: Option<String>,
    },
    NotFound,
}

fn parse_route(path: &str) -> Route {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        ["version"] => return Route::Version,
        ["openapi", "v3"] => return Route::OpenApiRoot,
        ["openapi", "v3", rest @ ..] => return Route::OpenApi(rest.join("/")),
        ["healthz" | "livez" | "readyz", ..] => return Route::Health,
        ["api"] => return Route::Api,
        ["apis"] => return Route::Apis,
        ["apis", group] => return Route::Group((*group).to_owned()),
        ["api", "v1"] => return Route::GroupVersion(String::new(), "v1".to_owned()),
        ["apis", group, version] => {
            return Route::GroupVersion((*group).to_owned(), (*version).to_owned());
        }
        _ => {}
    }
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Route::NotFound,
    };
    // `namespaces/<ns>/<resource>/...`, except the Namespace object itself and its
    // subresources (`namespaces/<name>`, `namespaces/<name>/status|finalize`).
    let (namespace, rest) = match rest {
        ["namespaces", ns, resource, tail @ ..] if !matches!(*resource, "status" | "finalize") => {
            (Some((*ns).to_owned()), {
                let mut r = vec![*resource];
                r.extend_from_slice(tail);
                r
            })
        }
        other => (None, other.to_vec()),
    };
    let Some(info) = resources::find(group, version, rest.first().copied().unwrap_or("")) else {
        return Route::NotFound;
    };
    if namespace.is_some() && !info.namespaced {
        return Route::NotFound;
    }
    let name = rest.get(1).map(|s| (*s).to_owned());
    let subresource = rest.get(2).map(|s| (*s).to_owned());
    if rest.len() > 3 {
        return Route::NotFound;
    }
    if let Some(sub) = &subresource {
        let ok = (sub == "status" && info.status_subresource)
            || (sub == "finalize" && info.plural == "namespaces");
        if !ok {
            return Route::NotFound;
        }
    }
    Route::Resource {
        info,
        namespace,
        name,
        subresource,
    }
}

/// Pick the representation from `Accept`; `Err` is a 406.
fn negotiate(headers: &HeaderMap) -> Result<Format, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Format::Object);
    };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<&str> = parts.collect();
        if !matches!(
            media.as_str(),
            "application/json" | "*/*" | "application/*" | ""
        ) {
            continue;
        }
        let as_param = params.iter().find_map(|p| p.strip_prefix("as="));
        match as_param {
            None => return Ok(Format::Object),
            Some("Table") => return Ok(Format::Table),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") => {
                return Ok(Format::Metadata);
            }
            Some(_) => {}
        }
    }
    Err(not_acceptable())
}

fn not_acceptable() -> ApiError {
    ApiError {
        code: 406,
        reason: Some("NotAcceptable"),
        message: "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf".to_owned(),
        details: Some(Box::new(serde_json::json!({}))),
        metadata: serde_json::Map::new(),
        headers: Vec::new(),
    }
}

/// 406 bodies are indented and have no trailing newline (fixture i16).
fn not_acceptable_response() -> Response {
    let body = super::status::status_pretty(&not_acceptable().to_status());
    let mut response = super::status::json_response(StatusCode::NOT_ACCEPTABLE, body);
    *response.status_mut() = StatusCode::NOT_ACCEPTABLE;
    response
}

fn verb(method: &Method, has_name: bool, query: &Query) -> &'static str {
    match *method {
        Method::GET if !has_name && query.flag("watch") == Some(true) => "watch",
        Method::GET if has_name => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if has_name => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

/// What a resource request is counted and faulted as: its Kubernetes verb and
/// `plural[/subresource]`.
fn labels(
    method: &Method,
    has_name: bool,
    query: &Query,
    plural: &str,
    subresource: Option<&str>,
) -> (&'static str, String) {
    let resource = match subresource {
        Some(sub) => format!("{plural}/{sub}"),
        None => plural.to_owned(),
    };
    (verb(method, has_name, query), resource)
}

/// Counts a resource request in flight from its arrival, the injected latency included: a
/// slow server holds each request for its latency, and how many a client has waiting at once
/// is the client's doing.
fn in_flight<'a>(
    shared: &'a Shared,
    method: &Method,
    route: &Route,
    query: &Query,
) -> Option<requests::InFlight<'a>> {
    let Route::Resource {
        info,
        name,
        subresource,
        ..
    } = route
    else {
        return None;
    };
    let (verb, resource) = labels(
        method,
        name.is_some(),
        query,
        info.plural,
        subresource.as_deref(),
    );
    Some(shared.requests.begin(verb, &resource))
}

/// Whether reading a body failed on [`MAX_BODY`] rather than on the connection.
fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if cause.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The single axum handler behind [`super::ApiServer::router`].
pub(crate) async fn dispatch(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let query = Query::parse(parts.uri.query());
    let route = parse_route(parts.uri.path());
    let _in_flight = in_flight(&shared, &parts.method, &route, &query);
    let latency = shared.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(err) if is_length_limit(&err) => {
            return ApiError::request_entity_too_large(MAX_BODY).into_response();
        }
        // The client went away or sent a broken body: nothing over the limit.
        Err(err) => {
            return ApiError::bad_request(format!("cannot read the request body: {err}"))
                .into_response();
        }
    };
    match route {
        Route::Version => discovery::version(),
        Route::OpenApiRoot => discovery::openapi_root(),
        Route::OpenApi(gv) => discovery::openapi_group_version(&gv),
        Route::Health => text_ok(),
        Route::Api => discovery::api(&parts.headers, &shared.config),
        Route::Apis => discovery::apis(&parts.headers, &shared.config),
        Route::Group(g) => discovery::group(&g, &shared.config),
        Route::GroupVersion(g, v) => discovery::group_version(&g, &v, &shared.config),
        Route::NotFound => ApiError::unknown_path().into_response(),
        Route::Resource { info, .. } if !info.served(&shared.config) => {
            ApiError::unknown_path().into_response()
        }
        Route::Resource {
            info,
            namespace,
            name,
            subresource,
        } => {
            let (verb, fault_resource) = labels(
                &parts.method,
                name.is_some(),
                &query,
                info.plural,
                subresource.as_deref(),
            );
            let agent = parts
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok());
            shared
                .requests
                .count(requests::client_of(agent), verb, &fault_resource);
            shared.requests.record_client(
                agent,
                Permission {
                    group: info.group.to_owned(),
                    resource: fault_resource.clone(),
                    verb: verb.to_owned(),
                },
            );
            if let Some(code) = shared.faults.check(verb, &fault_resource) {
                return ApiError::injected(code).into_response();
            }
            let Ok(format) = negotiate(&parts.headers) else {
                return not_acceptable_response();
            };
            let req = ResourceRequest {
                info,
                namespace,
                name,
                subresource,
                query,
                headers: parts.headers,
                format,
                managed_fields: shared.config.managed_fields,
            };
            let lose_answer = shared.faults.lose_answer(verb, &fault_resource);
            let response = serve(&shared, &parts.method, req, body)
                .await
                .unwrap_or_else(IntoResponse::into_response);
            // Only a write that was carried out has watch events to race its answer.
            if response.status().is_success()
                && let Some(released) = shared.faults.hold_answer(verb, &fault_resource)
            {
                super::faults::wait_released(released).await;
            }
            if lose_answer {
                cut_off(response)
            } else {
                response
            }
        }
    }
}

/// `response` with its body cut off after the headers (fault `lose_answers`): hyper ends the
/// connection when the body fails, and the client reads an incomplete message.
fn cut_off(response: Response) -> Response {
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = axum::body::Body::from_stream(futures::stream::once(async {
        Err::<axum::body::Bytes, std::io::Error>(std::io::Error::other(
            "the answer was lost (fault injected)",
        ))
    }));
    Response::from_parts(parts, body)
}

async fn serve(
    shared: &Arc<Shared>,
    method: &Method,
    req: ResourceRequest,
    body: Bytes,
) -> Result<Response, ApiError> {
    let has_name = req.name.is_some();
    match (method.clone(), has_name) {
        (Method::GET, true) => handlers::get(shared, &req),
        (Method::GET, false) if req.query.flag("watch") == Some(true) => watch::watch(shared, &req),
        (Method::GET, false) => list::list(shared, &req).await,
        (Method::POST, false) => handlers::create(shared, &req, &body),
        (Method::PUT, true) => handlers::update(shared, &req, &body),
        (Method::PATCH, true) => handlers::patch(shared, &req, &body),
        (Method::DELETE, true) => delete::one(shared, &req, &body),
        (Method::DELETE, false) => delete::collection(shared, &req, &body),
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn text_ok() -> Response {
    let mut response = Response::new(Body::from("ok"));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = (&'static str, Option<String>, Option<String>, Option<String>);

    fn resource(path: &str) -> Option<Parsed> {
        match parse_route(path) {
            Route::Resource {
                info,
                namespace,
                name,
                subresource,
            } => Some((info.plural, namespace, name, subresource)),
            _ => None,
        }
    }

    #[test]
    fn paths_map_to_resources_namespaces_names_and_subresources() {
        assert_eq!(
            resource("/api/v1/namespaces/ns/persistentvolumeclaims/a/status"),
            Some((
                "persistentvolumeclaims",
                Some("ns".into()),
                Some("a".into()),
                Some("status".into())
            ))
        );
        assert_eq!(
            resource("/api/v1/persistentvolumeclaims"),
            Some(("persistentvolumeclaims", None, None, None))
        );
        assert_eq!(
            resource("/api/v1/namespaces/ns"),
            Some(("namespaces", None, Some("ns".into()), None))
        );
        assert_eq!(
            resource("/api/v1/namespaces/ns/status"),
            Some(("namespaces", None, Some("ns".into()), Some("status".into())))
        );
        assert_eq!(
            resource("/apis/storage.k8s.io/v1/volumeattachments/va"),
            Some(("volumeattachments", None, Some("va".into()), None))
        );
        assert!(resource("/apis/storage.k8s.io/v1/nosuchresources").is_none());
        assert!(resource("/apis/storage.k8s.io/v1/storageclasses/sc/status").is_none());
        assert!(resource("/apis/storage.k8s.io/v1/namespaces/ns/volumeattachments").is_none());
    }

    #[test]
    fn accept_headers_select_object_table_metadata_or_406() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, v.parse().unwrap());
            negotiate(&h).map_err(|e| e.code)
        };
        assert_eq!(with("application/json"), Ok(Format::Object));
        assert_eq!(
            with(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            ),
            Ok(Format::Table)
        );
        assert_eq!(
            with("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
            Ok(Format::Metadata)
        );
        assert_eq!(with("*/*"), Ok(Format::Object));
        assert_eq!(with("text/plain"), Err(406));
    }
}
