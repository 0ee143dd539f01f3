use std::error::Error as _;

use super::*;
use crate::params::*;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn claim_annotations() -> BTreeMap<String, String> {
    map(&[
        ("team.example.com/key", "blue"),
        ("quoted", "q"),
        ("Upper.Case/Key", "Bad_Value"),
    ])
}

fn claim(annotations: &BTreeMap<String, String>) -> ClaimTokens<'_> {
    ClaimTokens {
        name: "data-web-0",
        namespace: "apps",
        annotations: Some(annotations),
    }
}

#[allow(
    clippy::unnecessary_wraps,
    reason = "rows compare against Option results"
)]
fn sref(name: &str, namespace: &str) -> Option<SecretRef> {
    Some(SecretRef {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
    })
}

#[test]
fn templates_expand_every_token() {
    let annotations = claim_annotations();
    let cases: &[(&str, &str, Option<SecretRef>)] = &[
        ("static", "kube-system", sref("static", "kube-system")),
        ("${pv.name}", "${pv.name}", sref("pvc-123", "pvc-123")),
        (
            "${pvc.name}",
            "${pvc.namespace}",
            sref("data-web-0", "apps"),
        ),
        (
            "${pvc.name}-${pvc.namespace}-${pv.name}",
            "${pvc.namespace}-secrets",
            sref("data-web-0-apps-pvc-123", "apps-secrets"),
        ),
        (
            "${pvc.annotations['team.example.com/key']}-secret",
            "ns",
            sref("blue-secret", "ns"),
        ),
        // `$name` without braces is a token too (os.Expand); `pvc` alone is not one.
        ("x$pvc", "ns", None),
        // A dollar before a non-name character stays, and the result is then not a DNS name.
        ("a$%b", "ns", None),
    ];
    for (name, namespace, want) in cases {
        let params = map(&[
            (PREFIXED_NODE_PUBLISH_SECRET_NAME_KEY, name),
            (PREFIXED_NODE_PUBLISH_SECRET_NAMESPACE_KEY, namespace),
        ]);
        let got = secret_ref(
            SecretKind::NodePublish,
            &params,
            "pvc-123",
            &claim(&annotations),
        );
        match want {
            Some(want) => assert_eq!(got.as_ref(), Ok(&Some(want.clone())), "{name} {namespace}"),
            None => assert!(got.is_err(), "{name} {namespace}: {got:?}"),
        }
    }
}

#[test]
fn expand_follows_go_os_expand() {
    let tokens = map(&[("a", "A"), ("pv.name", "P"), ("1", "one")]);
    let cases: &[(&str, Result<&str, &[&str]>)] = &[
        ("plain", Ok("plain")),
        ("${a}", Ok("A")),
        ("$a", Ok("A")),
        ("$a.b", Ok("A.b")),
        ("x${pv.name}y", Ok("xPy")),
        ("${1}", Ok("one")),
        ("$1x", Ok("onex")),
        ("$", Ok("$")),
        ("a$", Ok("a$")),
        ("$%", Ok("$%")),
        ("${}", Ok("")),
        ("x${}y", Ok("xy")),
        ("${a", Ok("a")),
        ("$$", Err(&["$"])),
        ("${b}", Err(&["b"])),
        ("${zz}-${b}-${b}", Err(&["b", "zz"])),
        ("$ab", Err(&["ab"])),
    ];
    for (template, want) in cases {
        let got = expand(template, &tokens);
        match want {
            Ok(text) => assert_eq!(got.as_deref(), Ok(*text), "{template}"),
            Err(names) => assert_eq!(
                got.unwrap_err().tokens,
                names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
                "{template}"
            ),
        }
    }
}

#[test]
fn unknown_tokens_are_reported_with_upstream_text() {
    let annotations = claim_annotations();
    let cases: &[(&str, &str, &str)] = &[
        (
            "${pvc.uid}",
            "ns",
            r#"error resolving value "${pvc.uid}": invalid tokens: ["pvc.uid"]"#,
        ),
        (
            "${b}${a}",
            "ns",
            r#"error resolving value "${b}${a}": invalid tokens: ["a" "b"]"#,
        ),
        // The namespace may not use the claim name or its annotations.
        (
            "name",
            "${pvc.name}",
            r#"error resolving value "${pvc.name}": invalid tokens: ["pvc.name"]"#,
        ),
        (
            "name",
            "${pvc.annotations['quoted']}",
            r#"error resolving value "${pvc.annotations['quoted']}": invalid tokens: ["pvc.annotations['quoted']"]"#,
        ),
        // Only single quotes select an annotation.
        (
            r#"${pvc.annotations["quoted"]}"#,
            "ns",
            r#"error resolving value "${pvc.annotations[\"quoted\"]}": invalid tokens: ["pvc.annotations[\"quoted\"]"]"#,
        ),
        (
            "${pvc.annotations['missing']}",
            "ns",
            r#"error resolving value "${pvc.annotations['missing']}": invalid tokens: ["pvc.annotations['missing']"]"#,
        ),
    ];
    for (name, namespace, want) in cases {
        let params = map(&[
            (PREFIXED_PROVISIONER_SECRET_NAME_KEY, name),
            (PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, namespace),
        ]);
        let err =
            secret_ref(SecretKind::Provisioner, &params, "pv", &claim(&annotations)).unwrap_err();
        assert_eq!(
            csi_common::logging::error_chain(&err),
            *want,
            "{name} {namespace}"
        );
    }
}

#[test]
fn resolved_names_must_be_dns_names() {
    let annotations = claim_annotations();
    let long_label = "a".repeat(64);
    let long_name = format!("{}.{}", "a".repeat(200), "b".repeat(53));
    let cases: Vec<(&str, &str, Result<(), String>)> = vec![
        ("ok.name-1", "ns-1", Ok(())),
        ("a", &long_label, Err(format!(r#""{long_label}" is not a valid namespace name"#))),
        ("a", "Upper", Err(r#""Upper" is not a valid namespace name"#.to_owned())),
        ("a", "dot.ted", Err(r#""dot.ted" is not a valid namespace name"#.to_owned())),
        ("a", "-lead", Err(r#""-lead" is not a valid namespace name"#.to_owned())),
        (
            "a",
            "${pv.name}",
            Err(r#""${pv.name}" resolved to "PV_1" which is not a valid namespace name"#.to_owned()),
        ),
        ("under_score", "ns", Err(r#""under_score" is not a valid secret name"#.to_owned())),
        ("trail-", "ns", Err(r#""trail-" is not a valid secret name"#.to_owned())),
        ("a..b", "ns", Err(r#""a..b" is not a valid secret name"#.to_owned())),
        (&long_name, "ns", Err(format!(r#""{long_name}" is not a valid secret name"#))),
        (
            "${pvc.annotations['Upper.Case/Key']}",
            "ns",
            Err(
                r#""${pvc.annotations['Upper.Case/Key']}" resolved to "Bad_Value" which is not a valid secret name"#
                    .to_owned(),
            ),
        ),
        // Both empty after expansion: still invalid, not "no secret".
        ("${pvc.annotations['empty']}", "ns", Err(String::new())),
    ];
    let mut annotations = annotations;
    annotations.insert("empty".to_owned(), String::new());
    for (name, namespace, want) in cases {
        let params = map(&[
            (PREFIXED_DEFAULT_SECRET_NAME_KEY, name),
            (PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY, namespace),
        ]);
        let got = secret_ref(
            SecretKind::Provisioner,
            &params,
            "PV_1",
            &claim(&annotations),
        );
        match want {
            Ok(()) => assert!(matches!(got, Ok(Some(_))), "{name} {namespace}: {got:?}"),
            Err(text) if text.is_empty() => assert!(got.is_err(), "{name}"),
            Err(text) => assert_eq!(got.unwrap_err().to_string(), text, "{name} {namespace}"),
        }
    }
    // The longest valid names pass.
    let max_label = "n".repeat(63);
    let max_name = format!("{}.{}", "a".repeat(200), "b".repeat(52));
    let params = map(&[
        (PREFIXED_DEFAULT_SECRET_NAME_KEY, &max_name),
        (PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY, &max_label),
    ]);
    assert_eq!(
        secret_ref(SecretKind::NodeExpand, &params, "pv", &claim(&annotations)),
        Ok(sref(&max_name, &max_label))
    );
}

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
#[allow(clippy::type_complexity, reason = "table test rows are tuples")]
fn key_combinations_follow_upstream_rules() {
    let annotations = claim_annotations();
    let cases: Vec<(Vec<(&str, &str)>, Result<Option<SecretRef>, &str>)> = vec![
        (vec![], Ok(None)),
        (vec![("type", "x")], Ok(None)),
        (
            vec![
                (PREFIXED_PROVISIONER_SECRET_NAME_KEY, "s"),
                (PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "n"),
            ],
            Ok(sref("s", "n")),
        ),
        (
            vec![
                (DEPRECATED_PROVISIONER_SECRET_NAME_KEY, "s"),
                (DEPRECATED_PROVISIONER_SECRET_NAMESPACE_KEY, "n"),
            ],
            Ok(sref("s", "n")),
        ),
        // Deprecated name with prefixed namespace is one of each: accepted.
        (
            vec![
                (DEPRECATED_PROVISIONER_SECRET_NAME_KEY, "s"),
                (PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "n"),
            ],
            Ok(sref("s", "n")),
        ),
        // The default applies only when the kind's own keys are absent.
        (
            vec![
                (PREFIXED_DEFAULT_SECRET_NAME_KEY, "d"),
                (PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY, "dn"),
            ],
            Ok(sref("d", "dn")),
        ),
        (
            vec![
                (PREFIXED_DEFAULT_SECRET_NAME_KEY, "d"),
                (PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY, "dn"),
                (PREFIXED_PROVISIONER_SECRET_NAME_KEY, "s"),
                (PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "n"),
            ],
            Ok(sref("s", "n")),
        ),
        (
            vec![
                (DEPRECATED_PROVISIONER_SECRET_NAME_KEY, "s"),
                (PREFIXED_PROVISIONER_SECRET_NAME_KEY, "s"),
                (PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "n"),
            ],
            Err(
                r#"failed to get name and namespace template from params: Provisioner secrets specified in parameters with both "csi" and "csi.storage.k8s.io/" keys"#,
            ),
        ),
        (
            vec![
                (DEPRECATED_PROVISIONER_SECRET_NAMESPACE_KEY, "n"),
                (PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "n"),
            ],
            Err(
                r#"failed to get name and namespace template from params: Provisioner secrets specified in parameters with both "csi" and "csi.storage.k8s.io/" keys"#,
            ),
        ),
        (
            vec![(PREFIXED_PROVISIONER_SECRET_NAME_KEY, "s")],
            Err(
                "failed to get name and namespace template from params: either name and namespace for Provisioner secrets specified, Both must be specified",
            ),
        ),
        (
            vec![(PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "n")],
            Err(
                "failed to get name and namespace template from params: either name and namespace for Provisioner secrets specified, Both must be specified",
            ),
        ),
        (
            vec![
                (PREFIXED_PROVISIONER_SECRET_NAME_KEY, ""),
                (PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "n"),
            ],
            Err(
                "failed to get name and namespace template from params: Provisioner secrets specified in parameters but value of either namespace or name is empty",
            ),
        ),
        (
            vec![(PREFIXED_DEFAULT_SECRET_NAME_KEY, "d")],
            Err(
                "failed to get default name and namespace template from params: either name and namespace for Default secrets specified, Both must be specified",
            ),
        ),
        (
            vec![
                (PREFIXED_DEFAULT_SECRET_NAME_KEY, "d"),
                (PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY, ""),
            ],
            Err(
                "failed to get default name and namespace template from params: Default secrets specified in parameters but value of either namespace or name is empty",
            ),
        ),
    ];
    for (pairs, want) in cases {
        let got = secret_ref(
            SecretKind::Provisioner,
            &map(&pairs),
            "pv",
            &claim(&annotations),
        );
        match want {
            Ok(want) => assert_eq!(got, Ok(want), "{pairs:?}"),
            Err(text) => assert_eq!(
                csi_common::logging::error_chain(&got.unwrap_err()),
                text,
                "{pairs:?}"
            ),
        }
    }
}

#[test]
#[allow(clippy::type_complexity, reason = "table test rows are tuples")]
fn each_kind_reads_its_own_keys() {
    let annotations = claim_annotations();
    let kinds: [(SecretKind, &str, &str, Option<(&str, &str)>, &str); 7] = [
        (
            SecretKind::Provisioner,
            PREFIXED_PROVISIONER_SECRET_NAME_KEY,
            PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY,
            Some((
                DEPRECATED_PROVISIONER_SECRET_NAME_KEY,
                DEPRECATED_PROVISIONER_SECRET_NAMESPACE_KEY,
            )),
            "Provisioner",
        ),
        (
            SecretKind::ControllerPublish,
            PREFIXED_CONTROLLER_PUBLISH_SECRET_NAME_KEY,
            PREFIXED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY,
            Some((
                DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAME_KEY,
                DEPRECATED_CONTROLLER_PUBLISH_SECRET_NAMESPACE_KEY,
            )),
            "ControllerPublish",
        ),
        (
            SecretKind::NodeStage,
            PREFIXED_NODE_STAGE_SECRET_NAME_KEY,
            PREFIXED_NODE_STAGE_SECRET_NAMESPACE_KEY,
            Some((
                DEPRECATED_NODE_STAGE_SECRET_NAME_KEY,
                DEPRECATED_NODE_STAGE_SECRET_NAMESPACE_KEY,
            )),
            "NodeStage",
        ),
        (
            SecretKind::NodePublish,
            PREFIXED_NODE_PUBLISH_SECRET_NAME_KEY,
            PREFIXED_NODE_PUBLISH_SECRET_NAMESPACE_KEY,
            Some((
                DEPRECATED_NODE_PUBLISH_SECRET_NAME_KEY,
                DEPRECATED_NODE_PUBLISH_SECRET_NAMESPACE_KEY,
            )),
            "NodePublish",
        ),
        (
            SecretKind::ControllerExpand,
            PREFIXED_CONTROLLER_EXPAND_SECRET_NAME_KEY,
            PREFIXED_CONTROLLER_EXPAND_SECRET_NAMESPACE_KEY,
            None,
            "ControllerExpand",
        ),
        (
            SecretKind::NodeExpand,
            PREFIXED_NODE_EXPAND_SECRET_NAME_KEY,
            PREFIXED_NODE_EXPAND_SECRET_NAMESPACE_KEY,
            None,
            "NodeExpand",
        ),
        (
            SecretKind::ControllerModify,
            PREFIXED_CONTROLLER_MODIFY_SECRET_NAME_KEY,
            PREFIXED_CONTROLLER_MODIFY_SECRET_NAMESPACE_KEY,
            None,
            "ControllerModify",
        ),
    ];
    assert_eq!(SecretKind::ALL.len(), kinds.len());
    for (kind, name_key, namespace_key, deprecated, label) in kinds {
        let params = map(&[(name_key, "own"), (namespace_key, "own-ns")]);
        for other in SecretKind::ALL {
            let want = if other == kind {
                sref("own", "own-ns")
            } else {
                None
            };
            assert_eq!(
                secret_ref(other, &params, "pv", &claim(&annotations)),
                Ok(want),
                "{kind:?} keys read as {other:?}"
            );
        }
        let only_name = map(&[(name_key, "own")]);
        let err = secret_ref(kind, &only_name, "pv", &claim(&annotations)).unwrap_err();
        assert!(
            err.source()
                .unwrap()
                .to_string()
                .starts_with(&format!("either name and namespace for {label} secrets"))
        );
        if let Some((dep_name, dep_namespace)) = deprecated {
            let params = map(&[(dep_name, "old"), (dep_namespace, "old-ns")]);
            assert_eq!(
                secret_ref(kind, &params, "pv", &claim(&annotations)),
                Ok(sref("old", "old-ns"))
            );
        }
    }
}

#[test]
fn pv_secret_refs_fill_every_pv_field() {
    let annotations = claim_annotations();
    let params = map(&[
        (PREFIXED_DEFAULT_SECRET_NAME_KEY, "default"),
        (PREFIXED_DEFAULT_SECRET_NAMESPACE_KEY, "${pvc.namespace}"),
        (PREFIXED_NODE_STAGE_SECRET_NAME_KEY, "stage-${pvc.name}"),
        (PREFIXED_NODE_STAGE_SECRET_NAMESPACE_KEY, "stage"),
    ]);
    let refs = pv_secret_refs(&params, "pv", &claim(&annotations)).unwrap();
    assert_eq!(refs.controller_publish, sref("default", "apps"));
    assert_eq!(refs.node_stage, sref("stage-data-web-0", "stage"));
    assert_eq!(refs.node_publish, sref("default", "apps"));
    assert_eq!(refs.controller_expand, sref("default", "apps"));
    assert_eq!(refs.node_expand, sref("default", "apps"));
    assert_eq!(refs.controller_modify, sref("default", "apps"));
    assert_eq!(
        pv_secret_refs(&BTreeMap::new(), "pv", &claim(&annotations)),
        Ok(PvSecretRefs::default())
    );
}

fn pv(annotations: &[(&str, &str)], class: Option<&str>, claim_ref: bool) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pvc-1".into()),
            annotations: Some(map(annotations)).filter(|a| !a.is_empty()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            storage_class_name: class.map(str::to_owned),
            claim_ref: claim_ref.then(|| ObjectReference {
                name: Some("claim".into()),
                namespace: Some("team".into()),
                ..ObjectReference::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

fn class(params: &[(&str, &str)]) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some("gold".into()),
            ..ObjectMeta::default()
        },
        provisioner: "csi.example.com".into(),
        parameters: Some(map(params)),
        ..StorageClass::default()
    }
}

#[test]
#[allow(clippy::too_many_lines, reason = "table test: one row per case")]
#[allow(clippy::type_complexity, reason = "table test rows are tuples")]
fn deletion_secret_prefers_annotations_then_the_class() {
    let templated = class(&[
        (
            PREFIXED_PROVISIONER_SECRET_NAME_KEY,
            "${pvc.name}-${pv.name}",
        ),
        (
            PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY,
            "${pvc.namespace}",
        ),
    ]);
    let by_annotation = class(&[
        (
            PREFIXED_PROVISIONER_SECRET_NAME_KEY,
            "${pvc.annotations['k']}",
        ),
        (PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY, "ns"),
    ]);
    let both = [
        (ANN_DELETION_SECRET_NAME, "s"),
        (ANN_DELETION_SECRET_NAMESPACE, "n"),
    ];
    let empty = [
        (ANN_DELETION_SECRET_NAME, ""),
        (ANN_DELETION_SECRET_NAMESPACE, ""),
    ];
    let mixed = [
        (ANN_DELETION_SECRET_NAME, "s"),
        (ANN_DELETION_SECRET_NAMESPACE, ""),
    ];
    let half = [(ANN_DELETION_SECRET_NAME, "s")];
    let cases: Vec<(
        &str,
        PersistentVolume,
        Option<&StorageClass>,
        Result<Option<SecretRef>, &str>,
    )> = vec![
        (
            "annotations win over the class",
            pv(&both, Some("gold"), true),
            Some(&templated),
            Ok(sref("s", "n")),
        ),
        (
            "empty annotations mean none",
            pv(&empty, Some("gold"), true),
            Some(&templated),
            Ok(None),
        ),
        (
            "a half-empty pair means none",
            pv(&mixed, Some("gold"), true),
            Some(&templated),
            Ok(None),
        ),
        (
            "one annotation falls back to the class",
            pv(&half, Some("gold"), true),
            Some(&templated),
            Ok(sref("claim-pvc-1", "team")),
        ),
        (
            "old PV uses the class",
            pv(&[], Some("gold"), true),
            Some(&templated),
            Ok(sref("claim-pvc-1", "team")),
        ),
        (
            "beta class annotation counts",
            pv(
                &[("volume.beta.kubernetes.io/storage-class", "gold")],
                None,
                true,
            ),
            Some(&templated),
            Ok(sref("claim-pvc-1", "team")),
        ),
        (
            "no class name",
            pv(&[], None, true),
            Some(&templated),
            Ok(None),
        ),
        ("class gone", pv(&[], Some("gold"), true), None, Ok(None)),
        (
            "no claimRef",
            pv(&[], Some("gold"), false),
            Some(&templated),
            Ok(None),
        ),
        (
            "annotation templates cannot resolve at delete time",
            pv(&[], Some("gold"), true),
            Some(&by_annotation),
            Err(
                r#"failed to get secretreference for volume pvc-1: error resolving value "${pvc.annotations['k']}": invalid tokens: ["pvc.annotations['k']"]"#,
            ),
        ),
    ];
    for (name, volume, class, want) in cases {
        let got = deletion_secret(&volume, class);
        match want {
            Ok(want) => assert_eq!(got, Ok(want), "{name}"),
            Err(text) => assert_eq!(
                csi_common::logging::error_chain(&got.unwrap_err()),
                text,
                "{name}"
            ),
        }
    }
}

#[test]
fn dns_checks_match_kubernetes_validation() {
    for ok in ["a", "0", "a-b", "abc123", &"x".repeat(63)] {
        assert!(is_dns1123_label(ok), "{ok}");
        assert!(is_dns1123_subdomain(ok), "{ok}");
    }
    for bad in ["", "A", "a_b", "-a", "a-", "a.b", &"x".repeat(64)] {
        assert!(!is_dns1123_label(bad), "{bad}");
    }
    for ok in [
        "a.b",
        "a-1.b-2.c",
        &"x".repeat(253),
        &format!("{}.x", "y".repeat(100)),
    ] {
        assert!(is_dns1123_subdomain(ok), "{ok}");
    }
    for bad in [
        "",
        ".a",
        "a.",
        "a..b",
        "a.-b",
        "a_b.c",
        "A.b",
        &"x".repeat(254),
    ] {
        assert!(!is_dns1123_subdomain(bad), "{bad}");
    }
}
