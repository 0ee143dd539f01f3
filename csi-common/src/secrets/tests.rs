#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use http::{Request, Response};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::client::Body;

use super::*;

fn sref(name: &str, namespace: &str) -> SecretRef {
    SecretRef {
        name: name.into(),
        namespace: namespace.into(),
    }
}

fn pv(annotations: &[(&str, &str)], expand: Option<&SecretRef>) -> PersistentVolume {
    let annotations = annotations.iter().map(|&(k, v)| (k.into(), v.into()));
    PersistentVolume {
        metadata: ObjectMeta {
            annotations: Some(annotations.collect()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: "csi.example.com".into(),
                volume_handle: "vol-1".into(),
                controller_expand_secret_ref: expand.map(SecretReference::from),
                ..CSIPersistentVolumeSource::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

#[test]
fn the_modify_secret_comes_from_the_annotations_else_the_expand_secret() {
    let name = ANN_CONTROLLER_MODIFY_SECRET_NAME;
    let namespace = ANN_CONTROLLER_MODIFY_SECRET_NAMESPACE;
    let expand = Some(sref("expand", "ns-e"));
    let cases = [
        (vec![], None, None),
        (vec![], expand.clone(), expand.clone()),
        (
            vec![(name, "modify"), (namespace, "ns-m")],
            expand.clone(),
            Some(sref("modify", "ns-m")),
        ),
        (
            vec![(name, "modify"), (namespace, "ns-m")],
            None,
            Some(sref("modify", "ns-m")),
        ),
        // Half a pair, or an empty value, is no pair.
        (vec![(name, "modify")], expand.clone(), expand.clone()),
        (
            vec![(name, "modify"), (namespace, "")],
            expand.clone(),
            expand.clone(),
        ),
        (vec![(name, ""), (namespace, "ns-m")], None, None),
    ];
    for (annotations, expand, want) in cases {
        assert_eq!(
            controller_modify(&pv(&annotations, expand.as_ref())),
            want,
            "{annotations:?} {expand:?}"
        );
    }
    assert_eq!(controller_modify(&PersistentVolume::default()), None);
}

#[test]
fn references_convert_with_go_zero_values() {
    let full = SecretReference {
        name: Some("s".into()),
        namespace: Some("ns".into()),
    };
    assert_eq!(SecretRef::from(&full), sref("s", "ns"));
    assert_eq!(SecretReference::from(&sref("s", "ns")), full);
    assert_eq!(SecretRef::from(&SecretReference::default()), sref("", ""));
}

#[test]
fn secret_data_becomes_strings() {
    let secret = Secret {
        data: Some(BTreeMap::from([
            ("user".to_owned(), ByteString(b"admin".to_vec())),
            ("empty".to_owned(), ByteString(Vec::new())),
            ("binary".to_owned(), ByteString(vec![b'a', 0xff, b'b'])),
        ])),
        ..Secret::default()
    };
    let want = HashMap::from([
        ("user".to_owned(), "admin".to_owned()),
        ("empty".to_owned(), String::new()),
        ("binary".to_owned(), "a\u{fffd}b".to_owned()),
    ]);
    assert_eq!(csi_secrets(&secret), want);
    assert!(csi_secrets(&Secret::default()).is_empty());
}

/// A client whose one request is answered with `status` and `body`, and the path it asked for.
async fn get_once(
    status: u16,
    body: serde_json::Value,
) -> (Result<HashMap<String, String>, FetchError>, String) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("one request");
        send.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
        request.uri().to_string()
    });
    let result = fetch(&client, &sref("s1", "ns1")).await;
    (result, server.await.unwrap())
}

#[tokio::test]
async fn fetch_gets_the_secret_by_namespace_and_name() {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s1", "namespace": "ns1"},
        "data": {"password": "c2VjcmV0"},
    });
    let (result, path) = get_once(200, body).await;
    assert_eq!(path, "/api/v1/namespaces/ns1/secrets/s1");
    assert_eq!(
        result.unwrap(),
        HashMap::from([("password".to_owned(), "secret".to_owned())])
    );
}

#[tokio::test]
async fn a_missing_secret_reads_like_upstream() {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "message": "secrets \"s1\" not found",
        "reason": "NotFound",
        "details": {"name": "s1", "kind": "secrets"},
        "code": 404,
    });
    let (result, _) = get_once(404, body).await;
    let err = result.unwrap_err();
    assert_eq!(
        crate::logging::error_chain(&err),
        r#"error getting secret s1 in namespace ns1: secrets "s1" not found"#
    );
}
