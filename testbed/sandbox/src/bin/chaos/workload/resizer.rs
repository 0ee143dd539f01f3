//! csi-resizer's burst: N bound claims with their PVs and volumes stored at 1Gi, then every
//! claim's request raised to 2Gi at once (3Gi for all when the `mid-op` fault resizes them
//! again). The driver needs no node expansion, so the resizer finishes each one. Done: the
//! driver's volume and the PV's capacity both reached the latest request.
//! An expansion the driver gets for a volume whose claim already shows that size in
//! `status.capacity` is a duplicate.

use std::collections::HashMap;

use anyhow::Context as _;
use csi_common::quantity::parse_bytes;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, SecretReference};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{Patch, PatchParams};
use proto::csi::v1::ControllerExpandVolumeRequest;
use serde_json::json;
use testbed_mock_csi::{DEFAULT_DRIVER_NAME, Method, MockVolume};
use testbed_sandbox::fixtures::Binding;

use super::{Tally, Verdict, at_once, last_seq, repeats};
use crate::rig::{NAMESPACE, Rig, SECRET_NAME};

const GI: i64 = 1 << 30;
const CLASS: &str = "chaos-expandable";

fn claim_name(i: usize) -> String {
    format!("chaos-claim-{i}")
}

fn pv_name(i: usize) -> String {
    format!("chaos-pv-{i}")
}

/// The burst of expansions and what was seen of it.
#[derive(Debug)]
pub(crate) struct Expanding {
    count: usize,
    /// The latest request of every claim, in Gi.
    target_gi: i64,
    /// Per volume handle and size in Gi: the last call before it was seen at that size.
    done_at: HashMap<String, Option<u64>>,
}

impl Expanding {
    pub(crate) fn prepare(rig: &Rig, count: usize) -> anyhow::Result<Self> {
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": CLASS},
            "provisioner": DEFAULT_DRIVER_NAME,
            "allowVolumeExpansion": true,
        }))?;
        rig.server.put_object(&class)?;
        // A controller-only expansion (no NodeExpandVolume): there is no kubelet here to
        // finish a node expansion, and while one is pending (NodeResizePending) a second
        // resize waits for it, as upstream's expand-and-recover does ("case #1").
        rig.driver
            .update_config(|config| config.node_expansion_required = false);
        for i in 0..count {
            rig.driver.insert_volume(MockVolume::new(pv_name(i), GI));
            let (claim, volume) = (claim_name(i), pv_name(i));
            let binding = Binding {
                namespace: NAMESPACE,
                claim: &claim,
                volume: &volume,
                class: CLASS,
                driver: DEFAULT_DRIVER_NAME,
            };
            let stored = rig.server.put_object(&binding.claim()?)?;
            let mut pv = binding.volume(&stored.metadata.uid.unwrap_or_default())?;
            if let Some(csi) = pv.spec.as_mut().and_then(|s| s.csi.as_mut()) {
                csi.controller_expand_secret_ref = Some(SecretReference {
                    name: Some(SECRET_NAME.to_owned()),
                    namespace: Some(NAMESPACE.to_owned()),
                });
            }
            rig.server.put_object(&pv)?;
        }
        Ok(Self {
            count,
            target_gi: 1,
            done_at: HashMap::new(),
        })
    }

    async fn request_all(&mut self, rig: &Rig, gi: i64) -> anyhow::Result<()> {
        self.target_gi = gi;
        let api: Api<PersistentVolumeClaim> = Api::namespaced(rig.server.client(), NAMESPACE);
        let body = json!({"spec": {"resources": {"requests": {"storage": format!("{gi}Gi")}}}});
        at_once(self.count, |i| {
            let (api, body) = (api.clone(), body.clone());
            async move {
                api.patch(
                    &claim_name(i),
                    &PatchParams::default(),
                    &Patch::Merge(&body),
                )
                .await
                .with_context(|| format!("cannot resize {}", claim_name(i)))?;
                Ok(())
            }
        })
        .await
    }

    pub(crate) async fn launch(&mut self, rig: &Rig) -> anyhow::Result<()> {
        self.request_all(rig, 2).await
    }

    /// Raises every claim again, to 3Gi, while the 2Gi expansions are under way.
    pub(crate) async fn resize_again(&mut self, rig: &Rig) -> anyhow::Result<String> {
        self.request_all(rig, 3).await?;
        Ok(format!("{} claims resized again to 3Gi", self.count))
    }

    pub(crate) fn observe(&mut self, rig: &Rig) -> Tally {
        let target = self.target_gi * GI;
        let pvs: HashMap<String, i64> = rig
            .server
            .list_objects::<PersistentVolume>(None)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|pv| {
                let size = pv.spec?.capacity?.get("storage")?.0.clone();
                Some((pv.metadata.name?, parse_bytes(&size).ok()?))
            })
            .collect();
        let driver = driver_sizes(rig);
        // PV name -> the claim's status.capacity.
        let claims: HashMap<String, i64> = rig
            .server
            .list_objects::<PersistentVolumeClaim>(Some(NAMESPACE))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| {
                let pv = c.spec?.volume_name?;
                let size = c.status?.capacity?.get("storage")?.0.clone();
                Some((pv, parse_bytes(&size).ok()?))
            })
            .collect();
        let seq = last_seq(rig);
        let mut done = 0;
        for name in (0..self.count).map(pv_name) {
            // Recorded as finished in the claim's status.capacity, not merely done on the
            // driver or in the PV: until the claim says so, upstream's expand-and-recover
            // calls ControllerExpandVolume again on purpose ("we failed to record our work in
            // API objects", case #2), to learn whether node expansion is needed.
            for gi in 2..=self.target_gi {
                if claims.get(&name).is_some_and(|b| *b >= gi * GI) {
                    self.done_at.entry(format!("{name}@{gi}")).or_insert(seq);
                }
            }
            let ok = pvs.get(&name).is_some_and(|b| *b >= target)
                && driver.get(&name).is_some_and(|b| *b >= target);
            done += usize::from(ok);
        }
        Tally {
            done,
            total: self.count,
        }
    }

    /// What the store and the driver hold for the first few claims that did not converge.
    fn stuck(&self, rig: &Rig) -> Vec<String> {
        let target = self.target_gi * GI;
        let driver = driver_sizes(rig);
        let mut stuck = Vec::new();
        for i in 0..self.count {
            let pv = rig
                .server
                .get_object::<PersistentVolume>(None, &pv_name(i))
                .ok()
                .flatten();
            let pv_size = pv
                .and_then(|pv| pv.spec?.capacity?.get("storage").map(|q| q.0.clone()))
                .unwrap_or_default();
            let on_driver = driver.get(&pv_name(i)).copied().unwrap_or_default();
            if parse_bytes(&pv_size).is_ok_and(|b| b >= target) && on_driver >= target {
                continue;
            }
            let claim = rig
                .server
                .get_object::<PersistentVolumeClaim>(Some(NAMESPACE), &claim_name(i))
                .ok()
                .flatten()
                .and_then(|c| serde_json::to_string(&c.status).ok())
                .unwrap_or_default();
            stuck.push(format!(
                "{}: PV {pv_size}, driver {on_driver}, claim status {claim}",
                claim_name(i)
            ));
            if stuck.len() == 3 {
                break;
            }
        }
        stuck
    }

    pub(crate) fn verdict(&self, rig: &Rig) -> Verdict {
        Verdict {
            orphaned: None,
            duplicated: repeats(
                rig,
                Method::ControllerExpandVolume,
                &self.done_at,
                |r: &ControllerExpandVolumeRequest| {
                    let bytes = r.capacity_range.as_ref()?.required_bytes;
                    Some(format!("{}@{}", r.volume_id, bytes / GI))
                },
            ),
            problems: self.stuck(rig),
        }
    }
}

/// Volume id -> capacity in the driver.
fn driver_sizes(rig: &Rig) -> HashMap<String, i64> {
    rig.driver
        .volumes()
        .into_iter()
        .map(|v| (v.volume_id, v.capacity_bytes))
        .collect()
}
