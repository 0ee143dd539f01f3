//! What one chaos scenario runs against: the in-memory API server listening on a port that
//! survives restarts, the controller-manager stand-in, the mock CSI driver (both in this
//! process), and one or two replicas of the sidecar under test as child processes, with a
//! "kubelet" that restarts a replica that exited, as a Deployment's pod would be.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use testbed_cluster::apiserver::{self, ApiServer, Listening};
use testbed_cluster::kcm::{self, ControllerManager};
use testbed_mock_csi::MockDriverHandle;
use testbed_sandbox::fixtures::Backends;
use testbed_support::leader::FAST_LEADER_ELECTION;
use testbed_support::process::{self, ChildProcess, CommandLine};
use tokio::time::Instant;

use crate::Sidecar;

/// Namespace of every claim the scenarios create.
pub(crate) const NAMESPACE: &str = "chaos";
/// `--timeout` of every sidecar: short, so a hanging driver call is given up quickly.
pub(crate) const CSI_TIMEOUT: Duration = Duration::from_secs(2);
/// The leader-election timings the replicas run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LeaderTimings {
    /// 3 s lease, 2 s renew deadline, 1 s retry period (testbed-support's
    /// `FAST_LEADER_ELECTION`): a leader fault takes seconds.
    Fast,
    /// Upstream's defaults, 15 s / 10 s / 5 s (sidecars.md, `--leader-election-*`): what a
    /// Deployment that sets none of the flags runs with.
    Upstream,
}

impl LeaderTimings {
    /// `--leader-election-lease-duration`.
    pub(crate) fn lease_duration(self) -> Duration {
        match self {
            Self::Fast => Duration::from_secs(3),
            Self::Upstream => Duration::from_secs(15),
        }
    }
}
/// The Secret every scenario's CSI calls carry (provisioner, controller-publish and
/// controller-expand secrets), in [`NAMESPACE`].
pub(crate) const SECRET_NAME: &str = "chaos-secret";
/// Its one value: it must never appear in a sidecar log, even at `-v=5`.
pub(crate) const SECRET_VALUE: &str = "chaos-s3cret-9f8e7d6c5b4a";

/// kubelet's first CrashLoopBackOff delay: a container that exited is started again after
/// 10 s (and the same pod name, hence the same Lease identity, comes back).
const KUBELET_BACKOFF: Duration = Duration::from_secs(10);

/// One replica of the sidecar and what happened to it.
#[derive(Debug)]
pub(crate) struct Replica {
    pub(crate) name: String,
    pub(crate) process: ChildProcess,
    /// Its `--http-endpoint` (`/metrics`).
    pub(crate) http: SocketAddr,
    /// Exit statuses seen (each followed by a restart).
    pub(crate) exits: Vec<ExitStatus>,
    /// When it was seen exited and not yet restarted.
    exited_at: Option<Instant>,
}

/// The API server, controller-manager stand-in, driver and sidecar replicas of one scenario.
pub(crate) struct Rig {
    pub(crate) server: ApiServer,
    listening: Option<Listening>,
    kubeconfig: PathBuf,
    pub(crate) driver: MockDriverHandle,
    kcm: Option<ControllerManager>,
    work_dir: PathBuf,
    binary: PathBuf,
    sidecar: Sidecar,
    /// The leader-election timings of the replicas started from now on.
    pub(crate) leader_timings: LeaderTimings,
    /// Flags and environment added to every replica started from now on.
    pub(crate) extra: Extra,
    pub(crate) replicas: Vec<Replica>,
}

/// Flags and environment variables beyond [`Rig`]'s own.
#[derive(Debug, Default, Clone)]
pub(crate) struct Extra {
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
}

impl std::fmt::Debug for Rig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rig")
            .field("work_dir", &self.work_dir)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl Rig {
    /// Starts the API server, controller-manager stand-in and driver, and stores the Node,
    /// its CSINode and the namespace. Sidecars are started by [`Rig::add_replica`]. The API
    /// server's first write gets `first_resource_version + 1`.
    pub(crate) async fn start(
        work_dir: &Path,
        binary: &Path,
        sidecar: Sidecar,
        first_resource_version: u64,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(work_dir).context("cannot create the work dir")?;
        let Backends {
            server,
            listening,
            kubeconfig,
            driver,
        } = Backends::start_with(
            work_dir,
            apiserver::Config {
                first_resource_version,
                ..apiserver::Config::default()
            },
        )
        .await?;
        let kcm = ControllerManager::start(server.client(), kcm::Config::default());
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}},
            "status": {"phase": "Active"},
        }))?;
        server.put_object(&namespace)?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(SECRET_NAME.to_owned()),
                namespace: Some(NAMESPACE.to_owned()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                "password".to_owned(),
                ByteString(SECRET_VALUE.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        };
        server.put_object(&secret)?;
        Ok(Self {
            server,
            listening: Some(listening),
            kubeconfig,
            driver,
            kcm: Some(kcm),
            work_dir: work_dir.to_owned(),
            binary: binary.to_owned(),
            sidecar,
            leader_timings: LeaderTimings::Fast,
            extra: Extra::default(),
            replicas: Vec::new(),
        })
    }

    /// Upstream's flags for the sidecar, with fast leader election and retries, `-v=5` (so
    /// the secret check reads the most verbose logs) and [`CSI_TIMEOUT`].
    fn args(&self, http: SocketAddr) -> Vec<String> {
        let mut args = vec![
            format!("--csi-address={}", self.driver.socket_path().display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--http-endpoint={http}"),
            format!("--timeout={}s", CSI_TIMEOUT.as_secs()),
            "--kube-api-qps=100".to_owned(),
            "--kube-api-burst=200".to_owned(),
            "--retry-interval-start=100ms".to_owned(),
            "--retry-interval-max=1s".to_owned(),
            "-v=5".to_owned(),
        ];
        match self.leader_timings {
            LeaderTimings::Fast => {
                args.extend(FAST_LEADER_ELECTION.iter().map(|a| (*a).to_owned()));
            }
            LeaderTimings::Upstream => {
                // No timing flags: the sidecar's defaults, which are upstream's.
                args.push("--leader-election".to_owned());
                args.push("--leader-election-namespace=default".to_owned());
            }
        }
        match self.sidecar {
            Sidecar::Provisioner => args.push("--worker-threads=20".to_owned()),
            Sidecar::Attacher => args.push("--worker-threads=10".to_owned()),
            Sidecar::Resizer => {
                args.push("--workers=10".to_owned());
                args.push("--handle-volume-inuse-error=false".to_owned());
            }
        }
        args.extend(self.extra.args.iter().cloned());
        args
    }

    /// Starts replica `name` (its `HOSTNAME`, hence its Lease identity) and waits until its
    /// diagnostics endpoint answers.
    pub(crate) async fn add_replica(&mut self, name: &str) -> anyhow::Result<()> {
        let http = process::free_port().context("no free port")?;
        let mut command = CommandLine::new(&self.binary, &self.args(http)).env("HOSTNAME", name);
        for (key, value) in &self.extra.env {
            command = command.env(key, value);
        }
        let log = self.work_dir.join(format!("{name}.log"));
        let mut child = ChildProcess::start(name, command, &log)?;
        child
            .wait_ready(Duration::from_secs(30), || process::accepts_tcp(http))
            .await
            .with_context(|| format!("{name} did not start: {}", process::log_tail(&log, 10)))?;
        self.replicas.push(Replica {
            name: name.to_owned(),
            process: child,
            http,
            exits: Vec::new(),
            exited_at: None,
        });
        Ok(())
    }

    /// The kubelet's part: a replica that exited is recorded and started again after
    /// [`KUBELET_BACKOFF`] (a stopped replica, SIGSTOP, is still running and is left alone).
    pub(crate) fn restart_exited(&mut self) -> anyhow::Result<()> {
        for replica in &mut self.replicas {
            match replica.exited_at {
                Some(at) if at.elapsed() >= KUBELET_BACKOFF => {
                    replica.process.respawn()?;
                    replica.exited_at = None;
                }
                Some(_) => {}
                None => {
                    if let Some(status) = replica.process.exit_status()? {
                        replica.exits.push(status);
                        replica.exited_at = Some(Instant::now());
                    }
                }
            }
        }
        Ok(())
    }

    /// How many times replicas were restarted.
    pub(crate) fn restarts(&self) -> usize {
        self.replicas.iter().map(|r| r.exits.len()).sum()
    }

    /// The identity holding the sidecar's Lease, read from the store.
    pub(crate) fn lease_holder(&self) -> Option<String> {
        let leases = self.server.list_objects::<Lease>(Some("default")).ok()?;
        leases
            .into_iter()
            .filter_map(|l| l.spec?.holder_identity)
            .find(|holder| self.replicas.iter().any(|r| &r.name == holder))
    }

    /// The holder of the sidecar's Lease (one of the replicas) and the `renewTime` of its
    /// record, read at once: the wall-clock instant of the holder's last renewal (the replicas
    /// run on this machine, so on this clock).
    pub(crate) fn lease_renewal(&self) -> Option<(String, Option<Timestamp>)> {
        let leases = self.server.list_objects::<Lease>(Some("default")).ok()?;
        leases.into_iter().filter_map(|l| l.spec).find_map(|spec| {
            let holder = spec.holder_identity?;
            self.replicas
                .iter()
                .any(|r| r.name == holder)
                .then(|| (holder, spec.renew_time.map(|t| t.0)))
        })
    }

    /// The replica holding the Lease.
    pub(crate) fn leader(&mut self) -> Option<&mut Replica> {
        let holder = self.lease_holder()?;
        self.replicas.iter_mut().find(|r| r.name == holder)
    }

    /// Restarts the API server (see `ApiServer::restart`): watches end, connections are
    /// refused for `down`, the same state comes back with a newer resourceVersion.
    pub(crate) async fn restart_api_server(
        &mut self,
        down: Duration,
        compact: bool,
    ) -> anyhow::Result<()> {
        let listening = self
            .listening
            .take()
            .context("the API server is not listening")?;
        let listening = self
            .server
            .restart(listening, down, compact)
            .await
            .context("cannot restart the API server")?;
        self.listening = Some(listening);
        Ok(())
    }

    /// The scenario's directory (sockets, kubeconfig, logs).
    pub(crate) fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// The API server's address (the port survives restarts).
    pub(crate) fn api_addr(&self) -> Option<SocketAddr> {
        self.listening.as_ref().map(Listening::addr)
    }

    /// Every log line the replicas wrote.
    pub(crate) fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| r.process.log_text())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops everything; the replicas with SIGTERM (SIGCONT first, in case one is stopped).
    pub(crate) async fn stop(mut self) {
        for replica in &mut self.replicas {
            let _ = replica.process.signal(process::Signal::CONT);
            let _ = replica.process.terminate().await;
        }
        if let Some(kcm) = self.kcm.take() {
            kcm.stop().await;
        }
        let _ = self.driver.stop().await;
        if let Some(listening) = self.listening.take() {
            listening.shutdown().await;
        }
    }
}
