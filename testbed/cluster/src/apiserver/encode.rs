//! JSON encoding in kube-apiserver's field order.
//!
//! The store keeps objects as `serde_json::Value` (keys sorted), but Go encodes struct fields in
//! declaration order: `kind`, `apiVersion`, `metadata` (name, generateName, namespace, uid,
//! resourceVersion, ...), then the kind's own fields. Clients do not care, but fixtures compared
//! byte for byte (and humans reading `curl` output) do, so the top level and `metadata` are
//! written in Go's order; deeper levels stay sorted.

use serde_json::Value;

use super::resources::ResourceInfo;

/// Go's field order of `ObjectMeta`.
pub(crate) const METADATA_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

const LIST_METADATA_ORDER: &[&str] = &["resourceVersion", "continue", "remainingItemCount"];

/// Field order of the object at a path (`[]` = the root, `"[]"` = any array item).
pub(crate) type OrderFn<'a> = &'a dyn Fn(&[&str]) -> Option<&'static [&'static str]>;

/// Write `value`; in every object whose path `order` knows, the listed keys come first (in that
/// order) and the rest follow sorted; objects at other paths are written sorted.
pub(crate) fn write_ordered(out: &mut Vec<u8>, value: &Value, order: OrderFn<'_>) {
    let mut path = Vec::new();
    write_at(out, value, &mut path, order, &[]);
}

/// Top-level keys a LIST leaves out of the items of built-in kinds.
const TYPE_KEYS: &[&str] = &["kind", "apiVersion"];

fn write_at<'v>(
    out: &mut Vec<u8>,
    value: &'v Value,
    path: &mut Vec<&'v str>,
    order: OrderFn<'_>,
    skip: &[&str],
) {
    match value {
        Value::Object(map) => {
            let keys = ordered(map, order(path).unwrap_or(&[]))
                .filter(|(k, _)| !skip.contains(&k.as_str()));
            out.push(b'{');
            for (i, (key, val)) in keys.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_plain(out, key);
                out.push(b':');
                path.push(key.as_str());
                write_at(out, val, path, order, &[]);
                path.pop();
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                path.push("[]");
                write_at(out, item, path, order, &[]);
                path.pop();
            }
            out.push(b']');
        }
        other => write_plain(out, other),
    }
}

fn write_plain(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    // Serializing a `Value` or a string into a Vec cannot fail.
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.extend_from_slice(b"null");
    }
}

/// Encode one object of `info`'s kind (GET/POST/PUT/PATCH responses and watch events).
pub(crate) fn object_bytes(info: &ResourceInfo, object: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    write_object(&mut out, info, object, &[]);
    out
}

/// Write one object of `info`'s kind without its top-level keys in `skip`: the top level and
/// `metadata` in Go's order, every other value as serde_json writes it (keys sorted, which is
/// what [`write_at`] does where no order is given, without walking the tree key by key: this
/// encoder runs for every answer and watch event of the bench's thousands of objects).
fn write_object(out: &mut Vec<u8>, info: &ResourceInfo, object: &Value, skip: &[&str]) {
    let Value::Object(map) = object else {
        write_plain(out, object);
        return;
    };
    out.push(b'{');
    let mut first = true;
    for (key, value) in ordered(map, info.top_order) {
        if skip.contains(&key.as_str()) {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_plain(out, key);
        out.push(b':');
        match value {
            Value::Object(metadata) if key == "metadata" => {
                out.push(b'{');
                for (i, (key, value)) in ordered(metadata, METADATA_ORDER).enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_plain(out, key);
                    out.push(b':');
                    write_plain(out, value);
                }
                out.push(b'}');
            }
            other => write_plain(out, other),
        }
    }
    out.push(b'}');
}

/// The entries of `map`: those named in `first` in that order, then the rest sorted.
fn ordered<'m>(
    map: &'m serde_json::Map<String, Value>,
    first: &'static [&'static str],
) -> impl Iterator<Item = (&'m String, &'m Value)> {
    first
        .iter()
        .filter_map(|k| map.get_key_value(*k))
        .chain(map.iter().filter(|(k, _)| !first.contains(&k.as_str())))
}

/// Encode a list: `{"kind":"<Kind>List","apiVersion":..,"metadata":{..},"items":[..]}`, the
/// items without their kind and apiVersion with `strip_type`.
pub(crate) fn list_bytes(
    info: &ResourceInfo,
    metadata: &Value,
    items: &[impl std::ops::Deref<Target = Value>],
    strip_type: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + items.len() * 512);
    out.extend_from_slice(b"{\"kind\":");
    write_plain(&mut out, &format!("{}List", info.kind));
    out.extend_from_slice(b",\"apiVersion\":");
    write_plain(&mut out, &info.api_version());
    out.extend_from_slice(b",\"metadata\":");
    write_ordered(&mut out, metadata, &|path| {
        path.is_empty().then_some(LIST_METADATA_ORDER)
    });
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_object(
            &mut out,
            info,
            item,
            if strip_type { TYPE_KEYS } else { &[] },
        );
    }
    out.extend_from_slice(b"]}");
    out
}

/// Encode one watch event line (without the trailing newline).
pub(crate) fn watch_event_bytes(event_type: &str, object_json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(object_json.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object_json);
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ordered_writing_puts_listed_keys_first_and_sorts_the_rest() {
        let value = json!({"z": 1, "b": {"y": 1, "x": 2}, "a": [{"q": 1, "p": 2}], "kind": "K"});
        let mut out = Vec::new();
        write_ordered(&mut out, &value, &|path| match path {
            [] => Some(&["kind", "b"][..]),
            ["b"] => Some(&["y", "x"][..]),
            ["a", "[]"] => Some(&["q"][..]),
            _ => None,
        });
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"kind":"K","b":{"y":1,"x":2},"a":[{"q":1,"p":2}],"z":1}"#
        );
    }

    #[test]
    fn an_object_is_written_as_the_general_ordered_writer_writes_it() {
        let info = super::super::resources::find("", "v1", "persistentvolumeclaims")
            .expect("a built-in resource");
        let object = json!({
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}, "accessModes": ["ReadWriteOnce"]},
            "metadata": {"uid": "u", "name": "data", "annotations": {"b": "\u{1}\"", "a": "x"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}], "namespace": "default"},
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "zzz": null,
        });
        let order = |path: &[&str]| match path {
            [] => Some(info.top_order),
            ["metadata"] => Some(METADATA_ORDER),
            _ => None,
        };
        for skip in [&[][..], TYPE_KEYS] {
            let mut general = Vec::new();
            write_at(&mut general, &object, &mut Vec::new(), &order, skip);
            let mut fast = Vec::new();
            write_object(&mut fast, info, &object, skip);
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                String::from_utf8(general).unwrap(),
                "skip {skip:?}"
            );
        }
    }
}
