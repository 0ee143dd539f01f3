//! Helpers for informer caches that hold projections of Kubernetes objects (only the fields a
//! sidecar reads) instead of whole k8s-openapi objects.
//!
//! k8s-openapi's types hold every field inline: `PersistentVolume` is 3472 bytes before any
//! string, most of it an `Option` for each of some thirty in-tree volume sources. A projection
//! names only the fields the sidecar reads (serde skips the others, which also saves reading
//! them) and, through [`same_resource_as!`](crate::same_resource_as), has the group, version,
//! kind and plural of the real type, so `kube::Api`, the watch and the object references of
//! Events are the same as with the real type. docs/bench.md has what this saved in the attacher
//! and the resizer.
//!
//! Fields that k8s-openapi treats as required must read an absent or `null` value as the
//! default, as k8s-openapi's own deserializers do: give them
//! `#[serde(default, deserialize_with = "csi_common::cached::required")]`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

mod meta;

pub use self::meta::{Meta, Reference};

/// k8s-openapi's reading of a required field: absent (with `#[serde(default)]`) or `null` is
/// the default value.
///
/// # Errors
///
/// The deserializer's error when the value is neither `null` nor a `T`.
pub fn required<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `metadata` as k8s-openapi reads it (absent or `null` is the default `ObjectMeta`), without
/// reading `managedFields`: the API server sends them on every object of every list and watch
/// event (often half the object), and k8s-openapi would build a `serde_json::Value` tree of
/// each entry only for a cache to drop it. Skipped here as any unknown field is, so the result is
/// k8s-openapi's `ObjectMeta` with `managed_fields: None`.
///
/// # Errors
///
/// The deserializer's error when the value is neither `null` nor an object's metadata.
pub fn meta_without_managed_fields<'de, D>(deserializer: D) -> Result<ObjectMeta, D::Error>
where
    D: Deserializer<'de>,
{
    let meta = Option::<MetaWire>::deserialize(deserializer)?;
    Ok(meta.map(MetaWire::into_object_meta).unwrap_or_default())
}

/// Every field of `ObjectMeta` but `managedFields`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaWire {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl MetaWire {
    fn into_object_meta(self) -> ObjectMeta {
        ObjectMeta {
            annotations: self.annotations,
            creation_timestamp: self.creation_timestamp,
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            deletion_timestamp: self.deletion_timestamp,
            finalizers: self.finalizers,
            generate_name: self.generate_name,
            generation: self.generation,
            labels: self.labels,
            managed_fields: None,
            name: self.name,
            namespace: self.namespace,
            owner_references: self.owner_references,
            resource_version: self.resource_version,
            self_link: self.self_link,
            uid: self.uid,
        }
    }
}

/// A map with string keys read as k8s-openapi reads it (`null` is absent), kept as a list
/// sorted by key.
///
/// A `BTreeMap<String, String>` allocates a node with room for eleven entries (544 bytes) even
/// for the one or two annotations, volume attributes or capacities an object usually has; look
/// a key up in the list with [`lookup`].
///
/// # Errors
///
/// The deserializer's error when the value is neither `null` nor a map of strings.
#[allow(clippy::type_complexity, reason = "serde's deserialize_with signature")]
pub fn sorted_pairs<'de, D, V>(deserializer: D) -> Result<Option<Box<[(String, V)]>>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    let map = Option::<BTreeMap<String, V>>::deserialize(deserializer)?;
    Ok(map.map(|map| map.into_iter().collect()))
}

/// The value of `key` in a list sorted by key, as [`sorted_pairs`] makes it.
#[must_use]
pub fn lookup<'a, V>(pairs: &'a [(String, V)], key: &str) -> Option<&'a V> {
    pairs
        .binary_search_by(|(k, _)| k.as_str().cmp(key))
        .ok()
        .map(|i| &pairs[i].1)
}

/// Makes `$projection` the same Kubernetes resource as `$real`: the group, version, kind,
/// plural and scope of `$real` (`k8s_openapi::Resource`, hence `kube::Resource`), and its
/// `metadata` field, an `ObjectMeta`, as the object's metadata (`k8s_openapi::Metadata`).
///
/// The calling crate must depend on `k8s_openapi`.
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
/// use kube::Resource as _;
///
/// /// A Secret cut down to its metadata.
/// #[derive(serde::Deserialize)]
/// struct SecretMeta {
///     #[serde(default, deserialize_with = "csi_common::cached::required")]
///     metadata: ObjectMeta,
/// }
/// csi_common::same_resource_as!(SecretMeta, k8s_openapi::api::core::v1::Secret);
///
/// assert_eq!(SecretMeta::url_path(&(), Some("ns")), "/api/v1/namespaces/ns/secrets");
/// ```
#[macro_export]
macro_rules! same_resource_as {
    ($projection:ty, $real:ty) => {
        impl ::k8s_openapi::Resource for $projection {
            const API_VERSION: &'static str = <$real as ::k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$real as ::k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$real as ::k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$real as ::k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$real as ::k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$real as ::k8s_openapi::Resource>::Scope;
        }

        impl ::k8s_openapi::Metadata for $projection {
            type Ty = ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::Resource as _;
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    /// A ConfigMap cut down to its metadata, one required-style field and its data as a list.
    #[derive(Debug, Default, PartialEq, Deserialize)]
    struct Projection {
        #[serde(default, deserialize_with = "required")]
        metadata: ObjectMeta,
        #[serde(default, deserialize_with = "required")]
        immutable: bool,
        #[serde(default, deserialize_with = "sorted_pairs")]
        data: Option<Box<[(String, String)]>>,
    }

    crate::same_resource_as!(Projection, ConfigMap);

    #[test]
    fn a_projection_is_the_resource_it_projects() {
        assert_eq!(
            Projection::url_path(&(), Some("ns")),
            ConfigMap::url_path(&(), Some("ns"))
        );
        assert_eq!(Projection::api_version(&()), ConfigMap::api_version(&()));
        assert_eq!(Projection::kind(&()), ConfigMap::kind(&()));
        assert_eq!(Projection::group(&()), ConfigMap::group(&()));
        assert_eq!(Projection::plural(&()), ConfigMap::plural(&()));
        let mut p = Projection::default();
        p.meta_mut().name = Some("n".into());
        assert_eq!(p.metadata.name.as_deref(), Some("n"));
        assert_eq!(p.meta().name.as_deref(), Some("n"));
    }

    #[test]
    fn required_fields_read_absent_and_null_as_the_default() {
        let absent: Projection = serde_json::from_value(json!({})).unwrap();
        assert_eq!(absent, Projection::default());
        let null: Projection =
            serde_json::from_value(json!({"metadata": null, "immutable": null, "data": null}))
                .unwrap();
        assert_eq!(null, Projection::default());
        let set: Projection = serde_json::from_value(
            json!({"metadata": {"name": "n"}, "immutable": true, "kind": "ConfigMap"}),
        )
        .unwrap();
        assert_eq!(set.metadata.name.as_deref(), Some("n"));
        assert!(set.immutable);
        assert!(serde_json::from_value::<Projection>(json!({"immutable": "yes"})).is_err());
    }

    #[test]
    fn sorted_pairs_keep_every_entry_sorted_by_key() {
        let p: Projection =
            serde_json::from_value(json!({"data": {"b": "2", "a": "1", "c": ""}})).unwrap();
        let pairs = p.data.unwrap();
        assert_eq!(
            &*pairs,
            &[
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "2".to_owned()),
                ("c".to_owned(), String::new()),
            ]
        );
        assert_eq!(lookup(&pairs, "a").map(String::as_str), Some("1"));
        assert_eq!(lookup(&pairs, "c").map(String::as_str), Some(""));
        assert_eq!(lookup(&pairs, "d"), None);
        assert_eq!(lookup::<String>(&[], "a"), None);
        let empty: Projection = serde_json::from_value(json!({"data": {}})).unwrap();
        assert_eq!(empty.data.as_deref(), Some(&[][..]));
        assert!(serde_json::from_value::<Projection>(json!({"data": {"a": 1}})).is_err());
    }

    #[test]
    fn metadata_reads_as_k8s_openapi_reads_it_but_for_managed_fields() {
        #[derive(Debug, Deserialize)]
        struct Object {
            #[serde(default, deserialize_with = "meta_without_managed_fields")]
            metadata: ObjectMeta,
        }
        let full = json!({
            "name": "data-0", "namespace": "ns", "uid": "9a4f6a3c-0d1e-4b7a-9c7e-3f1b2a5d6e7f",
            "resourceVersion": "7", "generation": 2, "generateName": "data-",
            "selfLink": "/api/v1/namespaces/ns/persistentvolumeclaims/data-0",
            "creationTimestamp": "2026-11-21T15:35:48Z",
            "deletionTimestamp": "2026-11-21T15:36:48Z", "deletionGracePeriodSeconds": 0,
            "labels": {"app": "db"}, "annotations": {"a": "1", "b": ""},
            "finalizers": ["kubernetes.io/pvc-protection"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                                 "uid": "1", "controller": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                               "apiVersion": "v1", "time": "2026-11-21T15:35:48Z",
                               "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}}}],
            "somethingNew": {"x": 1}
        });
        for value in [
            full,
            json!({}),
            json!(null),
            json!({"name": null, "labels": null, "managedFields": null}),
        ] {
            let real: ObjectMeta = serde_json::from_value(value.clone()).unwrap_or_default();
            let read: Object = serde_json::from_value(json!({"metadata": value})).unwrap();
            assert_eq!(
                read.metadata,
                ObjectMeta {
                    managed_fields: None,
                    ..real
                }
            );
        }
        let absent: Object = serde_json::from_value(json!({})).unwrap();
        assert_eq!(absent.metadata, ObjectMeta::default());
        for bad in [json!({"name": 5}), json!({"labels": ["a"]}), json!("meta")] {
            assert!(serde_json::from_value::<Object>(json!({"metadata": bad})).is_err());
        }
    }
}
