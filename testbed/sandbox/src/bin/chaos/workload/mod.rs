//! The burst each sidecar is given, and how the scenario reads its outcome from the store and
//! the driver: how many objects are done, which were finished more than once, and what was
//! left behind in the driver.
//!
//! "Done" is read from the API server's store (no HTTP, no injected fault). A call to the
//! driver for an object that arrived after the object was seen done is a duplicate: the
//! success was already recorded in the API, so a correct controller has no reason to repeat
//! it (spec: a VA marked attached is never published again; a claim with a PV is never
//! provisioned again; a PV already at the requested size is not expanded again). The teardown
//! is read the same way: a DeleteVolume after the volume's PV was seen gone, or a
//! ControllerUnpublishVolume after the volume's VolumeAttachment was seen gone, is a duplicate
//! (the object's removal is what records the driver's success).

mod attacher;
mod provisioner;
mod resizer;

use std::collections::{HashMap, HashSet};

use futures::StreamExt as _;

use proto::csi::v1::{
    ControllerExpandVolumeRequest, ControllerPublishVolumeRequest,
    ControllerUnpublishVolumeRequest, CreateVolumeRequest, DeleteVolumeRequest,
};
use testbed_mock_csi::{Method, RecordedCall};

use crate::Sidecar;
use crate::rig::Rig;

pub(crate) use attacher::Attaching;
pub(crate) use provisioner::Provisioning;
pub(crate) use resizer::Expanding;

/// How far the burst is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) done: usize,
    pub(crate) total: usize,
}

impl Tally {
    pub(crate) fn complete(self) -> bool {
        self.done == self.total
    }
}

/// The outcome the table shows besides convergence.
#[derive(Debug, Clone, Default)]
pub(crate) struct Verdict {
    /// Volumes left in the driver (provisioner), or published with no VA (attacher); `None`
    /// where the notion does not apply (resizer).
    pub(crate) orphaned: Option<usize>,
    /// Objects the driver was asked to finish again after they were seen done.
    pub(crate) duplicated: usize,
    /// Anything else wrong.
    pub(crate) problems: Vec<String>,
}

/// The burst of one sidecar.
#[derive(Debug)]
pub(crate) enum Workload {
    Provisioner(Provisioning),
    Attacher(Attaching),
    Resizer(Expanding),
}

impl Workload {
    /// Stores what the burst needs (a StorageClass, PVs, bound claims).
    pub(crate) fn prepare(sidecar: Sidecar, rig: &Rig, count: usize) -> anyhow::Result<Self> {
        Ok(match sidecar {
            Sidecar::Provisioner => Self::Provisioner(Provisioning::prepare(rig, count)?),
            Sidecar::Attacher => Self::Attacher(Attaching::prepare(rig, count)?),
            Sidecar::Resizer => Self::Resizer(Expanding::prepare(rig, count)?),
        })
    }

    /// The driver method whose calls make the burst's progress.
    pub(crate) fn method(&self) -> Method {
        match self {
            Self::Provisioner(_) => Method::CreateVolume,
            Self::Attacher(_) => Method::ControllerPublishVolume,
            Self::Resizer(_) => Method::ControllerExpandVolume,
        }
    }

    /// Creates the burst through the API (claims, VolumeAttachments, raised requests).
    pub(crate) async fn launch(&mut self, rig: &Rig) -> anyhow::Result<()> {
        match self {
            Self::Provisioner(w) => w.launch(rig).await,
            Self::Attacher(w) => w.launch(rig).await,
            Self::Resizer(w) => w.launch(rig).await,
        }
    }

    /// The mid-operation change of the `mid-op` fault: a tenth of the claims deleted before
    /// they are provisioned, a tenth of the VAs deleted before they are attached, every claim
    /// resized again.
    pub(crate) async fn change_mid_operation(&mut self, rig: &Rig) -> anyhow::Result<String> {
        match self {
            Self::Provisioner(w) => w.delete_pending_claims(rig).await,
            Self::Attacher(w) => w.delete_pending_attachments(rig).await,
            Self::Resizer(w) => w.resize_again(rig).await,
        }
    }

    /// How far the burst is; also notes, per object, the last driver call seen before it was
    /// first seen done.
    pub(crate) fn observe(&mut self, rig: &Rig) -> Tally {
        match self {
            Self::Provisioner(w) => w.observe(rig),
            Self::Attacher(w) => w.observe(rig),
            Self::Resizer(w) => w.observe(rig),
        }
    }

    /// Orphans and duplicates, once the burst converged (or timed out). The provisioner's
    /// claims and the attacher's VolumeAttachments are deleted first, so a volume left in the
    /// driver (published, for the attacher) is a leak.
    pub(crate) async fn verdict(&mut self, rig: &mut Rig) -> anyhow::Result<Verdict> {
        match self {
            Self::Provisioner(w) => w.verdict(rig).await,
            Self::Attacher(w) => w.verdict(rig).await,
            Self::Resizer(w) => Ok(w.verdict(rig)),
        }
    }
}

/// Requests a burst keeps in flight: the objects arrive "at once" for the sidecar without
/// starving it of CPU on a small machine (as the bench's bursts).
const CONCURRENCY: usize = 32;

/// Runs `call(i)` for `i` in `0..count`, [`CONCURRENCY`] at a time; the first error, if any.
pub(crate) async fn at_once<F, Fut>(count: usize, call: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..count)
        .map(call)
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The volume a call finishes or undoes something for, per method, for
/// [`repeated_after_ok`]: the name of a CreateVolume, the volume of a DeleteVolume, volume and
/// node of a publish or unpublish, volume and size of an expansion. `None` for other calls.
fn repeat_key(call: &RecordedCall) -> Option<String> {
    Some(match call.method {
        Method::CreateVolume => call.decode::<CreateVolumeRequest>().ok()?.name,
        Method::DeleteVolume => call.decode::<DeleteVolumeRequest>().ok()?.volume_id,
        Method::ControllerPublishVolume => {
            let r = call.decode::<ControllerPublishVolumeRequest>().ok()?;
            format!("{}@{}", r.volume_id, r.node_id)
        }
        Method::ControllerUnpublishVolume => {
            let r = call.decode::<ControllerUnpublishVolumeRequest>().ok()?;
            format!("{}@{}", r.volume_id, r.node_id)
        }
        Method::ControllerExpandVolume => {
            let r = call.decode::<ControllerExpandVolumeRequest>().ok()?;
            format!("{}:{}", r.volume_id, r.capacity_range?.required_bytes)
        }
        _ => return None,
    })
}

/// Calls (of the methods [`repeat_key`] knows) that arrived after an earlier call of the same
/// method for the same key had been answered OK to a caller still waiting for it, with
/// nothing undoing it in between: the sidecar held the driver's success and asked again.
/// Undoing: an unpublish between two publishes of a volume to a node (and the other way
/// round), a CreateVolume of the volume between two DeleteVolumes of it (the mock gives a
/// re-created name its old id, [`testbed_mock_csi::volume_id_for`]), and the other way round.
/// Garbled OK answers do not count as successes (the sidecar rightly asks again), nor answers
/// to calls the sidecar had given up on. Meaningful only while one sidecar process ran the
/// row: a replica that dies with an answer in hand takes it along.
pub(crate) fn repeated_after_ok(calls: &[RecordedCall]) -> usize {
    // Per method and key: the earliest OK answer since the last undo.
    let mut succeeded: HashMap<(Method, String), tokio::time::Instant> = HashMap::new();
    // Volume id → the CreateVolume name that made it.
    let mut names: HashMap<String, String> = HashMap::new();
    let mut repeated = 0;
    for call in calls {
        let Some(key) = repeat_key(call) else {
            continue;
        };
        let undone = match call.method {
            Method::ControllerPublishVolume => {
                Some((Method::ControllerUnpublishVolume, key.clone()))
            }
            Method::ControllerUnpublishVolume => {
                Some((Method::ControllerPublishVolume, key.clone()))
            }
            Method::CreateVolume => {
                let id = testbed_mock_csi::volume_id_for(&key);
                names.insert(id.clone(), key.clone());
                Some((Method::DeleteVolume, id))
            }
            Method::DeleteVolume => names
                .get(&key)
                .map(|name| (Method::CreateVolume, name.clone())),
            _ => None,
        };
        if let Some(undone) = undone {
            succeeded.remove(&undone);
        }
        let id = (call.method, key);
        if succeeded.get(&id).is_some_and(|ok| *ok < call.at) {
            repeated += 1;
        }
        if call.code == Some(tonic::Code::Ok)
            && call.delivered
            && !call.garbled
            && let Some(answered) = call.answered
        {
            let earliest = succeeded.entry(id).or_insert(answered);
            *earliest = (*earliest).min(answered);
        }
    }
    repeated
}

/// Per volume id: the last driver call seen before the object whose removal records the
/// volume's teardown (its PV, its VolumeAttachment) was first seen gone. The keys feed
/// [`repeats`].
#[derive(Debug, Default)]
pub(crate) struct GoneAt {
    /// Ids whose object was seen in the store.
    seen: HashSet<String>,
    at: HashMap<String, Option<u64>>,
}

impl GoneAt {
    /// Notes the ids of the objects the store holds now (`present`, listed *before* `seq` was
    /// read, so that no call counted later can have come before the object was gone): an id
    /// seen before and absent now is gone as of `seq`.
    pub(crate) fn note(&mut self, present: HashSet<String>, seq: Option<u64>) {
        for id in &self.seen {
            if !present.contains(id) {
                self.at.entry(id.clone()).or_insert(seq);
            }
        }
        self.seen.extend(present);
    }

    pub(crate) fn at(&self) -> &HashMap<String, Option<u64>> {
        &self.at
    }
}

/// How long a teardown (claims or VolumeAttachments deleted in the verdict) may take.
pub(crate) const TEARDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_mins(2);

/// The volume ids of the `K`s the store holds, then the last call's sequence number, for
/// [`GoneAt::note`].
pub(crate) fn present<K>(
    rig: &Rig,
    volume_of: impl Fn(&K) -> Option<String>,
) -> anyhow::Result<(HashSet<String>, Option<u64>)>
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let ids = rig
        .server
        .list_objects::<K>(None)?
        .iter()
        .filter_map(volume_of)
        .collect();
    Ok((ids, last_seq(rig)))
}

/// Waits until the API server holds no `K` (restarting exited replicas meanwhile), noting in
/// `gone` when each one's volume (`volume_of`) was seen gone; a problem naming how many are
/// left when [`TEARDOWN_TIMEOUT`] passes first.
pub(crate) async fn wait_all_gone<K>(
    rig: &mut Rig,
    after: &str,
    gone: &mut GoneAt,
    volume_of: impl Fn(&K) -> Option<String>,
) -> anyhow::Result<Option<String>>
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let deadline = tokio::time::Instant::now() + TEARDOWN_TIMEOUT;
    loop {
        rig.restart_exited()?;
        let objects = rig.server.list_objects::<K>(None)?;
        let seq = last_seq(rig);
        gone.note(objects.iter().filter_map(&volume_of).collect(), seq);
        let left = objects.len();
        if left == 0 {
            return Ok(None);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Some(format!(
                "{left} {} left {TEARDOWN_TIMEOUT:?} after {after}",
                K::plural(&())
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The last call sequence number the driver recorded (`None` before the first call).
pub(crate) fn last_seq(rig: &Rig) -> Option<u64> {
    rig.driver.calls().last().map(|c| c.seq)
}

/// Counts the recorded `method` calls, keyed by `key_of(request)`, that arrived after the
/// sequence number noted for their key in `done_at` (answered successfully or not: a repeat
/// is a repeat).
pub(crate) fn repeats<M: prost::Message + Default>(
    rig: &Rig,
    method: Method,
    done_at: &HashMap<String, Option<u64>>,
    key_of: impl Fn(&M) -> Option<String>,
) -> usize {
    rig.driver
        .calls_of(method)
        .iter()
        .filter(|call| {
            let Ok(request) = call.decode::<M>() else {
                return false;
            };
            let Some(key) = key_of(&request) else {
                return false;
            };
            match done_at.get(&key) {
                Some(Some(seq)) => call.seq > *seq,
                Some(None) => true,
                None => false,
            }
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> HashSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn an_id_is_gone_from_the_first_listing_without_it_after_one_with_it() {
        let mut gone = GoneAt::default();
        gone.note(ids(&["a", "b"]), None);
        assert!(gone.at().is_empty(), "both still there");
        gone.note(ids(&["b"]), Some(4));
        gone.note(ids(&[]), Some(9));
        // `c` never listed: nothing is known of it, so none of its calls can count.
        gone.note(ids(&[]), Some(12));
        let expected = HashMap::from([("a".to_owned(), Some(4)), ("b".to_owned(), Some(9))]);
        assert_eq!(gone.at(), &expected);
    }

    /// A recorded call of `method` for `request`, arriving at `at` ms, answered OK at
    /// `answered` ms (or not at all), to a caller still waiting when `delivered`.
    fn call<M: prost::Message>(
        method: Method,
        request: &M,
        at: u64,
        answered: Option<u64>,
        delivered: bool,
    ) -> RecordedCall {
        let start = tokio::time::Instant::now();
        let ms = |n| start + std::time::Duration::from_millis(n);
        RecordedCall {
            seq: at,
            method,
            at: ms(at),
            request: request.encode_to_vec(),
            code: answered.map(|_| tonic::Code::Ok),
            message: String::new(),
            answered: answered.map(ms),
            garbled: false,
            delivered,
        }
    }

    fn publish(volume: &str) -> ControllerPublishVolumeRequest {
        ControllerPublishVolumeRequest {
            volume_id: volume.into(),
            node_id: "node".into(),
            ..Default::default()
        }
    }

    fn unpublish(volume: &str) -> ControllerUnpublishVolumeRequest {
        ControllerUnpublishVolumeRequest {
            volume_id: volume.into(),
            node_id: "node".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_call_after_an_ok_answer_for_the_same_key_is_repeated_unless_undone_or_unheard() {
        let publish_a = Method::ControllerPublishVolume;
        let unpublish_a = Method::ControllerUnpublishVolume;
        let cases: Vec<(&str, Vec<RecordedCall>, usize)> = vec![
            (
                "publish, OK, publish again",
                vec![
                    call(publish_a, &publish("a"), 0, Some(5), true),
                    call(publish_a, &publish("a"), 10, Some(15), true),
                ],
                1,
            ),
            (
                "another volume",
                vec![
                    call(publish_a, &publish("a"), 0, Some(5), true),
                    call(publish_a, &publish("b"), 10, Some(15), true),
                ],
                0,
            ),
            (
                "the retry left before the first answer (a timeout)",
                vec![
                    call(publish_a, &publish("a"), 0, Some(20), true),
                    call(publish_a, &publish("a"), 10, Some(25), true),
                ],
                0,
            ),
            (
                "the first answer reached nobody (its caller gave up)",
                vec![
                    call(publish_a, &publish("a"), 0, Some(5), false),
                    call(publish_a, &publish("a"), 10, Some(15), true),
                ],
                0,
            ),
            (
                "unpublished in between",
                vec![
                    call(publish_a, &publish("a"), 0, Some(5), true),
                    call(unpublish_a, &unpublish("a"), 6, Some(8), true),
                    call(publish_a, &publish("a"), 10, Some(15), true),
                ],
                0,
            ),
            (
                "the first call not answered",
                vec![
                    call(publish_a, &publish("a"), 0, None, true),
                    call(publish_a, &publish("a"), 10, Some(15), true),
                ],
                0,
            ),
        ];
        for (name, calls, want) in cases {
            assert_eq!(repeated_after_ok(&calls), want, "{name}");
        }
        let mut garbled = call(publish_a, &publish("a"), 0, Some(5), true);
        garbled.garbled = true;
        let again = call(publish_a, &publish("a"), 10, Some(15), true);
        assert_eq!(repeated_after_ok(&[garbled, again]), 0, "garbled");
    }

    #[test]
    fn a_delete_after_an_ok_delete_is_repeated_unless_the_name_was_made_again() {
        let delete = |at| {
            let request = DeleteVolumeRequest {
                volume_id: testbed_mock_csi::volume_id_for("pvc-1"),
                ..Default::default()
            };
            call(Method::DeleteVolume, &request, at, Some(at + 1), true)
        };
        let create = |at| {
            let request = CreateVolumeRequest {
                name: "pvc-1".into(),
                ..Default::default()
            };
            call(Method::CreateVolume, &request, at, Some(at + 1), true)
        };
        let made_again = [create(0), delete(10), create(20), delete(30)];
        assert_eq!(repeated_after_ok(&made_again), 0, "same name, same id");
        let deleted_twice = [create(0), delete(10), delete(20)];
        assert_eq!(repeated_after_ok(&deleted_twice), 1);
    }

    #[test]
    fn an_id_gone_before_any_driver_call_counts_every_call() {
        let mut gone = GoneAt::default();
        gone.note(ids(&["a"]), None);
        gone.note(ids(&[]), None);
        assert_eq!(gone.at().get("a"), Some(&None));
    }
}
