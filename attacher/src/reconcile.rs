//! The ListVolumes reconciler's decisions (external-attacher `ReconcileVA`): which
//! VolumeAttachments disagree with what the driver reports as published, and so get a one-shot
//! forced sync. It never writes to the API itself and never detaches a volume Kubernetes does
//! not know about.

use std::borrow::Cow;
use std::collections::HashMap;

use csi_common::migration::{self, RepairError};
use proto::csi::v1::ListVolumesResponse;

/// Volume ID → the node IDs the driver says it is published on, built page by page.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Published(HashMap<String, Vec<String>>);

impl Published {
    /// Adds one ListVolumes page; entries without a volume or a status are skipped (upstream).
    pub(crate) fn add_page(&mut self, page: ListVolumesResponse) {
        for entry in page.entries {
            if let (Some(volume), Some(status)) = (entry.volume, entry.status) {
                self.0
                    .entry(volume.volume_id)
                    .or_default()
                    .extend(status.published_node_ids);
            }
        }
    }

    /// Whether the driver reports `volume_id` published on `node_id`.
    pub(crate) fn on(&self, volume_id: &str, node_id: &str) -> bool {
        self.0
            .get(volume_id)
            .is_some_and(|nodes| nodes.iter().any(|n| n == node_id))
    }
}

/// The volume ID the driver lists a VolumeAttachment's volume under. A migrated volume (a
/// translated in-tree PV, or an inline volume, which only CSI migration creates) has its
/// handle repaired with the node's ID first, as external-attacher's reconciler does
/// (`RepairVolumeHandle`: only a GCE PD handle of an `UNSPECIFIED` project changes); an error
/// skips the VolumeAttachment this pass, as upstream.
pub(crate) fn listed_volume_id<'a>(
    volume_id: &'a str,
    migrated: bool,
    driver: &str,
    node_id: &str,
) -> Result<Cow<'a, str>, RepairError> {
    if !migrated {
        return Ok(Cow::Borrowed(volume_id));
    }
    migration::repair_volume_handle(driver, volume_id, node_id).map(Cow::Owned)
}

/// Whether a VolumeAttachment needs a forced sync: its `status.attached` disagrees with the
/// driver. Attached but not published → publish again (re-attach after an out-of-band detach,
/// or finish a detach); not attached but published → publish (idempotent) and mark attached.
pub(crate) fn out_of_sync(
    attached: bool,
    published: &Published,
    volume_id: &str,
    node_id: &str,
) -> bool {
    attached != published.on(volume_id, node_id)
}

#[cfg(test)]
mod tests {
    use proto::csi::v1::Volume;
    use proto::csi::v1::list_volumes_response::{Entry, VolumeStatus};

    use super::*;

    fn entry(id: Option<&str>, nodes: Option<&[&str]>) -> Entry {
        Entry {
            volume: id.map(|id| Volume {
                volume_id: id.into(),
                ..Default::default()
            }),
            status: nodes.map(|nodes| VolumeStatus {
                published_node_ids: nodes.iter().map(|n| (*n).to_owned()).collect(),
                volume_condition: None,
            }),
        }
    }

    #[test]
    fn pages_accumulate_and_incomplete_entries_are_skipped() {
        let mut published = Published::default();
        published.add_page(ListVolumesResponse {
            entries: vec![
                entry(Some("v1"), Some(&["n1"])),
                entry(None, Some(&["n9"])),
                entry(Some("v2"), None),
            ],
            next_token: "t".into(),
        });
        published.add_page(ListVolumesResponse {
            entries: vec![entry(Some("v1"), Some(&["n2"]))],
            next_token: String::new(),
        });
        assert!(published.on("v1", "n1"));
        assert!(published.on("v1", "n2"));
        assert!(!published.on("v2", "n1"));
        assert!(!published.on("v3", "n9"));
    }

    #[test]
    fn only_disagreements_are_forced() {
        let mut published = Published::default();
        published.add_page(ListVolumesResponse {
            entries: vec![entry(Some("v1"), Some(&["n1"]))],
            next_token: String::new(),
        });
        let cases = [
            ("attached and published", true, "v1", "n1", false),
            ("attached, not published", true, "v1", "n2", true),
            ("not attached, published", false, "v1", "n1", true),
            ("neither", false, "v2", "n1", false),
        ];
        for (name, attached, volume, node, want) in cases {
            assert_eq!(
                out_of_sync(attached, &published, volume, node),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn only_a_migrated_volumes_handle_is_repaired_with_the_node_id() {
        let gce = "pd.csi.storage.gke.io";
        let handle = "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/d";
        let node = "projects/p/zones/us-central1-a/instances/i";
        assert_eq!(
            listed_volume_id(handle, true, gce, node).unwrap(),
            "projects/p/zones/us-central1-a/disks/d"
        );
        assert_eq!(listed_volume_id(handle, false, gce, node).unwrap(), handle);
        assert_eq!(
            listed_volume_id("h", false, "hostpath.csi.k8s.io", "n").unwrap(),
            "h"
        );
        assert!(
            listed_volume_id("h", true, "hostpath.csi.k8s.io", "n").is_err(),
            "an inline volume of a driver no in-tree plugin migrated to is skipped"
        );
    }
}
