//! What kube-apiserver does to an object between decoding and validation: defaulting, the
//! admission plugins that matter to CSI sidecars (StorageObjectInUseProtection adds the
//! `kubernetes.io/pvc-protection` / `kubernetes.io/pv-protection` finalizers, DefaultStorageClass
//! fills `storageClassName`) and the registry strategies (server-owned metadata, status reset on
//! create, status/spec split between the main resource and `/status`, `generation`).
//!
//! managedFields sent by a client are dropped here; the handlers then record the server's own
//! (`super::managed`), as kube-apiserver's field manager does.

use serde_json::{Map, Value, json};

use super::resources::ResourceInfo;
use super::store::Inner;

/// Annotation marking the default StorageClass (DefaultStorageClass admission).
const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subresource {
    /// The main resource: everything but status (for kinds with a status subresource).
    Main,
    /// `/status`: status and metadata, never spec.
    Status,
}

/// The current time as Kubernetes serializes `metav1.Time` (seconds, UTC).
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A random version-4 UUID.
pub(crate) fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A name from `generateName`: the prefix (cut to 58 bytes) plus five random characters from
/// upstream's alphabet (no vowels, no confusable digits).
pub(crate) fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut name = prefix[..cut].to_owned();
    for _ in 0..5 {
        name.push(ALPHABET[fastrand::usize(..ALPHABET.len())] as char);
    }
    name
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable!("metadata was just made an object"),
    }
}

fn obj_mut<'a>(obj: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !obj[key].is_object() {
        obj[key] = json!({});
    }
    match obj.get_mut(key).and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable!("the field was just made an object"),
    }
}

fn default_field(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_owned(), value);
    }
}

fn add_finalizer_last(obj: &mut Value, finalizer: &str) {
    let meta = meta_mut(obj);
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(items) = list.as_array_mut()
        && !items.iter().any(|f| f == finalizer)
    {
        items.push(json!(finalizer));
    }
}

/// Add Go's zero-valued fields the object lacks (`status.attached: false`, `"source":{}`, ...).
pub(crate) fn fill_zero(info: &ResourceInfo, obj: &mut Value) {
    fn fill(target: &mut Value, zero: &Value) {
        let (Value::Object(t), Value::Object(z)) = (target, zero) else {
            return;
        };
        for (k, zv) in z {
            match t.get_mut(k) {
                None => {
                    t.insert(k.clone(), zv.clone());
                }
                Some(tv) if tv.is_null() && !zv.is_null() => *tv = zv.clone(),
                Some(tv) => fill(tv, zv),
            }
        }
    }
    fill(obj, &info.zero_value());
}

/// Normalizations Go's encoding implies: condition timestamps that are unset are `null`
/// (fixture i14: `"lastProbeTime":null,"lastTransitionTime":null`).
pub(crate) fn normalize(info: &ResourceInfo, obj: &mut Value) {
    if matches!(info.plural, "persistentvolumeclaims" | "pods") && info.group.is_empty() {
        let conditions = obj
            .get_mut("status")
            .and_then(|s| s.get_mut("conditions"))
            .and_then(Value::as_array_mut);
        if let Some(conditions) = conditions {
            for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
                for key in ["lastProbeTime", "lastTransitionTime"] {
                    c.entry(key).or_insert(Value::Null);
                }
            }
        }
    }
    fill_zero(info, obj);
}

/// Mutating admission and defaulting of a new object (before generateName and validation).
pub(crate) fn admit_create(info: &ResourceInfo, obj: &mut Value, store: &Inner) {
    match (info.group, info.plural) {
        ("", "persistentvolumeclaims") => {
            let spec = obj_mut(obj, "spec");
            default_field(spec, "volumeMode", json!("Filesystem"));
            if !spec.contains_key("storageClassName")
                && let Some(class) = default_storage_class(store)
            {
                spec.insert("storageClassName".to_owned(), json!(class));
            }
            add_finalizer_last(obj, "kubernetes.io/pvc-protection");
        }
        ("", "persistentvolumes") => {
            let spec = obj_mut(obj, "spec");
            default_field(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            default_field(spec, "volumeMode", json!("Filesystem"));
            add_finalizer_last(obj, "kubernetes.io/pv-protection");
        }
        ("", "secrets") => {
            if let Some(map) = obj.as_object_mut() {
                default_field(map, "type", json!("Opaque"));
            }
        }
        ("", "namespaces") => {
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
            let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert("kubernetes.io/metadata.name".to_owned(), json!(name));
            }
            default_field(obj_mut(obj, "spec"), "finalizers", json!(["kubernetes"]));
        }
        ("", "pods") => default_pod(obj),
        ("storage.k8s.io", "storageclasses") => {
            if let Some(map) = obj.as_object_mut() {
                default_field(map, "reclaimPolicy", json!("Delete"));
                default_field(map, "volumeBindingMode", json!("Immediate"));
            }
        }
        ("storage.k8s.io", "csidrivers") => {
            let spec = obj_mut(obj, "spec");
            default_field(spec, "attachRequired", json!(true));
            default_field(spec, "podInfoOnMount", json!(false));
            default_field(spec, "volumeLifecycleModes", json!(["Persistent"]));
            default_field(spec, "storageCapacity", json!(false));
            default_field(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
            default_field(spec, "requiresRepublish", json!(false));
            default_field(spec, "seLinuxMount", json!(false));
        }
        _ => {}
    }
}

fn default_pod(obj: &mut Value) {
    let spec = obj_mut(obj, "spec");
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_field(spec, "enableServiceLinks", json!(true));
    default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    default_field(spec, "priority", json!(0));
    if let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) {
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let image = c
                .get("image")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let tag = image
                .rsplit('/')
                .next()
                .unwrap_or("")
                .split_once(':')
                .map(|(_, t)| t.to_owned());
            let pull = if tag.is_none() || tag.as_deref() == Some("latest") {
                "Always"
            } else {
                "IfNotPresent"
            };
            default_field(c, "imagePullPolicy", json!(pull));
            default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
            default_field(c, "terminationMessagePolicy", json!("File"));
            default_field(c, "resources", json!({}));
        }
    }
}

fn default_storage_class(store: &Inner) -> Option<String> {
    store
        .range("storageclasses", "/")
        .into_iter()
        .filter(|(_, sc)| sc["metadata"]["annotations"][DEFAULT_CLASS_ANNOTATION] == "true")
        .max_by(|(_, a), (_, b)| {
            let ts = |o: &Value| {
                o["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
            };
            ts(a).cmp(&ts(b))
        })
        .and_then(|(_, sc)| sc["metadata"]["name"].as_str().map(str::to_owned))
}

/// Registry `PrepareForCreate`: server-owned metadata and the initial status.
pub(crate) fn prepare_create(info: &ResourceInfo, obj: &mut Value) {
    let now = now();
    let meta = meta_mut(obj);
    for key in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    ] {
        meta.remove(key);
    }
    meta.insert("uid".to_owned(), json!(new_uid()));
    meta.insert("creationTimestamp".to_owned(), json!(now));
    if info.generation {
        meta.insert("generation".to_owned(), json!(1));
    } else {
        meta.remove("generation");
    }
    if info.status_subresource {
        let keep_status = matches!(info.plural, "nodes");
        if !keep_status && let Some(map) = obj.as_object_mut() {
            map.remove("status");
        }
        let status = obj_mut(obj, "status");
        match (info.group, info.plural) {
            ("", "persistentvolumeclaims") => {
                status.insert("phase".to_owned(), json!("Pending"));
            }
            ("", "persistentvolumes") => {
                status.insert("phase".to_owned(), json!("Pending"));
                status.insert("lastPhaseTransitionTime".to_owned(), json!(now));
            }
            ("", "namespaces") => {
                status.insert("phase".to_owned(), json!("Active"));
            }
            ("", "pods") => {
                status.insert("phase".to_owned(), json!("Pending"));
                status.insert("qosClass".to_owned(), json!("BestEffort"));
            }
            _ => {}
        }
        if obj["status"].as_object().is_some_and(Map::is_empty)
            && info.custom
            && let Some(map) = obj.as_object_mut()
        {
            map.remove("status");
        }
    }
    normalize(info, obj);
}

/// Everything of an object except metadata and status (what `generation` tracks).
fn spec_part(obj: &Value) -> Map<String, Value> {
    obj.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "kind" | "apiVersion")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Registry `PrepareForUpdate`: keep server-owned metadata, split spec and status.
pub(crate) fn prepare_update(info: &ResourceInfo, old: &Value, new: &mut Value, sub: Subresource) {
    let now = now();
    let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
    {
        let meta = meta_mut(new);
        for key in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ] {
            match old_meta.get(key) {
                Some(v) => {
                    meta.insert(key.to_owned(), v.clone());
                }
                None => {
                    meta.remove(key);
                }
            }
        }
        meta.remove("managedFields");
        meta.remove("selfLink");
    }
    if info.status_subresource
        && let Some(map) = new.as_object_mut()
    {
        match sub {
            Subresource::Main => match old.get("status") {
                Some(s) => {
                    map.insert("status".to_owned(), s.clone());
                }
                None => {
                    map.remove("status");
                }
            },
            Subresource::Status => {
                let status = map.remove("status");
                map.retain(|k, _| matches!(k.as_str(), "metadata" | "kind" | "apiVersion"));
                for (k, v) in spec_part(old) {
                    map.insert(k, v);
                }
                if let Some(status) = status {
                    map.insert("status".to_owned(), status);
                }
            }
        }
    }
    if info.generation && spec_part(old) != spec_part(new) {
        let next = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        meta_mut(new).insert("generation".to_owned(), json!(next));
    }
    if info.plural == "persistentvolumes"
        && info.group.is_empty()
        && old["status"]["phase"] != new["status"]["phase"]
    {
        obj_mut(new, "status").insert("lastPhaseTransitionTime".to_owned(), json!(now));
    }
    normalize(info, new);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources;
    use crate::apiserver::store::Store;

    #[test]
    fn generated_names_use_the_prefix_and_five_safe_characters() {
        let name = generate_name("csisc-");
        assert_eq!(name.len(), 11);
        assert!(name.starts_with("csisc-"));
        assert!(
            name[6..]
                .bytes()
                .all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c))
        );
        assert_eq!(generate_name(&"a".repeat(80)).len(), 63);
    }

    #[test]
    fn uids_look_like_version_4_uuids() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert_ne!(uid, new_uid());
    }

    #[test]
    fn a_new_pvc_gets_volume_mode_protection_finalizer_and_pending_phase() {
        let info = resources::find("", "v1", "persistentvolumeclaims").unwrap();
        let store = Store::new(10);
        let mut obj = json!({"metadata": {"name": "x", "finalizers": ["a/b"]}, "spec": {}, "status": {"phase": "Bound"}});
        admit_create(info, &mut obj, &store.lock());
        prepare_create(info, &mut obj);
        assert_eq!(obj["spec"]["volumeMode"], "Filesystem");
        assert_eq!(
            obj["metadata"]["finalizers"],
            json!(["a/b", "kubernetes.io/pvc-protection"])
        );
        assert_eq!(obj["status"], json!({"phase": "Pending"}));
    }

    #[test]
    fn a_status_update_keeps_the_spec_and_a_main_update_keeps_the_status() {
        let info = resources::find("", "v1", "persistentvolumeclaims").unwrap();
        let old = json!({"metadata": {"name": "x", "uid": "u"}, "spec": {"a": 1}, "status": {"phase": "Pending"}});
        let mut via_status = json!({"metadata": {"name": "x", "labels": {"l": "v"}}, "spec": {"a": 2}, "status": {"phase": "Bound"}});
        prepare_update(info, &old, &mut via_status, Subresource::Status);
        assert_eq!(via_status["spec"]["a"], 1);
        assert_eq!(via_status["status"]["phase"], "Bound");
        assert_eq!(via_status["metadata"]["labels"]["l"], "v");
        assert_eq!(via_status["metadata"]["uid"], "u");
        let mut via_main =
            json!({"metadata": {"name": "x"}, "spec": {"a": 2}, "status": {"phase": "Lost"}});
        prepare_update(info, &old, &mut via_main, Subresource::Main);
        assert_eq!(via_main["spec"]["a"], 2);
        assert_eq!(via_main["status"]["phase"], "Pending");
    }

    #[test]
    fn a_volume_attachment_always_has_attached_false() {
        let info = resources::find("storage.k8s.io", "v1", "volumeattachments").unwrap();
        let mut obj = json!({"metadata": {"name": "va"}, "spec": {"attacher": "x", "source": {"persistentVolumeName": "pv"}, "nodeName": "n"}, "status": {"attached": true}});
        prepare_create(info, &mut obj);
        assert_eq!(obj["status"], json!({"attached": false}));
    }
}
