//! Test tooling for the CSI sidecars: a mock CSI driver on a unix socket, an in-memory
//! Kubernetes API server and fakes of the other cluster parts the sidecars talk to.

pub mod apiserver;
pub mod grpc_dial;
pub mod http_client;
pub mod kcm;
pub mod kubelet;
pub mod logs;
pub mod mock_csi;
pub mod sandbox;
pub mod version;
pub mod wait;
