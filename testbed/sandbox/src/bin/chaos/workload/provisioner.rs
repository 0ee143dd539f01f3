//! csi-provisioner's burst: N claims of an Immediate StorageClass created at once. Done: a
//! live claim has one PV bound to its uid; a claim deleted mid-provisioning has no PV left;
//! a claim still pending when its class was deleted has a `ProvisioningFailed` Warning
//! (upstream keeps retrying it and never provisions it: spec, class lookup per attempt).
//! At the end every claim is deleted and, once the PVs are gone, any volume left in the
//! driver is an orphan, and a DeleteVolume for a volume whose PV was gone a duplicate.

use std::collections::{BTreeSet, HashMap};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use proto::csi::v1::{CreateVolumeRequest, DeleteVolumeRequest};
use serde_json::json;
use testbed_mock_csi::{DEFAULT_DRIVER_NAME, Method};

use super::{GoneAt, Tally, Verdict, at_once, last_seq, present, repeats, wait_all_gone};
use crate::rig::{NAMESPACE, Rig, SECRET_NAME};

const CLASS: &str = "chaos-immediate";

fn claim_name(i: usize) -> String {
    format!("chaos-claim-{i}")
}

/// The burst of claims and what was seen of it.
#[derive(Debug)]
pub(crate) struct Provisioning {
    count: usize,
    /// Claims deleted mid-provisioning.
    deleted: BTreeSet<String>,
    /// Claims still pending when the class was deleted.
    classless: BTreeSet<String>,
    /// Per CreateVolume name (`pvc-<claim uid>`): the last call before the PV was seen.
    done_at: HashMap<String, Option<u64>>,
}

impl Provisioning {
    pub(crate) fn prepare(rig: &Rig, count: usize) -> anyhow::Result<Self> {
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": CLASS},
            "provisioner": DEFAULT_DRIVER_NAME,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
            "parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": SECRET_NAME,
                "csi.storage.k8s.io/provisioner-secret-namespace": NAMESPACE,
            },
        }))?;
        rig.server.put_object(&class)?;
        Ok(Self {
            count,
            deleted: BTreeSet::new(),
            classless: BTreeSet::new(),
            done_at: HashMap::new(),
        })
    }

    fn claims(rig: &Rig) -> Api<PersistentVolumeClaim> {
        Api::namespaced(rig.server.client(), NAMESPACE)
    }

    pub(crate) async fn launch(&mut self, rig: &Rig) -> anyhow::Result<()> {
        let api = Self::claims(rig);
        at_once(self.count, |i| {
            let api = api.clone();
            async move {
                let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                    "metadata": {"name": claim_name(i), "namespace": NAMESPACE},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                        "storageClassName": CLASS,
                    },
                }))?;
                api.create(&PostParams::default(), &claim)
                    .await
                    .with_context(|| format!("cannot create claim {}", claim_name(i)))?;
                Ok(())
            }
        })
        .await
    }

    /// Claims without a PV yet.
    fn pending(&self, rig: &Rig) -> anyhow::Result<Vec<String>> {
        let bound = bound_claims(rig)?;
        Ok((0..self.count)
            .map(claim_name)
            .filter(|name| !bound.contains_key(name))
            .collect())
    }

    /// Deletes every tenth claim that has no PV yet.
    pub(crate) async fn delete_pending_claims(&mut self, rig: &Rig) -> anyhow::Result<String> {
        let api = Self::claims(rig);
        for name in self.pending(rig)?.into_iter().step_by(10) {
            delete_claim(&api, &name).await?;
            self.deleted.insert(name);
        }
        Ok(format!(
            "{} claims deleted before provisioning",
            self.deleted.len()
        ))
    }

    /// Deletes the StorageClass while claims are still pending.
    pub(crate) async fn delete_class(&mut self, rig: &Rig) -> anyhow::Result<String> {
        Api::<StorageClass>::all(rig.server.client())
            .delete(CLASS, &DeleteParams::default())
            .await
            .context("cannot delete the StorageClass")?;
        self.classless = self.pending(rig)?.into_iter().collect();
        Ok(format!(
            "class deleted with {} claims pending",
            self.classless.len()
        ))
    }

    pub(crate) fn observe(&mut self, rig: &Rig) -> Tally {
        let (Ok(bound), Ok(claims)) = (
            bound_claims(rig),
            rig.server
                .list_objects::<PersistentVolumeClaim>(Some(NAMESPACE)),
        ) else {
            return Tally {
                done: 0,
                total: self.count,
            };
        };
        let failed = failed_claims(rig);
        let seq = last_seq(rig);
        let mut done = 0;
        for name in (0..self.count).map(claim_name) {
            let claim = claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name.as_str()));
            let uid = claim.and_then(|c| c.metadata.uid.clone());
            let has_pv = uid
                .as_ref()
                .is_some_and(|uid| bound.get(&name).is_some_and(|uids| uids.contains(uid)));
            if has_pv && let Some(uid) = uid {
                self.done_at.entry(format!("pvc-{uid}")).or_insert(seq);
            }
            let ok = if self.deleted.contains(&name) {
                claim.is_none() && !bound.contains_key(&name)
            } else if self.classless.contains(&name) {
                has_pv || failed.contains(&name)
            } else {
                has_pv
            };
            done += usize::from(ok);
        }
        Tally {
            done,
            total: self.count,
        }
    }

    /// What the store and the driver say about the first few claims that should have a PV
    /// and have none.
    fn stuck(&self, rig: &Rig) -> anyhow::Result<Vec<String>> {
        let requests: Vec<(String, Option<tonic::Code>)> = rig
            .driver
            .calls_of(Method::CreateVolume)
            .iter()
            .filter_map(|c| Some((c.decode::<CreateVolumeRequest>().ok()?.name, c.code)))
            .collect();
        let mut stuck = Vec::new();
        let pending = self.pending(rig)?.into_iter();
        // Deleted claims and claims left without a class are done without a PV.
        let expected = pending.filter(|n| !self.deleted.contains(n) && !self.classless.contains(n));
        for name in expected.take(3) {
            let claim = rig
                .server
                .get_object::<PersistentVolumeClaim>(Some(NAMESPACE), &name)?;
            let uid = claim.as_ref().and_then(|c| c.metadata.uid.clone());
            let annotations: Vec<String> = claim
                .as_ref()
                .and_then(|c| c.metadata.annotations.clone())
                .unwrap_or_default()
                .into_keys()
                .collect();
            let calls: Vec<String> = requests
                .iter()
                .filter(|(n, _)| uid.as_ref().is_some_and(|uid| *n == format!("pvc-{uid}")))
                .map(|(_, code)| format!("{code:?}"))
                .collect();
            stuck.push(format!(
                "{name} (uid {uid:?}): annotations {annotations:?}, CreateVolume answers {calls:?}"
            ));
        }
        Ok(stuck)
    }

    pub(crate) async fn verdict(&mut self, rig: &mut Rig) -> anyhow::Result<Verdict> {
        let mut verdict = Verdict {
            problems: self.stuck(rig)?,
            duplicated: repeats(
                rig,
                Method::CreateVolume,
                &self.done_at,
                |r: &CreateVolumeRequest| Some(r.name.clone()),
            ),
            orphaned: None,
        };
        for (claim, uids) in bound_claims(rig)? {
            if uids.len() > 1 {
                verdict.duplicated += uids.len() - 1;
                verdict
                    .problems
                    .push(format!("{claim} has {} PVs", uids.len()));
            }
        }
        let mut gone = GoneAt::default();
        let (volumes, seq) = present(rig, volume_handle)?;
        gone.note(volumes, seq);
        let api = Self::claims(rig);
        for name in (0..self.count).map(claim_name) {
            delete_claim(&api, &name).await?;
        }
        let left = wait_all_gone(rig, "the claims were deleted", &mut gone, volume_handle).await?;
        verdict.problems.extend(left);
        verdict.duplicated += repeats(
            rig,
            Method::DeleteVolume,
            gone.at(),
            |r: &DeleteVolumeRequest| Some(r.volume_id.clone()),
        );
        verdict.orphaned = Some(rig.driver.volumes().len());
        Ok(verdict)
    }
}

async fn delete_claim(api: &Api<PersistentVolumeClaim>, name: &str) -> anyhow::Result<()> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot delete claim {name}")),
    }
}

/// The driver's id of the volume behind `pv`.
fn volume_handle(pv: &PersistentVolume) -> Option<String> {
    Some(pv.spec.as_ref()?.csi.as_ref()?.volume_handle.clone())
}

/// Claim name → uids of the claims the PVs in the store are bound to (in our namespace).
fn bound_claims(rig: &Rig) -> anyhow::Result<HashMap<String, Vec<String>>> {
    let mut bound: HashMap<String, Vec<String>> = HashMap::new();
    for pv in rig.server.list_objects::<PersistentVolume>(None)? {
        let Some(claim) = pv.spec.and_then(|s| s.claim_ref) else {
            continue;
        };
        if claim.namespace.as_deref() != Some(NAMESPACE) {
            continue;
        }
        if let Some(name) = claim.name {
            bound
                .entry(name)
                .or_default()
                .push(claim.uid.unwrap_or_default());
        }
    }
    Ok(bound)
}

/// Claims with a `ProvisioningFailed` Warning.
fn failed_claims(rig: &Rig) -> BTreeSet<String> {
    rig.server
        .list_objects::<Event>(Some(NAMESPACE))
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ProvisioningFailed"))
        .filter_map(|e| e.involved_object.name)
        .collect()
}
