//! Which resizer the driver gets (spec sidecars.md §2.2 steps 5-7): a pure function of the
//! driver's capabilities and the `VolumeAttributesClass` gate.

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
    /// MODIFY_VOLUME with the `VolumeAttributesClass` gate not turned off: upstream would run
    /// the modify controller, which this resizer does not have yet.
    #[error(
        "the CSI driver supports ControllerModifyVolume, but VolumeAttributesClass modification is not supported yet by this csi-resizer; set --feature-gates=VolumeAttributesClass=false to run volume expansion only"
    )]
    ModifyNotSupportedYet,
}

impl ModeError {
    /// Exit code: 2 for a feature not implemented yet (as for flags), 1 for upstream's fatal
    /// errors.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::ModifyNotSupportedYet => 2,
            Self::NoControllerService | Self::NeitherResizeNorModify => 1,
        }
    }
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

/// The resizer for the driver; `volume_attributes_class` is the gate as given (`None`: unset,
/// upstream default on).
pub(crate) fn choose(
    caps: DriverCaps<'_>,
    volume_attributes_class: Option<bool>,
) -> Result<Resizer, ModeError> {
    if !caps.plugin.has_controller_service() {
        return Err(ModeError::NoControllerService);
    }
    if caps.controller.has_modify_volume() && volume_attributes_class != Some(false) {
        return Err(ModeError::ModifyNotSupportedYet);
    }
    if caps.controller.has_expand_volume() {
        Ok(Resizer::Csi)
    } else if caps.node_expansion == Some(true) {
        Ok(Resizer::Trivial)
    } else {
        Err(ModeError::NeitherResizeNorModify)
    }
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
        Option<bool>,
        Result<Resizer, ModeError>,
    );

    #[test]
    fn the_capability_matrix_matches_upstream() {
        use Ctrl::{ExpandVolume, ModifyVolume};
        let cases: [Case; 11] = [
            (true, &[ExpandVolume], None, Some(false), Ok(Resizer::Csi)),
            (true, &[ExpandVolume], None, None, Ok(Resizer::Csi)),
            (true, &[], Some(true), None, Ok(Resizer::Trivial)),
            (
                true,
                &[],
                Some(false),
                None,
                Err(ModeError::NeitherResizeNorModify),
            ),
            (
                false,
                &[ExpandVolume],
                None,
                None,
                Err(ModeError::NoControllerService),
            ),
            (
                false,
                &[],
                Some(true),
                None,
                Err(ModeError::NoControllerService),
            ),
            (
                true,
                &[ExpandVolume, ModifyVolume],
                None,
                None,
                Err(ModeError::ModifyNotSupportedYet),
            ),
            (
                true,
                &[ExpandVolume, ModifyVolume],
                None,
                Some(false),
                Ok(Resizer::Csi),
            ),
            (
                true,
                &[ExpandVolume, ModifyVolume],
                None,
                Some(true),
                Err(ModeError::ModifyNotSupportedYet),
            ),
            (true, &[ExpandVolume], None, Some(true), Ok(Resizer::Csi)),
            (
                true,
                &[ModifyVolume],
                Some(false),
                Some(false),
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
    fn exit_codes_tell_unsupported_from_fatal() {
        assert_eq!(ModeError::ModifyNotSupportedYet.exit_code(), 2);
        assert_eq!(ModeError::NoControllerService.exit_code(), 1);
        assert_eq!(ModeError::NeitherResizeNorModify.exit_code(), 1);
    }
}
