//! `metadata.managedFields`, as kube-apiserver's field manager writes them on every create,
//! update and patch: one entry per (manager, operation, subresource) with the time of its last
//! write and the set of fields it wrote in the `FieldsV1` format (`{"f:spec":
//! {"f:volumeName": {}}}`, `"."` for a map or struct the manager created).
//!
//! The real server sends them in every GET, LIST and WATCH answer, which is why informers of
//! real sidecars spend memory and CPU on them (they are often half of an object: a bound PV of
//! the golden fixtures is 2.7 kB of JSON, 1.2 kB of it managedFields); the test bed keeps them
//! so that the sidecars' handling and the benches' memory figures match a cluster.
//!
//! What is copied: the manager is the request's `fieldManager` or else the `User-Agent` up to
//! its first `/`; the operation is `Apply` for an apply patch and `Update` for everything else;
//! `subresource` is `status` for writes to `/status`; the fields are those the write set or
//! changed, added to the fields this entry already had; a write that changes nothing leaves
//! the entries as they are; a client cannot set managedFields itself (they are replaced).
//! Simplified: lists are owned as a whole (`"f:accessModes": {}`), the real server keys the
//! items of associative and set lists (`"k:{...}"`, `"v:..."`); every map or struct below
//! `spec`/`status`/`metadata` that a write creates gets its `"."` (the real server leaves it
//! out for some structs, such as a claim's `resources`); and a field another manager takes over
//! stays in the earlier manager's entry as well (the real server moves it).

use serde_json::{Map, Value, json};

/// Metadata the server owns: never part of a manager's fields.
const SERVER_OWNED: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
    "name",
    "namespace",
    "generateName",
];

/// Top-level keys that are not fields of the object.
const NOT_FIELDS: &[&str] = &["kind", "apiVersion"];

/// Who wrote, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Writer<'a> {
    /// The field manager.
    pub(crate) manager: &'a str,
    /// `Apply` or `Update`.
    pub(crate) operation: &'static str,
    /// `Some("status")` for a write to `/status`.
    pub(crate) subresource: Option<&'a str>,
}

/// Sets `new`'s managedFields after a write by `writer` that turned `old` (`None` on create)
/// into `new`, at `time`. Whatever managedFields `new` carried are replaced.
pub(crate) fn record(old: Option<&Value>, new: &mut Value, writer: &Writer<'_>, time: &str) {
    let mut entries: Vec<Value> = old
        .and_then(|o| o["metadata"]["managedFields"].as_array().cloned())
        .unwrap_or_default();
    let changed = changed_fields(old.unwrap_or(&Value::Null), new, true);
    if !changed.is_empty() {
        let same = |e: &Value| {
            e["manager"] == writer.manager
                && e["operation"] == writer.operation
                && e["subresource"].as_str() == writer.subresource
        };
        let mut fields = Value::Object(changed);
        if let Some(i) = entries.iter().position(same) {
            let mut earlier = entries.remove(i);
            merge(&mut earlier["fieldsV1"], &fields);
            fields = earlier["fieldsV1"].take();
        }
        let mut entry = json!({
            "manager": writer.manager,
            "operation": writer.operation,
            "apiVersion": new["apiVersion"].as_str().unwrap_or("v1"),
            "time": time,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        });
        if let Some(sub) = writer.subresource {
            entry["subresource"] = json!(sub);
        }
        entries.push(entry);
    }
    if let Some(meta) = new["metadata"].as_object_mut() {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".to_owned(), Value::Array(entries));
        }
    }
}

/// The `FieldsV1` set of the fields `new` sets differently from `old` (all of them when `old`
/// is not an object).
fn changed_fields(old: &Value, new: &Value, top: bool) -> Map<String, Value> {
    let mut fields = Map::new();
    let Some(new) = new.as_object() else {
        return fields;
    };
    for (key, value) in new {
        if top && NOT_FIELDS.contains(&key.as_str()) {
            continue;
        }
        let before = old.get(key);
        if before == Some(value) || value.is_null() {
            continue;
        }
        let inner = if key == "metadata" && top {
            let mut inner = changed_fields(before.unwrap_or(&Value::Null), value, false);
            inner.retain(|k, _| !SERVER_OWNED.contains(&k.trim_start_matches("f:")));
            if inner.is_empty() {
                continue;
            }
            inner
        } else if value.is_object() {
            let mut inner = changed_fields(before.unwrap_or(&Value::Null), value, false);
            if !top && before.is_none_or(|b| !b.is_object()) {
                inner.insert(".".to_owned(), json!({}));
            }
            inner
        } else {
            Map::new()
        };
        fields.insert(format!("f:{key}"), Value::Object(inner));
    }
    fields
}

/// Adds the fields of `more` to the set `into`.
fn merge(into: &mut Value, more: &Value) {
    let (Some(into), Some(more)) = (into.as_object_mut(), more.as_object()) else {
        return;
    };
    for (key, value) in more {
        match into.get_mut(key) {
            Some(existing) => merge(existing, value),
            None => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPDATE: Writer<'static> = Writer {
        manager: "kube-controller-manager",
        operation: "Update",
        subresource: None,
    };

    #[test]
    fn a_create_owns_every_field_it_sets_but_server_metadata() {
        let mut obj = json!({
            "kind": "PersistentVolumeClaim", "apiVersion": "v1",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "1",
                         "labels": {"app": "fixtures"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": "sc", "volumeMode": "Filesystem"}
        });
        let writer = Writer {
            manager: "curl",
            ..UPDATE
        };
        record(None, &mut obj, &writer, "2026-11-21T15:35:44Z");
        // As the entry of manager "curl" in fixture objects/pvc-2-bound.json, but for the "."
        // of `resources` (the real server omits it for that struct).
        assert_eq!(
            obj["metadata"]["managedFields"],
            json!([{"manager": "curl", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-11-21T15:35:44Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                                 "f:spec": {"f:accessModes": {},
                                            "f:resources": {".": {}, "f:requests": {".": {}, "f:storage": {}}},
                                            "f:storageClassName": {}, "f:volumeMode": {}}}}])
        );
    }

    #[test]
    fn an_update_adds_an_entry_per_manager_and_subresource_with_what_it_changed() {
        let old = json!({
            "apiVersion": "v1",
            "metadata": {"name": "c", "resourceVersion": "1",
                         "managedFields": [{"manager": "curl", "operation": "Update",
                                            "fieldsV1": {"f:spec": {"f:storageClassName": {}}}}]},
            "spec": {"storageClassName": "sc"}
        });
        let mut new = old.clone();
        new["metadata"]["resourceVersion"] = json!("2");
        new["spec"]["volumeName"] = json!("pv");
        new["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
        record(Some(&old), &mut new, &UPDATE, "t1");
        let entries = new["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["manager"], "curl", "the earlier entry stays");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:metadata": {"f:annotations": {".": {}, "f:pv.kubernetes.io/bind-completed": {}}},
                   "f:spec": {"f:volumeName": {}}})
        );

        let mut status = new.clone();
        status["status"] = json!({"phase": "Bound"});
        let writer = Writer {
            subresource: Some("status"),
            ..UPDATE
        };
        record(Some(&new), &mut status, &writer, "t2");
        let entries = status["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[2]["subresource"], "status");
        assert_eq!(entries[2]["fieldsV1"], json!({"f:status": {"f:phase": {}}}));

        // The same manager again: one entry, its fields merged, its time updated.
        let mut again = new.clone();
        again["spec"]["volumeMode"] = json!("Block");
        record(Some(&new), &mut again, &UPDATE, "t3");
        let entries = again["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1]["time"], "t3");
        assert_eq!(
            entries[1]["fieldsV1"]["f:spec"],
            json!({"f:volumeName": {}, "f:volumeMode": {}})
        );
    }

    #[test]
    fn a_write_that_changes_nothing_keeps_the_entries_and_a_client_cannot_forge_them() {
        let old = json!({
            "metadata": {"name": "c", "managedFields": [{"manager": "curl", "operation": "Update"}]},
            "spec": {"a": 1}
        });
        let mut new = old.clone();
        new["metadata"]["managedFields"] = json!([{"manager": "forged"}]);
        record(Some(&old), &mut new, &UPDATE, "t");
        assert_eq!(
            new["metadata"]["managedFields"],
            old["metadata"]["managedFields"]
        );
    }
}
