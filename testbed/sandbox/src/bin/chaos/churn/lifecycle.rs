//! The objects each controller sidecar sees come and go, one batch at a time, as on a busy
//! cluster: every object of a batch has a new name (a cache or map keyed by name that never
//! forgets a deleted object grows), and a batch ends only when its objects are gone from the
//! store, so nothing piles up and any growth is the sidecar's.
//!
//! - csi-provisioner: claims of an Immediate class (reclaim policy Delete) created, provisioned
//!   and bound (by the controller-manager stand-in); then as many clones of them (`dataSource`
//!   the first claims, so the sidecar also puts and removes its cloning-protection finalizer
//!   on the sources); then a VolumeSnapshot of each first claim and a claim restored from it
//!   (the sidecar puts its source-protection finalizer on the snapshot and takes it off again,
//!   `snapshots.rs`); all deleted; the sidecar deletes the volumes and the PVs, and the
//!   snapshots go once no finalizer of the sidecar holds them. With
//!   `--churn-capacity` it also tracks storage capacity, and every batch replaces the
//!   WaitForFirstConsumer class the CSIStorageCapacity objects are for.
//! - csi-attacher: VolumeAttachments of stored PVs created, attached, deleted; the sidecar
//!   detaches them and removes its finalizer.
//! - csi-resizer: bound claims and PVs stored (as csi-provisioner and the PV controller leave
//!   them), expanded from 1Gi to 2Gi and moved to a VolumeAttributesClass in one change (so
//!   the expansion and the modify controllers both work on every claim), then removed from
//!   the store (as the provisioner's deletion and the protection controller would), and new
//!   ones stored.

use std::time::Duration;

use anyhow::{Context as _, bail};
use csi_common::quantity::parse_bytes;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{
    CSIStorageCapacity, StorageClass, VolumeAttachment, VolumeAttributesClass,
};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testbed_mock_csi::{ControllerRpc, DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID, MockVolume};
use testbed_sandbox::fixtures::Binding;
use tokio::time::Instant;

use super::snapshots;
use crate::Sidecar;
use crate::rig::{NAMESPACE, Rig};
use crate::workload::at_once;

const GI: i64 = 1 << 30;
const CLASS: &str = "churn";
/// The `kind` parameter of the late-binding classes, which the driver has capacity for.
const CAPACITY_KIND: &str = "fast";
/// The VolumeAttributesClass every resizer claim is moved to.
const MODIFIED_CLASS: &str = "churn-gold";
/// Longest a batch may take to reach each step before the run stops as stuck.
const STEP_TIMEOUT: Duration = Duration::from_mins(1);
/// How often the store is read while a batch moves on.
const POLL: Duration = Duration::from_millis(50);

/// Object lifecycles of one sidecar, a batch at a time.
#[derive(Debug)]
pub(crate) struct Lifecycles {
    sidecar: Sidecar,
    batch: usize,
    /// Batches started so far (part of every object name).
    round: usize,
    /// Lifecycles completed.
    pub(crate) completed: usize,
    /// csi-provisioner tracks capacity: a late-binding class per batch.
    capacity: bool,
}

impl Lifecycles {
    /// Stores what every batch needs: the StorageClass, or the attacher's PVs and volumes.
    pub(crate) fn prepare(
        sidecar: Sidecar,
        rig: &Rig,
        batch: usize,
        capacity: bool,
    ) -> anyhow::Result<Self> {
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": CLASS},
            "provisioner": DEFAULT_DRIVER_NAME,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": true,
        }))?;
        rig.server.put_object(&class)?;
        match sidecar {
            Sidecar::Attacher => {
                for i in 0..batch {
                    rig.driver.insert_volume(MockVolume::new(volume(i), GI));
                    rig.server.put_object(&attachable_pv(i)?)?;
                }
            }
            // No kubelet finishes a node expansion here (as in the resizer's burst). The
            // driver can modify volumes, so the modify controller runs too (the
            // VolumeAttributesClass gate is on by default, as upstream's).
            Sidecar::Resizer => {
                rig.driver.update_config(|config| {
                    config.node_expansion_required = false;
                    config
                        .controller_capabilities
                        .push(ControllerRpc::ModifyVolume);
                });
                let gold: VolumeAttributesClass = serde_json::from_value(json!({
                    "metadata": {"name": MODIFIED_CLASS},
                    "driverName": DEFAULT_DRIVER_NAME,
                    "parameters": {"iops": "3000"},
                }))?;
                rig.server.put_object(&gold)?;
            }
            // Clones need CLONE_VOLUME and restores CREATE_DELETE_SNAPSHOT (upstream checks
            // them before provisioning one). GetCapacity answers like csi-driver-host-path's
            // `--capacity fast=10Gi`.
            Sidecar::Provisioner => rig.driver.update_config(|config| {
                config.controller_capabilities.extend([
                    ControllerRpc::CloneVolume,
                    ControllerRpc::CreateDeleteSnapshot,
                ]);
                if capacity {
                    config
                        .capacity_by_kind
                        .insert(CAPACITY_KIND.to_owned(), 10 * GI);
                }
            }),
        }
        Ok(Self {
            sidecar,
            batch,
            round: 0,
            completed: 0,
            capacity,
        })
    }

    /// Runs batches until `until`; a batch under way is finished first.
    pub(crate) async fn run(&mut self, rig: &Rig, until: Instant) -> anyhow::Result<()> {
        while Instant::now() < until {
            self.round += 1;
            self.completed += match self.sidecar {
                Sidecar::Provisioner => self.provision(rig).await?,
                Sidecar::Attacher => {
                    self.attach(rig).await?;
                    self.batch
                }
                Sidecar::Resizer => {
                    self.expand(rig).await?;
                    self.batch
                }
            };
            // The driver's call record would grow in this process for nothing.
            rig.driver.clear_calls();
        }
        Ok(())
    }

    fn name(&self, kind: &str, i: usize) -> String {
        format!("churn-{kind}-{}-{i}", self.round)
    }

    /// One batch of claims: sources, clones and restores; returns how many claims it made.
    async fn provision(&self, rig: &Rig) -> anyhow::Result<usize> {
        if self.capacity {
            self.replace_late_binding_class(rig).await?;
        }
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(rig.server.client(), NAMESPACE);
        // The first half are new volumes, the second half clones of them (claim i of the
        // second half clones claim i of the first).
        let sources = self.batch.div_ceil(2);
        for (range, what) in [(0..sources, "source"), (sources..self.batch, "clone")] {
            let count = range.end;
            at_once(range.len(), |k| {
                let i = range.start + k;
                let (claims, name) = (claims.clone(), self.name("claim", i));
                let source = (i >= sources).then(|| self.name("claim", i - sources));
                async move {
                    let mut claim = json!({
                        "metadata": {"name": name, "namespace": NAMESPACE},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                            "storageClassName": CLASS,
                        },
                    });
                    if let Some(source) = source {
                        claim["spec"]["dataSource"] =
                            json!({"kind": "PersistentVolumeClaim", "name": source});
                    }
                    let claim: PersistentVolumeClaim = serde_json::from_value(claim)?;
                    claims.create(&PostParams::default(), &claim).await?;
                    Ok(())
                }
            })
            .await
            .with_context(|| format!("cannot create a {what} claim"))?;
            self.wait(rig, &format!("every {what} claim bound to a PV"), |rig| {
                Ok(rig
                    .server
                    .list_objects::<PersistentVolume>(None)?
                    .iter()
                    .filter(|pv| {
                        pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
                    })
                    .count()
                    == count)
            })
            .await?;
        }
        let snapshot_ids = self.restore(rig, &claims, sources).await?;
        let made = self.batch + sources;
        at_once(made, |i| {
            let (claims, name) = (claims.clone(), self.name("claim", i));
            async move {
                claims.delete(&name, &DeleteParams::default()).await?;
                Ok(())
            }
        })
        .await
        .context("cannot delete a claim")?;
        self.wait(rig, "every claim and PV gone", |rig| {
            Ok(rig
                .server
                .list_objects::<PersistentVolumeClaim>(Some(NAMESPACE))?
                .is_empty()
                && rig
                    .server
                    .list_objects::<PersistentVolume>(None)?
                    .is_empty())
        })
        .await?;
        at_once(sources, |i| {
            let (name, id) = (self.name("snap", i), snapshot_ids[i].clone());
            async move { snapshots::remove(rig, &name, &id).await }
        })
        .await
        .context("cannot remove a snapshot")?;
        self.wait(rig, "every VolumeSnapshot gone", |rig| {
            Ok(snapshots::left(rig)? == 0)
        })
        .await?;
        Ok(made)
    }

    /// A VolumeSnapshot of each of the `sources` first claims and a claim restored from it
    /// (numbered after the batch's); waits until every claim of the batch is bound. Returns the
    /// driver's snapshot ids.
    async fn restore(
        &self,
        rig: &Rig,
        claims: &Api<PersistentVolumeClaim>,
        sources: usize,
    ) -> anyhow::Result<Vec<String>> {
        let handles: std::collections::HashMap<String, String> = rig
            .server
            .list_objects::<PersistentVolume>(None)?
            .into_iter()
            .filter_map(|pv| {
                let spec = pv.spec?;
                Some((spec.claim_ref?.name?, spec.csi?.volume_handle))
            })
            .collect();
        let mut ids = Vec::with_capacity(sources);
        for i in 0..sources {
            let claim = self.name("claim", i);
            let handle = handles
                .get(&claim)
                .with_context(|| format!("no PV for {claim}"))?;
            ids.push(snapshots::publish(rig, &self.name("snap", i), handle).await?);
        }
        at_once(sources, |k| {
            let (claims, name) = (claims.clone(), self.name("claim", self.batch + k));
            let source = json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                                "name": self.name("snap", k)});
            async move {
                // dataSourceRef as kube-apiserver's defaulting copies it from dataSource.
                let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                        "storageClassName": CLASS,
                        "dataSource": source,
                        "dataSourceRef": source,
                    },
                }))?;
                claims.create(&PostParams::default(), &claim).await?;
                Ok(())
            }
        })
        .await
        .context("cannot create a restored claim")?;
        let count = self.batch + sources;
        self.wait(rig, "every restored claim bound to a PV", |rig| {
            Ok(rig
                .server
                .list_objects::<PersistentVolume>(None)?
                .iter()
                .filter(|pv| pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
                .count()
                == count)
        })
        .await?;
        Ok(ids)
    }

    /// Stores this batch's WaitForFirstConsumer class and removes the previous one; waits
    /// until the only CSIStorageCapacity is this class's.
    async fn replace_late_binding_class(&self, rig: &Rig) -> anyhow::Result<()> {
        let class = |round: usize| format!("churn-late-{round}");
        let late: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": class(self.round)},
            "provisioner": DEFAULT_DRIVER_NAME,
            "parameters": {"kind": CAPACITY_KIND},
            "volumeBindingMode": "WaitForFirstConsumer",
        }))?;
        rig.server.put_object(&late)?;
        rig.server
            .delete_object::<StorageClass>(None, &class(self.round - 1))?;
        let current = class(self.round);
        self.wait(
            rig,
            "one CSIStorageCapacity, of this batch's class",
            |rig| {
                let objects = rig
                    .server
                    .list_objects::<CSIStorageCapacity>(Some(NAMESPACE))?;
                Ok(objects.len() == 1 && objects[0].storage_class_name == current)
            },
        )
        .await
    }

    async fn attach(&self, rig: &Rig) -> anyhow::Result<()> {
        let vas: Api<VolumeAttachment> = Api::all(rig.server.client());
        at_once(self.batch, |i| {
            let (vas, name) = (vas.clone(), self.name("va", i));
            async move {
                let va: VolumeAttachment = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {
                        "attacher": DEFAULT_DRIVER_NAME,
                        "nodeName": DEFAULT_NODE_ID,
                        "source": {"persistentVolumeName": pv(i)},
                    },
                }))?;
                vas.create(&PostParams::default(), &va).await?;
                Ok(())
            }
        })
        .await
        .context("cannot create a VolumeAttachment")?;
        self.wait(rig, "every VolumeAttachment attached", |rig| {
            Ok(rig
                .server
                .list_objects::<VolumeAttachment>(None)?
                .iter()
                .filter(|va| va.status.as_ref().is_some_and(|s| s.attached))
                .count()
                == self.batch)
        })
        .await?;
        at_once(self.batch, |i| {
            let (vas, name) = (vas.clone(), self.name("va", i));
            async move {
                vas.delete(&name, &DeleteParams::default()).await?;
                Ok(())
            }
        })
        .await
        .context("cannot delete a VolumeAttachment")?;
        self.wait(rig, "every VolumeAttachment detached and gone", |rig| {
            Ok(rig
                .server
                .list_objects::<VolumeAttachment>(None)?
                .is_empty())
        })
        .await
    }

    async fn expand(&self, rig: &Rig) -> anyhow::Result<()> {
        for i in 0..self.batch {
            let (claim, volume) = (self.name("claim", i), self.name("pv", i));
            rig.driver.insert_volume(MockVolume::new(&volume, GI));
            let binding = Binding {
                namespace: NAMESPACE,
                claim: &claim,
                volume: &volume,
                class: CLASS,
                driver: DEFAULT_DRIVER_NAME,
            };
            let stored = rig.server.put_object(&binding.claim()?)?;
            rig.server
                .put_object(&binding.volume(&stored.metadata.uid.unwrap_or_default())?)?;
        }
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(rig.server.client(), NAMESPACE);
        let body = json!({"spec": {
            "resources": {"requests": {"storage": "2Gi"}},
            "volumeAttributesClassName": MODIFIED_CLASS,
        }});
        at_once(self.batch, |i| {
            let (claims, name, body) = (claims.clone(), self.name("claim", i), body.clone());
            async move {
                claims
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                    .await?;
                Ok(())
            }
        })
        .await
        .context("cannot resize a claim")?;
        self.wait(
            rig,
            "every claim's status at 2Gi and of the new class",
            |rig| {
                let done = rig
                    .server
                    .list_objects::<PersistentVolumeClaim>(Some(NAMESPACE))?
                    .into_iter()
                    .filter_map(|c| c.status)
                    .filter(|s| {
                        s.current_volume_attributes_class_name.as_deref() == Some(MODIFIED_CLASS)
                    })
                    .filter_map(|s| s.capacity?.get("storage").cloned())
                    .filter(|q| parse_bytes(&q.0).is_ok_and(|b| b >= 2 * GI))
                    .count();
                Ok(done == self.batch)
            },
        )
        .await?;
        for i in 0..self.batch {
            rig.server
                .delete_object::<PersistentVolumeClaim>(Some(NAMESPACE), &self.name("claim", i))?;
            rig.server
                .delete_object::<PersistentVolume>(None, &self.name("pv", i))?;
        }
        Ok(())
    }

    /// Polls the store until `done`; an error naming the step and the batch after
    /// [`STEP_TIMEOUT`].
    async fn wait(
        &self,
        rig: &Rig,
        step: &str,
        done: impl Fn(&Rig) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while !done(rig)? {
            if Instant::now() >= deadline {
                bail!(
                    "batch {} stuck: not {step} within {STEP_TIMEOUT:?}",
                    self.round
                );
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }
}

fn pv(i: usize) -> String {
    format!("churn-pv-{i}")
}

fn volume(i: usize) -> String {
    format!("churn-vol-{i}")
}

/// A stored PV of an existing volume, for the attacher's VolumeAttachments.
fn attachable_pv(i: usize) -> serde_json::Result<PersistentVolume> {
    serde_json::from_value(json!({
        "metadata": {"name": pv(i)},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "volumeMode": "Filesystem",
            "csi": {"driver": DEFAULT_DRIVER_NAME, "volumeHandle": volume(i), "fsType": "ext4"},
        },
        "status": {"phase": "Available"},
    }))
}
