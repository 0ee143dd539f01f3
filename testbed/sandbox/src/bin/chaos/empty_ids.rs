//! The `driver-empty-ids` fault (csi-provisioner): every CreateVolume answer is OK with an empty
//! `volume_id` (the mock driver's `Garbage::EmptyVolumeId` on every call), for as long as it
//! takes each claim of the burst to be answered so twice, then the driver recovers.
//!
//! While it lasts no sidecar can bind anything: a volume without an id can be neither named in
//! a PV nor deleted (CSI spec, CreateVolume: `volume_id` is REQUIRED and identifies the volume
//! in every later call). What a correct sidecar does, and what this row checks: it creates no
//! PV, records a Warning for the claim, and retries with the *same* name, so that once the
//! driver answers properly its idempotent answer names the very volume the empty answers were
//! about (CSI spec: a CreateVolume with the name of an existing compatible volume returns that
//! volume). Then every claim is bound, nothing is orphaned and no volume is made twice. An
//! outage that never ends cannot converge by construction; this is its longest part that can.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, PersistentVolume};
use proto::csi::v1::CreateVolumeRequest;
use testbed_mock_csi::{Action, Fault as DriverFault, Garbage, Method, When};
use tokio::time::Instant;

use crate::rig::Rig;

/// Empty answers every claim must have had before the driver recovers: the first attempt and
/// at least one retry, so the row shows the retry keeps the name.
const EMPTY_ANSWERS_PER_CLAIM: usize = 2;

/// How often the outage is checked.
const POLL: Duration = Duration::from_millis(100);

/// The driver fault: every CreateVolume answer has an empty `volume_id`.
pub(crate) fn driver_faults() -> Vec<DriverFault> {
    vec![DriverFault {
        method: Method::CreateVolume,
        when: When::Every,
        action: Action::Garbage(Garbage::EmptyVolumeId),
    }]
}

/// The names of the CreateVolume calls answered so far, with how many answers each had.
fn answers_per_name(rig: &Rig) -> HashMap<String, usize> {
    let mut per_name = HashMap::new();
    for call in rig.driver.calls_of(Method::CreateVolume) {
        if call.code.is_none() {
            continue;
        }
        if let Ok(request) = call.decode::<CreateVolumeRequest>() {
            *per_name.entry(request.name).or_insert(0) += 1;
        }
    }
    per_name
}

/// Whether `claims` volume names have each had [`EMPTY_ANSWERS_PER_CLAIM`] answers.
fn outage_done(per_name: &HashMap<String, usize>, claims: usize) -> bool {
    per_name
        .values()
        .filter(|&&n| n >= EMPTY_ANSWERS_PER_CLAIM)
        .count()
        >= claims
}

/// Warning events of the claims, counting an aggregated event's `count`.
fn claim_warnings(rig: &Rig) -> usize {
    rig.server
        .list_objects::<Event>(None)
        .unwrap_or_default()
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.involved_object.kind.as_deref() == Some("PersistentVolumeClaim"))
        .map(|e| e.count.map_or(1, |c| usize::try_from(c).unwrap_or(1)))
        .sum()
}

/// Lets the outage run until each of the `claims` claims has had its empty answers (or
/// `deadline`), checks what the sidecar did meanwhile, and ends it: the driver answers
/// properly from then on.
pub(crate) async fn outage(
    rig: &mut Rig,
    claims: usize,
    deadline: Instant,
    notes: &mut Vec<String>,
    problems: &mut Vec<String>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let per_name = loop {
        rig.restart_exited()?;
        let per_name = answers_per_name(rig);
        if outage_done(&per_name, claims) || Instant::now() >= deadline {
            break per_name;
        }
        tokio::time::sleep(POLL).await;
    };
    let lasted = started.elapsed();
    // Read before the recovery: what the empty answers led to.
    let volumes = rig.server.list_objects::<PersistentVolume>(None)?.len();
    let warnings = claim_warnings(rig);
    rig.driver.clear_faults();
    let answers: usize = per_name.values().sum();
    notes.push(format!(
        "{answers} CreateVolume answers with an empty volume_id for {} names over {:.1} s, \
         then the driver recovered; {warnings} Warning events on claims; {volumes} PVs during \
         the outage",
        per_name.len(),
        lasted.as_secs_f64()
    ));
    if !outage_done(&per_name, claims) {
        problems.push(format!(
            "the outage did not reach {EMPTY_ANSWERS_PER_CLAIM} answers for each of {claims} claims"
        ));
    }
    if per_name.len() > claims {
        problems.push(format!(
            "{} volume names for {claims} claims: a retry changed the name",
            per_name.len()
        ));
    }
    if volumes > 0 {
        problems.push(format!(
            "{volumes} PVs made from answers without a volume id"
        ));
    }
    if warnings == 0 {
        problems.push("no Warning event for an empty volume_id".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outage_lasts_until_every_claim_had_its_empty_answers() {
        let per = |counts: &[usize]| -> HashMap<String, usize> {
            counts
                .iter()
                .enumerate()
                .map(|(i, &n)| (format!("pvc-{i}"), n))
                .collect()
        };
        for (counts, claims, done) in [
            (&[][..], 2, false),
            (&[2, 1][..], 2, false),
            (&[2, 2][..], 2, true),
            (&[5, 3][..], 2, true),
            (&[2, 2, 0][..], 3, false),
            (&[2][..], 0, true),
        ] {
            assert_eq!(
                outage_done(&per(counts), claims),
                done,
                "{counts:?} of {claims}"
            );
        }
    }

    #[test]
    fn every_create_volume_call_gets_an_empty_id() {
        let [fault] = driver_faults().try_into().unwrap();
        assert_eq!(fault.method, Method::CreateVolume);
        assert!((1..=1_000).all(|n| fault.when.matches(n)));
        assert!(matches!(
            fault.action,
            Action::Garbage(Garbage::EmptyVolumeId)
        ));
    }
}
