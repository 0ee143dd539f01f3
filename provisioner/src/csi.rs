//! The two CSI calls the controllers make, behind the [`VolumeDriver`] seam: the real
//! implementation over the tonic client ([`TonicDriver`]) and, in tests, a scripted fake.
//!
//! Errors keep the gRPC code, because the provisioning state model (spec §4.5/§4.7) depends on
//! it, and display like grpc-go's status errors (`rpc error: code = OutOfRange desc = ...`),
//! because that text is what upstream puts into `ProvisioningFailed` / `VolumeFailedDelete`
//! events and users search for it.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use csi_common::connection::Connection;
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::{CreateVolumeRequest, CreateVolumeResponse, DeleteVolumeRequest};
use tonic::Code;

/// A failed CSI call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CsiError {
    /// The gRPC code; `None` when the call failed without a status (upstream then assumes the
    /// operation may still be running).
    pub code: Option<Code>,
    /// The status message (or the transport error's text).
    pub message: String,
}

impl CsiError {
    /// An error with a gRPC status code.
    pub fn status(code: Code, message: impl Into<String>) -> Self {
        Self {
            code: Some(code),
            message: message.into(),
        }
    }
}

impl fmt::Display for CsiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(
                f,
                "rpc error: code = {} desc = {}",
                csi_common::status::code_name(code),
                self.message
            ),
            None => f.write_str(&self.message),
        }
    }
}

impl From<tonic::Status> for CsiError {
    fn from(status: tonic::Status) -> Self {
        Self::status(status.code(), status.message())
    }
}

/// The controller RPCs the provisioner calls (external-provisioner's `csi.ControllerClient`
/// usage narrowed to what this sidecar sends).
pub trait VolumeDriver: Send + Sync + 'static {
    /// CreateVolume; the request carries the secrets (never logged: its `Debug` redacts them).
    fn create_volume(
        &self,
        request: CreateVolumeRequest,
    ) -> impl Future<Output = Result<CreateVolumeResponse, CsiError>> + Send;

    /// DeleteVolume.
    fn delete_volume(
        &self,
        request: DeleteVolumeRequest,
    ) -> impl Future<Output = Result<(), CsiError>> + Send;
}

/// [`VolumeDriver`] over the driver connection, every call bounded by `--timeout`.
#[derive(Debug, Clone)]
pub struct TonicDriver {
    connection: Connection,
    timeout: Duration,
}

impl TonicDriver {
    /// Calls go through `connection` (metrics and `-v=5` logging included) with `timeout`.
    pub fn new(connection: Connection, timeout: Duration) -> Self {
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

    async fn delete_volume(&self, request: DeleteVolumeRequest) -> Result<(), CsiError> {
        let mut client = ControllerClient::new(self.connection.channel());
        client.delete_volume(self.request(request)).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_display_like_grpc_go_status_errors() {
        let err = CsiError::status(
            Code::OutOfRange,
            "Requested capacity 2199023255552 exceeds maximum allowed 1099511627776",
        );
        assert_eq!(
            err.to_string(),
            "rpc error: code = OutOfRange desc = Requested capacity 2199023255552 exceeds maximum allowed 1099511627776"
        );
        let err = CsiError::from(tonic::Status::cancelled("gone"));
        assert_eq!(err.to_string(), "rpc error: code = Canceled desc = gone");
        let err = CsiError {
            code: None,
            message: "transport closed".into(),
        };
        assert_eq!(err.to_string(), "transport closed");
    }
}
