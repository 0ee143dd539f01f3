//! The golden kube-apiserver v1.36.2 exchanges (shared/fixtures/http) the in-memory API server
//! reproduces, request by request: status codes, Status bodies (compared exactly where they
//! carry no generated values), object shapes with uid/timestamps/resourceVersions scrubbed,
//! and the framing facts (trailing newlines, headers).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should panic with its error"
)]

use crate::apiserver_support::*;
use base64::Engine;
use serde_json::json;
use testbed_cluster::apiserver::ApiServer;

#[tokio::test]
async fn a_limited_list_pages_with_upstream_continue_tokens_and_remaining_counts() {
    let s = fixture_server().await;
    // a1: first page.
    let p1 = get(&s, &format!("{PVCS}?limit=1")).await;
    assert_eq!(p1.status, 200);
    assert!(p1.body.ends_with("}\n"));
    assert!(p1.body.starts_with("{\"kind\":\"PersistentVolumeClaimList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"), "{}", p1.body);
    let j1 = p1.json();
    let rv = j1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(j1["metadata"]["remainingItemCount"], 2);
    assert_eq!(j1["items"][0]["metadata"]["name"], "fx-list-a");
    assert!(
        j1["items"][0].get("kind").is_none(),
        "list items carry no kind (a1)"
    );
    let token = j1["metadata"]["continue"].as_str().unwrap().to_owned();
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&token)
        .unwrap();
    assert_eq!(
        String::from_utf8(decoded).unwrap(),
        format!("{{\"v\":\"meta.k8s.io/v1\",\"rv\":{rv},\"start\":\"/fx-list-a\\u0000\"}}")
    );
    // A write between pages does not show up in later pages: they are served at the list RV.
    let r = post(&s, PVCS, &pvc("fx-list-b2")).await;
    assert_eq!(r.status, 201);
    // a2: second page.
    let j2 = get(&s, &format!("{PVCS}?limit=1&continue={token}"))
        .await
        .json();
    assert_eq!(j2["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(j2["metadata"]["remainingItemCount"], 1);
    assert_eq!(j2["items"][0]["metadata"]["name"], "fx-list-b");
    // a3: last page has neither continue nor remainingItemCount.
    let token2 = j2["metadata"]["continue"].as_str().unwrap();
    let j3 = get(&s, &format!("{PVCS}?limit=1&continue={token2}"))
        .await
        .json();
    assert_eq!(j3["items"][0]["metadata"]["name"], "fx-list-c");
    assert_eq!(j3["metadata"], json!({"resourceVersion": rv}));
}

#[tokio::test]
async fn a_full_list_has_no_continue_and_a_cluster_list_works_for_pvs() {
    let s = fixture_server().await;
    let all = get(&s, PVCS).await.json();
    assert_eq!(all["items"].as_array().unwrap().len(), 3);
    assert!(all["metadata"].get("continue").is_none());
    assert_eq!(
        scrub(all["items"][0].clone()),
        json!({"metadata":{"name":"fx-list-a","namespace":"fixtures","labels":{"fixtures-list":"true"},"finalizers":["kubernetes.io/pvc-protection"]},
               "spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"fixtures-none","volumeMode":"Filesystem"},
               "status":{"phase":"Pending"}})
    );
    let pvs = get(&s, "/api/v1/persistentvolumes").await.json();
    assert_eq!(pvs["kind"], "PersistentVolumeList");
    // All-namespaces list of a namespaced resource.
    let everywhere = get(&s, "/api/v1/persistentvolumeclaims").await.json();
    assert_eq!(everywhere["items"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn resource_version_zero_ignores_limit_and_selectors_filter() {
    let s = fixture_server().await;
    // a6
    let j = get(
        &s,
        &format!("{PVCS}?labelSelector=fixtures-list%3Dtrue&resourceVersion=0&limit=1"),
    )
    .await
    .json();
    assert_eq!(j["items"].as_array().unwrap().len(), 3);
    assert!(j["metadata"].get("continue").is_none());
    // a7
    let j = get(
        &s,
        &format!("{PVCS}?fieldSelector=metadata.name%3Dfx-list-b"),
    )
    .await
    .json();
    let names: Vec<_> = j["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("fx-list-b")]);
    let j = get(
        &s,
        &format!("{PVCS}?labelSelector=fixtures-list%20notin%20(true)"),
    )
    .await
    .json();
    assert!(j["items"].as_array().unwrap().is_empty());
    let bad = get(&s, &format!("{PVCS}?fieldSelector=spec.volumeName%3Dx")).await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json()["message"],
        "field label not supported: spec.volumeName"
    );
}

#[tokio::test]
async fn compacted_resource_versions_answer_410_like_upstream() {
    let s = fixture_server().await;
    let a1 = get(&s, &format!("{PVCS}?limit=1")).await.json();
    let token = a1["metadata"]["continue"].as_str().unwrap().to_owned();
    // Compaction removes every revision older than the current one.
    assert_eq!(
        post(
            &s,
            "/api/v1/namespaces/fixtures/configmaps",
            &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bump"}})
        )
        .await
        .status,
        201
    );
    s.faults().compact();
    // c2
    let r = get(
        &s,
        &format!("{PVCS}?resourceVersion=1&resourceVersionMatch=Exact"),
    )
    .await;
    assert_eq!(r.status, 410);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"The resourceVersion for the provided list is too old.\",\"reason\":\"Expired\",\"code\":410}\n"
    );
    // c3: the answer carries a fresh inconsistent token that continues after the same key.
    let r = get(&s, &format!("{PVCS}?limit=1&continue={token}")).await;
    assert_eq!(r.status, 410);
    let j = r.json();
    assert_eq!(j["reason"], "Expired");
    assert!(j["message"].as_str().unwrap().starts_with(
        "The provided continue parameter is too old to display a consistent list result."
    ));
    let fresh = j["metadata"]["continue"].as_str().unwrap();
    assert_eq!(
        fresh,
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZngtbGlzdC1hXHUwMDAwIn0"
    );
    let rest = get(&s, &format!("{PVCS}?limit=5&continue={fresh}"))
        .await
        .json();
    let names: Vec<_> = rest["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, vec!["fx-list-b", "fx-list-c"]);
    // Before compaction an exact list at an old RV is the state at that RV.
    let s2 = fixture_server().await;
    let rv = s2.resource_version();
    post(&s2, PVCS, &pvc("later")).await;
    let old = get(
        &s2,
        &format!("{PVCS}?resourceVersion={rv}&resourceVersionMatch=Exact"),
    )
    .await
    .json();
    assert_eq!(old["items"].as_array().unwrap().len(), 3);
    assert_eq!(old["metadata"]["resourceVersion"], rv.to_string());
}

#[tokio::test(start_paused = true)]
async fn a_list_at_a_future_resource_version_times_out_with_504() {
    let s = fixture_server().await;
    // c5
    let r = get(
        &s,
        &format!("{PVCS}?resourceVersion=100538&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(r.status, 504);
    assert_eq!(r.header("retry-after"), Some("1"));
    let current = s.resource_version();
    assert_eq!(
        r.body,
        format!(
            "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":\"Timeout: Too large resource version: 100538, current: {current}\",\"reason\":\"Timeout\",\"details\":{{\"causes\":[{{\"reason\":\"ResourceVersionTooLarge\",\"message\":\"Too large resource version\"}}],\"retryAfterSeconds\":1}},\"code\":504}}\n"
        )
    );
}

#[tokio::test]
async fn invalid_list_and_watch_options_are_422_list_options_errors() {
    let s = fixture_server().await;
    // d3
    let r = get(
        &s,
        &format!("{PVCS}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&timeoutSeconds=2"),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"ListOptions.meta.k8s.io \\\"\\\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan\",\"reason\":\"Invalid\",\"details\":{\"group\":\"meta.k8s.io\",\"kind\":\"ListOptions\",\"causes\":[{\"reason\":\"FieldValueForbidden\",\"message\":\"Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan\",\"field\":\"resourceVersionMatch\"}]},\"code\":422}\n"
    );
    // d5
    let r = get(
        &s,
        &format!("{PVCS}?sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"ListOptions.meta.k8s.io \\\"\\\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]\",\"reason\":\"Invalid\",\"details\":{\"group\":\"meta.k8s.io\",\"kind\":\"ListOptions\",\"causes\":[{\"reason\":\"FieldValueForbidden\",\"message\":\"Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided\",\"field\":\"resourceVersionMatch\"},{\"reason\":\"FieldValueForbidden\",\"message\":\"Forbidden: sendInitialEvents is forbidden for list\",\"field\":\"sendInitialEvents\"}]},\"code\":422}\n"
    );
}

#[tokio::test]
async fn missing_objects_and_resources_are_404_with_upstream_bodies() {
    let s = fixture_server().await;
    let cases = [
        // e1
        (
            format!("{PVCS}/fx-does-not-exist"),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"persistentvolumeclaims \\\"fx-does-not-exist\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"fx-does-not-exist\",\"kind\":\"persistentvolumeclaims\"},\"code\":404}\n",
        ),
        // e2
        (
            "/api/v1/persistentvolumes/fx-does-not-exist".to_owned(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"persistentvolumes \\\"fx-does-not-exist\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"fx-does-not-exist\",\"kind\":\"persistentvolumes\"},\"code\":404}\n",
        ),
        // e3
        (
            "/apis/storage.k8s.io/v1/volumeattachments/fx-does-not-exist".to_owned(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"volumeattachments.storage.k8s.io \\\"fx-does-not-exist\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"fx-does-not-exist\",\"group\":\"storage.k8s.io\",\"kind\":\"volumeattachments\"},\"code\":404}\n",
        ),
        // e4
        (
            "/apis/storage.k8s.io/v1/nosuchresources".to_owned(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the server could not find the requested resource\",\"reason\":\"NotFound\",\"details\":{},\"code\":404}\n",
        ),
        // e5
        (
            "/api/v1/namespaces/fx-no-such-ns/persistentvolumeclaims/x".to_owned(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"persistentvolumeclaims \\\"x\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"x\",\"kind\":\"persistentvolumeclaims\"},\"code\":404}\n",
        ),
    ];
    for (path, body) in cases {
        let r = get(&s, &path).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.body, body, "{path}");
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
}

#[tokio::test]
async fn creating_twice_or_into_a_missing_namespace_fails_like_upstream() {
    let s = fixture_server().await;
    // f1
    let r = post(&s, PVCS, &pvc("fx-list-a")).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"persistentvolumeclaims \\\"fx-list-a\\\" already exists\",\"reason\":\"AlreadyExists\",\"details\":{\"name\":\"fx-list-a\",\"kind\":\"persistentvolumeclaims\"},\"code\":409}\n"
    );
    // f2
    let mut body = pvc("x");
    body["metadata"]["namespace"] = json!("fx-no-such-ns");
    let r = post(
        &s,
        "/api/v1/namespaces/fx-no-such-ns/persistentvolumeclaims",
        &body,
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"namespaces \\\"fx-no-such-ns\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"fx-no-such-ns\",\"kind\":\"namespaces\"},\"code\":404}\n"
    );
}

#[tokio::test]
async fn updates_use_optimistic_concurrency_and_check_the_name() {
    let s = fixture_server().await;
    let current = get(&s, &format!("{PVCS}/fx-list-c")).await.json();
    let mut stale = current.clone();
    let r = patch(
        &s,
        &format!("{PVCS}/fx-list-c"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"step":"x"}}}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    // g1
    stale["metadata"]["labels"]["step"] = json!("put-with-stale-rv");
    let r = put(&s, &format!("{PVCS}/fx-list-c"), &stale).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Operation cannot be fulfilled on persistentvolumeclaims \\\"fx-list-c\\\": the object has been modified; please apply your changes to the latest version and try again\",\"reason\":\"Conflict\",\"details\":{\"name\":\"fx-list-c\",\"kind\":\"persistentvolumeclaims\"},\"code\":409}\n"
    );
    // g2
    let mut unconditional = stale.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    unconditional["metadata"]["labels"]["step"] = json!("put-without-rv");
    let r = put(&s, &format!("{PVCS}/fx-list-c"), &unconditional).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["metadata"]["labels"]["step"], "put-without-rv");
    assert_ne!(
        r.json()["metadata"]["resourceVersion"],
        current["metadata"]["resourceVersion"]
    );
    // g3
    let r = put(&s, &format!("{PVCS}/fx-put-create"), &pvc("fx-put-create")).await;
    assert_eq!(r.status, 404);
    // g4
    let r = put(&s, &format!("{PVCS}/fx-list-a"), &unconditional).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the name of the object (fx-list-c) does not match the name on the URL (fx-list-a)\",\"reason\":\"BadRequest\",\"code\":400}\n"
    );
}

#[tokio::test]
async fn invalid_bodies_are_400_or_422_as_upstream_decides() {
    let s = fixture_server().await;
    // h1
    let r = post(&s, PVCS, &pvc("FX_Invalid")).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"PersistentVolumeClaim \\\"FX_Invalid\\\" is invalid: metadata.name: Invalid value: \\\"FX_Invalid\\\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')\",\"reason\":\"Invalid\",\"details\":{\"name\":\"FX_Invalid\",\"kind\":\"PersistentVolumeClaim\",\"causes\":[{\"reason\":\"FieldValueInvalid\",\"message\":\"Invalid value: \\\"FX_Invalid\\\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')\",\"field\":\"metadata.name\"}]},\"code\":422}\n"
    );
    // h2
    let r = send(&s, "POST", PVCS, Some("application/json"), r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"fx-invalid-spec","namespace":"fixtures"},"spec":{"storageClassName":"fixtures-none","resources":{"requests":{"storage":"-1Gi"}}}}"#).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"PersistentVolumeClaim \\\"fx-invalid-spec\\\" is invalid: [spec.accessModes: Required value: at least 1 access mode is required, spec.resources[storage]: Invalid value: \\\"-1Gi\\\": must be greater than zero]\",\"reason\":\"Invalid\",\"details\":{\"name\":\"fx-invalid-spec\",\"kind\":\"PersistentVolumeClaim\",\"causes\":[{\"reason\":\"FieldValueRequired\",\"message\":\"Required value: at least 1 access mode is required\",\"field\":\"spec.accessModes\"},{\"reason\":\"FieldValueInvalid\",\"message\":\"Invalid value: \\\"-1Gi\\\": must be greater than zero\",\"field\":\"spec.resources[storage]\"}]},\"code\":422}\n"
    );
    // h3
    let r = send(&s, "POST", PVCS, Some("application/json"), r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"fx-ns-mismatch","namespace":"default"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}"#).await;
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the namespace of the provided object does not match the namespace sent on the request\",\"reason\":\"BadRequest\",\"code\":400}\n"
    );
    // h4
    let r = send(
        &s,
        "POST",
        PVCS,
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"#,
    )
    .await;
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the object provided is unrecognized (must be of type PersistentVolumeClaim): couldn't get version/kind; json parse error: unexpected end of JSON input ({\\\"apiVersion\\\":\\\"v1\\\",\\\"kind\\\":\\\"Per ...)\",\"reason\":\"BadRequest\",\"code\":400}\n"
    );
    // h5
    let r = send(&s, "POST", PVCS, Some("application/json"), r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fx-wrong-kind","namespace":"fixtures"}}"#).await;
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"ConfigMap in version \\\"v1\\\" cannot be handled as a PersistentVolumeClaim: converting (v1.ConfigMap) to (core.PersistentVolumeClaim): unknown conversion\",\"reason\":\"BadRequest\",\"code\":400}\n"
    );
    // h6
    let r = send(&s, "POST", PVCS, Some("application/json"), r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"fx-bad-quantity","namespace":"fixtures"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1GB"}}}}"#).await;
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"PersistentVolumeClaim in version \\\"v1\\\" cannot be handled as a PersistentVolumeClaim: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'\",\"reason\":\"BadRequest\",\"code\":400}\n"
    );
}

#[tokio::test]
async fn a_body_above_three_mebibytes_is_413_request_entity_too_large() {
    // kube-apiserver reads at most MaxRequestBodyBytes (3 MiB) of a write and answers
    // apimachinery's NewRequestEntityTooLargeError("limit is 3145728"); a body of exactly
    // the limit is read.
    let s = fixture_server().await;
    let with_annotation = |name: &str, bytes: usize| {
        let mut claim = pvc(name);
        claim["metadata"]["annotations"] = json!({"example.com/blob": ""});
        let base = serde_json::to_vec(&claim).unwrap().len();
        claim["metadata"]["annotations"]["example.com/blob"] = json!("x".repeat(bytes - base));
        let body = serde_json::to_string(&claim).unwrap();
        assert_eq!(body.len(), bytes);
        body
    };
    let limit = 3 * 1024 * 1024;
    let r = send(
        &s,
        "POST",
        PVCS,
        Some("application/json"),
        &with_annotation("fx-too-large", limit + 1),
    )
    .await;
    assert_eq!(r.status, 413);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Request entity too large: limit is 3145728\",\"reason\":\"RequestEntityTooLarge\",\"code\":413}\n"
    );
    // Read in full, the same body fails on what kube-apiserver checks next (here the
    // annotations' 256 KiB total), not on its size.
    let r = send(
        &s,
        "POST",
        PVCS,
        Some("application/json"),
        &with_annotation("fx-at-limit", limit),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        "PersistentVolumeClaim \"fx-at-limit\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes"
    );
}

#[tokio::test]
async fn annotations_may_hold_256_kib_of_keys_and_values_together() {
    // apimachinery's ValidateAnnotationsSize: the sum of the keys' and values' bytes.
    let s = fixture_server().await;
    let key = "example.com/notes";
    let with_value_bytes = |name: &str, bytes: usize| {
        let mut claim = pvc(name);
        claim["metadata"]["annotations"] = json!({key: "x".repeat(bytes)});
        claim
    };
    let r = post(
        &s,
        PVCS,
        &with_value_bytes("fx-annotations-full", 256 * 1024 - key.len()),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = post(
        &s,
        PVCS,
        &with_value_bytes("fx-annotations-over", 256 * 1024 - key.len() + 1),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        r.json()["details"]["causes"],
        json!([{"reason": "FieldValueTooLong", "message": "Too long: may not be more than 262144 bytes", "field": "metadata.annotations"}])
    );
}

#[tokio::test]
async fn unknown_fields_warn_by_default_and_fail_with_strict_validation() {
    let s = fixture_server().await;
    let body = r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"fx-unknown-field","namespace":"fixtures"},"spec":{"accessModes":["ReadWriteOnce"],"bogusField":1,"resources":{"requests":{"storage":"1Gi"}}}}"#;
    for query in ["?dryRun=All&fieldValidation=Warn", "?dryRun=All"] {
        // h7, h9
        let r = send(
            &s,
            "POST",
            &format!("{PVCS}{query}"),
            Some("application/json"),
            body,
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(
            r.header("warning"),
            Some("299 - \"unknown field \\\"spec.bogusField\\\"\"")
        );
        let j = r.json();
        assert!(
            j["metadata"].get("resourceVersion").is_none(),
            "dry run has no resourceVersion"
        );
        assert!(j["metadata"]["uid"].is_string());
        assert_eq!(
            scrub(j)["spec"],
            json!({"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"volumeMode":"Filesystem"})
        );
    }
    assert_eq!(
        get(&s, &format!("{PVCS}/fx-unknown-field")).await.status,
        404,
        "dry run stored nothing"
    );
    // h8
    let r = send(
        &s,
        "POST",
        &format!("{PVCS}?dryRun=All&fieldValidation=Strict"),
        Some("application/json"),
        body,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "PersistentVolumeClaim in version \"v1\" cannot be handled as a PersistentVolumeClaim: strict decoding error: unknown field \"spec.bogusField\""
    );
}

#[tokio::test]
async fn patches_of_every_type_behave_like_upstream() {
    let s = fixture_server().await;
    let a = format!("{PVCS}/fx-list-a");
    // i1
    let r = patch(&s, &a, "application/merge-patch+json", r#"{"metadata":{"labels":{"merge":"yes"},"annotations":{"fixtures.example.com/note":"merge-patch"}}}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["metadata"]["annotations"],
        json!({"fixtures.example.com/note": "merge-patch"})
    );
    // i2
    let r = patch(&s, &a, "application/json-patch+json", r#"[{"op":"test","path":"/metadata/labels/merge","value":"yes"},{"op":"add","path":"/metadata/labels/jsonpatch","value":"yes"},{"op":"remove","path":"/metadata/annotations/fixtures.example.com~1note"}]"#).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!(
        j["metadata"]["labels"],
        json!({"fixtures-list":"true","jsonpatch":"yes","merge":"yes"})
    );
    assert!(
        j["metadata"]
            .get("annotations")
            .is_none_or(|a| a.as_object().is_none_or(serde_json::Map::is_empty))
    );
    let generic = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the server rejected our request due to an error in our request\",\"reason\":\"Invalid\",\"details\":{},\"code\":422}\n";
    // i3
    let r = patch(&s, &a, "application/json-patch+json", r#"[{"op":"test","path":"/metadata/labels/merge","value":"no"},{"op":"add","path":"/metadata/labels/never","value":"applied"}]"#).await;
    assert_eq!((r.status, r.body.as_str()), (422, generic));
    // i4
    let r = patch(
        &s,
        &a,
        "application/json-patch+json",
        r#"[{"op":"remove","path":"/metadata/labels/does-not-exist"}]"#,
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (422, generic));
    // i10
    let r = patch(
        &s,
        &a,
        "application/merge-patch+json",
        r#"{"metadata":{"resourceVersion":"1","labels":{"x":"y"}}}"#,
    )
    .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["reason"], "Conflict");
    // i11
    let r = patch(
        &s,
        &format!("{PVCS}/fx-does-not-exist"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"x":"y"}}}"#,
    )
    .await;
    assert_eq!(r.status, 404);
    // i12
    let ssa = r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"fx-list-a","namespace":"fixtures","labels":{"ssa":"yes"}}}"#;
    let r = patch(&s, &a, "application/apply-patch+yaml", ssa).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"PatchOptions.meta.k8s.io \\\"\\\" is invalid: fieldManager: Required value: is required for apply patch\",\"reason\":\"Invalid\",\"details\":{\"group\":\"meta.k8s.io\",\"kind\":\"PatchOptions\",\"causes\":[{\"reason\":\"FieldValueRequired\",\"message\":\"Required value: is required for apply patch\",\"field\":\"fieldManager\"}]},\"code\":422}\n"
    );
    // i13
    let r = patch(
        &s,
        &format!("{a}?fieldManager=fixture-ssa"),
        "application/apply-patch+yaml",
        ssa,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["metadata"]["labels"]["ssa"], "yes");
    // i14
    let r = patch(&s, &format!("{a}/status"), "application/merge-patch+json", r#"{"status":{"conditions":[{"type":"FixturesCondition","status":"True","message":"set through PATCH /status"}]}}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["status"],
        json!({"phase":"Pending","conditions":[{"type":"FixturesCondition","status":"True","lastProbeTime":null,"lastTransitionTime":null,"message":"set through PATCH /status"}]})
    );
    assert!(
        r.body.contains(
            "\"conditions\":[{\"lastProbeTime\":null,\"lastTransitionTime\":null,\"message\""
        ),
        "{}",
        r.body
    );
    // i8, i9
    let unsupported = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"415: Unsupported Media Type\",\"reason\":\"UnsupportedMediaType\",\"details\":{},\"code\":415}\n";
    for ct in ["application/json", "text/plain"] {
        let r = patch(&s, &a, ct, r#"{"metadata":{"labels":{"x":"y"}}}"#).await;
        assert_eq!((r.status, r.body.as_str()), (415, unsupported), "{ct}");
    }
}

#[tokio::test]
async fn finalizer_patches_merge_with_smp_and_replace_with_merge_patch() {
    let s = ApiServer::new();
    let pv = json!({"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"fx-static-pv","finalizers":["external-attacher/hostpath-csi-k8s-io"]},
        "spec":{"capacity":{"storage":"1Gi"},"csi":{"driver":"hostpath.csi.k8s.io","volumeHandle":"fx-no-such-volume"},"accessModes":["ReadWriteOnce"],"storageClassName":"fixtures-static"}});
    let r = post(&s, "/api/v1/persistentvolumes", &pv).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let created = r.json();
    assert_eq!(
        created["metadata"]["finalizers"],
        json!([
            "external-attacher/hostpath-csi-k8s-io",
            "kubernetes.io/pv-protection"
        ])
    );
    assert_eq!(created["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(created["status"]["phase"], "Pending");
    let path = "/api/v1/persistentvolumes/fx-static-pv";
    // i5: SMP merges and puts the new entry first.
    let r = patch(
        &s,
        path,
        "application/strategic-merge-patch+json",
        r#"{"metadata":{"finalizers":["fixtures.example.com/hold"]}}"#,
    )
    .await;
    assert_eq!(
        r.json()["metadata"]["finalizers"],
        json!([
            "fixtures.example.com/hold",
            "external-attacher/hostpath-csi-k8s-io",
            "kubernetes.io/pv-protection"
        ])
    );
    let rv = r.json()["metadata"]["resourceVersion"].clone();
    // i6: merge patch replaces (dry run: nothing stored, same resourceVersion).
    let r = patch(
        &s,
        &format!("{path}?dryRun=All"),
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":["fixtures.example.com/other"]}}"#,
    )
    .await;
    assert_eq!(
        r.json()["metadata"]["finalizers"],
        json!(["fixtures.example.com/other"])
    );
    assert_eq!(r.json()["metadata"]["resourceVersion"], rv);
    // i7
    let r = patch(
        &s,
        &format!("{path}?dryRun=All"),
        "application/strategic-merge-patch+json",
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["fixtures.example.com/hold"]}}"#,
    )
    .await;
    assert_eq!(
        r.json()["metadata"]["finalizers"],
        json!([
            "external-attacher/hostpath-csi-k8s-io",
            "kubernetes.io/pv-protection"
        ])
    );
    assert_eq!(
        get(&s, path).await.json()["metadata"]["resourceVersion"],
        rv
    );
}

#[tokio::test]
async fn bodies_in_unknown_formats_or_unacceptable_accepts_are_rejected() {
    let s = fixture_server().await;
    // i15
    let r = send(&s, "POST", PVCS, Some("text/plain"), "name: x").await;
    assert_eq!(r.status, 415);
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf\",\"reason\":\"UnsupportedMediaType\",\"code\":415}\n"
    );
    // i16: indented, no trailing newline.
    let r = send_with(
        &s,
        "GET",
        &format!("{PVCS}/fx-list-a"),
        &[("accept", Some("text/plain"))],
        "",
    )
    .await;
    assert_eq!(r.status, 406);
    assert_eq!(
        r.body,
        "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \"status\": \"Failure\",\n  \"message\": \"406: Not Acceptable\\n\\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf\",\n  \"reason\": \"NotAcceptable\",\n  \"details\": {},\n  \"code\": 406\n}"
    );
}

#[tokio::test]
async fn deleting_honours_finalizers_preconditions_and_per_resource_answers() {
    let s = fixture_server().await;
    let mut fin = pvc("fx-fin");
    fin["metadata"]["finalizers"] = json!(["fixtures.example.com/hold"]);
    assert_eq!(post(&s, PVCS, &fin).await.status, 201);
    let path = format!("{PVCS}/fx-fin");
    // j1
    let r = delete(&s, &path, "").await;
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["kind"], "PersistentVolumeClaim");
    assert!(j["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(j["metadata"]["deletionGracePeriodSeconds"], 0);
    assert!(
        r.body.contains("\"deletionTimestamp\":")
            && r.body.find("\"creationTimestamp\"") < r.body.find("\"deletionTimestamp\"")
    );
    // Remove the pvc-protection finalizer as KCM would (j2 shows only the custom one left).
    let r = patch(
        &s,
        &path,
        "application/strategic-merge-patch+json",
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["kubernetes.io/pvc-protection"]}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // A new finalizer cannot be added while deleting.
    let r = patch(
        &s,
        &path,
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":["fixtures.example.com/hold","x.example.com/new"]}}"#,
    )
    .await;
    assert_eq!(r.status, 422);
    assert!(r.json()["message"].as_str().unwrap().contains("no new finalizers can be added if the object is being deleted, found new finalizers []string{\"x.example.com/new\"}"));
    // j2, j3
    let before = get(&s, &path).await;
    let again = delete(&s, &path, "").await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, before.body, "repeat DELETE changes nothing");
    // j4: the answer has no finalizers and the old resourceVersion; j5: gone.
    let r = patch(&s, &path, "application/json-patch+json", r#"[{"op":"test","path":"/metadata/finalizers/0","value":"fixtures.example.com/hold"},{"op":"remove","path":"/metadata/finalizers/0"}]"#).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert!(
        j["metadata"]
            .get("finalizers")
            .is_none_or(|f| f.as_array().is_some_and(Vec::is_empty))
    );
    assert_eq!(
        j["metadata"]["resourceVersion"],
        before.json()["metadata"]["resourceVersion"]
    );
    assert_eq!(get(&s, &path).await.status, 404);
    // j6, j7
    let b = get(&s, &format!("{PVCS}/fx-list-b")).await.json();
    let rv = b["metadata"]["resourceVersion"].as_str().unwrap();
    let uid = b["metadata"]["uid"].as_str().unwrap();
    let r = delete(
        &s,
        &format!("{PVCS}/fx-list-b"),
        r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"1"}}"#,
    )
    .await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.body,
        format!(
            "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Failure\",\"message\":\"Operation cannot be fulfilled on PersistentVolumeClaim \\\"fx-list-b\\\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({rv}). The object might have been modified\",\"reason\":\"Conflict\",\"details\":{{\"name\":\"fx-list-b\",\"kind\":\"PersistentVolumeClaim\"}},\"code\":409}}\n"
        )
    );
    let r = delete(&s, &format!("{PVCS}/fx-list-b"), r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}"#).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json()["message"],
        format!(
            "Operation cannot be fulfilled on PersistentVolumeClaim \"fx-list-b\": the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )
    );
    // j8
    assert_eq!(
        delete(&s, &format!("{PVCS}/fx-does-not-exist"), "")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn deletes_without_finalizers_answer_the_object_or_a_success_status() {
    let s = fixture_server().await;
    // j9
    let sc = json!({"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"fixtures-tmp-sc"},"provisioner":"fixtures.example.com/none"});
    let created = post(&s, "/apis/storage.k8s.io/v1/storageclasses", &sc).await;
    assert_eq!(created.status, 201);
    assert_eq!(
        scrub(created.json()),
        json!({"kind":"StorageClass","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fixtures-tmp-sc"},"provisioner":"fixtures.example.com/none","reclaimPolicy":"Delete","volumeBindingMode":"Immediate"})
    );
    let r = delete(
        &s,
        "/apis/storage.k8s.io/v1/storageclasses/fixtures-tmp-sc",
        "",
    )
    .await;
    assert_eq!(r.json()["kind"], "StorageClass");
    // j10
    let va = json!({"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachment","metadata":{"name":"fx-va-foreign"},"spec":{"attacher":"fixtures.example.com","source":{"persistentVolumeName":"fx-static-pv"},"nodeName":"ref-node"}});
    let created = post(&s, "/apis/storage.k8s.io/v1/volumeattachments", &va).await;
    assert_eq!(
        scrub(created.json()),
        json!({"kind":"VolumeAttachment","apiVersion":"storage.k8s.io/v1","metadata":{"name":"fx-va-foreign"},"spec":{"attacher":"fixtures.example.com","source":{"persistentVolumeName":"fx-static-pv"},"nodeName":"ref-node"},"status":{"attached":false}})
    );
    let r = delete(
        &s,
        "/apis/storage.k8s.io/v1/volumeattachments/fx-va-foreign",
        "",
    )
    .await;
    assert_eq!(scrub(r.json())["status"], json!({"attached": false}));
    // j11
    let cm = post(
        &s,
        "/api/v1/namespaces/fixtures/configmaps",
        &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fx-cm"}}),
    )
    .await
    .json();
    let r = delete(&s, "/api/v1/namespaces/fixtures/configmaps/fx-cm", "").await;
    assert_eq!(
        r.body,
        format!(
            "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Success\",\"details\":{{\"name\":\"fx-cm\",\"kind\":\"configmaps\",\"uid\":\"{}\"}}}}\n",
            cm["metadata"]["uid"].as_str().unwrap()
        )
    );
    // j12
    let lease = post(&s, "/apis/coordination.k8s.io/v1/namespaces/fixtures/leases", &json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"fx-lease-tmp"},"spec":{}})).await.json();
    let r = delete(
        &s,
        "/apis/coordination.k8s.io/v1/namespaces/fixtures/leases/fx-lease-tmp",
        "",
    )
    .await;
    assert_eq!(
        r.body,
        format!(
            "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{{}},\"status\":\"Success\",\"details\":{{\"name\":\"fx-lease-tmp\",\"group\":\"coordination.k8s.io\",\"kind\":\"leases\",\"uid\":\"{}\"}}}}\n",
            lease["metadata"]["uid"].as_str().unwrap()
        )
    );
}

#[tokio::test]
async fn status_and_main_resource_writes_each_change_only_their_part() {
    let s = fixture_server().await;
    let c = format!("{PVCS}/fx-list-c");
    let mut obj = get(&s, &c).await.json();
    // k1
    obj["metadata"]["labels"]["step"] = json!("label-sent-to-status");
    obj["spec"]["resources"]["requests"]["storage"] = json!("5Gi");
    obj["status"]["conditions"] =
        json!([{"type":"FixturesStatus","status":"True","message":"written through PUT /status"}]);
    let r = put(&s, &format!("{c}/status"), &obj).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // k2
    let after = get(&s, &c).await.json();
    assert_eq!(after["spec"]["resources"]["requests"]["storage"], "1Gi");
    assert_eq!(after["metadata"]["labels"]["step"], "label-sent-to-status");
    assert_eq!(
        after["status"]["conditions"][0]["lastProbeTime"],
        json!(null)
    );
    // k3
    let mut main = after.clone();
    main["metadata"]["labels"]["step"] = json!("label-sent-to-main");
    main["status"] =
        json!({"phase":"Lost","conditions":[{"type":"FixturesMainPut","status":"True"}]});
    let r = put(&s, &c, &main).await.json();
    assert_eq!(r["metadata"]["labels"]["step"], "label-sent-to-main");
    assert_eq!(r["status"], after["status"]);
}

#[tokio::test]
async fn generate_name_appends_five_characters_and_validates_both_names() {
    let s = fixture_server().await;
    // l1
    let csc = json!({"apiVersion":"storage.k8s.io/v1","kind":"CSIStorageCapacity","metadata":{"generateName":"csisc-","namespace":"fixtures","labels":{"csi.storage.k8s.io/drivername":"hostpath.csi.k8s.io"}},"storageClassName":"fixtures-hostpath","nodeTopology":{"matchLabels":{"topology.hostpath.csi/node":"ref-node"}},"capacity":"100Gi","maximumVolumeSize":"1Ti"});
    let r = post(
        &s,
        "/apis/storage.k8s.io/v1/namespaces/fixtures/csistoragecapacities",
        &csc,
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let name = r.json()["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("csisc-") && name.len() == 11, "{name}");
    assert!(r.body.contains("\"nodeTopology\":{\"matchLabels\":{\"topology.hostpath.csi/node\":\"ref-node\"}},\"storageClassName\":\"fixtures-hostpath\",\"capacity\":\"100Gi\",\"maximumVolumeSize\":\"1Ti\"}"), "{}", r.body);
    // l3
    let mut named = pvc("fx-named");
    named["metadata"]["generateName"] = json!("fx-gen-");
    let r = post(&s, PVCS, &named).await.json();
    assert_eq!(r["metadata"]["name"], "fx-named");
    assert_eq!(r["metadata"]["generateName"], "fx-gen-");
    // l4
    let r = send(&s, "POST", PVCS, Some("application/json"), r#"{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"generateName":"FX_","namespace":"fixtures"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"fixtures-none","resources":{"requests":{"storage":"1Gi"}}}}"#).await;
    assert_eq!(r.status, 422);
    let j = r.json();
    let generated = j["details"]["name"].as_str().unwrap();
    assert!(generated.starts_with("FX_") && generated.len() == 8);
    let fields: Vec<_> = j["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].clone())
        .collect();
    assert_eq!(
        fields,
        vec![json!("metadata.generateName"), json!("metadata.name")]
    );
}

#[tokio::test]
async fn core_and_events_k8s_io_events_are_two_views_of_one_object() {
    let s = fixture_server().await;
    // m1, m2
    let core = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"fx-list-a.18ea19fixture01","namespace":"fixtures"},"involvedObject":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-list-a","uid":"39ecb7ff-b323-4196-a809-3ea5b016795a","apiVersion":"v1","resourceVersion":"1"},"reason":"Provisioning","message":"External provisioner is provisioning volume for claim \"fixtures/fx-list-a\"","source":{"component":"hostpath.csi.k8s.io_fixture_0000"},"firstTimestamp":"2026-11-21T15:41:00Z","lastTimestamp":"2026-11-21T15:41:00Z","count":1,"type":"Normal","eventTime":null,"reportingComponent":"hostpath.csi.k8s.io_fixture_0000","reportingInstance":""}"#;
    let r = send(
        &s,
        "POST",
        "/api/v1/namespaces/fixtures/events",
        Some("application/json"),
        core,
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let tail = ",\"involvedObject\":{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"name\":\"fx-list-a\",\"namespace\":\"fixtures\",\"resourceVersion\":\"1\",\"uid\":\"39ecb7ff-b323-4196-a809-3ea5b016795a\"},\"reason\":\"Provisioning\",\"message\":\"External provisioner is provisioning volume for claim \\\"fixtures/fx-list-a\\\"\",\"source\":{\"component\":\"hostpath.csi.k8s.io_fixture_0000\"},\"firstTimestamp\":\"2026-11-21T15:41:00Z\",\"lastTimestamp\":\"2026-11-21T15:41:00Z\",\"count\":1,\"type\":\"Normal\",\"eventTime\":null,\"reportingComponent\":\"hostpath.csi.k8s.io_fixture_0000\",\"reportingInstance\":\"\"}\n";
    assert!(r.body.ends_with(tail), "{}", r.body);
    // m3
    let v1 = get(
        &s,
        "/apis/events.k8s.io/v1/namespaces/fixtures/events/fx-list-a.18ea19fixture01",
    )
    .await;
    assert!(v1.body.ends_with(",\"eventTime\":null,\"reportingController\":\"hostpath.csi.k8s.io_fixture_0000\",\"reason\":\"Provisioning\",\"regarding\":{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"name\":\"fx-list-a\",\"namespace\":\"fixtures\",\"resourceVersion\":\"1\",\"uid\":\"39ecb7ff-b323-4196-a809-3ea5b016795a\"},\"note\":\"External provisioner is provisioning volume for claim \\\"fixtures/fx-list-a\\\"\",\"type\":\"Normal\",\"deprecatedSource\":{\"component\":\"hostpath.csi.k8s.io_fixture_0000\"},\"deprecatedFirstTimestamp\":\"2026-11-21T15:41:00Z\",\"deprecatedLastTimestamp\":\"2026-11-21T15:41:00Z\",\"deprecatedCount\":1}\n"), "{}", v1.body);
    assert!(
        v1.body
            .starts_with("{\"kind\":\"Event\",\"apiVersion\":\"events.k8s.io/v1\"")
    );
    // m4, m5, m6
    let ev1 = r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"fx-list-a.18ea19fixture02","namespace":"fixtures"},"eventTime":"2026-11-21T15:41:01.123456Z","reportingController":"fixtures.example.com/controller","reportingInstance":"fixtures-controller-vm","action":"Provisioning","reason":"ProvisioningSucceeded","regarding":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-list-a","uid":"39ecb7ff-b323-4196-a809-3ea5b016795a","apiVersion":"v1"},"note":"written through events.k8s.io/v1","type":"Normal"}"#;
    let r = send(
        &s,
        "POST",
        "/apis/events.k8s.io/v1/namespaces/fixtures/events",
        Some("application/json"),
        ev1,
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body.ends_with("\"note\":\"written through events.k8s.io/v1\",\"type\":\"Normal\",\"deprecatedSource\":{},\"deprecatedFirstTimestamp\":null,\"deprecatedLastTimestamp\":null}\n"), "{}", r.body);
    let via_core = get(
        &s,
        "/api/v1/namespaces/fixtures/events/fx-list-a.18ea19fixture02",
    )
    .await;
    assert!(via_core.body.ends_with("\"reason\":\"ProvisioningSucceeded\",\"message\":\"written through events.k8s.io/v1\",\"source\":{},\"firstTimestamp\":null,\"lastTimestamp\":null,\"type\":\"Normal\",\"eventTime\":\"2026-11-21T15:41:01.123456Z\",\"action\":\"Provisioning\",\"reportingComponent\":\"fixtures.example.com/controller\",\"reportingInstance\":\"fixtures-controller-vm\"}\n"), "{}", via_core.body);
    // m7
    let r = send(&s, "POST", "/apis/events.k8s.io/v1/namespaces/fixtures/events", Some("application/json"), r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"fx-bad-event","namespace":"fixtures"},"reason":"X","note":"missing","type":"Normal","regarding":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-list-a"}}"#).await;
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Event \\\"fx-bad-event\\\" is invalid: eventTime: Required value\",\"reason\":\"Invalid\",\"details\":{\"name\":\"fx-bad-event\",\"kind\":\"Event\",\"causes\":[{\"reason\":\"FieldValueRequired\",\"message\":\"Required value\",\"field\":\"eventTime\"}]},\"code\":422}\n"
    );
    // m8
    let r = send(&s, "POST", "/api/v1/namespaces/fixtures/events", Some("application/json"), r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"fx-bad-type","namespace":"fixtures"},"involvedObject":{"kind":"PersistentVolumeClaim","namespace":"fixtures","name":"fx-list-a"},"reason":"X","message":"y","type":"Info"}"#).await;
    assert_eq!(r.status, 201);
    assert!(r.body.ends_with("\"reason\":\"X\",\"message\":\"y\",\"source\":{},\"firstTimestamp\":null,\"lastTimestamp\":null,\"type\":\"Info\",\"eventTime\":null,\"reportingComponent\":\"\",\"reportingInstance\":\"\"}\n"), "{}", r.body);
    // m9
    let r = send(&s, "POST", "/api/v1/namespaces/fixtures/events", Some("application/json"), r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"fx-ns-mismatch","namespace":"fixtures"},"involvedObject":{"kind":"PersistentVolumeClaim","namespace":"default","name":"other"},"reason":"X","message":"y","type":"Normal","source":{"component":"fixture-client"}}"#).await;
    assert_eq!(
        r.body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Event \\\"fx-ns-mismatch\\\" is invalid: involvedObject.namespace: Invalid value: \\\"default\\\": does not match event.namespace\",\"reason\":\"Invalid\",\"details\":{\"name\":\"fx-ns-mismatch\",\"kind\":\"Event\",\"causes\":[{\"reason\":\"FieldValueInvalid\",\"message\":\"Invalid value: \\\"default\\\": does not match event.namespace\",\"field\":\"involvedObject.namespace\"}]},\"code\":422}\n"
    );
}

#[tokio::test]
async fn discovery_matches_the_upstream_documents_for_the_served_resources() {
    let s = ApiServer::new();
    // n1
    let v = get(&s, "/version").await;
    assert!(!v.body.ends_with('\n'));
    assert!(
        v.body
            .starts_with("{\n  \"major\": \"1\",\n  \"minor\": \"36\",")
    );
    // n2
    let api = get(&s, "/api").await.json();
    assert_eq!(api["versions"], json!(["v1"]));
    // n3
    let apis = get(&s, "/apis").await.json();
    let names: Vec<_> = apis["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        vec![
            "events.k8s.io",
            "storage.k8s.io",
            "coordination.k8s.io",
            "snapshot.storage.k8s.io",
            "gateway.networking.k8s.io"
        ]
    );
    // n4
    let storage = get(&s, "/apis/storage.k8s.io/v1").await;
    assert_eq!(
        storage.body,
        "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"storage.k8s.io/v1\",\"resources\":[{\"name\":\"csidrivers\",\"singularName\":\"csidriver\",\"namespaced\":false,\"kind\":\"CSIDriver\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"storageVersionHash\":\"hL6j/rwBV5w=\"},{\"name\":\"csinodes\",\"singularName\":\"csinode\",\"namespaced\":false,\"kind\":\"CSINode\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"storageVersionHash\":\"Pe62DkZtjuo=\"},{\"name\":\"csistoragecapacities\",\"singularName\":\"csistoragecapacity\",\"namespaced\":true,\"kind\":\"CSIStorageCapacity\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"storageVersionHash\":\"xeVl+2Ly1kE=\"},{\"name\":\"storageclasses\",\"singularName\":\"storageclass\",\"namespaced\":false,\"kind\":\"StorageClass\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"sc\"],\"storageVersionHash\":\"K+m6uJwbjGY=\"},{\"name\":\"volumeattachments\",\"singularName\":\"volumeattachment\",\"namespaced\":false,\"kind\":\"VolumeAttachment\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"storageVersionHash\":\"tJx/ezt6UDU=\"},{\"name\":\"volumeattachments/status\",\"singularName\":\"\",\"namespaced\":false,\"kind\":\"VolumeAttachment\",\"verbs\":[\"get\",\"patch\",\"update\"]},{\"name\":\"volumeattributesclasses\",\"singularName\":\"volumeattributesclass\",\"namespaced\":false,\"kind\":\"VolumeAttributesClass\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"vac\"],\"storageVersionHash\":\"tIjydgKBC5w=\"}]}\n"
    );
    // n5
    let coordination = get(&s, "/apis/coordination.k8s.io/v1").await;
    assert_eq!(
        coordination.body,
        "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"coordination.k8s.io/v1\",\"resources\":[{\"name\":\"leases\",\"singularName\":\"lease\",\"namespaced\":true,\"kind\":\"Lease\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"storageVersionHash\":\"gqkMMb/YqFM=\"}]}\n"
    );
    // n7
    let events = get(&s, "/apis/events.k8s.io/v1").await;
    assert_eq!(
        events.body,
        "{\"kind\":\"APIResourceList\",\"apiVersion\":\"v1\",\"groupVersion\":\"events.k8s.io/v1\",\"resources\":[{\"name\":\"events\",\"singularName\":\"event\",\"namespaced\":true,\"kind\":\"Event\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"ev\"],\"storageVersionHash\":\"r2yiGXH7wu8=\"}]}\n"
    );
    // n6 (the served subset, entries as upstream prints them)
    let core = get(&s, "/api/v1").await.body;
    for entry in [
        "{\"name\":\"persistentvolumeclaims\",\"singularName\":\"persistentvolumeclaim\",\"namespaced\":true,\"kind\":\"PersistentVolumeClaim\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"pvc\"],\"storageVersionHash\":\"QWTyNDq0dC4=\"}",
        "{\"name\":\"persistentvolumeclaims/status\",\"singularName\":\"\",\"namespaced\":true,\"kind\":\"PersistentVolumeClaim\",\"verbs\":[\"get\",\"patch\",\"update\"]}",
        "{\"name\":\"namespaces\",\"singularName\":\"namespace\",\"namespaced\":false,\"kind\":\"Namespace\",\"verbs\":[\"create\",\"delete\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"ns\"],\"storageVersionHash\":\"Q3oi5N2YM8M=\"}",
        "{\"name\":\"pods\",\"singularName\":\"pod\",\"namespaced\":true,\"kind\":\"Pod\",\"verbs\":[\"create\",\"delete\",\"deletecollection\",\"get\",\"list\",\"patch\",\"update\",\"watch\"],\"shortNames\":[\"po\"],\"categories\":[\"all\"],\"storageVersionHash\":\"xPOwRZ+Yhw8=\"}",
    ] {
        assert!(core.contains(entry), "{entry}");
    }
    // n8: aggregated discovery when asked for it.
    let agg = send_with(&s, "GET", "/apis", &[("accept", Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"))], "").await;
    assert_eq!(
        agg.header("content-type"),
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    );
    let j = agg.json();
    assert_eq!(j["kind"], "APIGroupDiscoveryList");
    let storage = j["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "storage.k8s.io")
        .unwrap();
    let va = storage["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "volumeattachments")
        .unwrap();
    assert_eq!(va["subresources"][0]["subresource"], "status");
    assert_eq!(va["scope"], "Cluster");
}

#[tokio::test]
async fn injected_failures_hit_exactly_the_matching_requests() {
    let s = fixture_server().await;
    s.faults().fail("get", "persistentvolumeclaims", 503, 2);
    assert_eq!(get(&s, &format!("{PVCS}/fx-list-a")).await.status, 503);
    assert_eq!(get(&s, PVCS).await.status, 200, "list is another verb");
    let r = get(&s, &format!("{PVCS}/fx-list-a")).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["reason"], "ServiceUnavailable");
    assert_eq!(get(&s, &format!("{PVCS}/fx-list-a")).await.status, 200);
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_content_and_then_itself() {
    let s = fixture_server().await;
    let mut held = pvc("held");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    post(&s, PVCS, &held).await;
    let r = delete(&s, "/api/v1/namespaces/fixtures", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"]["phase"], "Terminating");
    let r = post(&s, PVCS, &pvc("late")).await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "persistentvolumeclaims \"late\" is forbidden: unable to create new content in namespace fixtures because it is being terminated"
    );
    // Only PVCs with finalizers remain (pvc-protection is never removed here: no controller).
    let left: Vec<String> = get(&s, PVCS).await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left, vec!["fx-list-a", "fx-list-b", "fx-list-c", "held"]);
    for name in &left {
        let r = patch(
            &s,
            &format!("{PVCS}/{name}"),
            "application/merge-patch+json",
            r#"{"metadata":{"finalizers":null}}"#,
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(get(&s, "/api/v1/namespaces/fixtures").await.status, 404);
}

/// `field` of every entry of an APIResourceList.
fn resource_fields(reply: &Reply, field: &str) -> Vec<String> {
    reply.json()["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[field].as_str().unwrap().to_owned())
        .collect()
}

/// GET /apis as aggregated discovery (v2).
async fn aggregated_apis(server: &ApiServer) -> Reply {
    send_with(
        server,
        "GET",
        "/apis",
        &[(
            "accept",
            Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
        )],
        "",
    )
    .await
}

#[tokio::test]
async fn a_disabled_resource_is_absent_from_discovery_and_its_paths_are_unknown() {
    use testbed_cluster::apiserver::Config;
    let server = ApiServer::with_config(Config {
        disabled_resources: vec!["storage.k8s.io/v1/volumeattributesclasses".into()],
        ..Config::default()
    });
    let kinds = |reply: &Reply| resource_fields(reply, "kind");
    let list = get(&server, "/apis/storage.k8s.io/v1").await;
    assert_eq!(list.status, 200);
    assert!(kinds(&list).contains(&"StorageClass".to_owned()));
    assert!(!kinds(&list).contains(&"VolumeAttributesClass".to_owned()));
    let aggregated = aggregated_apis(&server).await;
    assert!(aggregated.body.contains("\"storageclasses\""));
    assert!(!aggregated.body.contains("volumeattributesclasses"));
    let missing = get(&server, "/apis/storage.k8s.io/v1/volumeattributesclasses").await;
    assert_eq!(missing.status, 404);
    // The default server serves it.
    let default = get(&ApiServer::new(), "/apis/storage.k8s.io/v1").await;
    assert!(kinds(&default).contains(&"VolumeAttributesClass".to_owned()));
}

/// Kubernetes 1.21-1.23: CSIStorageCapacity is served at storage.k8s.io/v1beta1 only (v1 came
/// in 1.24), with v1's fields; the v1 paths are unknown and discovery lists v1beta1 beside the
/// group's other v1 kinds. A default (v1.36.2) server has no v1beta1 of that kind.
#[tokio::test]
async fn capacity_at_v1beta1_only_copies_kubernetes_1_23() {
    use testbed_cluster::apiserver::Config;
    let server = ApiServer::with_config(Config {
        disabled_resources: vec!["storage.k8s.io/v1/csistoragecapacities".into()],
        enabled_resources: vec!["storage.k8s.io/v1beta1/csistoragecapacities".into()],
        ..Config::default()
    });
    let v1 = "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities";
    let beta = "/apis/storage.k8s.io/v1beta1/namespaces/default/csistoragecapacities";
    let object = |version: &str| {
        json!({"apiVersion": format!("storage.k8s.io/{version}"), "kind": "CSIStorageCapacity",
            "metadata": {"name": "csisc-a"}, "storageClassName": "fast", "capacity": "10Gi",
            "nodeTopology": {"matchLabels": {"zone": "a"}}})
    };
    assert_eq!(post(&server, v1, &object("v1")).await.status, 404);
    assert_eq!(get(&server, v1).await.status, 404);
    let created = post(&server, beta, &object("v1beta1")).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.json()["apiVersion"], "storage.k8s.io/v1beta1");
    assert_eq!(created.json()["capacity"], "10Gi");
    let read = get(&server, &format!("{beta}/csisc-a")).await;
    assert_eq!(read.json()["nodeTopology"]["matchLabels"]["zone"], "a");
    // The same 422 as v1 for an invalid name (the provisioner's version probe).
    let mut invalid = object("v1beta1");
    invalid["metadata"]["name"] = json!("#%123-invalid-name");
    assert_eq!(post(&server, beta, &invalid).await.status, 422);

    let group = get(&server, "/apis/storage.k8s.io").await.json();
    assert_eq!(group["versions"][0]["version"], "v1");
    assert_eq!(group["versions"][1]["version"], "v1beta1");
    assert_eq!(group["preferredVersion"]["version"], "v1");
    let plurals = |reply: &Reply| resource_fields(reply, "name");
    let listed_v1 = plurals(&get(&server, "/apis/storage.k8s.io/v1").await);
    assert!(listed_v1.contains(&"storageclasses".to_owned()));
    assert!(!listed_v1.contains(&"csistoragecapacities".to_owned()));
    let listed_beta = plurals(&get(&server, "/apis/storage.k8s.io/v1beta1").await);
    assert_eq!(listed_beta, vec!["csistoragecapacities".to_owned()]);
    let aggregated = aggregated_apis(&server).await.json();
    let storage = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "storage.k8s.io")
        .unwrap()
        .clone();
    let beta_resources = &storage["versions"][1];
    assert_eq!(beta_resources["version"], "v1beta1");
    assert_eq!(
        beta_resources["resources"][0]["resource"],
        "csistoragecapacities"
    );

    // A default server: v1 only.
    let default = ApiServer::new();
    assert_eq!(get(&default, beta).await.status, 404);
    assert_eq!(get(&default, v1).await.status, 200);
    let group = get(&default, "/apis/storage.k8s.io").await.json();
    assert_eq!(group["versions"].as_array().unwrap().len(), 1);
}

/// kube-apiserver's field manager: every write records who wrote which fields, named by the
/// `User-Agent` product, and every answer carries the entries (objects/pvc-2-bound.json).
#[tokio::test]
async fn writes_record_managed_fields_by_user_agent_and_answers_carry_them() {
    let s = ApiServer::with_config(testbed_cluster::apiserver::Config {
        managed_fields: true,
        namespaces: vec!["fixtures".to_owned()],
        ..testbed_cluster::apiserver::Config::default()
    });
    let body = pvc("fx-managed").to_string();
    let created = send_with(
        &s,
        "POST",
        PVCS,
        &[
            ("content-type", Some("application/json")),
            ("user-agent", Some("kubectl/v1.36.2 (linux/amd64)")),
        ],
        &body,
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let entries = created.json()["metadata"]["managedFields"].clone();
    assert_eq!(entries[0]["manager"], "kubectl");
    assert_eq!(entries[0]["operation"], "Update");
    assert_eq!(
        entries[0]["fieldsV1"]["f:spec"]["f:storageClassName"],
        json!({})
    );
    let patched = send_with(
        &s,
        "PATCH",
        &format!("{PVCS}/fx-managed/status"),
        &[
            ("content-type", Some("application/merge-patch+json")),
            ("user-agent", Some("kube-controller-manager/v1.36.2")),
        ],
        r#"{"status":{"phase":"Bound"}}"#,
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let read = get(&s, &format!("{PVCS}/fx-managed")).await.json();
    let entries = read["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[1]["manager"], "kube-controller-manager");
    assert_eq!(entries[1]["subresource"], "status");
    assert_eq!(entries[1]["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
    let listed = get(&s, PVCS).await.json();
    let item = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "fx-managed")
        .unwrap()
        .clone();
    assert_eq!(item["metadata"]["managedFields"], json!(entries));
}

/// Objects stored for a bench must be as heavy as kube-apiserver's: with managedFields on, a
/// stored object without entries gets the one a single client's create records; one that
/// brings its own (the provisioner bench's, shaped like the fixtures') keeps them.
#[tokio::test]
async fn stored_objects_get_managed_fields_unless_they_bring_their_own() {
    use k8s_openapi::api::core::v1::PersistentVolume;
    use testbed_cluster::apiserver::PUT_MANAGER;

    let volume = |name: &str, entries: serde_json::Value| -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": name, "managedFields": entries},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "csi": {"driver": "d", "volumeHandle": name}},
            "status": {"phase": "Available"},
        }))
        .unwrap()
    };
    let own = json!([{"manager": "csi-provisioner", "operation": "Update", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:csi": {}}}}]);
    for managed_fields in [true, false] {
        let s = ApiServer::with_config(testbed_cluster::apiserver::Config {
            managed_fields,
            ..testbed_cluster::apiserver::Config::default()
        });
        s.put_object(&volume("bare", json!(null))).unwrap();
        s.put_object(&volume("own", own.clone())).unwrap();
        let bare = get(&s, "/api/v1/persistentvolumes/bare").await.json();
        let entries = &bare["metadata"]["managedFields"];
        if managed_fields {
            assert_eq!(entries[0]["manager"], PUT_MANAGER, "{bare}");
            assert_eq!(
                entries[0]["fieldsV1"]["f:spec"]["f:csi"]["f:volumeHandle"],
                json!({})
            );
            assert_eq!(entries[0]["fieldsV1"]["f:status"]["f:phase"], json!({}));
        } else {
            assert!(entries.is_null(), "{bare}");
        }
        let kept = get(&s, "/api/v1/persistentvolumes/own").await.json();
        assert_eq!(
            kept["metadata"]["managedFields"][0]["manager"],
            "csi-provisioner"
        );
    }

    // A replaced object keeps the entries of its earlier writers, as after an update.
    let s = ApiServer::with_config(testbed_cluster::apiserver::Config {
        managed_fields: true,
        ..testbed_cluster::apiserver::Config::default()
    });
    let body = serde_json::to_string(&volume("posted", json!(null))).unwrap();
    let created = send_with(
        &s,
        "POST",
        "/api/v1/persistentvolumes",
        &[
            ("content-type", Some("application/json")),
            ("user-agent", Some("kubectl/v1.36.2 (linux/amd64)")),
        ],
        &body,
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let mut changed = volume("posted", json!(null));
    changed.metadata.labels = Some([("app".to_owned(), "bench".to_owned())].into());
    s.put_object(&changed).unwrap();
    let read = get(&s, "/api/v1/persistentvolumes/posted").await.json();
    let entries = read["metadata"]["managedFields"].as_array().unwrap();
    let managers: Vec<_> = entries.iter().map(|e| e["manager"].as_str()).collect();
    assert_eq!(managers, [Some("kubectl"), Some(PUT_MANAGER)], "{read}");
    // Its own entry names what the put changed (the labels; also the status, which a create
    // does not store), not every field as for a new object.
    assert_eq!(
        entries[1]["fieldsV1"]["f:metadata"],
        json!({"f:labels": {".": {}, "f:app": {}}})
    );
    assert!(
        entries[1]["fieldsV1"]["f:spec"].get("f:csi").is_none(),
        "{read}"
    );
}
