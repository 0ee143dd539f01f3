//! csi-attacher's burst: N PVs stored with their volumes in the driver, then N
//! VolumeAttachments created at once, as the attach-detach controller does. Done: a live VA
//! has `status.attached`; a VA deleted mid-attach is gone (the attacher detached it and
//! removed its finalizer). At the end every VA is deleted; a volume still published to the
//! node once they are gone is an orphan, and a ControllerUnpublishVolume for a volume whose
//! VA was gone a duplicate.

use std::collections::{BTreeSet, HashMap};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use proto::csi::v1::{ControllerPublishVolumeRequest, ControllerUnpublishVolumeRequest};
use serde_json::json;
use testbed_mock_csi::{DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID, Method, MockVolume};

use super::{GoneAt, Tally, Verdict, at_once, last_seq, repeats, wait_all_gone};
use crate::rig::{NAMESPACE, Rig, SECRET_NAME};

const GI: i64 = 1 << 30;

fn pv_name(i: usize) -> String {
    format!("chaos-pv-{i}")
}

fn va_name(i: usize) -> String {
    format!("chaos-va-{i}")
}

fn handle(i: usize) -> String {
    format!("chaos-vol-{i}")
}

/// The burst of VolumeAttachments and what was seen of it.
#[derive(Debug)]
pub(crate) struct Attaching {
    count: usize,
    /// VAs deleted mid-attach.
    deleted: BTreeSet<String>,
    /// Per volume handle: the last call before its VA was seen attached.
    done_at: HashMap<String, Option<u64>>,
    /// Per volume handle: the last call before its VA was seen gone.
    gone: GoneAt,
}

impl Attaching {
    pub(crate) fn prepare(rig: &Rig, count: usize) -> anyhow::Result<Self> {
        for i in 0..count {
            rig.driver.insert_volume(MockVolume::new(handle(i), GI));
            let pv: PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": pv_name(i)},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "volumeMode": "Filesystem",
                    "csi": {
                        "driver": DEFAULT_DRIVER_NAME, "volumeHandle": handle(i), "fsType": "ext4",
                        "controllerPublishSecretRef": {"name": SECRET_NAME, "namespace": NAMESPACE},
                    },
                },
                "status": {"phase": "Available"},
            }))?;
            rig.server.put_object(&pv)?;
        }
        Ok(Self {
            count,
            deleted: BTreeSet::new(),
            done_at: HashMap::new(),
            gone: GoneAt::default(),
        })
    }

    fn attachments(rig: &Rig) -> Api<VolumeAttachment> {
        Api::all(rig.server.client())
    }

    pub(crate) async fn launch(&mut self, rig: &Rig) -> anyhow::Result<()> {
        let api = Self::attachments(rig);
        at_once(self.count, |i| {
            let api = api.clone();
            async move {
                let va: VolumeAttachment = serde_json::from_value(json!({
                    "metadata": {"name": va_name(i)},
                    "spec": {
                        "attacher": DEFAULT_DRIVER_NAME,
                        "nodeName": DEFAULT_NODE_ID,
                        "source": {"persistentVolumeName": pv_name(i)},
                    },
                }))?;
                api.create(&PostParams::default(), &va)
                    .await
                    .with_context(|| format!("cannot create {}", va_name(i)))?;
                Ok(())
            }
        })
        .await
    }

    /// Deletes every tenth VA that is not attached yet.
    pub(crate) async fn delete_pending_attachments(&mut self, rig: &Rig) -> anyhow::Result<String> {
        let attached = attached(rig)?;
        let api = Self::attachments(rig);
        let pending: Vec<String> = (0..self.count)
            .map(va_name)
            .filter(|name| !attached.contains(name))
            .collect();
        for name in pending.into_iter().step_by(10) {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("cannot delete {name}")),
            }
            self.deleted.insert(name);
        }
        Ok(format!("{} VAs deleted before attach", self.deleted.len()))
    }

    pub(crate) fn observe(&mut self, rig: &Rig) -> Tally {
        let Ok(vas) = rig.server.list_objects::<VolumeAttachment>(None) else {
            return Tally {
                done: 0,
                total: self.count,
            };
        };
        let names: BTreeSet<String> = vas.iter().filter_map(|v| v.metadata.name.clone()).collect();
        let seq = last_seq(rig);
        // A VA deleted mid-attach is gone once detached: no unpublish may follow.
        self.gone
            .note(vas.iter().filter_map(volume_of).collect(), seq);
        let attached: BTreeSet<String> = vas
            .iter()
            .filter(|v| v.status.as_ref().is_some_and(|s| s.attached))
            .filter_map(|v| v.metadata.name.clone())
            .collect();
        let mut done = 0;
        for i in 0..self.count {
            let name = va_name(i);
            if attached.contains(&name) {
                self.done_at.entry(handle(i)).or_insert(seq);
            }
            let ok = if self.deleted.contains(&name) {
                !names.contains(&name)
            } else {
                attached.contains(&name)
            };
            done += usize::from(ok);
        }
        Tally {
            done,
            total: self.count,
        }
    }

    /// Duplicates first; then every VA is deleted, as the attach-detach controller does when
    /// the pods go, and once they are gone (each detached and its finalizer removed) a volume
    /// still published to the node is an orphan.
    pub(crate) async fn verdict(&mut self, rig: &mut Rig) -> anyhow::Result<Verdict> {
        let mut verdict = Verdict {
            orphaned: None,
            duplicated: repeats(
                rig,
                Method::ControllerPublishVolume,
                &self.done_at,
                |r: &ControllerPublishVolumeRequest| Some(r.volume_id.clone()),
            ),
            problems: Vec::new(),
        };
        let api = Self::attachments(rig);
        for name in (0..self.count).map(va_name) {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("cannot delete {name}")),
            }
        }
        let left = wait_all_gone(rig, "they were deleted", &mut self.gone, volume_of).await?;
        verdict.problems.extend(left);
        verdict.duplicated += repeats(
            rig,
            Method::ControllerUnpublishVolume,
            self.gone.at(),
            |r: &ControllerUnpublishVolumeRequest| Some(r.volume_id.clone()),
        );
        // A VA still there (the wait timed out, reported above) is not orphaned: its volume
        // may rightly still be published.
        let live: BTreeSet<String> = rig
            .server
            .list_objects::<VolumeAttachment>(None)?
            .iter()
            .filter_map(volume_of)
            .collect();
        let orphaned = rig
            .driver
            .volumes()
            .into_iter()
            .filter(|v| v.published_nodes.contains_key(DEFAULT_NODE_ID))
            .filter(|v| !live.contains(&v.volume_id))
            .count();
        verdict.orphaned = Some(orphaned);
        Ok(verdict)
    }
}

/// The driver's id of the volume `va` attaches (the burst's PVs are named after it).
fn volume_of(va: &VolumeAttachment) -> Option<String> {
    let pv = va.spec.source.persistent_volume_name.as_deref()?;
    Some(pv.replacen("chaos-pv-", "chaos-vol-", 1))
}

fn attached(rig: &Rig) -> anyhow::Result<BTreeSet<String>> {
    Ok(rig
        .server
        .list_objects::<VolumeAttachment>(None)?
        .into_iter()
        .filter(|v| v.status.as_ref().is_some_and(|s| s.attached))
        .filter_map(|v| v.metadata.name)
        .collect())
}
