//! Objects the sync tests share: a claim bound to its PersistentVolume, made through the
//! in-memory API server (which validates them as kube-apiserver does).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// `{"storage": size}`.
pub(crate) fn storage(size: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([("storage".into(), Quantity(size.into()))])
}

/// Creates the claim `default/data` asking for `size` and the PV `pv-1` of `driver` (volume
/// `vol-1`, also `size`) bound to it, then merges `status` (a `{"status": ...}` patch) into
/// the claim's status; the claim as the API server answered that patch.
pub(crate) async fn bound_claim(
    client: &Client,
    driver: &str,
    size: &str,
    status: serde_json::Value,
) -> PersistentVolumeClaim {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            volume_name: Some("pv-1".into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(storage(size)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    let claim = claims.create(&PostParams::default(), &claim).await.unwrap();
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv-1".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            capacity: Some(storage(size)),
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: "vol-1".into(),
                ..Default::default()
            }),
            claim_ref: Some(ObjectReference {
                namespace: Some("default".into()),
                name: Some("data".into()),
                uid: claim.metadata.uid.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    claims
        .patch_status("data", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap()
}

/// The claim `default/data` as the API server has it now.
pub(crate) async fn claim(client: &Client) -> PersistentVolumeClaim {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .get("data")
        .await
        .unwrap()
}

/// The PV `pv-1` as the API server has it now.
pub(crate) async fn volume(client: &Client) -> PersistentVolume {
    Api::<PersistentVolume>::all(client.clone())
        .get("pv-1")
        .await
        .unwrap()
}

/// The types of the claim's conditions, in order.
pub(crate) fn conditions(claim: &PersistentVolumeClaim) -> Vec<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().map(|c| c.type_.clone()).collect())
        .unwrap_or_default()
}

/// A violation if a condition type appears more than once on the claim (kube-apiserver keeps
/// them as a list; every writer must keep one per type).
pub(crate) fn repeated_conditions(claim: &PersistentVolumeClaim) -> Option<String> {
    let types = conditions(claim);
    let mut unique = types.clone();
    unique.sort();
    unique.dedup();
    (unique.len() != types.len()).then(|| format!("conditions repeated: {types:?}"))
}

/// A runtime on tokio's paused clock for one property-test case: the slow-set window runs on
/// that clock, so whether a sync falls inside it depends on the schedule, not on the
/// machine's load.
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// The property tests' runner: 200 cases from a fixed seed, so a failure names a schedule
/// that fails again, and no failure file written into the tree.
pub(crate) fn property_config() -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: 200,
        rng_seed: proptest::test_runner::RngSeed::Fixed(14),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
