//! What every CSI sidecar shares: the driver connection over a unix socket, identity calls and
//! readiness probing, gRPC status classification and the CSI error type, CSI call metrics and
//! logging, client-go style Events, the Secrets CSI calls carry, the diagnostics HTTP server, the
//! `:authority` repair for gRPC servers, Lease-based leader election, command-line flags, logging
//! set-up, the Kubernetes client, Go's `%q`, shutdown signals, the version string and the
//! translation of in-tree volumes for CSI migration; and for the
//! controller sidecars (csi-provisioner, csi-attacher, csi-resizer) the work queue, the controller
//! runtime that drains it ([`controller`]) and the start-up wiring and run loop of the whole
//! process ([`sidecar`]).
//!
//! Rust counterpart of kubernetes-csi/csi-lib-utils. Nothing in this crate reads the process
//! environment on its own, parses argv, or exits the process: binaries pass values in and decide
//! what a returned error or a resolved loss signal means for the process.

pub mod access_modes;
pub mod cached;
pub mod capabilities;
pub mod coalesce;
pub mod connection;
pub mod controller;
pub mod events;
pub mod fence;
pub mod flags;
pub mod h2_authority;
pub mod http;
pub mod identity;
pub mod informer;
pub mod intern;
pub mod kube_client;
pub mod leader;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod migration;
pub mod quantity;
pub mod quote;
pub mod rpc_log;
pub mod runtime;
pub mod secrets;
pub mod shutdown;
pub mod sidecar;
pub mod status;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod vac_discovery;
pub mod version;
pub mod volume_capability;
pub mod workqueue;
