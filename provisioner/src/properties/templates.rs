//! Secret-reference templates (spec §3): `${pv.name}`, `${pvc.namespace}`, `${pvc.name}` and
//! `${pvc.annotations['KEY']}` expanded as Go's `os.Expand` does, the result checked as a
//! Kubernetes name. Whatever the class and the claim hold: no panic, and either a reference
//! valid for the API server or an error.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{config, hostile};
use crate::params::{
    PREFIXED_PROVISIONER_SECRET_NAME_KEY as NAME_KEY,
    PREFIXED_PROVISIONER_SECRET_NAMESPACE_KEY as NAMESPACE_KEY,
};
use crate::secrets::{ClaimTokens, SecretError, SecretKind, secret_ref};

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, the shape of a DNS-1123 label, written independently of
/// the code under test.
fn label_shaped(s: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.chars().all(|c| ok_char(c) || c == '-')
        && s.chars().next().is_some_and(ok_char)
        && s.chars().last().is_some_and(ok_char)
}

/// kube-apiserver's check of a namespace (`IsDNS1123Label`).
fn valid_label(s: &str) -> bool {
    s.len() <= 63 && label_shaped(s)
}

/// kube-apiserver's check of an object name (`IsDNS1123Subdomain`): at most 253 characters of
/// dot-separated label-shaped parts.
fn valid_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(label_shaped)
}

/// The tokens templates may name, and some they may not.
const TOKENS: [&str; 10] = [
    "pv.name",
    "pvc.namespace",
    "pv.name",
    "pvc.namespace",
    "pvc.name",
    "pvc.annotations['team']",
    "pvc.annotations['team']",
    "pvc.annotations['missing']",
    "pvc.uid",
    "PVC.NAME",
];

/// Template pieces: mostly literals and well-formed references, sometimes malformed ones or
/// anything.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9]{1,6}",
        1 => "[a-z0-9.-]{0,6}",
        4 => proptest::sample::select(TOKENS.to_vec()).prop_map(|t| format!("${{{t}}}")),
        1 => "[a-zA-Z_][a-zA-Z0-9_]{0,6}".prop_map(|t| format!("${t}")),
        1 => proptest::sample::select(vec!["$", "${", "${}", "$$", "$1", "${@}", "}", "$é"])
            .prop_map(str::to_owned),
        1 => hostile(),
    ]
}

fn template() -> impl Strategy<Value = String> {
    proptest::collection::vec(piece(), 1..4).prop_map(|pieces| pieces.concat())
}

/// Claim names and namespaces: mostly valid Kubernetes names, sometimes anything.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", 1 => hostile()]
}

fn annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(
        prop_oneof![Just("team".to_owned()), hostile()],
        prop_oneof![name(), hostile()],
        0..3,
    )
}

/// The class's provisioner secret keys set to these templates.
fn params(name: &str, namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_KEY.to_owned(), name.to_owned()),
        (NAMESPACE_KEY.to_owned(), namespace.to_owned()),
    ])
}

/// The claim-controlled tokens, as they appear in a template.
fn names_claim_token(template: &str) -> bool {
    template.contains("${pvc.name}") || template.contains("${pvc.annotations[")
}

proptest! {
    #![proptest_config(config(1500))]

    /// No panic; a resolved reference is one kube-apiserver accepts (namespace a DNS-1123
    /// label, name a DNS-1123 subdomain), and an error says why in a message.
    #[test]
    fn a_template_resolves_to_a_valid_reference_or_a_clear_error(
        name_template in template(),
        namespace_template in template(),
        pv in prop_oneof![Just("pvc-0b2f6c1e-5d8a-4c1b-9e57-2f1a3c4d5e6f".to_owned()), name()],
        claim_name in name(),
        claim_namespace in name(),
        claim_annotations in annotations(),
    ) {
        let claim = ClaimTokens {
            name: &claim_name,
            namespace: &claim_namespace,
            annotations: Some(&claim_annotations),
        };
        let params = params(&name_template, &namespace_template);
        match secret_ref(SecretKind::Provisioner, &params, &pv, &claim) {
            Ok(Some(reference)) => {
                prop_assert!(valid_label(&reference.namespace), "{reference:?}");
                prop_assert!(valid_subdomain(&reference.name), "{reference:?}");
            }
            Ok(None) => prop_assert!(false, "both keys are set: a reference or an error"),
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                if let SecretError::Template { source, .. } = &e {
                    prop_assert!(!source.tokens.is_empty(), "{e}");
                }
            }
        }
    }

    /// The claim's author must not choose where the secret is read from: a namespace
    /// template naming `${pvc.name}` or a claim annotation never resolves (spec §3, upstream
    /// only offers `${pv.name}` and `${pvc.namespace}` there).
    #[test]
    fn a_namespace_never_comes_from_the_claim_name_or_annotations(
        before in "[a-z0-9-]{0,4}",
        token in proptest::sample::select(vec!["${pvc.name}", "${pvc.annotations['team']}"]),
        after in "[a-z0-9-]{0,4}",
        claim_name in name(),
        claim_annotations in annotations(),
    ) {
        let namespace_template = format!("{before}{token}{after}");
        prop_assert!(names_claim_token(&namespace_template));
        let claim = ClaimTokens {
            name: &claim_name,
            namespace: "ns",
            annotations: Some(&claim_annotations),
        };
        let params = params("secret", &namespace_template);
        let result = secret_ref(SecretKind::Provisioner, &params, "pv", &claim);
        let is_template_error = matches!(result, Err(SecretError::Template { .. }));
        prop_assert!(is_template_error, "{result:?}");
    }

    /// A template of literal text and known tokens is their concatenation, checked as a name
    /// (a model of `os.Expand` without the malformed cases).
    #[test]
    fn literal_text_and_known_tokens_concatenate(
        pieces in proptest::collection::vec(
            prop_oneof![
                "[a-z0-9.-]{1,6}".prop_map(|l| (l.clone(), l)),
                Just(("${pvc.name}".to_owned(), "claim".to_owned())),
                Just(("${pvc.namespace}".to_owned(), "ns".to_owned())),
                Just(("${pv.name}".to_owned(), "pv-1".to_owned())),
                Just(("${pvc.annotations['team']}".to_owned(), "blue".to_owned())),
            ],
            1..6,
        ),
    ) {
        let template: String = pieces.iter().map(|(t, _)| t.as_str()).collect();
        let expected: String = pieces.iter().map(|(_, v)| v.as_str()).collect();
        let annotations = BTreeMap::from([("team".to_owned(), "blue".to_owned())]);
        let claim = ClaimTokens { name: "claim", namespace: "ns", annotations: Some(&annotations) };
        let params = params(&template, "secrets");
        match secret_ref(SecretKind::Provisioner, &params, "pv-1", &claim) {
            Ok(Some(reference)) => {
                prop_assert_eq!(&reference.name, &expected);
                prop_assert_eq!(reference.namespace, "secrets");
            }
            Err(SecretError::InvalidName { resolved, .. }) => {
                prop_assert_eq!(&resolved, &expected);
                prop_assert!(!valid_subdomain(&expected), "{expected} is valid");
            }
            other => prop_assert!(false, "{template}: {other:?}"),
        }
    }
}
