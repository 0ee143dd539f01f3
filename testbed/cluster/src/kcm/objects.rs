//! The well-known names kube-controller-manager reads and writes on volume objects, and the
//! small pure helpers over PersistentVolume / PersistentVolumeClaim that upstream keeps in
//! `k8s.io/component-helpers/storage/volume` (`GetPersistentVolumeClaimClass`,
//! `IsVolumeBoundToClaim`, `CheckAccessModes`, ...). Nothing here calls the API.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
    PersistentVolumeStatus,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt as _;

/// Claim annotation naming the provisioner that should create its volume.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The deprecated beta spelling of [`ANN_STORAGE_PROVISIONER`]; still written next to it.
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// Claim annotation set by the scheduler for WaitForFirstConsumer classes.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Claim annotation: the binder finished binding this claim at least once.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Claim or volume annotation: the binder (not a user) made this binding.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Volume annotation written by provisioners: who provisioned it.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Volume annotation of CSI migration: the CSI driver handling an in-tree volume.
pub const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// The beta class annotation, which wins over `spec.storageClassName` when present.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// StorageClass annotation marking the cluster default class.
pub const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// The beta spelling of [`ANN_DEFAULT_CLASS`].
pub const ANN_BETA_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// Finalizer of the pvc-protection controller (added by admission).
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// Finalizer of the pv-protection controller (added by admission).
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";

/// PersistentVolume phases.
pub mod volume_phase {
    /// Created, not yet looked at by the binder.
    pub const PENDING: &str = "Pending";
    /// Free, or reserved for a claim that has not bound yet.
    pub const AVAILABLE: &str = "Available";
    /// Bound to a claim.
    pub const BOUND: &str = "Bound";
    /// Its claim is gone; waiting for the reclaim policy.
    pub const RELEASED: &str = "Released";
    /// Reclaiming failed.
    pub const FAILED: &str = "Failed";
}

/// PersistentVolumeClaim phases.
pub mod claim_phase {
    /// Not bound yet.
    pub const PENDING: &str = "Pending";
    /// Bound to a volume.
    pub const BOUND: &str = "Bound";
    /// Its volume is gone or bound elsewhere.
    pub const LOST: &str = "Lost";
}

/// `metadata.annotations[key]`.
pub fn annotation<'a>(meta: &'a impl kube::Resource, key: &str) -> Option<&'a str> {
    meta.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Sets `metadata.annotations[key] = value`.
pub(crate) fn set_annotation(obj: &mut impl kube::Resource, key: &str, value: &str) {
    obj.meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), value.to_owned());
}

/// Whether `finalizer` is on the object.
pub(crate) fn has_finalizer(obj: &impl kube::Resource, finalizer: &str) -> bool {
    obj.meta()
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Whether the object has a deletionTimestamp.
pub(crate) fn is_deleting(obj: &impl kube::Resource) -> bool {
    obj.meta().deletion_timestamp.is_some()
}

/// `status.phase` of a volume ("" when unset).
pub fn pv_phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `status.phase` of a claim ("" when unset).
pub fn pvc_phase(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `spec.volumeName` of a claim ("" when unset).
pub fn claim_volume_name(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// `spec.claimRef` of a volume.
pub fn claim_ref(pv: &PersistentVolume) -> Option<&ObjectReference> {
    pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
}

/// The claim's class as upstream `GetPersistentVolumeClaimClass` sees it: the beta annotation
/// first, then `spec.storageClassName`, else "".
pub fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    annotation(pvc, ANN_BETA_STORAGE_CLASS)
        .or_else(|| {
            pvc.spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or("")
}

/// Whether the claim asked for a class at all (an explicit "" counts: it means "no class,
/// do not default").
pub(crate) fn claim_has_class(pvc: &PersistentVolumeClaim) -> bool {
    annotation(pvc, ANN_BETA_STORAGE_CLASS).is_some()
        || pvc
            .spec
            .as_ref()
            .is_some_and(|s| s.storage_class_name.is_some())
}

/// The volume's class (`GetPersistentVolumeClass`).
pub(crate) fn volume_class(pv: &PersistentVolume) -> &str {
    annotation(pv, ANN_BETA_STORAGE_CLASS)
        .or_else(|| {
            pv.spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
        })
        .unwrap_or("")
}

/// `name_any` without the copy: the name, else the generateName.
fn name_of(obj: &impl kube::Resource) -> &str {
    let meta = obj.meta();
    meta.name
        .as_deref()
        .or(meta.generate_name.as_deref())
        .unwrap_or("")
}

/// `IsVolumeBoundToClaim`: claimRef names the claim, and its uid is empty or the claim's.
pub fn is_volume_bound_to_claim(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = claim_ref(pv) else {
        return false;
    };
    // Compared in place: the binder asks this of every cached volume on each claim sync.
    if r.name.as_deref() != Some(name_of(pvc)) || r.namespace != pvc.metadata.namespace {
        return false;
    }
    match r.uid.as_deref() {
        None | Some("") => true,
        Some(uid) => pvc.metadata.uid.as_deref() == Some(uid),
    }
}

/// The reference kube-controller-manager stores in `spec.claimRef` (client-go
/// `reference.GetReference`): kind, namespace, name, uid, apiVersion and resourceVersion.
pub fn claim_reference(pvc: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        kind: Some("PersistentVolumeClaim".to_owned()),
        namespace: pvc.namespace(),
        name: Some(pvc.name_any()),
        uid: pvc.metadata.uid.clone(),
        api_version: Some("v1".to_owned()),
        resource_version: pvc.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// The reference an Event uses for a volume.
pub(crate) fn volume_reference(pv: &PersistentVolume) -> ObjectReference {
    ObjectReference {
        kind: Some("PersistentVolume".to_owned()),
        namespace: None,
        name: Some(pv.name_any()),
        uid: pv.metadata.uid.clone(),
        api_version: Some("v1".to_owned()),
        resource_version: pv.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// A quantity in whole bytes, `None` when it does not parse (the binder then treats the size
/// as unknown, as the real controller does with a quantity it cannot read).
fn bytes(quantity: &str) -> Option<i128> {
    csi_common::quantity::parse_bytes(quantity)
        .ok()
        .map(i128::from)
}

/// Requested storage of a claim in bytes (0 when unset or unparsable).
pub(crate) fn requested_bytes(pvc: &PersistentVolumeClaim) -> i128 {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| bytes(&q.0))
        .unwrap_or(0)
}

/// Capacity of a volume in bytes (0 when unset or unparsable).
pub(crate) fn capacity_bytes(pv: &PersistentVolume) -> i128 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| bytes(&q.0))
        .unwrap_or(0)
}

fn claim_access_modes(pvc: &PersistentVolumeClaim) -> &[String] {
    pvc.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[])
}

pub(crate) fn volume_access_modes(pv: &PersistentVolume) -> &[String] {
    pv.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[])
}

/// `CheckAccessModes`: every mode the claim asks for is offered by the volume.
pub(crate) fn access_modes_satisfied(pvc: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let offered = volume_access_modes(pv);
    claim_access_modes(pvc).iter().all(|m| offered.contains(m))
}

/// `CheckVolumeModeMismatches`: both default to Filesystem.
pub(crate) fn volume_mode_mismatch(pvc: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let claim = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    let volume = pv
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    claim != volume
}

/// `spec.selector` of a claim.
pub(crate) fn claim_selector(pvc: &PersistentVolumeClaim) -> Option<&LabelSelector> {
    pvc.spec.as_ref().and_then(|s| s.selector.as_ref())
}

/// Whether `labels` match a LabelSelector (matchLabels and the four set-based operators).
/// An unknown operator matches nothing, as an invalid selector would fail upstream.
pub(crate) fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

/// Whether a class binds late (`volumeBindingMode: WaitForFirstConsumer`).
pub(crate) fn is_wait_for_first_consumer(class: &StorageClass) -> bool {
    class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
}

/// Whether a StorageClass is marked as the cluster default.
pub(crate) fn is_default_class(class: &StorageClass) -> bool {
    annotation(class, ANN_DEFAULT_CLASS) == Some("true")
        || annotation(class, ANN_BETA_DEFAULT_CLASS) == Some("true")
}

/// A copy of the volume with `status.phase` (and `message`) set, or `None` when the phase is
/// already `phase` (upstream `updateVolumePhase` writes nothing then).
pub(crate) fn with_volume_phase(
    pv: &PersistentVolume,
    phase: &str,
    message: Option<String>,
) -> Option<PersistentVolume> {
    if pv_phase(pv) == phase {
        return None;
    }
    let mut clone = pv.clone();
    let status = clone
        .status
        .get_or_insert_with(PersistentVolumeStatus::default);
    status.phase = Some(phase.to_owned());
    status.message = message;
    Some(clone)
}

/// A copy of the claim with the status upstream `updateClaimStatus` writes, or `None` when
/// nothing changes. With a volume, accessModes follow the volume and capacity is copied only
/// when the phase changes (a later difference can be an intended filesystem/device size gap).
pub(crate) fn with_claim_status(
    pvc: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Option<PersistentVolumeClaim> {
    let mut clone = pvc.clone();
    let old = pvc.status.clone().unwrap_or_default();
    let status = clone
        .status
        .get_or_insert_with(PersistentVolumeClaimStatus::default);
    let mut dirty = false;
    if old.phase.as_deref() != Some(phase) {
        status.phase = Some(phase.to_owned());
        dirty = true;
    }
    match volume {
        None => {
            if old.access_modes.is_some() {
                status.access_modes = None;
                dirty = true;
            }
            if old.capacity.is_some() {
                status.capacity = None;
                dirty = true;
            }
        }
        Some(pv) => {
            let modes = pv.spec.as_ref().and_then(|s| s.access_modes.clone());
            if old.access_modes != modes {
                status.access_modes = modes;
                dirty = true;
            }
            if old.phase.as_deref() != Some(phase) {
                let capacity = pv.spec.as_ref().and_then(|s| s.capacity.clone());
                let volume_size = capacity
                    .as_ref()
                    .and_then(|c| c.get("storage"))
                    .and_then(|q| bytes(&q.0));
                let claim_size = old
                    .capacity
                    .as_ref()
                    .and_then(|c| c.get("storage"))
                    .and_then(|q| bytes(&q.0));
                if claim_size.is_none() || claim_size != volume_size {
                    status.capacity = capacity;
                    dirty = true;
                }
            }
        }
    }
    dirty.then_some(clone)
}

/// A copy of the volume bound to the claim (upstream `GetBindVolumeToClaim`), or `None` when
/// it already is. The volume gets `bound-by-controller` only when it was not reserved for this
/// claim by its creator.
pub(crate) fn with_volume_bound_to_claim(
    pv: &PersistentVolume,
    pvc: &PersistentVolumeClaim,
) -> Option<PersistentVolume> {
    let set_bound_by_controller = !is_volume_bound_to_claim(pv, pvc);
    let mut clone = pv.clone();
    let mut dirty = false;
    let matches = claim_ref(pv).is_some_and(|r| {
        r.name.as_deref() == Some(pvc.name_any().as_str())
            && r.namespace.as_deref() == pvc.namespace().as_deref()
            && r.uid == pvc.metadata.uid
    });
    if !matches {
        clone.spec.get_or_insert_with(Default::default).claim_ref = Some(claim_reference(pvc));
        dirty = true;
    }
    if set_bound_by_controller && annotation(&clone, ANN_BOUND_BY_CONTROLLER).is_none() {
        set_annotation(&mut clone, ANN_BOUND_BY_CONTROLLER, "yes");
        dirty = true;
    }
    dirty.then_some(clone)
}

/// A copy of the claim bound to the volume (upstream `bindClaimToVolume`), or `None` when it
/// already is: `spec.volumeName`, `bound-by-controller` when the binder chose the volume, and
/// `bind-completed`.
pub(crate) fn with_claim_bound_to_volume(
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
) -> Option<PersistentVolumeClaim> {
    let mut clone = pvc.clone();
    let mut dirty = false;
    let pv_name = pv.name_any();
    if claim_volume_name(pvc) != pv_name {
        clone.spec.get_or_insert_with(Default::default).volume_name = Some(pv_name);
        if annotation(&clone, ANN_BOUND_BY_CONTROLLER).is_none() {
            set_annotation(&mut clone, ANN_BOUND_BY_CONTROLLER, "yes");
        }
        dirty = true;
    }
    if annotation(&clone, ANN_BIND_COMPLETED).is_none() {
        set_annotation(&mut clone, ANN_BIND_COMPLETED, "yes");
        dirty = true;
    }
    dirty.then_some(clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PersistentVolumeSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    fn pvc(uid: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("c".into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        }
    }

    fn pv(claim_uid: Option<&str>) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("v".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: Some(vec!["ReadWriteOnce".into(), "ReadOnlyMany".into()]),
                capacity: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                claim_ref: claim_uid.map(|uid| ObjectReference {
                    name: Some("c".into()),
                    namespace: Some("ns".into()),
                    uid: (!uid.is_empty()).then(|| uid.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn a_reservation_without_uid_counts_as_bound_to_the_claim() {
        assert!(is_volume_bound_to_claim(&pv(Some("")), &pvc("u1")));
        assert!(is_volume_bound_to_claim(&pv(Some("u1")), &pvc("u1")));
        assert!(!is_volume_bound_to_claim(&pv(Some("u2")), &pvc("u1")));
        assert!(!is_volume_bound_to_claim(&pv(None), &pvc("u1")));
    }

    #[test]
    fn binding_a_reserved_volume_fills_the_uid_without_bound_by_controller() {
        let bound = with_volume_bound_to_claim(&pv(Some("")), &pvc("u1")).unwrap();
        let r = claim_ref(&bound).unwrap();
        assert_eq!(r.uid.as_deref(), Some("u1"));
        assert_eq!(r.kind.as_deref(), Some("PersistentVolumeClaim"));
        assert_eq!(r.resource_version.as_deref(), Some("7"));
        assert_eq!(annotation(&bound, ANN_BOUND_BY_CONTROLLER), None);
    }

    #[test]
    fn binding_a_free_volume_marks_it_bound_by_controller() {
        let bound = with_volume_bound_to_claim(&pv(None), &pvc("u1")).unwrap();
        assert_eq!(annotation(&bound, ANN_BOUND_BY_CONTROLLER), Some("yes"));
    }

    #[test]
    fn a_volume_already_bound_with_uid_needs_no_write() {
        assert!(with_volume_bound_to_claim(&pv(Some("u1")), &pvc("u1")).is_none());
    }

    #[test]
    fn claim_binding_sets_volume_name_and_both_annotations_once() {
        let bound = with_claim_bound_to_volume(&pvc("u1"), &pv(Some("u1"))).unwrap();
        assert_eq!(claim_volume_name(&bound), "v");
        assert_eq!(annotation(&bound, ANN_BIND_COMPLETED), Some("yes"));
        assert_eq!(annotation(&bound, ANN_BOUND_BY_CONTROLLER), Some("yes"));
        assert!(with_claim_bound_to_volume(&bound, &pv(Some("u1"))).is_none());
    }

    #[test]
    fn bound_claim_status_copies_capacity_and_access_modes_of_the_volume() {
        let status = with_claim_status(&pvc("u1"), "Bound", Some(&pv(Some("u1"))))
            .unwrap()
            .status
            .unwrap();
        assert_eq!(status.phase.as_deref(), Some("Bound"));
        assert_eq!(status.capacity.unwrap()["storage"].0, "1Gi");
        assert_eq!(status.access_modes.unwrap().len(), 2);
        assert!(with_claim_status(&pvc("u1"), "Pending", None).is_none());
    }

    #[test]
    fn access_modes_must_all_be_offered() {
        let mut claim = pvc("u1");
        assert!(access_modes_satisfied(&claim, &pv(None)));
        claim.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteMany".into()]);
        assert!(!access_modes_satisfied(&claim, &pv(None)));
    }

    #[test]
    fn selectors_support_labels_and_set_operators() {
        let labels = BTreeMap::from([("tier".to_owned(), "gold".to_owned())]);
        let req = |op: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
            }]),
            match_labels: None,
        };
        assert!(selector_matches(&req("In", &["gold"]), Some(&labels)));
        assert!(!selector_matches(&req("NotIn", &["gold"]), Some(&labels)));
        assert!(selector_matches(&req("Exists", &[]), Some(&labels)));
        assert!(selector_matches(&req("DoesNotExist", &[]), None));
        let by_label = LabelSelector {
            match_labels: Some(BTreeMap::from([("tier".into(), "silver".into())])),
            match_expressions: None,
        };
        assert!(!selector_matches(&by_label, Some(&labels)));
    }
}
