//! The kubelet plugin-registration gRPC service (`pluginregistration.Registration`) served on the
//! registration socket.
//!
//! Kubelet's plugin watcher calls `GetInfo`, validates the answer, registers the driver (dialing
//! the returned endpoint for `NodeGetInfo`) and then reports the outcome with
//! `NotifyRegistrationStatus`. Newer kubelets also call `GetInfo` every 10 s as a health check,
//! so it must stay cheap and never fail.

use proto::pluginregistration::v1::registration_server::Registration;
use proto::pluginregistration::v1::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status};

/// `PluginInfo.type` of a CSI driver (kubelet's `registerapi.CSIPlugin`).
pub(crate) const CSI_PLUGIN_TYPE: &str = "CSIPlugin";

/// The CSI versions upstream announces (`supportedVersions` in `main.go`). Kubelet needs at
/// least one version with major 1.
pub(crate) const SUPPORTED_VERSIONS: &[&str] = &["1.0.0"];

/// The registration service.
#[derive(Debug, Clone)]
pub(crate) struct RegistrationService {
    info: PluginInfo,
    failures: mpsc::Sender<String>,
    stopping: watch::Receiver<bool>,
}

impl RegistrationService {
    /// A service announcing `driver_name` at `endpoint` (`--kubelet-registration-path`).
    ///
    /// A `NotifyRegistrationStatus` with `plugin_registered: false` sends kubelet's error text
    /// to `failures` and leaves the call unanswered until `stopping` turns true: upstream calls
    /// `os.Exit(1)` before replying, so kubelet sees the connection drop, not an answer.
    pub(crate) fn new(
        driver_name: &str,
        endpoint: &str,
        failures: mpsc::Sender<String>,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self {
            info: PluginInfo {
                r#type: CSI_PLUGIN_TYPE.to_owned(),
                name: driver_name.to_owned(),
                endpoint: endpoint.to_owned(),
                supported_versions: SUPPORTED_VERSIONS.iter().map(|v| (*v).to_owned()).collect(),
            },
            failures,
            stopping,
        }
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(
        &self,
        request: Request<InfoRequest>,
    ) -> Result<Response<PluginInfo>, Status> {
        tracing::info!(request = ?request.get_ref(), "Received GetInfo call");
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        tracing::info!(
            plugin_registered = status.plugin_registered,
            error = %status.error,
            "Received NotifyRegistrationStatus call"
        );
        if status.plugin_registered {
            return Ok(Response::new(RegistrationStatusResponse {}));
        }
        tracing::error!(
            error = %status.error,
            "Registration process failed with error, restarting registration container"
        );
        // A full channel means a failure is already on its way: one is enough to stop.
        let _ = self.failures.try_send(status.error);
        let mut stopping = self.stopping.clone();
        let _ = stopping.wait_for(|stopping| *stopping).await;
        Err(Status::unavailable("node-driver-registrar is exiting"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> (
        RegistrationService,
        mpsc::Receiver<String>,
        watch::Sender<bool>,
    ) {
        let (failures, failed) = mpsc::channel(1);
        let (stop, stopping) = watch::channel(false);
        let service = RegistrationService::new(
            "hostpath.csi.k8s.io",
            "/var/lib/kubelet/plugins/csi-hostpath/csi.sock",
            failures,
            stopping,
        );
        (service, failed, stop)
    }

    #[tokio::test]
    async fn get_info_answers_like_upstream() {
        let (service, _, _) = service();
        let info = service
            .get_info(Request::new(InfoRequest {}))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            info,
            PluginInfo {
                r#type: "CSIPlugin".to_owned(),
                name: "hostpath.csi.k8s.io".to_owned(),
                endpoint: "/var/lib/kubelet/plugins/csi-hostpath/csi.sock".to_owned(),
                supported_versions: vec!["1.0.0".to_owned()],
            }
        );
    }

    #[tokio::test]
    async fn a_successful_registration_is_acknowledged() {
        let (service, mut failed, _stop) = service();
        let status = RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        };
        service
            .notify_registration_status(Request::new(status))
            .await
            .unwrap();
        assert!(failed.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_failed_registration_is_reported_and_never_acknowledged() {
        let (service, mut failed, stop) = service();
        let status = RegistrationStatus {
            plugin_registered: false,
            error: "plugin validation failed".to_owned(),
        };
        let call = tokio::spawn(async move {
            service
                .notify_registration_status(Request::new(status))
                .await
        });
        assert_eq!(failed.recv().await.unwrap(), "plugin validation failed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!call.is_finished(), "answered before the registrar stopped");
        stop.send_replace(true);
        let status = call.await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
    }
}
