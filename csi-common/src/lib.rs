//! What every CSI sidecar shares: the driver connection over a unix socket, identity calls and
//! readiness probing, gRPC status classification, CSI call metrics and logging, client-go style
//! Events, the diagnostics HTTP server, the `:authority` repair for gRPC servers, Lease-based
//! leader election, command-line flags, logging set-up, the Kubernetes client, shutdown signals
//! and the version string.
//!
//! Rust counterpart of kubernetes-csi/csi-lib-utils. Nothing in this crate reads the process
//! environment on its own, parses argv, or exits the process: binaries pass values in and decide
//! what a returned error or a resolved loss signal means for the process.

pub mod access_modes;
pub mod capabilities;
pub mod connection;
pub mod events;
pub mod flags;
pub mod h2_authority;
pub mod http;
pub mod identity;
pub mod kube_client;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod quantity;
pub mod rpc_log;
pub mod runtime;
pub mod shutdown;
pub mod status;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod version;
pub mod workqueue;
