//! The ListVolumes reconciler's decisions (external-attacher `ReconcileVA`): which
//! VolumeAttachments disagree with what the driver reports as published, and so get a one-shot
//! forced sync. It never writes to the API itself and never detaches a volume Kubernetes does
//! not know about.

use std::collections::HashMap;

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
}
