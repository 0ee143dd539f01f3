//! What the PV binder does next for one claim or one volume, decided from a snapshot of the
//! objects involved. Mirrors kube-controller-manager v1.36
//! `pkg/controller/volume/persistentvolume/pv_controller.go`: `syncUnboundClaim`,
//! `syncBoundClaim`, `syncVolume`, `reclaimVolume`, and `FindMatchingVolume` from
//! component-helpers. No I/O here: `binder::mod` carries the decisions out.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt as _;

use crate::kcm::events::EventSpec;
use crate::kcm::objects::{
    self, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_MIGRATED_TO, ANN_PROVISIONED_BY,
    ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER, claim_phase, volume_phase,
};

/// Event reasons of the PV controller (`pkg/controller/volume/events`).
pub(crate) mod reason {
    pub(crate) const EXTERNAL_PROVISIONING: &str = "ExternalProvisioning";
    pub(crate) const PROVISIONING_FAILED: &str = "ProvisioningFailed";
    pub(crate) const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
    pub(crate) const WAIT_FOR_POD_SCHEDULED: &str = "WaitForPodScheduled";
    pub(crate) const FAILED_BINDING: &str = "FailedBinding";
    pub(crate) const VOLUME_MISMATCH: &str = "VolumeMismatch";
    pub(crate) const CLAIM_LOST: &str = "ClaimLost";
    pub(crate) const CLAIM_MISBOUND: &str = "ClaimMisbound";
    pub(crate) const VOLUME_FAILED_DELETE: &str = "VolumeFailedDelete";
    pub(crate) const VOLUME_FAILED_RECYCLE: &str = "VolumeFailedRecycle";
    pub(crate) const VOLUME_UNKNOWN_RECLAIM_POLICY: &str = "VolumeUnknownReclaimPolicy";
}

/// The claim's StorageClass as the binder found it.
#[derive(Debug, Clone)]
pub(crate) enum ClassLookup {
    /// The claim names no class ("").
    NoClass,
    /// The named class does not exist.
    Missing(String),
    /// The class.
    Found(Box<StorageClass>),
}

/// Everything `decide_claim` looks at besides the claim.
#[derive(Debug)]
pub(crate) struct ClaimInputs<'a> {
    /// The claim's class.
    pub(crate) class: &'a ClassLookup,
    /// The volumes to match against: the binder's cache of all volumes (upstream's
    /// `ctrl.volumes`), or only the one the claim names (`spec.volumeName`), read from the API
    /// server.
    pub(crate) volumes: &'a [&'a PersistentVolume],
    /// Names of unscheduled, running Pods using the claim (for the WaitForPodScheduled text).
    pub(crate) unscheduled_pods: &'a [String],
    /// The default StorageClass, if any (only consulted for class-less claims).
    pub(crate) default_class: Option<&'a str>,
}

/// The write a claim sync makes.
#[derive(Debug, Clone)]
pub(crate) enum ClaimAction {
    /// Nothing to write.
    Nothing,
    /// Bind the claim and this volume (volume spec, volume phase, claim spec, claim status).
    Bind(Box<PersistentVolume>),
    /// Give a class-less claim the default class (retroactive default StorageClass).
    AssignDefaultClass(String),
    /// Annotate the claim for an external provisioner (no-op when already annotated).
    SetProvisioner(String),
    /// Phase Pending, no capacity or access modes.
    Pending,
    /// Phase Lost (terminal).
    Lost,
}

/// A claim sync: one write, then at most one event.
#[derive(Debug, Clone)]
pub(crate) struct ClaimDecision {
    pub(crate) action: ClaimAction,
    pub(crate) event: Option<EventSpec>,
}

impl ClaimDecision {
    fn new(action: ClaimAction, event: Option<EventSpec>) -> Self {
        Self { action, event }
    }
}

/// `syncClaim`: unbound claims look for a volume or ask for provisioning; bound claims check
/// that their volume still points back.
pub(crate) fn decide_claim(
    claim: &PersistentVolumeClaim,
    inputs: &ClaimInputs<'_>,
) -> ClaimDecision {
    if objects::annotation(claim, ANN_BIND_COMPLETED).is_some() {
        decide_bound_claim(claim, inputs.volumes)
    } else {
        decide_unbound_claim(claim, inputs)
    }
}

fn find_volume<'a>(volumes: &[&'a PersistentVolume], name: &str) -> Option<&'a PersistentVolume> {
    volumes
        .iter()
        .copied()
        .find(|v| v.metadata.name.as_deref() == Some(name))
}

fn decide_unbound_claim(claim: &PersistentVolumeClaim, inputs: &ClaimInputs<'_>) -> ClaimDecision {
    let volume_name = objects::claim_volume_name(claim);
    if !volume_name.is_empty() {
        return decide_claim_asking_for_volume(claim, volume_name, inputs.volumes);
    }
    let delay_binding =
        matches!(inputs.class, ClassLookup::Found(c) if objects::is_wait_for_first_consumer(c));
    if let Some(volume) = find_best_match(claim, inputs.volumes, delay_binding) {
        return ClaimDecision::new(ClaimAction::Bind(Box::new(volume.clone())), None);
    }
    if !objects::claim_has_class(claim)
        && let Some(default) = inputs.default_class
    {
        return ClaimDecision::new(ClaimAction::AssignDefaultClass(default.to_owned()), None);
    }
    if delay_binding && objects::annotation(claim, ANN_SELECTED_NODE).is_none() {
        // The scheduler has not picked a node: provisioning waits for it.
        let event = match inputs.unscheduled_pods {
            [] => EventSpec::normal(
                reason::WAIT_FOR_FIRST_CONSUMER,
                "waiting for first consumer to be created before binding",
            ),
            [one] => EventSpec::normal(
                reason::WAIT_FOR_POD_SCHEDULED,
                format!("waiting for pod {one} to be scheduled"),
            ),
            many => EventSpec::normal(
                reason::WAIT_FOR_POD_SCHEDULED,
                format!("waiting for pods {} to be scheduled", many.join(",")),
            ),
        };
        return ClaimDecision::new(ClaimAction::Pending, Some(event));
    }
    if !objects::claim_class(claim).is_empty() {
        // provisionClaim: no status write either way.
        return match inputs.class {
            ClassLookup::Found(class) if !class.provisioner.starts_with("kubernetes.io/") => {
                let provisioner = class.provisioner.clone();
                let message = format!(
                    "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
                );
                ClaimDecision::new(
                    ClaimAction::SetProvisioner(provisioner),
                    Some(EventSpec::normal(reason::EXTERNAL_PROVISIONING, message)),
                )
            }
            ClassLookup::Found(class) => {
                // In-tree provisioners need volume plugins this stand-in does not have (and
                // CSI migration is not modelled): upstream's lookup error for unknown plugins.
                let message = format!("no volume plugin matched name: {}", class.provisioner);
                ClaimDecision::new(
                    ClaimAction::Nothing,
                    Some(EventSpec::warning(reason::PROVISIONING_FAILED, message)),
                )
            }
            ClassLookup::Missing(name) => {
                // The lister's NotFound error text, as in fixture events.
                let message = format!("storageclass.storage.k8s.io \"{name}\" not found");
                ClaimDecision::new(
                    ClaimAction::Nothing,
                    Some(EventSpec::warning(reason::PROVISIONING_FAILED, message)),
                )
            }
            // The lookup says NoClass only for "", which this branch excludes.
            ClassLookup::NoClass => ClaimDecision::new(ClaimAction::Nothing, None),
        };
    }
    ClaimDecision::new(
        ClaimAction::Pending,
        Some(EventSpec::normal(
            reason::FAILED_BINDING,
            "no persistent volumes available for this claim and no storage class is set",
        )),
    )
}

/// The user named a volume in `spec.volumeName`.
fn decide_claim_asking_for_volume(
    claim: &PersistentVolumeClaim,
    volume_name: &str,
    volumes: &[&PersistentVolume],
) -> ClaimDecision {
    let Some(volume) = find_volume(volumes, volume_name) else {
        // The volume may still come; retry on the next sync.
        return ClaimDecision::new(ClaimAction::Pending, None);
    };
    if objects::claim_ref(volume).is_none() {
        return match check_volume_satisfies_claim(volume, claim) {
            Ok(()) => ClaimDecision::new(ClaimAction::Bind(Box::new(volume.clone())), None),
            Err(why) => ClaimDecision::new(
                ClaimAction::Pending,
                Some(EventSpec::warning(
                    reason::VOLUME_MISMATCH,
                    format!("Cannot bind to requested volume \"{volume_name}\": {why}"),
                )),
            ),
        };
    }
    if objects::is_volume_bound_to_claim(volume, claim) {
        return ClaimDecision::new(ClaimAction::Bind(Box::new(volume.clone())), None);
    }
    let event = EventSpec::warning(
        reason::FAILED_BINDING,
        format!("volume \"{volume_name}\" already bound to a different claim."),
    );
    if objects::annotation(claim, ANN_BOUND_BY_CONTROLLER).is_none() {
        ClaimDecision::new(ClaimAction::Pending, Some(event))
    } else {
        // Upstream returns an error here ("THIS SHOULD NEVER HAPPEN"); the event is all a
        // user can see of it.
        ClaimDecision::new(ClaimAction::Nothing, Some(event))
    }
}

/// `checkVolumeSatisfyClaim`, with upstream's messages.
fn check_volume_satisfies_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<(), String> {
    if objects::is_deleting(volume) {
        return Err(format!(
            "the volume is marked for deletion \"{}\"",
            volume.name_any()
        ));
    }
    if objects::capacity_bytes(volume) < objects::requested_bytes(claim) {
        return Err("requested PV is too small".to_owned());
    }
    if objects::volume_class(volume) != objects::claim_class(claim) {
        return Err("storageClassName does not match".to_owned());
    }
    if objects::volume_mode_mismatch(claim, volume) {
        return Err("incompatible volumeMode".to_owned());
    }
    if !objects::access_modes_satisfied(claim, volume) {
        return Err("incompatible accessMode".to_owned());
    }
    Ok(())
}

fn decide_bound_claim(
    claim: &PersistentVolumeClaim,
    volumes: &[&PersistentVolume],
) -> ClaimDecision {
    let lost = |reason_: &'static str, message: &str| {
        // updateClaimStatusWithEvent: the event only accompanies an actual phase change.
        if objects::pvc_phase(claim) == claim_phase::LOST {
            ClaimDecision::new(ClaimAction::Nothing, None)
        } else {
            ClaimDecision::new(
                ClaimAction::Lost,
                Some(EventSpec::warning(reason_, message)),
            )
        }
    };
    let volume_name = objects::claim_volume_name(claim);
    if volume_name.is_empty() {
        return lost(
            reason::CLAIM_LOST,
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
        );
    }
    let Some(volume) = find_volume(volumes, volume_name) else {
        return lost(
            reason::CLAIM_LOST,
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
        );
    };
    match objects::claim_ref(volume) {
        None => ClaimDecision::new(ClaimAction::Bind(Box::new(volume.clone())), None),
        Some(r) if r.uid == claim.metadata.uid => {
            // All is well; bind() only rewrites what drifted (usually nothing).
            ClaimDecision::new(ClaimAction::Bind(Box::new(volume.clone())), None)
        }
        Some(_) => lost(
            reason::CLAIM_MISBOUND,
            "Two claims are bound to the same volume, this one is bound incorrectly",
        ),
    }
}

/// `findBestMatchForClaim`: volumes whose access modes cover the claim's, grouped by how many
/// modes they offer (fewest first); in each group a volume reserved for this claim wins,
/// otherwise the smallest Available one that fits.
pub(crate) fn find_best_match<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &[&'a PersistentVolume],
    delay_binding: bool,
) -> Option<&'a PersistentVolume> {
    // `find_matching_volume` skips every volume reserved for another claim, so leaving them
    // out first changes no answer (a group of only such volumes matches nothing either), and
    // spares the access-mode checks of all the bound volumes of a large cluster on every
    // claim sync.
    let volumes: Vec<&PersistentVolume> = volumes
        .iter()
        .copied()
        .filter(|v| objects::claim_ref(v).is_none() || objects::is_volume_bound_to_claim(v, claim))
        .collect();
    let mut group_sizes: Vec<usize> = volumes
        .iter()
        .filter(|v| objects::access_modes_satisfied(claim, v))
        .map(|v| objects::volume_access_modes(v).len())
        .collect();
    group_sizes.sort_unstable();
    group_sizes.dedup();
    group_sizes.into_iter().find_map(|size| {
        let group: Vec<&PersistentVolume> = volumes
            .iter()
            .copied()
            .filter(|v| {
                objects::access_modes_satisfied(claim, v)
                    && objects::volume_access_modes(v).len() == size
            })
            .collect();
        find_matching_volume(claim, &group, delay_binding)
    })
}

/// component-helpers `FindMatchingVolume` without the scheduler's node checks.
fn find_matching_volume<'a>(
    claim: &PersistentVolumeClaim,
    volumes: &[&'a PersistentVolume],
    delay_binding: bool,
) -> Option<&'a PersistentVolume> {
    let requested = objects::requested_bytes(claim);
    let class = objects::claim_class(claim);
    let selector = objects::claim_selector(claim);
    let mut smallest: Option<(&PersistentVolume, i128)> = None;
    for &volume in volumes {
        if objects::claim_ref(volume).is_some() && !objects::is_volume_bound_to_claim(volume, claim)
        {
            continue;
        }
        let size = objects::capacity_bytes(volume);
        if size < requested
            || objects::volume_mode_mismatch(claim, volume)
            || objects::is_deleting(volume)
        {
            continue;
        }
        if objects::is_volume_bound_to_claim(volume, claim) {
            return Some(volume);
        }
        if delay_binding {
            // Late binding: the scheduler, not the PV controller, binds free volumes.
            continue;
        }
        if objects::pv_phase(volume) != volume_phase::AVAILABLE
            || selector
                .is_some_and(|s| !objects::selector_matches(s, volume.metadata.labels.as_ref()))
            || objects::volume_class(volume) != class
        {
            continue;
        }
        if smallest.is_none_or(|(_, best)| best > size) {
            smallest = Some((volume, size));
        }
    }
    smallest.map(|(v, _)| v)
}

/// What to do with a Released volume's storage (`reclaimVolume`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reclaim {
    /// Retain, or an external deleter (CSI provisioner) owns deletion.
    Nothing,
    /// No in-tree plugin can do it: phase Failed plus this event.
    Fail(EventSpec),
}

/// The writes a volume sync makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VolumeAction {
    /// Binding in progress: nothing to write, but the claim is synced next, which finishes
    /// it (upstream's `syncVolume` adds the claim to its queue for that).
    SyncClaim,
    /// Set `status.phase`.
    SetPhase(&'static str),
    /// The claim is gone: phase Released (unless Released/Failed already), then reclaim.
    Release(Reclaim),
    /// Undo a binding the claim does not reciprocate: drop the whole claimRef when the binder
    /// made it, else only its uid; then phase Available.
    Unbind {
        /// Whether `pv.kubernetes.io/bound-by-controller` was set.
        clear_claim_ref: bool,
    },
}

/// `syncVolume`. `claim` is the claim the volume's claimRef names, fetched by name, or `None`
/// when it does not exist (or is a different claim with the same name).
pub(crate) fn decide_volume(
    volume: &PersistentVolume,
    claim: Option<&PersistentVolumeClaim>,
) -> VolumeAction {
    let Some(claim_ref) = objects::claim_ref(volume) else {
        return VolumeAction::SetPhase(volume_phase::AVAILABLE);
    };
    if claim_ref.uid.as_deref().is_none_or(str::is_empty) {
        // Reserved for a claim that has not bound yet; the claim sync binds it.
        return VolumeAction::SetPhase(volume_phase::AVAILABLE);
    }
    let claim = claim.filter(|c| c.metadata.uid == claim_ref.uid);
    let Some(claim) = claim else {
        return VolumeAction::Release(reclaim(volume));
    };
    let volume_name = objects::claim_volume_name(claim);
    if volume_name.is_empty() {
        // Binding in progress (e.g. a volume a provisioner made for this claim); the claim
        // sync finishes it.
        VolumeAction::SyncClaim
    } else if volume_name == volume.name_any() {
        VolumeAction::SetPhase(volume_phase::BOUND)
    } else if objects::annotation(volume, ANN_PROVISIONED_BY).is_some()
        && reclaim_policy(volume) == "Delete"
    {
        // Provisioned for this claim, which bound elsewhere: not needed any more.
        VolumeAction::Release(reclaim(volume))
    } else {
        VolumeAction::Unbind {
            clear_claim_ref: objects::annotation(volume, ANN_BOUND_BY_CONTROLLER).is_some(),
        }
    }
}

fn reclaim_policy(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain")
}

/// `reclaimVolume` / `findDeletablePlugin`, for a stand-in without in-tree volume plugins.
fn reclaim(volume: &PersistentVolume) -> Reclaim {
    if objects::annotation(volume, ANN_MIGRATED_TO).is_some_and(|m| !m.is_empty()) {
        return Reclaim::Nothing;
    }
    match reclaim_policy(volume) {
        "Retain" => Reclaim::Nothing,
        "Delete" => {
            let external_provisioner = objects::annotation(volume, ANN_PROVISIONED_BY)
                .is_some_and(|p| !p.is_empty() && !p.starts_with("kubernetes.io/"));
            let csi = volume.spec.as_ref().is_some_and(|s| s.csi.is_some());
            if external_provisioner || csi {
                // The external provisioner deletes it (spec §5); the binder waits.
                Reclaim::Nothing
            } else {
                Reclaim::Fail(EventSpec::warning(
                    reason::VOLUME_FAILED_DELETE,
                    format!(
                        "error getting deleter volume plugin for volume \"{}\": no deletable volume plugin matched",
                        volume.name_any()
                    ),
                ))
            }
        }
        "Recycle" => Reclaim::Fail(EventSpec::warning(
            reason::VOLUME_FAILED_RECYCLE,
            "No recycler plugin found for the volume!",
        )),
        _ => Reclaim::Fail(EventSpec::warning(
            reason::VOLUME_UNKNOWN_RECLAIM_POLICY,
            "Volume has unrecognized PersistentVolumeReclaimPolicy",
        )),
    }
}

/// Whether a claim already carries the provisioner annotation with this value.
pub(crate) fn has_provisioner(claim: &PersistentVolumeClaim, provisioner: &str) -> bool {
    objects::annotation(claim, ANN_STORAGE_PROVISIONER) == Some(provisioner)
}

#[cfg(test)]
mod tests;
