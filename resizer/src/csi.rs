//! ControllerExpandVolume behind the [`ExpandDriver`] seam: over the driver connection
//! ([`TonicDriver`]) or, in tests, a scripted fake.

use std::future::Future;
use std::time::Duration;

use csi_common::connection::Connection;
use csi_common::status::CsiError;
use proto::csi::v1::ControllerExpandVolumeRequest;
use proto::csi::v1::controller_client::ControllerClient;

/// What the driver answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expanded {
    /// `capacity_bytes`.
    pub(crate) capacity: i64,
    /// `node_expansion_required`.
    pub(crate) node_expansion_required: bool,
}

/// external-resizer's `csi.Client.Expand`.
pub(crate) trait ExpandDriver: Send + Sync + 'static {
    /// ControllerExpandVolume.
    fn expand(
        &self,
        request: ControllerExpandVolumeRequest,
    ) -> impl Future<Output = Result<Expanded, CsiError>> + Send;
}

/// [`ExpandDriver`] over the driver connection; each call bounded by `--timeout`.
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
}

impl ExpandDriver for TonicDriver {
    async fn expand(&self, request: ControllerExpandVolumeRequest) -> Result<Expanded, CsiError> {
        let mut request = tonic::Request::new(request);
        request.set_timeout(self.timeout);
        let response = ControllerClient::new(self.connection.channel())
            .controller_expand_volume(request)
            .await?
            .into_inner();
        Ok(Expanded {
            capacity: response.capacity_bytes,
            node_expansion_required: response.node_expansion_required,
        })
    }
}
