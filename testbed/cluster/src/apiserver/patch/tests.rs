//! Unit tests for the patch module: the RFC 7386 and RFC 6902 appendix examples and the helpers
//! the public API does not expose. Fixture-driven tests of [`super::apply`] live in
//! `testbed/tests/apiserver_patch.rs`.

use serde_json::{Value, json};

use super::{PatchError, PatchType, apply, json_eq, merge_patch};

/// RFC 7386 Appendix A, every row: (target, patch, result).
#[test]
fn merge_patch_matches_every_rfc_7386_appendix_example() {
    let cases = [
        (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
        (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
        (json!({"a":"b"}), json!({"a":null}), json!({})),
        (
            json!({"a":"b","b":"c"}),
            json!({"a":null}),
            json!({"b":"c"}),
        ),
        (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
        (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
        (
            json!({"a":{"b":"c"}}),
            json!({"a":{"b":"d","c":null}}),
            json!({"a":{"b":"d"}}),
        ),
        (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
        (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
        (json!({"a":"b"}), json!(["c"]), json!(["c"])),
        (json!({"a":"foo"}), json!(null), json!(null)),
        (json!({"a":"foo"}), json!("bar"), json!("bar")),
        (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
        (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
        (
            json!({}),
            json!({"a":{"bb":{"ccc":null}}}),
            json!({"a":{"bb":{}}}),
        ),
    ];
    for (target, patch, expected) in cases {
        let mut result = target.clone();
        merge_patch(&mut result, &patch);
        assert_eq!(result, expected, "target {target} patch {patch}");
    }
}

fn json_patch(target: &Value, patch: &str) -> Result<Value, PatchError> {
    apply(PatchType::Json, "Example", target, patch.as_bytes())
}

/// RFC 6902 Appendix A.1-A.8, A.10, A.11, A.14 and A.16: patches that apply.
#[test]
fn json_patch_applies_the_successful_rfc_6902_appendix_examples() {
    let cases = [
        (
            json!({"foo":"bar"}),
            r#"[{"op":"add","path":"/baz","value":"qux"}]"#,
            json!({"baz":"qux","foo":"bar"}),
        ),
        (
            json!({"foo":["bar","baz"]}),
            r#"[{"op":"add","path":"/foo/1","value":"qux"}]"#,
            json!({"foo":["bar","qux","baz"]}),
        ),
        (
            json!({"baz":"qux","foo":"bar"}),
            r#"[{"op":"remove","path":"/baz"}]"#,
            json!({"foo":"bar"}),
        ),
        (
            json!({"foo":["bar","qux","baz"]}),
            r#"[{"op":"remove","path":"/foo/1"}]"#,
            json!({"foo":["bar","baz"]}),
        ),
        (
            json!({"baz":"qux","foo":"bar"}),
            r#"[{"op":"replace","path":"/baz","value":"boo"}]"#,
            json!({"baz":"boo","foo":"bar"}),
        ),
        (
            json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}),
            r#"[{"op":"move","from":"/foo/waldo","path":"/qux/thud"}]"#,
            json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}}),
        ),
        (
            json!({"foo":["all","grass","cows","eat"]}),
            r#"[{"op":"move","from":"/foo/1","path":"/foo/3"}]"#,
            json!({"foo":["all","cows","eat","grass"]}),
        ),
        (
            json!({"baz":"qux","foo":["a",2,"c"]}),
            r#"[{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}]"#,
            json!({"baz":"qux","foo":["a",2,"c"]}),
        ),
        (
            json!({"foo":"bar"}),
            r#"[{"op":"add","path":"/child","value":{"grandchild":{}}}]"#,
            json!({"foo":"bar","child":{"grandchild":{}}}),
        ),
        (
            json!({"foo":"bar"}),
            r#"[{"op":"add","path":"/baz","value":"qux","xyz":123}]"#,
            json!({"foo":"bar","baz":"qux"}),
        ),
        (
            json!({"/":9,"~1":10}),
            r#"[{"op":"test","path":"/~01","value":10}]"#,
            json!({"/":9,"~1":10}),
        ),
        (
            json!({"foo":["bar"]}),
            r#"[{"op":"add","path":"/foo/-","value":["abc","def"]}]"#,
            json!({"foo":["bar",["abc","def"]]}),
        ),
    ];
    for (target, patch, expected) in cases {
        assert_eq!(json_patch(&target, patch), Ok(expected), "patch {patch}");
    }
}

/// RFC 6902 Appendix A.9, A.12, A.13 and A.15, plus pointer and operation errors: all are the
/// generic 422 once the body is an array of objects.
#[test]
fn json_patch_rejects_the_failing_rfc_6902_appendix_examples_as_unprocessable() {
    let cases = [
        (
            json!({"baz":"qux"}),
            r#"[{"op":"test","path":"/baz","value":"bar"}]"#,
        ),
        (
            json!({"foo":"bar"}),
            r#"[{"op":"add","path":"/baz/bat","value":"qux"}]"#,
        ),
        (
            json!({"foo":"bar"}),
            r#"[{"op":"add","path":"/baz","value":"qux","op":"remove"}]"#,
        ),
        (
            json!({"/":9,"~1":10}),
            r#"[{"op":"test","path":"/~01","value":"10"}]"#,
        ),
        (json!({"a":1}), r#"[{"op":"frobnicate","path":"/a"}]"#),
        (json!({"a":1}), r#"[{"path":"/a","value":1}]"#),
        (json!({"a":1}), r#"[{"op":"add","value":1}]"#),
        (json!({"a":1}), r#"[{"op":"add","path":"/b"}]"#),
        (json!({"a":1}), r#"[{"op":"add","path":"b","value":1}]"#),
        (json!({"a":1}), r#"[{"op":"add","path":"/~2","value":1}]"#),
        (
            json!({"a":1}),
            r#"[{"op":"replace","path":"/b","value":1}]"#,
        ),
        (
            json!({"a":[1]}),
            r#"[{"op":"add","path":"/a/2","value":1}]"#,
        ),
        (
            json!({"a":[1]}),
            r#"[{"op":"add","path":"/a/01","value":1}]"#,
        ),
        (json!({"a":[1]}), r#"[{"op":"remove","path":"/a/1"}]"#),
        (json!({"a":[1]}), r#"[{"op":"remove","path":"/a/-"}]"#),
        (json!({"a":1}), r#"[{"op":"remove","path":""}]"#),
        (
            json!({"a":{"b":1}}),
            r#"[{"op":"move","from":"/a","path":"/a/c"}]"#,
        ),
        (
            json!({"a":1}),
            r#"[{"op":"copy","from":"/missing","path":"/b"}]"#,
        ),
    ];
    for (target, patch) in cases {
        assert_eq!(
            json_patch(&target, patch),
            Err(PatchError::Unprocessable),
            "patch {patch}"
        );
    }
}

#[test]
fn json_patch_is_all_or_nothing() {
    let target = json!({"a":1});
    let patch = r#"[{"op":"add","path":"/b","value":2},{"op":"test","path":"/a","value":5}]"#;
    assert_eq!(json_patch(&target, patch), Err(PatchError::Unprocessable));
    assert_eq!(target, json!({"a":1}));
}

#[test]
fn json_patch_on_the_empty_path_replaces_or_copies_the_whole_document() {
    let target = json!({"a":{"b":1}});
    assert_eq!(
        json_patch(&target, r#"[{"op":"replace","path":"","value":{"c":2}}]"#),
        Ok(json!({"c":2}))
    );
    assert_eq!(
        json_patch(&target, r#"[{"op":"copy","from":"","path":"/a/self"}]"#),
        Ok(json!({"a":{"b":1,"self":{"a":{"b":1}}}})),
    );
}

#[test]
fn json_patch_test_compares_numbers_by_value_and_null_is_a_value() {
    let target = json!({"n":1,"f":2.5,"z":null});
    let patch = r#"[{"op":"test","path":"/n","value":1.0},{"op":"test","path":"/f","value":2.5},
        {"op":"test","path":"/z","value":null},{"op":"add","path":"/m","value":null}]"#;
    assert_eq!(
        json_patch(&target, patch),
        Ok(json!({"n":1,"f":2.5,"z":null,"m":null}))
    );
    assert_eq!(
        json_patch(&target, r#"[{"op":"test","path":"/n","value":2}]"#),
        Err(PatchError::Unprocessable)
    );
}

#[test]
fn json_eq_compares_nested_values_and_numbers_by_value() {
    assert!(json_eq(
        &json!({"a":[1, {"b":2.0}]}),
        &json!({"a":[1.0, {"b":2}]})
    ));
    assert!(json_eq(&json!(u64::MAX), &json!(u64::MAX)));
    assert!(!json_eq(&json!(-1), &json!(u64::MAX)));
    assert!(!json_eq(&json!({"a":1}), &json!({"a":1,"b":2})));
    assert!(!json_eq(&json!([1, 2]), &json!([2, 1])));
    assert!(!json_eq(&json!("1"), &json!(1)));
}

#[test]
fn content_types_map_to_patch_types_ignoring_parameters_and_case() {
    let cases = [
        ("application/json-patch+json", Some(PatchType::Json)),
        ("application/merge-patch+json", Some(PatchType::Merge)),
        (
            "application/strategic-merge-patch+json",
            Some(PatchType::StrategicMerge),
        ),
        ("application/apply-patch+yaml", Some(PatchType::Apply)),
        (
            "application/merge-patch+json; charset=utf-8",
            Some(PatchType::Merge),
        ),
        (
            "Application/Strategic-Merge-Patch+JSON ;charset=UTF-8",
            Some(PatchType::StrategicMerge),
        ),
        ("  application/json-patch+json  ", Some(PatchType::Json)),
        ("application/json", None),
        ("text/plain", None),
        ("application/apply-patch+cbor", None),
        ("application/yaml", None),
        ("", None),
    ];
    for (content_type, expected) in cases {
        assert_eq!(
            PatchType::from_content_type(content_type),
            expected,
            "{content_type:?}"
        );
    }
}
