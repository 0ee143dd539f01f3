//! The CSI RPCs the mock driver serves, named once so faults, the call record and assertions
//! agree on spelling.

use std::fmt;
use std::str::FromStr;

/// One RPC of the CSI v1 Identity, Controller or Node service.
///
/// `Display` prints the gRPC full path (`/csi.v1.Controller/CreateVolume`), the form the
/// upstream sidecars log and label their metrics with. [`FromStr`] accepts that path, the bare
/// method name (`CreateVolume`) or the name in any letter case (`createvolume`), so command-line
/// fault flags are forgiving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is the CSI RPC of the same name
pub enum Method {
    GetPluginInfo,
    GetPluginCapabilities,
    Probe,
    CreateVolume,
    DeleteVolume,
    ControllerPublishVolume,
    ControllerUnpublishVolume,
    ValidateVolumeCapabilities,
    ListVolumes,
    GetCapacity,
    ControllerGetCapabilities,
    CreateSnapshot,
    DeleteSnapshot,
    ListSnapshots,
    GetSnapshot,
    ControllerExpandVolume,
    ControllerGetVolume,
    ControllerModifyVolume,
    NodeStageVolume,
    NodeUnstageVolume,
    NodePublishVolume,
    NodeUnpublishVolume,
    NodeGetVolumeStats,
    NodeExpandVolume,
    NodeGetCapabilities,
    NodeGetInfo,
}

/// The CSI service an RPC belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// `csi.v1.Identity`
    Identity,
    /// `csi.v1.Controller`
    Controller,
    /// `csi.v1.Node`
    Node,
}

impl Method {
    /// Every RPC the mock driver serves, in service order.
    pub const ALL: [Method; 26] = [
        Method::GetPluginInfo,
        Method::GetPluginCapabilities,
        Method::Probe,
        Method::CreateVolume,
        Method::DeleteVolume,
        Method::ControllerPublishVolume,
        Method::ControllerUnpublishVolume,
        Method::ValidateVolumeCapabilities,
        Method::ListVolumes,
        Method::GetCapacity,
        Method::ControllerGetCapabilities,
        Method::CreateSnapshot,
        Method::DeleteSnapshot,
        Method::ListSnapshots,
        Method::GetSnapshot,
        Method::ControllerExpandVolume,
        Method::ControllerGetVolume,
        Method::ControllerModifyVolume,
        Method::NodeStageVolume,
        Method::NodeUnstageVolume,
        Method::NodePublishVolume,
        Method::NodeUnpublishVolume,
        Method::NodeGetVolumeStats,
        Method::NodeExpandVolume,
        Method::NodeGetCapabilities,
        Method::NodeGetInfo,
    ];

    /// The bare RPC name, e.g. `CreateVolume`.
    pub fn name(self) -> &'static str {
        self.full_path().rsplit('/').next().unwrap_or_default()
    }

    /// The service the RPC belongs to.
    pub fn service(self) -> Service {
        match self {
            Method::GetPluginInfo | Method::GetPluginCapabilities | Method::Probe => {
                Service::Identity
            }
            Method::NodeStageVolume
            | Method::NodeUnstageVolume
            | Method::NodePublishVolume
            | Method::NodeUnpublishVolume
            | Method::NodeGetVolumeStats
            | Method::NodeExpandVolume
            | Method::NodeGetCapabilities
            | Method::NodeGetInfo => Service::Node,
            _ => Service::Controller,
        }
    }

    /// The gRPC full path, e.g. `/csi.v1.Controller/CreateVolume`.
    pub fn full_path(self) -> &'static str {
        match self {
            Method::GetPluginInfo => "/csi.v1.Identity/GetPluginInfo",
            Method::GetPluginCapabilities => "/csi.v1.Identity/GetPluginCapabilities",
            Method::Probe => "/csi.v1.Identity/Probe",
            Method::CreateVolume => "/csi.v1.Controller/CreateVolume",
            Method::DeleteVolume => "/csi.v1.Controller/DeleteVolume",
            Method::ControllerPublishVolume => "/csi.v1.Controller/ControllerPublishVolume",
            Method::ControllerUnpublishVolume => "/csi.v1.Controller/ControllerUnpublishVolume",
            Method::ValidateVolumeCapabilities => "/csi.v1.Controller/ValidateVolumeCapabilities",
            Method::ListVolumes => "/csi.v1.Controller/ListVolumes",
            Method::GetCapacity => "/csi.v1.Controller/GetCapacity",
            Method::ControllerGetCapabilities => "/csi.v1.Controller/ControllerGetCapabilities",
            Method::CreateSnapshot => "/csi.v1.Controller/CreateSnapshot",
            Method::DeleteSnapshot => "/csi.v1.Controller/DeleteSnapshot",
            Method::ListSnapshots => "/csi.v1.Controller/ListSnapshots",
            Method::GetSnapshot => "/csi.v1.Controller/GetSnapshot",
            Method::ControllerExpandVolume => "/csi.v1.Controller/ControllerExpandVolume",
            Method::ControllerGetVolume => "/csi.v1.Controller/ControllerGetVolume",
            Method::ControllerModifyVolume => "/csi.v1.Controller/ControllerModifyVolume",
            Method::NodeStageVolume => "/csi.v1.Node/NodeStageVolume",
            Method::NodeUnstageVolume => "/csi.v1.Node/NodeUnstageVolume",
            Method::NodePublishVolume => "/csi.v1.Node/NodePublishVolume",
            Method::NodeUnpublishVolume => "/csi.v1.Node/NodeUnpublishVolume",
            Method::NodeGetVolumeStats => "/csi.v1.Node/NodeGetVolumeStats",
            Method::NodeExpandVolume => "/csi.v1.Node/NodeExpandVolume",
            Method::NodeGetCapabilities => "/csi.v1.Node/NodeGetCapabilities",
            Method::NodeGetInfo => "/csi.v1.Node/NodeGetInfo",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.full_path())
    }
}

/// A string that names no CSI RPC served by the mock driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown CSI method {0:?}")]
pub struct UnknownMethod(pub String);

impl FromStr for Method {
    type Err = UnknownMethod;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        Method::ALL
            .into_iter()
            .find(|m| m.full_path() == wanted || m.name().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| UnknownMethod(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_round_trips_through_its_full_path_and_name() {
        for m in Method::ALL {
            assert_eq!(m.full_path().parse::<Method>(), Ok(m));
            assert_eq!(m.name().parse::<Method>(), Ok(m));
            assert_eq!(m.name().to_lowercase().parse::<Method>(), Ok(m));
            let service = match m.service() {
                Service::Identity => "Identity",
                Service::Controller => "Controller",
                Service::Node => "Node",
            };
            assert_eq!(m.full_path(), format!("/csi.v1.{service}/{}", m.name()));
        }
    }

    #[test]
    fn unknown_method_names_are_rejected() {
        assert_eq!(
            "CreateVolumes".parse::<Method>(),
            Err(UnknownMethod("CreateVolumes".into()))
        );
    }
}
