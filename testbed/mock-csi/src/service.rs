//! The tonic Identity, Controller and Node services: every RPC is recorded, passed through the
//! injected faults, then answered from the shared state.

use std::fmt::Debug;
use std::sync::Arc;

use prost::Message;
use proto::csi::v1 as csi;
use proto::csi::v1::controller_server::Controller;
use proto::csi::v1::identity_server::Identity;
use proto::csi::v1::node_server::Node;
use tokio::sync::watch;
use tonic::{Code, Request, Response, Status};

use super::config::PluginCapability;
use super::fault::Garbage;
use super::method::Method;
use super::shared::{Inner, Shared};

/// One server generation's view of the shared state. `stopped` flips to true when the handle
/// stops this generation, so delayed calls end instead of answering after the "crash".
#[derive(Debug, Clone)]
pub(crate) struct CsiService {
    shared: Arc<Shared>,
    stopped: watch::Receiver<bool>,
}

type RpcResult<T> = Result<Response<T>, Status>;

impl CsiService {
    pub(crate) fn new(shared: Arc<Shared>, stopped: watch::Receiver<bool>) -> Self {
        CsiService { shared, stopped }
    }

    /// Runs one RPC whose answer no [`Garbage`] fault changes.
    async fn call<Req, Resp>(
        &self,
        method: Method,
        request: Request<Req>,
        op: impl FnOnce(&mut Inner, Req) -> Result<Resp, Status> + Send + 'static,
    ) -> RpcResult<Resp>
    where
        Req: Message + Debug + Send + 'static,
        Resp: Debug + Send + 'static,
    {
        self.call_garbled(method, request, None, op, |_, resp| resp)
            .await
    }

    /// Runs one RPC: record, log, apply faults, then `op` under the state lock, then `garble`
    /// when a [`Garbage`] fault matched and `op` succeeded.
    ///
    /// The work runs in its own task, so a client that gives up (deadline, cancellation) does
    /// not cancel it: like a real driver, the mock finishes a delayed CreateVolume after the
    /// caller stopped waiting, and the caller's retry finds the volume (CSI spec, "Timeouts").
    /// Only stopping the driver abandons a pending call.
    ///
    /// With a `volume` (CreateVolume's name, DeleteVolume's id), a call that arrives while
    /// another call for the same volume is being carried out is answered `Aborted` at once,
    /// the CSI spec's "operation pending for volume" (the CO must keep one call in flight per
    /// volume; kubernetes-csi drivers such as csi-driver-nfs answer so from their per-volume
    /// locks). A retry after a timeout therefore cannot run beside the call it retries, and
    /// the late call cannot re-create a volume deleted in between.
    async fn call_garbled<Req, Resp>(
        &self,
        method: Method,
        request: Request<Req>,
        volume: Option<String>,
        op: impl FnOnce(&mut Inner, Req) -> Result<Resp, Status> + Send + 'static,
        garble: fn(&Garbage, Resp) -> Resp,
    ) -> RpcResult<Resp>
    where
        Req: Message + Debug + Send + 'static,
        Resp: Debug + Send + 'static,
    {
        let req = request.into_inner();
        let begun = self.shared.begin(method, req.encode_to_vec());
        let seq = begun.seq;
        if begun.log_calls {
            tracing::info!(method = %method, request = ?req, "CSI call");
        } else {
            tracing::debug!(method = %method, request = ?req, "CSI call");
        }
        let shared = Arc::clone(&self.shared);
        let mut stopped = self.stopped.clone();
        let work = tokio::spawn(async move {
            let _busy = match volume {
                Some(volume) => match Busy::take(&shared, volume) {
                    Ok(busy) => Some(busy),
                    Err(pending) => {
                        shared.finish(begun.seq, pending.code(), pending.message(), false);
                        return Err(pending);
                    }
                },
                None => None,
            };
            if !begun.plan.delay.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(begun.plan.delay) => {}
                    // The driver "died" while this call was pending: it is never carried out
                    // and no answer is recorded, as with a real driver killed mid-call.
                    _ = stopped.wait_for(|s| *s) => {
                        return Err(Status::unavailable("mock CSI driver stopped"));
                    }
                }
            }
            let result = match begun.plan.error {
                Some(status) => Err(status),
                None => op(&mut shared.lock(), req).map(|resp| match &begun.plan.garbage {
                    Some(garbage) => garble(garbage, resp),
                    None => resp,
                }),
            };
            let (code, message) = match &result {
                Ok(_) => (Code::Ok, ""),
                Err(status) => (status.code(), status.message()),
            };
            let garbled = result.is_ok() && begun.plan.garbage.is_some();
            shared.finish(begun.seq, code, message, garbled);
            let response = result.as_ref().ok();
            if begun.log_calls {
                tracing::info!(method = %method, ?code, message, ?response, "CSI answer");
            } else {
                tracing::debug!(method = %method, ?code, message, ?response, "CSI answer");
            }
            result
        });
        // Dropped here, with the call, when the caller cancels it (its deadline passed).
        let answer = work.await;
        self.shared.delivered(seq);
        match answer {
            Ok(result) => result.map(Response::new),
            Err(e) => Err(Status::internal(format!(
                "mock CSI driver handler failed: {e}"
            ))),
        }
    }
}

/// A volume's call being carried out; dropping it (the call answered or abandoned) frees the
/// volume.
struct Busy {
    shared: Arc<Shared>,
    volume: String,
}

impl Busy {
    /// Marks `volume` busy, or answers `Aborted` when it already is.
    fn take(shared: &Arc<Shared>, volume: String) -> Result<Self, Status> {
        if !shared.lock().busy.insert(volume.clone()) {
            return Err(Status::aborted(format!(
                "an operation for volume {volume} is already in progress"
            )));
        }
        Ok(Busy {
            shared: Arc::clone(shared),
            volume,
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.shared.lock().busy.remove(&self.volume);
    }
}

fn to_map<M: FromIterator<(String, String)>>(
    map: &std::collections::BTreeMap<String, String>,
) -> M {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn unsupported(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by the mock CSI driver"))
}

fn plugin_capability(cap: PluginCapability) -> csi::PluginCapability {
    use csi::plugin_capability::Type;
    let r#type = match cap {
        PluginCapability::Service(t) => {
            Type::Service(csi::plugin_capability::Service { r#type: t.into() })
        }
        PluginCapability::VolumeExpansion(t) => {
            Type::VolumeExpansion(csi::plugin_capability::VolumeExpansion { r#type: t.into() })
        }
    };
    csi::PluginCapability {
        r#type: Some(r#type),
    }
}

#[tonic::async_trait]
impl Identity for CsiService {
    async fn get_plugin_info(
        &self,
        request: Request<csi::GetPluginInfoRequest>,
    ) -> RpcResult<csi::GetPluginInfoResponse> {
        self.call(Method::GetPluginInfo, request, |inner, _| {
            Ok(csi::GetPluginInfoResponse {
                name: inner.config.driver_name.clone(),
                vendor_version: inner.config.vendor_version.clone(),
                manifest: to_map(&inner.config.manifest),
            })
        })
        .await
    }

    async fn get_plugin_capabilities(
        &self,
        request: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> RpcResult<csi::GetPluginCapabilitiesResponse> {
        self.call(Method::GetPluginCapabilities, request, |inner, _| {
            Ok(csi::GetPluginCapabilitiesResponse {
                capabilities: inner
                    .config
                    .plugin_capabilities
                    .iter()
                    .copied()
                    .map(plugin_capability)
                    .collect(),
            })
        })
        .await
    }

    async fn probe(&self, request: Request<csi::ProbeRequest>) -> RpcResult<csi::ProbeResponse> {
        self.call(Method::Probe, request, |inner, _| {
            Ok(csi::ProbeResponse { ready: inner.ready })
        })
        .await
    }
}

#[tonic::async_trait]
impl Controller for CsiService {
    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> RpcResult<csi::CreateVolumeResponse> {
        let name = request.get_ref().name.clone();
        self.call_garbled(
            Method::CreateVolume,
            request,
            Some(name),
            |inner, req| inner.volumes.create_volume(&inner.config, req),
            Garbage::create,
        )
        .await
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> RpcResult<csi::DeleteVolumeResponse> {
        let id = request.get_ref().volume_id.clone();
        self.call_garbled(
            Method::DeleteVolume,
            request,
            Some(id),
            |inner, req| inner.volumes.delete_volume(&inner.config, &req),
            |_, resp| resp,
        )
        .await
    }

    async fn controller_publish_volume(
        &self,
        request: Request<csi::ControllerPublishVolumeRequest>,
    ) -> RpcResult<csi::ControllerPublishVolumeResponse> {
        self.call_garbled(
            Method::ControllerPublishVolume,
            request,
            None,
            |inner, req| inner.volumes.controller_publish(&inner.config, &req),
            Garbage::publish,
        )
        .await
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> RpcResult<csi::ControllerUnpublishVolumeResponse> {
        self.call(Method::ControllerUnpublishVolume, request, |inner, req| {
            inner.volumes.controller_unpublish(&inner.config, &req)
        })
        .await
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> RpcResult<csi::ValidateVolumeCapabilitiesResponse> {
        self.call(Method::ValidateVolumeCapabilities, request, |inner, req| {
            inner.volumes.validate_capabilities(req)
        })
        .await
    }

    async fn list_volumes(
        &self,
        request: Request<csi::ListVolumesRequest>,
    ) -> RpcResult<csi::ListVolumesResponse> {
        self.call(Method::ListVolumes, request, |inner, req| {
            inner.volumes.list_volumes(&inner.config, &req)
        })
        .await
    }

    async fn get_capacity(
        &self,
        request: Request<csi::GetCapacityRequest>,
    ) -> RpcResult<csi::GetCapacityResponse> {
        self.call_garbled(
            Method::GetCapacity,
            request,
            None,
            |inner, req| inner.volumes.get_capacity(&inner.config, &req),
            Garbage::capacity,
        )
        .await
    }

    async fn controller_get_capabilities(
        &self,
        request: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> RpcResult<csi::ControllerGetCapabilitiesResponse> {
        use csi::controller_service_capability::{Rpc, Type};
        self.call(Method::ControllerGetCapabilities, request, |inner, _| {
            Ok(csi::ControllerGetCapabilitiesResponse {
                capabilities: inner
                    .config
                    .controller_capabilities
                    .iter()
                    .map(|t| csi::ControllerServiceCapability {
                        r#type: Some(Type::Rpc(Rpc {
                            r#type: (*t).into(),
                        })),
                    })
                    .collect(),
            })
        })
        .await
    }

    async fn create_snapshot(
        &self,
        request: Request<csi::CreateSnapshotRequest>,
    ) -> RpcResult<csi::CreateSnapshotResponse> {
        self.call(Method::CreateSnapshot, request, |inner, req| {
            inner.volumes.create_snapshot(&inner.config, &req)
        })
        .await
    }

    async fn delete_snapshot(
        &self,
        request: Request<csi::DeleteSnapshotRequest>,
    ) -> RpcResult<csi::DeleteSnapshotResponse> {
        self.call(Method::DeleteSnapshot, request, |inner, req| {
            inner.volumes.delete_snapshot(&inner.config, &req)
        })
        .await
    }

    async fn list_snapshots(
        &self,
        request: Request<csi::ListSnapshotsRequest>,
    ) -> RpcResult<csi::ListSnapshotsResponse> {
        self.call(Method::ListSnapshots, request, |_, _| {
            Err(unsupported("ListSnapshots"))
        })
        .await
    }

    async fn get_snapshot(
        &self,
        request: Request<csi::GetSnapshotRequest>,
    ) -> RpcResult<csi::GetSnapshotResponse> {
        self.call(Method::GetSnapshot, request, |_, _| {
            Err(unsupported("GetSnapshot"))
        })
        .await
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> RpcResult<csi::ControllerExpandVolumeResponse> {
        self.call_garbled(
            Method::ControllerExpandVolume,
            request,
            None,
            |inner, req| inner.volumes.controller_expand(&inner.config, &req),
            Garbage::expand,
        )
        .await
    }

    async fn controller_get_volume(
        &self,
        request: Request<csi::ControllerGetVolumeRequest>,
    ) -> RpcResult<csi::ControllerGetVolumeResponse> {
        self.call(Method::ControllerGetVolume, request, |inner, req| {
            inner.volumes.controller_get_volume(&inner.config, &req)
        })
        .await
    }

    async fn controller_modify_volume(
        &self,
        request: Request<csi::ControllerModifyVolumeRequest>,
    ) -> RpcResult<csi::ControllerModifyVolumeResponse> {
        self.call(Method::ControllerModifyVolume, request, |inner, req| {
            inner.volumes.controller_modify(&inner.config, &req)
        })
        .await
    }
}

#[tonic::async_trait]
impl Node for CsiService {
    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> RpcResult<csi::NodeStageVolumeResponse> {
        self.call(Method::NodeStageVolume, request, |inner, req| {
            inner.volumes.node_stage(&inner.config, &req)
        })
        .await
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> RpcResult<csi::NodeUnstageVolumeResponse> {
        self.call(Method::NodeUnstageVolume, request, |inner, req| {
            inner.volumes.node_unstage(&inner.config, &req)
        })
        .await
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> RpcResult<csi::NodePublishVolumeResponse> {
        self.call(Method::NodePublishVolume, request, |inner, req| {
            inner.volumes.node_publish(&inner.config, &req)
        })
        .await
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> RpcResult<csi::NodeUnpublishVolumeResponse> {
        self.call(Method::NodeUnpublishVolume, request, |inner, req| {
            inner.volumes.node_unpublish(&req)
        })
        .await
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> RpcResult<csi::NodeGetVolumeStatsResponse> {
        self.call(Method::NodeGetVolumeStats, request, |inner, req| {
            inner.volumes.node_volume_stats(&inner.config, &req)
        })
        .await
    }

    async fn node_expand_volume(
        &self,
        request: Request<csi::NodeExpandVolumeRequest>,
    ) -> RpcResult<csi::NodeExpandVolumeResponse> {
        self.call(Method::NodeExpandVolume, request, |inner, req| {
            inner.volumes.node_expand(&inner.config, &req)
        })
        .await
    }

    async fn node_get_capabilities(
        &self,
        request: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> RpcResult<csi::NodeGetCapabilitiesResponse> {
        use csi::node_service_capability::{Rpc, Type};
        self.call(Method::NodeGetCapabilities, request, |inner, _| {
            Ok(csi::NodeGetCapabilitiesResponse {
                capabilities: inner
                    .config
                    .node_capabilities
                    .iter()
                    .map(|t| csi::NodeServiceCapability {
                        r#type: Some(Type::Rpc(Rpc {
                            r#type: (*t).into(),
                        })),
                    })
                    .collect(),
            })
        })
        .await
    }

    async fn node_get_info(
        &self,
        request: Request<csi::NodeGetInfoRequest>,
    ) -> RpcResult<csi::NodeGetInfoResponse> {
        self.call(Method::NodeGetInfo, request, |inner, _| {
            let cfg = &inner.config;
            Ok(csi::NodeGetInfoResponse {
                node_id: cfg.node_id.clone(),
                max_volumes_per_node: cfg.max_volumes_per_node,
                accessible_topology: (!cfg.topology.is_empty()).then(|| csi::Topology {
                    segments: to_map(&cfg.topology),
                }),
            })
        })
        .await
    }
}
