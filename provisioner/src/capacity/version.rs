//! The version of CSIStorageCapacity the API server serves (spec provisioner.md §2.7): v1 since
//! Kubernetes 1.24, v1beta1 in 1.21-1.26 (removed in 1.27). The start-up probe picks one
//! ([`super::owner::probe`]); the informer and every write use it.
//!
//! v1beta1 has v1's fields, so objects are v1's type wrapped in [`Capacity`], whose version is
//! its kube dynamic type (the URL) rather than a second copy of the struct.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::DynamicResourceScope;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Which storage.k8s.io version CSIStorageCapacity objects are read and written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum CapacityVersion {
    /// storage.k8s.io/v1 (Kubernetes >= 1.24).
    #[default]
    V1,
    /// storage.k8s.io/v1beta1 (Kubernetes 1.21-1.23: v1 not served).
    V1beta1,
}

impl CapacityVersion {
    /// The version in URLs.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V1beta1 => "v1beta1",
        }
    }
}

/// A CSIStorageCapacity at either version. It is written without `apiVersion`:
/// kube-apiserver takes a body's missing version from the URL (a missing `kind` is a 400, so
/// that stays), list items come without one anyway, and k8s-openapi's type would refuse a
/// v1beta1 `apiVersion` when reading. So the version lives in the API handle
/// (`Api::namespaced_with`), not in the object.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Capacity(pub(crate) CSIStorageCapacity);

impl Deref for Capacity {
    type Target = CSIStorageCapacity;
    fn deref(&self) -> &CSIStorageCapacity {
        &self.0
    }
}

impl DerefMut for Capacity {
    fn deref_mut(&mut self) -> &mut CSIStorageCapacity {
        &mut self.0
    }
}

/// `value` without `apiVersion`.
fn without_version(mut value: Value) -> Value {
    if let Some(map) = value.as_object_mut() {
        map.remove("apiVersion");
    }
    value
}

impl Serialize for Capacity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value = serde_json::to_value(&self.0).map_err(serde::ser::Error::custom)?;
        without_version(value).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Capacity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = without_version(Value::deserialize(deserializer)?);
        serde_json::from_value(value)
            .map(Self)
            .map_err(serde::de::Error::custom)
    }
}

impl Resource for Capacity {
    type DynamicType = CapacityVersion;
    // Namespaced; kube's `*_with` constructors take a dynamic type only with this scope.
    type Scope = DynamicResourceScope;

    fn kind(_: &CapacityVersion) -> Cow<'_, str> {
        "CSIStorageCapacity".into()
    }

    fn group(_: &CapacityVersion) -> Cow<'_, str> {
        "storage.k8s.io".into()
    }

    fn version(version: &CapacityVersion) -> Cow<'_, str> {
        version.as_str().into()
    }

    fn plural(_: &CapacityVersion) -> Cow<'_, str> {
        "csistoragecapacities".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1beta1_object_reads_as_v1_fields_and_is_written_without_a_version() {
        let wire = serde_json::json!({
            "apiVersion": "storage.k8s.io/v1beta1", "kind": "CSIStorageCapacity",
            "metadata": {"name": "csisc-1"}, "storageClassName": "fast", "capacity": "1Gi",
        });
        let object: Capacity = serde_json::from_value(wire).unwrap();
        assert_eq!(object.storage_class_name, "fast");
        assert_eq!(object.capacity.as_ref().unwrap().0, "1Gi");
        let written = serde_json::to_value(&object).unwrap();
        assert_eq!(written.get("apiVersion"), None);
        assert_eq!(written["kind"], "CSIStorageCapacity");
        assert_eq!(written["storageClassName"], "fast");
    }

    #[test]
    fn the_version_picks_the_url() {
        assert_eq!(
            Capacity::url_path(&CapacityVersion::V1beta1, Some("ns")),
            "/apis/storage.k8s.io/v1beta1/namespaces/ns/csistoragecapacities"
        );
        assert_eq!(
            Capacity::url_path(&CapacityVersion::V1, Some("ns")),
            "/apis/storage.k8s.io/v1/namespaces/ns/csistoragecapacities"
        );
    }
}
