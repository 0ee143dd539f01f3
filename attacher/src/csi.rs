//! The three controller RPCs the attacher makes, behind the [`AttachDriver`] seam: the real
//! implementation over the driver connection ([`TonicDriver`]) and, in tests, a scripted fake.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use csi_common::connection::{Connection, CsiChannel};
use csi_common::metrics::Migrated;
use csi_common::status::CsiError;
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::{
    ControllerPublishVolumeRequest, ControllerUnpublishVolumeRequest, ListVolumesRequest,
    ListVolumesResponse,
};

/// The controller RPCs of external-attacher's `attacher.Attacher` and `CSIVolumeLister`.
pub(crate) trait AttachDriver: Send + Sync + 'static {
    /// ControllerPublishVolume; the publish context on success. `migrated`: the volume is a
    /// translated in-tree one (the call's `migrated` metric label).
    fn publish(
        &self,
        request: ControllerPublishVolumeRequest,
        migrated: bool,
    ) -> impl Future<Output = Result<HashMap<String, String>, CsiError>> + Send;

    /// ControllerUnpublishVolume; `migrated` as for [`AttachDriver::publish`].
    fn unpublish(
        &self,
        request: ControllerUnpublishVolumeRequest,
        migrated: bool,
    ) -> impl Future<Output = Result<(), CsiError>> + Send;

    /// One ListVolumes page, bounded by `deadline` (what is left of the reconcile pass).
    fn list_volumes(
        &self,
        request: ListVolumesRequest,
        deadline: Duration,
    ) -> impl Future<Output = Result<ListVolumesResponse, CsiError>> + Send;
}

/// [`AttachDriver`] over the driver connection; publish and unpublish bounded by `--timeout`.
#[derive(Debug, Clone)]
pub(crate) struct TonicDriver {
    connection: Connection,
    timeout: Duration,
}

impl TonicDriver {
    /// Calls go through `connection` (metrics and `-v=5` logging included).
    pub(crate) fn new(connection: Connection, timeout: Duration) -> Self {
        Self {
            connection,
            timeout,
        }
    }

    fn client(&self) -> ControllerClient<CsiChannel> {
        ControllerClient::new(self.connection.channel())
    }
}

fn with_timeout<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

/// [`with_timeout`], marked [`Migrated`] for a translated in-tree volume.
fn about_volume<T>(message: T, timeout: Duration, migrated: bool) -> tonic::Request<T> {
    let mut request = with_timeout(message, timeout);
    if migrated {
        request.extensions_mut().insert(Migrated);
    }
    request
}

impl AttachDriver for TonicDriver {
    async fn publish(
        &self,
        request: ControllerPublishVolumeRequest,
        migrated: bool,
    ) -> Result<HashMap<String, String>, CsiError> {
        let response = self
            .client()
            .controller_publish_volume(about_volume(request, self.timeout, migrated))
            .await?;
        Ok(response.into_inner().publish_context)
    }

    async fn unpublish(
        &self,
        request: ControllerUnpublishVolumeRequest,
        migrated: bool,
    ) -> Result<(), CsiError> {
        self.client()
            .controller_unpublish_volume(about_volume(request, self.timeout, migrated))
            .await?;
        Ok(())
    }

    async fn list_volumes(
        &self,
        request: ListVolumesRequest,
        deadline: Duration,
    ) -> Result<ListVolumesResponse, CsiError> {
        let response = self
            .client()
            .list_volumes(with_timeout(request, deadline))
            .await?;
        Ok(response.into_inner())
    }
}
