//! The CSI node ID a volume is published to or unpublished from.
//!
//! The node ID comes from the node's CSINode, which node-driver-registrar's registration makes
//! the kubelet write. Attach has no fallback: without a CSINode entry the driver is not running
//! on the node, and publishing there would be wrong. Detach falls back to the ID remembered in
//! the VolumeAttachment's `csi.alpha.kubernetes.io/node-id` annotation, because a node that shut
//! down or lost its driver pod must still be able to release its volumes (external-attacher
//! `getNodeID`, issues #83/#215/#299).

use k8s_openapi::api::storage::v1::CSINode;

use crate::cached::VolumeAttachment;
use crate::names::NODE_ID_ANNOTATION;

/// Why no node ID is known; retried with backoff (the registrar may register the driver).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NodeIdError {
    /// client-go's lister NotFound text.
    #[error("csinode.storage.k8s.io \"{0}\" not found")]
    NoCsiNode(String),
    /// external-attacher's text.
    #[error("CSINode {node} does not contain driver {driver}")]
    DriverNotRegistered {
        /// The node name.
        node: String,
        /// The driver name.
        driver: String,
    },
}

/// The node ID for ControllerPublishVolume: the CSINode's entry for `driver`, nothing else.
pub(crate) fn for_attach(
    csi_node: Option<&CSINode>,
    node: &str,
    driver: &str,
) -> Result<String, NodeIdError> {
    let csi_node = csi_node.ok_or_else(|| NodeIdError::NoCsiNode(node.to_owned()))?;
    csi_node
        .spec
        .drivers
        .iter()
        .find(|d| d.name == driver)
        .map(|d| d.node_id.clone())
        .ok_or_else(|| NodeIdError::DriverNotRegistered {
            node: node.to_owned(),
            driver: driver.to_owned(),
        })
}

/// The node ID for ControllerUnpublishVolume: the CSINode's entry, else the annotation the
/// attach wrote; the CSINode error when neither exists.
pub(crate) fn for_detach(
    csi_node: Option<&CSINode>,
    va: &VolumeAttachment,
    driver: &str,
) -> Result<String, NodeIdError> {
    for_attach(csi_node, &va.spec.node_name, driver).or_else(|err| {
        va.annotation(NODE_ID_ANNOTATION)
            .map(str::to_owned)
            .ok_or(err)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::storage::v1::{CSINodeDriver, CSINodeSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::cached::VolumeAttachmentSpec;

    fn csi_node(drivers: &[(&str, &str)]) -> CSINode {
        CSINode {
            spec: CSINodeSpec {
                drivers: drivers
                    .iter()
                    .map(|(name, id)| CSINodeDriver {
                        name: (*name).into(),
                        node_id: (*id).into(),
                        ..Default::default()
                    })
                    .collect(),
            },
            ..Default::default()
        }
    }

    fn va(annotation: Option<&str>) -> VolumeAttachment {
        VolumeAttachment {
            metadata: ObjectMeta {
                annotations: annotation
                    .map(|id| BTreeMap::from([(NODE_ID_ANNOTATION.to_owned(), id.to_owned())])),
                ..Default::default()
            },
            spec: VolumeAttachmentSpec {
                node_name: "node-1".into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn node_ids_come_from_csinode_and_detach_falls_back_to_the_annotation() {
        let ours = csi_node(&[("other", "x"), ("d", "id-1")]);
        let without = csi_node(&[("other", "x")]);
        let no_csi_node = Err(NodeIdError::NoCsiNode("node-1".into()));
        let not_registered = Err(NodeIdError::DriverNotRegistered {
            node: "node-1".into(),
            driver: "d".into(),
        });
        let cases = [
            (
                "registered",
                Some(&ours),
                None,
                Ok("id-1".to_owned()),
                Ok("id-1".to_owned()),
            ),
            (
                "registered beats annotation",
                Some(&ours),
                Some("old"),
                Ok("id-1".to_owned()),
                Ok("id-1".to_owned()),
            ),
            (
                "no CSINode",
                None,
                None,
                no_csi_node.clone(),
                no_csi_node.clone(),
            ),
            (
                "no CSINode, annotated",
                None,
                Some("old"),
                no_csi_node.clone(),
                Ok("old".to_owned()),
            ),
            (
                "driver gone",
                Some(&without),
                None,
                not_registered.clone(),
                not_registered.clone(),
            ),
            (
                "driver gone, annotated",
                Some(&without),
                Some("old"),
                not_registered,
                Ok("old".to_owned()),
            ),
        ];
        for (name, node, annotation, attach, detach) in cases {
            let va = va(annotation);
            assert_eq!(for_attach(node, "node-1", "d"), attach, "{name}: attach");
            assert_eq!(for_detach(node, &va, "d"), detach, "{name}: detach");
        }
    }

    #[test]
    fn error_texts_keep_upstream_words() {
        assert_eq!(
            NodeIdError::NoCsiNode("n".into()).to_string(),
            r#"csinode.storage.k8s.io "n" not found"#
        );
        assert_eq!(
            NodeIdError::DriverNotRegistered {
                node: "n".into(),
                driver: "d".into()
            }
            .to_string(),
            "CSINode n does not contain driver d"
        );
    }
}
