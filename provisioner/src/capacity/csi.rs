//! GetCapacity behind the [`CapacityDriver`] seam (the real call over the driver connection,
//! in tests a scripted fake). Upstream calls GetCapacity without checking the GET_CAPACITY
//! capability (spec §6.7); so does this: a driver without it answers an error, which is
//! logged and retried with backoff.

use std::future::Future;
use std::time::Duration;

use csi_common::connection::Connection;
use csi_common::status::CsiError;
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::{GetCapacityRequest, GetCapacityResponse};

/// The one controller RPC capacity tracking makes.
pub(crate) trait CapacityDriver: Send + Sync + 'static {
    /// GetCapacity.
    fn get_capacity(
        &self,
        request: GetCapacityRequest,
    ) -> impl Future<Output = Result<GetCapacityResponse, CsiError>> + Send;
}

/// [`CapacityDriver`] over the driver connection, every call bounded by `--timeout`.
#[derive(Debug, Clone)]
pub(crate) struct TonicCapacity {
    connection: Connection,
    timeout: Duration,
}

impl TonicCapacity {
    /// Calls go through `connection` (metrics and `-v=5` logging included) with `timeout`.
    pub(crate) fn new(connection: Connection, timeout: Duration) -> Self {
        Self {
            connection,
            timeout,
        }
    }
}

impl CapacityDriver for TonicCapacity {
    async fn get_capacity(
        &self,
        request: GetCapacityRequest,
    ) -> Result<GetCapacityResponse, CsiError> {
        let mut client = ControllerClient::new(self.connection.channel());
        let mut request = tonic::Request::new(request);
        request.set_timeout(self.timeout);
        Ok(client.get_capacity(request).await?.into_inner())
    }
}
