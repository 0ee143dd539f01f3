//! What every bench mode starts before it measures: the in-memory API server (listening, with
//! a kubeconfig), the mock CSI driver, one Node with a CSINode for the driver, and the sidecar
//! binary under test as a child process with upstream's flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Namespace;
use serde_json::json;
use testbed_cluster::apiserver::{ApiServer, Listening};
use testbed_mock_csi::MockDriverHandle;
use testbed_sandbox::fixtures::Backends;
use testbed_support::process::{self, ChildProcess};

use crate::ClientFlags;

/// The directory the sidecar binary is taken from: `--bin-dir`, else this binary's own, so the
/// debug bench uses the debug sidecars.
pub(crate) fn bin_dir(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    match arg {
        Some(dir) => Ok(dir.to_owned()),
        None => Ok(std::env::current_exe()
            .context("cannot find this binary")?
            .parent()
            .context("this binary has no parent directory")?
            .to_owned()),
    }
}

/// `--work-dir`, created if needed, else a new temp dir that is kept (logs stay readable).
pub(crate) fn work_dir(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    match arg {
        Some(dir) => {
            std::fs::create_dir_all(dir).context("cannot create the work dir")?;
            Ok(dir.to_owned())
        }
        None => Ok(tempfile::Builder::new()
            .prefix("csi-bench-")
            .tempdir()
            .context("cannot create the work dir")?
            .keep()),
    }
}

/// The API server and the mock driver, both in this process.
pub(crate) struct Cluster {
    pub(crate) server: ApiServer,
    listening: Listening,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) driver: MockDriverHandle,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Starts both, with the driver's default configuration (CONTROLLER_SERVICE with
    /// CREATE_DELETE_VOLUME and PUBLISH_UNPUBLISH_VOLUME) and the API server recording
    /// `managedFields`, and stores the Node and CSINode.
    pub(crate) async fn start(work_dir: &Path) -> anyhow::Result<Self> {
        // With managedFields, as kube-apiserver: the sidecars' caches must cope with them.
        let Backends {
            server,
            listening,
            kubeconfig,
            driver,
        } = Backends::start_with(
            work_dir,
            testbed_cluster::apiserver::Config {
                managed_fields: true,
                ..testbed_cluster::apiserver::Config::default()
            },
        )
        .await?;
        Ok(Self {
            server,
            listening,
            kubeconfig,
            driver,
        })
    }

    /// Stops the driver and the API server; a failure lands in `failures`.
    pub(crate) async fn stop(self, failures: &mut Vec<String>) {
        if let Err(e) = self.driver.stop().await {
            failures.push(format!("cannot stop the mock driver: {e}"));
        }
        self.listening.shutdown().await;
    }
}

/// Creates namespace `name` (the API server refuses namespaced objects in a missing one).
pub(crate) async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    kube::Api::<Namespace>::all(client.clone())
        .create(&kube::api::PostParams::default(), &namespace)
        .await
        .with_context(|| format!("cannot create the Namespace {name}"))?;
    Ok(())
}

/// Upstream's flags for a controller sidecar against `cluster`; `workers_flag` is the
/// sidecar's name for its worker count (`--worker-threads`, csi-resizer's `--workers`).
pub(crate) fn sidecar_args(
    cluster: &Cluster,
    http: SocketAddr,
    client: ClientFlags,
    workers_flag: &str,
) -> Vec<String> {
    vec![
        format!("--csi-address={}", cluster.driver.socket_path().display()),
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--http-endpoint={http}"),
        format!("--kube-api-qps={}", client.qps),
        format!("--kube-api-burst={}", client.burst),
        format!("{workers_flag}={}", client.workers),
    ]
}

/// Starts `binary` and waits until its `--http-endpoint` accepts connections. The process is
/// returned either way, so the caller stops it; the error says why it is not ready.
pub(crate) async fn start_sidecar(
    name: &str,
    binary: &Path,
    args: &[String],
    log: &Path,
    http: SocketAddr,
) -> anyhow::Result<(ChildProcess, Result<(), String>)> {
    let mut child = ChildProcess::spawn(name, binary, args, log)?;
    let ready = child
        .wait_ready(Duration::from_secs(30), || process::accepts_tcp(http))
        .await
        .map_err(|e| format!("{e}; last log lines:\n{}", process::log_tail(log, 10)));
    Ok((child, ready))
}

/// Checks that the sidecar is still running and stops it (SIGTERM, SIGKILL after a grace
/// period); problems land in `failures`. Returns its command line for the report.
pub(crate) async fn stop_sidecar(mut child: ChildProcess, failures: &mut Vec<String>) -> String {
    match child.exit_status() {
        Ok(Some(status)) => failures.push(format!("{} exited early with {status}", child.name())),
        Ok(None) => {}
        Err(e) => failures.push(e.to_string()),
    }
    let command = child.command_line();
    if let Err(e) = child.terminate().await {
        failures.push(format!("cannot stop {}: {e}", child.name()));
    }
    command
}
