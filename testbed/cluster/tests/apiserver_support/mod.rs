//! Helpers shared by the `apiserver_*` integration tests: raw HTTP exchanges against the
//! in-process router and scrubbing of server-generated fields before comparing bodies.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    reason = "test helpers shared by several test crates; a failure should panic"
)]

use axum::body::Body;
use http::{HeaderMap, Method, Request};
use serde_json::{Value, json};
use testbed_cluster::apiserver::ApiServer;
use tower::ServiceExt;

/// One response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Send one request to the server's router.
pub async fn send(
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Reply {
    send_with(
        server,
        method,
        path,
        &[("content-type", content_type)],
        body,
    )
    .await
}

/// Send one request with extra headers (`None` values are skipped).
pub async fn send_with(
    server: &ApiServer,
    method: &str,
    path: &str,
    headers: &[(&str, Option<&str>)],
    body: &str,
) -> Reply {
    let mut builder = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(path);
    for (name, value) in headers {
        if let Some(v) = value {
            builder = builder.header(*name, *v);
        }
    }
    let request = builder.body(Body::from(body.to_owned())).unwrap();
    let response = server.router().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Reply {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

pub async fn get(server: &ApiServer, path: &str) -> Reply {
    send(server, "GET", path, None, "").await
}

pub async fn post(server: &ApiServer, path: &str, body: &Value) -> Reply {
    send(
        server,
        "POST",
        path,
        Some("application/json"),
        &body.to_string(),
    )
    .await
}

pub async fn put(server: &ApiServer, path: &str, body: &Value) -> Reply {
    send(
        server,
        "PUT",
        path,
        Some("application/json"),
        &body.to_string(),
    )
    .await
}

pub async fn patch(server: &ApiServer, path: &str, content_type: &str, body: &str) -> Reply {
    send(server, "PATCH", path, Some(content_type), body).await
}

pub async fn delete(server: &ApiServer, path: &str, body: &str) -> Reply {
    let ct = (!body.is_empty()).then_some("application/json");
    send(server, "DELETE", path, ct, body).await
}

/// Remove what differs between runs (uid, timestamps, resourceVersion, managedFields,
/// generated name suffixes are left to the caller).
pub fn scrub(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        if let Some(map) = v.as_object_mut() {
            for key in [
                "uid",
                "creationTimestamp",
                "resourceVersion",
                "deletionTimestamp",
                "managedFields",
                "lastPhaseTransitionTime",
            ] {
                map.remove(key);
            }
            for child in map.values_mut() {
                walk(child);
            }
        } else if let Some(items) = v.as_array_mut() {
            items.iter_mut().for_each(walk);
        }
    }
    walk(&mut v);
    v
}

pub const PVCS: &str = "/api/v1/namespaces/fixtures/persistentvolumeclaims";

pub fn pvc(name: &str) -> Value {
    json!({"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":name,"namespace":"fixtures","labels":{"fixtures-list":"true"}},
        "spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"fixtures-none","resources":{"requests":{"storage":"1Gi"}}}})
}

/// A server with namespace `fixtures` and PVCs fx-list-a, -b, -c (the fixtures' list set).
pub async fn fixture_server() -> ApiServer {
    let server = ApiServer::new();
    let ns = post(
        &server,
        "/api/v1/namespaces",
        &json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"fixtures"}}),
    )
    .await;
    assert_eq!(ns.status, 201, "{}", ns.body);
    for name in ["fx-list-a", "fx-list-b", "fx-list-c"] {
        let r = post(&server, PVCS, &pvc(name)).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    server
}

/// An open watch: one data frame per event.
pub struct Watch {
    body: axum::body::Body,
}

impl Watch {
    /// Open a watch (the response status must be 200).
    pub async fn open(server: &ApiServer, path: &str) -> Watch {
        let request = Request::builder().uri(path).body(Body::empty()).unwrap();
        let response = server.router().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/json");
        Watch {
            body: response.into_body(),
        }
    }

    /// The next frame as text, `None` when the stream ended.
    pub async fn next_frame(&mut self) -> Option<String> {
        use http_body_util::BodyExt;
        loop {
            let frame = self.body.frame().await?.unwrap();
            if let Ok(data) = frame.into_data() {
                return Some(String::from_utf8(data.to_vec()).unwrap());
            }
        }
    }

    /// The next event as JSON, asserting it is exactly one newline-terminated line.
    pub async fn next_event(&mut self) -> Option<Value> {
        let frame = self.next_frame().await?;
        assert!(
            frame.ends_with('\n') && frame.matches('\n').count() == 1,
            "one event per frame: {frame:?}"
        );
        Some(serde_json::from_str(&frame).unwrap())
    }

    /// The next event's (type, object name, resourceVersion).
    pub async fn next_summary(&mut self) -> Option<(String, String, String)> {
        let e = self.next_event().await?;
        Some((
            e["type"].as_str().unwrap().to_owned(),
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        ))
    }
}
