//! The two CSI calls the controllers make, behind the [`VolumeDriver`] seam: the real
//! implementation over the tonic client ([`TonicDriver`]) and, in tests, a scripted fake.
//!
//! Failures are [`CsiError`]s: the gRPC code the provisioning state model (spec §4.5/§4.7)
//! depends on, and grpc-go's text, which upstream puts into `ProvisioningFailed` /
//! `VolumeFailedDelete` events.

use std::future::Future;
use std::time::Duration;

use csi_common::connection::Connection;
use csi_common::metrics::Migrated;
use csi_common::status::CsiError;
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::{CreateVolumeRequest, CreateVolumeResponse, DeleteVolumeRequest};

/// The controller RPCs the provisioner calls (external-provisioner's `csi.ControllerClient`
/// usage narrowed to what this sidecar sends).
pub(crate) trait VolumeDriver: Send + Sync + 'static {
    /// CreateVolume; the request carries the secrets (never logged: its `Debug` redacts them).
    fn create_volume(
        &self,
        request: CreateVolumeRequest,
    ) -> impl Future<Output = Result<CreateVolumeResponse, CsiError>> + Send;

    /// DeleteVolume; `migrated`: the volume is a translated in-tree one (the call's `migrated`
    /// metric label).
    fn delete_volume(
        &self,
        request: DeleteVolumeRequest,
        migrated: bool,
    ) -> impl Future<Output = Result<(), CsiError>> + Send;
}

/// [`VolumeDriver`] over the driver connection, every call bounded by `--timeout`.
#[derive(Debug, Clone)]
pub(crate) struct TonicDriver {
    connection: Connection,
    timeout: Duration,
}

impl TonicDriver {
    /// Calls go through `connection` (metrics and `-v=5` logging included) with `timeout`.
    pub(crate) fn new(connection: Connection, timeout: Duration) -> Self {
        Self {
            connection,
            timeout,
        }
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout);
        request
    }
}

impl VolumeDriver for TonicDriver {
    async fn create_volume(
        &self,
        request: CreateVolumeRequest,
    ) -> Result<CreateVolumeResponse, CsiError> {
        let mut client = ControllerClient::new(self.connection.channel());
        let response = client.create_volume(self.request(request)).await?;
        Ok(response.into_inner())
    }

    async fn delete_volume(
        &self,
        request: DeleteVolumeRequest,
        migrated: bool,
    ) -> Result<(), CsiError> {
        let mut client = ControllerClient::new(self.connection.channel());
        let mut request = self.request(request);
        if migrated {
            request.extensions_mut().insert(Migrated);
        }
        client.delete_volume(request).await?;
        Ok(())
    }
}
