use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use proptest::prelude::*;

use super::*;

fn full_meta() -> ObjectMeta {
    let time = |s: &str| Time(s.parse().unwrap());
    ObjectMeta {
        annotations: Some(BTreeMap::from([
            ("pv.kubernetes.io/bind-completed".into(), "yes".into()),
            ("empty".into(), String::new()),
        ])),
        creation_timestamp: Some(time("2026-11-21T15:35:48Z")),
        deletion_grace_period_seconds: Some(0),
        deletion_timestamp: Some(time("2026-11-21T15:36:48Z")),
        finalizers: Some(vec!["kubernetes.io/pvc-protection".into(), "b".into()]),
        generate_name: Some("data-".into()),
        generation: Some(3),
        labels: Some(BTreeMap::from([("app".into(), "db".into())])),
        managed_fields: Some(vec![ManagedFieldsEntry::default()]),
        name: Some("data-0".into()),
        namespace: Some("ns".into()),
        owner_references: Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "StatefulSet".into(),
            name: "db".into(),
            uid: "9a4f6a3c-0d1e-4b7a-9c7e-3f1b2a5d6e7f".into(),
            ..OwnerReference::default()
        }]),
        resource_version: Some("123456".into()),
        self_link: Some("/api/v1/namespaces/ns/persistentvolumeclaims/data-0".into()),
        uid: Some("9a4f6a3c-0d1e-4b7a-9c7e-3f1b2a5d6e7f".into()),
    }
}

#[test]
fn every_field_but_managed_fields_reads_back_as_it_was() {
    let mut interner = Interner::default();
    let meta = full_meta();
    let compact = Meta::new(meta.clone(), &mut interner);
    assert!(compact.rare.is_some());
    assert_eq!(
        compact.to_object_meta(),
        ObjectMeta {
            managed_fields: None,
            ..meta
        }
    );
    assert_eq!(compact.name(), Some("data-0"));
    assert_eq!(compact.namespace(), Some("ns"));

    // Absent and empty stay apart: an empty list or map is not an absent one.
    let sparse = ObjectMeta {
        name: Some(String::new()),
        finalizers: Some(vec![]),
        labels: Some(BTreeMap::new()),
        ..ObjectMeta::default()
    };
    let compact = Meta::new(sparse.clone(), &mut interner);
    assert!(compact.rare.is_none(), "nothing rare is set");
    assert_eq!(compact.to_object_meta(), sparse);
    assert_eq!(
        Meta::new(ObjectMeta::default(), &mut interner).to_object_meta(),
        ObjectMeta::default()
    );
}

#[test]
fn objects_share_their_common_strings() {
    let mut interner = Interner::default();
    let a = Meta::new(full_meta(), &mut interner);
    let mut other = full_meta();
    other.name = Some("data-1".into());
    other.uid = Some("0f4f6a3c-0d1e-4b7a-9c7e-3f1b2a5d6e7f".into());
    let b = Meta::new(other, &mut interner);
    let shared = |x: &Option<SharedPairs>, y: &Option<SharedPairs>| {
        Arc::ptr_eq(x.as_ref().unwrap(), y.as_ref().unwrap())
    };
    assert!(shared(&a.annotations, &b.annotations));
    assert!(shared(&a.labels, &b.labels));
    assert!(Arc::ptr_eq(
        a.finalizers.as_ref().unwrap(),
        b.finalizers.as_ref().unwrap()
    ));
    assert!(Arc::ptr_eq(
        a.namespace.as_ref().unwrap(),
        b.namespace.as_ref().unwrap()
    ));
}

#[test]
fn tokens_keep_the_usual_forms_in_place_and_everything_else_as_text() {
    let uuid = "9a4f6a3c-0d1e-4b7a-9c7e-3f1b2a5d6e7f";
    for (text, in_place) in [
        (uuid, true),
        ("00000000-0000-0000-0000-000000000000", true),
        ("ffffffff-ffff-ffff-ffff-ffffffffffff", true),
        ("9A4F6A3C-0D1E-4B7A-9C7E-3F1B2A5D6E7F", false),
        ("9a4f6a3c-0d1e-4b7a-9c7e-3f1b2a5d6e7", false),
        ("9a4f6a3c00d1e-4b7a-9c7e-3f1b2a5d6e7f", false),
        ("9a4f6a3c-0d1e-4b7a-9c7e-3f1b2a5d6e7g", false),
        ("0", true),
        ("7", true),
        ("18446744073709551615", true),
        ("18446744073709551616", false),
        ("007", false),
        ("+7", false),
        ("-7", false),
        ("", false),
        ("u-1", false),
        ("ａ", false),
    ] {
        let token = Token::new(text.to_owned());
        assert_eq!(token.to_text(), text);
        assert_eq!(!matches!(token.0, Repr::Text(_)), in_place, "{text:?}");
    }
    assert!(std::mem::size_of::<Option<Token>>() <= 24);
}

#[test]
fn the_compact_form_is_a_fraction_of_object_meta() {
    let (compact, full) = (
        std::mem::size_of::<Meta>(),
        std::mem::size_of::<ObjectMeta>(),
    );
    assert!(
        2 * compact <= full,
        "Meta is {compact} bytes, ObjectMeta {full}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, rng_seed: proptest::test_runner::RngSeed::Fixed(13), ..ProptestConfig::default() })]

    /// Any text reads back as it was: short strings over the characters of UUIDs and numbers,
    /// and arbitrary strings.
    #[test]
    fn a_token_reads_back_as_its_text(text in prop_oneof![
        "[0-9a-fA-F-]{0,40}",
        "[0-9]{1,21}",
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        any::<String>(),
    ]) {
        prop_assert_eq!(Token::new(text.clone()).to_text(), text);
    }
}

#[test]
fn a_reference_reads_back_as_it_was_and_shares_its_kind_and_namespace() {
    let mut interner = Interner::default();
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        field_path: Some("spec".into()),
        kind: Some("PersistentVolumeClaim".into()),
        name: Some("data-0".into()),
        namespace: Some("ns".into()),
        resource_version: Some("368".into()),
        uid: Some("e53a3fcd-672e-40ed-a167-7a8c6bc87f93".into()),
    };
    let a = Reference::new(reference.clone(), &mut interner);
    assert_eq!(a.to_object_reference(), reference);
    let b = Reference::new(
        ObjectReference {
            name: Some("data-1".into()),
            ..reference
        },
        &mut interner,
    );
    assert!(Arc::ptr_eq(
        a.kind.as_ref().unwrap(),
        b.kind.as_ref().unwrap()
    ));
    assert!(Arc::ptr_eq(
        a.namespace.as_ref().unwrap(),
        b.namespace.as_ref().unwrap()
    ));
    let empty = ObjectReference::default();
    assert_eq!(
        Reference::new(empty.clone(), &mut interner).to_object_reference(),
        empty
    );
}
