//! Which controllers the driver gets (spec sidecars.md §2.2 steps 5-8): a pure function of
//! the driver's capabilities and the `VolumeAttributesClass` gate (as given or as discovered).

use csi_common::capabilities::{ControllerCapabilities, PluginCapabilities};

/// How volumes are expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resizer {
    /// EXPAND_VOLUME controller capability: ControllerExpandVolume.
    Csi,
    /// Node expansion only: no CSI call; the PV grows to the request and kubelet runs
    /// NodeExpandVolume (external-resizer `trivialResizer`).
    Trivial,
}

/// Why the resizer cannot run with this driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ModeError {
    /// Upstream's first check: every resizer needs CONTROLLER_SERVICE.
    #[error("CSI driver does not support controller service")]
    NoControllerService,
    /// Neither controller nor node expansion, and modify is off (upstream's fatal
    /// "does not support resize nor modify").
    #[error("CSI driver neither supports controller resize nor modify")]
    NeitherResizeNorModify,
}

impl ModeError {
    /// Exit code: upstream exits 1 on both.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::NoControllerService | Self::NeitherResizeNorModify => 1,
        }
    }
}

/// The controllers that run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mode {
    /// The resize controller and its resizer, if the driver can expand at all.
    pub(crate) resizer: Option<Resizer>,
    /// The modify controller: MODIFY_VOLUME and the `VolumeAttributesClass` gate on.
    pub(crate) modify: bool,
}

/// The capabilities that decide the mode. `node_expansion` is NodeGetCapabilities'
/// EXPAND_VOLUME; upstream asks for it only without controller expansion, so it is `None` when
/// it was not asked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DriverCaps<'a> {
    pub(crate) plugin: &'a PluginCapabilities,
    pub(crate) controller: &'a ControllerCapabilities,
    pub(crate) node_expansion: Option<bool>,
}

/// Whether NodeGetCapabilities must be asked before [`choose`] (upstream asks only when the
/// controller cannot expand).
pub(crate) fn needs_node_capabilities(
    plugin: &PluginCapabilities,
    controller: &ControllerCapabilities,
) -> bool {
    plugin.has_controller_service() && !controller.has_expand_volume()
}

/// The controllers for the driver; `volume_attributes_class` is the gate after discovery
/// (`crate::discovery`). A modify-only driver runs the modify controller alone (upstream
/// #545); with the gate off it has nothing to run.
pub(crate) fn choose(
    caps: DriverCaps<'_>,
    volume_attributes_class: bool,
) -> Result<Mode, ModeError> {
    if !caps.plugin.has_controller_service() {
        return Err(ModeError::NoControllerService);
    }
    let resizer = if caps.controller.has_expand_volume() {
        Some(Resizer::Csi)
    } else if caps.node_expansion == Some(true) {
        Some(Resizer::Trivial)
    } else {
        None
    };
    let modify = caps.controller.has_modify_volume() && volume_attributes_class;
    if resizer.is_none() && !modify {
        return Err(ModeError::NeitherResizeNorModify);
    }
    Ok(Mode { resizer, modify })
}

#[cfg(test)]
mod tests {
    use proto::csi::v1::controller_service_capability::rpc::Type as Ctrl;
    use proto::csi::v1::plugin_capability::service::Type as Service;
    use proto::csi::v1::{
        ControllerGetCapabilitiesResponse, ControllerServiceCapability,
        controller_service_capability,
    };

    use super::*;

    fn plugin(controller_service: bool) -> PluginCapabilities {
        PluginCapabilities::from_values(
            if controller_service {
                vec![Service::ControllerService]
            } else {
                vec![]
            },
            vec![],
        )
    }

    fn controller(caps: &[Ctrl]) -> ControllerCapabilities {
        ControllerCapabilities::from_response(&ControllerGetCapabilitiesResponse {
            capabilities: caps
                .iter()
                .map(|t| ControllerServiceCapability {
                    r#type: Some(controller_service_capability::Type::Rpc(
                        controller_service_capability::Rpc { r#type: *t as i32 },
                    )),
                })
                .collect(),
        })
    }

    /// CONTROLLER_SERVICE, controller capabilities, node EXPAND_VOLUME, the
    /// VolumeAttributesClass gate, the expected mode.
    type Case = (
        bool,
        &'static [Ctrl],
        Option<bool>,
        bool,
        Result<Mode, ModeError>,
    );

    #[test]
    fn the_capability_matrix_matches_upstream() {
        use Ctrl::{ExpandVolume, ModifyVolume};
        let mode = |resizer, modify| Ok(Mode { resizer, modify });
        let csi = Some(Resizer::Csi);
        let cases: [Case; 11] = [
            (true, &[ExpandVolume], None, false, mode(csi, false)),
            (true, &[ExpandVolume], None, true, mode(csi, false)),
            (
                true,
                &[],
                Some(true),
                true,
                mode(Some(Resizer::Trivial), false),
            ),
            (
                true,
                &[],
                Some(false),
                true,
                Err(ModeError::NeitherResizeNorModify),
            ),
            (
                false,
                &[ExpandVolume],
                None,
                true,
                Err(ModeError::NoControllerService),
            ),
            (
                false,
                &[],
                Some(true),
                true,
                Err(ModeError::NoControllerService),
            ),
            (
                true,
                &[ExpandVolume, ModifyVolume],
                None,
                true,
                mode(csi, true),
            ),
            (
                true,
                &[ExpandVolume, ModifyVolume],
                None,
                false,
                mode(csi, false),
            ),
            // Modify without any expansion (upstream #545).
            (true, &[ModifyVolume], Some(false), true, mode(None, true)),
            (
                true,
                &[ModifyVolume],
                Some(true),
                true,
                mode(Some(Resizer::Trivial), true),
            ),
            (
                true,
                &[ModifyVolume],
                Some(false),
                false,
                Err(ModeError::NeitherResizeNorModify),
            ),
        ];
        for (service, ctrl, node, gate, want) in cases {
            let plugin = plugin(service);
            let controller = controller(ctrl);
            let caps = DriverCaps {
                plugin: &plugin,
                controller: &controller,
                node_expansion: node,
            };
            assert_eq!(
                choose(caps, gate),
                want,
                "{service} {ctrl:?} {node:?} {gate:?}"
            );
        }
        assert!(needs_node_capabilities(&plugin(true), &controller(&[])));
        assert!(!needs_node_capabilities(
            &plugin(true),
            &controller(&[ExpandVolume])
        ));
        assert!(!needs_node_capabilities(&plugin(false), &controller(&[])));
    }

    #[test]
    fn exit_codes_are_upstreams() {
        assert_eq!(ModeError::NoControllerService.exit_code(), 1);
        assert_eq!(ModeError::NeitherResizeNorModify.exit_code(), 1);
    }
}
