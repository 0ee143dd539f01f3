//! ControllerExpandVolume and ControllerModifyVolume behind the [`ExpandDriver`] and
//! [`ModifyDriver`] seams: over the driver connection ([`TonicDriver`]) or, in tests, a
//! scripted fake.

use std::future::Future;
use std::time::Duration;

use csi_common::connection::Connection;
use csi_common::metrics::Migrated;
use csi_common::status::CsiError;
use proto::csi::v1::controller_client::ControllerClient;
use proto::csi::v1::{ControllerExpandVolumeRequest, ControllerModifyVolumeRequest};

use crate::error::ExpandError;

/// What the driver answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expanded {
    /// `capacity_bytes`.
    pub(crate) capacity: i64,
    /// `node_expansion_required`.
    pub(crate) node_expansion_required: bool,
}

impl Expanded {
    /// The answer, if it is at least `target` bytes. CSI spec, ControllerExpandVolumeResponse:
    /// `capacity_bytes` is "the capacity of the volume" after expansion and is REQUIRED, so a
    /// smaller value (or 0) means the volume did not reach the size: an error, never a
    /// capacity written to the PV.
    pub(crate) fn at_least(self, target: i64) -> Result<Self, ExpandError> {
        if self.capacity < target {
            return Err(ExpandError::CapacityTooSmall {
                got: self.capacity,
                want: target,
            });
        }
        Ok(self)
    }
}

/// external-resizer's `csi.Client.Expand`.
pub(crate) trait ExpandDriver: Send + Sync + 'static {
    /// ControllerExpandVolume; `migrated`: the volume is a translated in-tree one (the call's
    /// `migrated` metric label).
    fn expand(
        &self,
        request: ControllerExpandVolumeRequest,
        migrated: bool,
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
    async fn expand(
        &self,
        request: ControllerExpandVolumeRequest,
        migrated: bool,
    ) -> Result<Expanded, CsiError> {
        let mut request = tonic::Request::new(request);
        request.set_timeout(self.timeout);
        if migrated {
            request.extensions_mut().insert(Migrated);
        }
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

/// external-resizer's `modifier.Modify`.
pub(crate) trait ModifyDriver: Send + Sync + 'static {
    /// ControllerModifyVolume (its response has no fields).
    fn modify(
        &self,
        request: ControllerModifyVolumeRequest,
    ) -> impl Future<Output = Result<(), CsiError>> + Send;
}

impl ModifyDriver for TonicDriver {
    async fn modify(&self, request: ControllerModifyVolumeRequest) -> Result<(), CsiError> {
        let mut request = tonic::Request::new(request);
        request.set_timeout(self.timeout);
        ControllerClient::new(self.connection.channel())
            .controller_modify_volume(request)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_below_the_target_is_an_error() {
        let answer = |capacity| Expanded {
            capacity,
            node_expansion_required: false,
        };
        for (capacity, ok) in [(0, false), (1023, false), (1024, true), (4096, true)] {
            let result = answer(capacity).at_least(1024);
            assert_eq!(result.is_ok(), ok, "{capacity}");
            if let Err(err) = result {
                assert!(err.is_final() && !err.is_infeasible());
                assert_eq!(
                    err.to_string(),
                    format!(
                        "CSI driver returned capacity {capacity} bytes, less than the requested 1024 bytes"
                    )
                );
            }
        }
    }
}
