//! VolumeAttributesClass on create (spec §4.3 step 14, §6.6): a claim naming a class gets the
//! class's `parameters` as CreateVolume `mutable_parameters`, verbatim (no prefix stripping),
//! once the class proves to be this driver's. The MODIFY_VOLUME capability check is part of the
//! plan ([`crate::request`]); the PV's `spec.volumeAttributesClassName` is set by
//! [`crate::pv`]; with the gate off the controller plans without the class name at all.
//!
//! Upstream GETs the class on every attempt (no cache, RBAC `volumeattributesclasses get`).
//! Here it is fetched for a fresh plan only: a plan repeated while the driver may still be
//! creating the volume keeps the parameters it was sent with (a class's parameters are
//! immutable anyway).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttributesClass;
use kube::{Api, Client};

use crate::plan_error::ProvisioningState;
use crate::request::ProvisionPlan;

/// Why the class cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum VacError {
    /// The GET failed (e.g. `volumeattributesclasses.storage.k8s.io "gold" not found`):
    /// upstream returns NoChange and retries.
    #[error("{0}")]
    Get(String),
    /// The class belongs to another driver (upstream's text, Finished).
    #[error(
        "VAC {name} referenced in PVC is for driver {class_driver} which does not match driver name {driver}"
    )]
    OtherDriver {
        /// The class name.
        name: String,
        /// The class's `driverName`.
        class_driver: String,
        /// Ours.
        driver: String,
    },
}

impl VacError {
    /// The provisioning state upstream returns with this error.
    pub(crate) fn state(&self) -> ProvisioningState {
        match self {
            Self::Get(_) => ProvisioningState::NoChange,
            Self::OtherDriver { .. } => ProvisioningState::Finished,
        }
    }
}

/// The claim's class name, if it names one.
pub(crate) fn class_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The `mutable_parameters` a fetched class gives, if it is `driver`'s.
pub(crate) fn mutable_parameters(
    driver: &str,
    name: &str,
    class: &VolumeAttributesClass,
) -> Result<HashMap<String, String>, VacError> {
    if class.driver_name != driver {
        return Err(VacError::OtherDriver {
            name: name.to_owned(),
            class_driver: class.driver_name.clone(),
            driver: driver.to_owned(),
        });
    }
    Ok(class
        .parameters
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect())
}

/// `plan` with the class's parameters when `claim` names a class (GET, then
/// [`mutable_parameters`]); unchanged otherwise.
pub(crate) async fn with_class(
    client: &Client,
    driver: &str,
    claim: &PersistentVolumeClaim,
    plan: Arc<ProvisionPlan>,
) -> Result<Arc<ProvisionPlan>, VacError> {
    let Some(name) = class_name(claim) else {
        return Ok(plan);
    };
    let api: Api<VolumeAttributesClass> = Api::all(client.clone());
    let class = api
        .get(name)
        .await
        .map_err(|err| VacError::Get(csi_common::kube_client::error_text(&err)))?;
    let parameters = mutable_parameters(driver, name, &class)?;
    let mut plan = (*plan).clone();
    plan.request.mutable_parameters = parameters;
    Ok(Arc::new(plan))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;

    use super::*;

    fn class(driver: &str, parameters: &[(&str, &str)]) -> VolumeAttributesClass {
        VolumeAttributesClass {
            driver_name: driver.into(),
            parameters: Some(
                parameters
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..VolumeAttributesClass::default()
        }
    }

    #[test]
    fn parameters_pass_verbatim_for_our_driver() {
        let params = mutable_parameters(
            "d",
            "gold",
            &class("d", &[("iops", "300"), ("csi.storage.k8s.io/x", "kept")]),
        )
        .unwrap();
        assert_eq!(params.len(), 2);
        assert_eq!(params["iops"], "300");
        assert_eq!(
            params["csi.storage.k8s.io/x"], "kept",
            "no prefix stripping"
        );
        let none = VolumeAttributesClass {
            driver_name: "d".into(),
            ..VolumeAttributesClass::default()
        };
        assert!(mutable_parameters("d", "gold", &none).unwrap().is_empty());
    }

    #[test]
    fn another_drivers_class_is_final_with_upstreams_text() {
        let err = mutable_parameters("d", "gold", &class("other", &[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "VAC gold referenced in PVC is for driver other which does not match driver name d"
        );
        assert_eq!(err.state(), ProvisioningState::Finished);
        assert_eq!(
            VacError::Get("x".into()).state(),
            ProvisioningState::NoChange
        );
    }

    #[test]
    fn only_a_non_empty_class_name_counts() {
        let claim = |name: Option<&str>| PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                volume_attributes_class_name: name.map(str::to_owned),
                ..PersistentVolumeClaimSpec::default()
            }),
            ..PersistentVolumeClaim::default()
        };
        assert_eq!(class_name(&claim(Some("gold"))), Some("gold"));
        assert_eq!(class_name(&claim(Some(""))), None);
        assert_eq!(class_name(&claim(None)), None);
    }
}
