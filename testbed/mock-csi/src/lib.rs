//! A mock CSI driver for tests: a real tonic server on a unix socket serving the CSI v1.12.0
//! Identity, Controller and Node services from an in-memory volume table.
//!
//! It behaves like a real driver where the sidecars care (CSI spec error codes and
//! csi-driver-host-path's answers): CreateVolume is idempotent by name, capabilities gate RPCs
//! (`Unimplemented` otherwise), sizes above the maximum are `OutOfRange`, unknown volumes and
//! nodes are `NotFound` on publish, deletes and unpublishes are idempotent, CreateVolume's
//! `mutable_parameters` need MODIFY_VOLUME (`InvalidArgument` otherwise) and are kept as the
//! volume's mutable parameters. Each instance is one node (`NodeGetInfo` answers its configured
//! id and topology; run one per node for a node deployment). On top of that a test
//! can:
//! - inject faults: an error code or a delay on the n-th / first n / every call of a method
//!   ([`Fault`]), and make `Probe` report not-ready ([`MockDriverHandle::set_ready`]);
//! - assert on every call received ([`MockDriverHandle::calls`], [`MockDriverHandle::requests`],
//!   [`MockDriverHandle::wait_for_calls`]) and on the volume table ([`MockDriverHandle::volumes`]);
//! - simulate the driver dying and coming back ([`MockDriverHandle::stop`],
//!   [`MockDriverHandle::restart`]).
//!
//! The same driver runs as the `mock-csi-driver` binary (see [`cli`]) for manual runs.
//!
//! ```no_run
//! use std::time::Duration;
//! use proto::csi::v1::{identity_client::IdentityClient, GetPluginInfoRequest};
//! use testbed_mock_csi::{Fault, Method, MockDriver, MockDriverConfig, When};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let driver = MockDriver::start_in_temp_dir(MockDriverConfig::default()).await?;
//! driver.inject(Fault::error(Method::CreateVolume, tonic::Code::Internal, "boom").on(When::Nth(1)));
//! let mut identity = IdentityClient::new(driver.channel()?);
//! let info = identity.get_plugin_info(GetPluginInfoRequest {}).await?.into_inner();
//! assert_eq!(info.name, "mock.csi.k8s.io");
//! driver.wait_for_calls(Method::GetPluginInfo, 1, Duration::from_secs(1)).await?;
//! driver.stop().await?; // the socket is gone, open connections are cut
//! # Ok(()) }
//! ```

use std::io;
use std::path::PathBuf;

pub mod cli;
mod config;
mod fault;
mod method;
mod record;
mod server;
mod service;
mod shared;
mod state;

pub use config::{
    ControllerRpc, DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY, MockDriverConfig,
    NodeRpc, PluginCapability, PluginService, UnknownCapability, VolumeExpansion,
    parse_controller_rpc, parse_node_rpc,
};
pub use fault::{Action, Fault, Garbage, When};
pub use method::{Method, Service, UnknownMethod};
pub use record::RecordedCall;
pub use server::{MockDriver, MockDriverHandle};
pub use state::{MockSnapshot, MockVolume, volume_id_for};

/// Failures of starting, stopping or waiting on the mock driver.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work (e.g. a non-positive allocation unit).
    #[error("invalid mock driver configuration: {0}")]
    InvalidConfig(String),
    /// The socket could not be bound (or its directory created).
    #[error("cannot bind the mock driver socket {}", path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Something other than a socket is in the way at the socket path.
    #[error("{} exists and is not a socket; refusing to remove it", .0.display())]
    NotASocket(PathBuf),
    /// A (stale) socket file could not be removed.
    #[error("cannot remove the socket file {}", path.display())]
    RemoveSocket {
        /// The socket path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// No temporary directory for the socket.
    #[error("cannot create a temporary directory for the socket")]
    TempDir(#[source] io::Error),
    /// The socket path does not make a valid endpoint URI.
    #[error("the socket path does not make a valid endpoint URI")]
    Endpoint(#[source] tonic::transport::Error),
    /// Fewer calls than expected arrived (or were answered) in time.
    #[error("waited for {expected} {method} calls, only {seen} came")]
    WaitTimeout {
        /// The awaited method.
        method: Method,
        /// How many calls were awaited.
        expected: usize,
        /// How many had arrived at the deadline.
        seen: usize,
    },
}

/// Result of this module's fallible operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
