//! The sidecar binaries the sandbox knows, with the upstream-style flags it starts them with.
//! A binary that is not in the bin dir yet is reported as "not built yet" and skipped, so the
//! sandbox grows with the workspace: adding a sidecar here is one [`SidecarSpec`] entry.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// What a sidecar's command line is built from.
#[derive(Debug, Clone)]
pub struct LaunchContext {
    /// The driver socket (`--csi-address`).
    pub csi_socket: PathBuf,
    /// The kubeconfig of the in-memory API server (`--kubeconfig`).
    pub kubeconfig: PathBuf,
    /// `--http-endpoint` for this sidecar.
    pub http_endpoint: SocketAddr,
    /// The kubelet plugin registration directory (exists; `--plugin-registration-path`).
    pub registration_dir: PathBuf,
}

/// One sidecar binary.
#[derive(Debug, Clone, Copy)]
pub struct SidecarSpec {
    /// Binary name (upstream's).
    pub binary: &'static str,
    /// Builds its flags.
    pub args: fn(&LaunchContext) -> Vec<String>,
    /// Path probed to tell it is up (served on `--http-endpoint`).
    pub ready_path: &'static str,
    /// Environment variables a pod would give it (downward API).
    pub env: &'static [(&'static str, &'static str)],
}

/// Where csi-provisioner keeps its CSIStorageCapacity objects (its "pod's" namespace, as in
/// a real deployment with `NAMESPACE` from the downward API).
pub const CAPACITY_NAMESPACE: &str = "kube-system";

fn common(ctx: &LaunchContext) -> Vec<String> {
    vec![
        format!("--csi-address={}", ctx.csi_socket.display()),
        format!("--kubeconfig={}", ctx.kubeconfig.display()),
        format!("--http-endpoint={}", ctx.http_endpoint),
    ]
}

/// Every sidecar of the workspace, in start order.
pub fn known() -> Vec<SidecarSpec> {
    vec![
        SidecarSpec {
            binary: "livenessprobe",
            args: |ctx| {
                vec![
                    format!("--csi-address={}", ctx.csi_socket.display()),
                    format!("--http-endpoint={}", ctx.http_endpoint),
                    // Short, so the driver-restart flow sees the failure quickly.
                    "--probe-timeout=1s".to_owned(),
                ]
            },
            ready_path: "/healthz",
            env: &[],
        },
        SidecarSpec {
            binary: "csi-provisioner",
            args: |ctx| {
                let mut args = common(ctx);
                // Capacity tracking for the sandbox's Immediate class; no pod to own the
                // objects.
                args.extend([
                    "--enable-capacity".to_owned(),
                    "--capacity-for-immediate-binding".to_owned(),
                    "--capacity-ownerref-level=-1".to_owned(),
                ]);
                args
            },
            ready_path: "/metrics",
            env: &[("NAMESPACE", CAPACITY_NAMESPACE)],
        },
        SidecarSpec {
            binary: "csi-attacher",
            args: common,
            ready_path: "/metrics",
            env: &[],
        },
        SidecarSpec {
            binary: "csi-resizer",
            args: common,
            ready_path: "/metrics",
            env: &[],
        },
        SidecarSpec {
            binary: "csi-node-driver-registrar",
            args: |ctx| {
                vec![
                    format!("--csi-address={}", ctx.csi_socket.display()),
                    format!("--kubelet-registration-path={}", ctx.csi_socket.display()),
                    format!(
                        "--plugin-registration-path={}",
                        ctx.registration_dir.display()
                    ),
                    format!("--http-endpoint={}", ctx.http_endpoint),
                ]
            },
            ready_path: "/healthz",
            env: &[],
        },
    ]
}

/// `dir/<binary>` if it exists.
pub fn locate(dir: &Path, binary: &str) -> Option<PathBuf> {
    let path = dir.join(binary);
    path.is_file().then_some(path)
}
