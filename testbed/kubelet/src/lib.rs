//! A fake kubelet plugin manager: watches a plugins directory the way kubelet's plugin watcher
//! does and registers the CSI drivers whose registration sockets appear there, so a real
//! node-driver-registrar can be tested without a kubelet.
//!
//! What it does, after kubelet's `pkg/kubelet/pluginmanager`:
//!
//! * **Discovery.** Kubelet watches the directory with fsnotify (inotify) and walks it at
//!   start-up; this fake polls it every [`KubeletConfig::poll_interval`] (100 ms by default). A
//!   plugin is a unix socket whose name does not start with `.`, whatever its extension
//!   ([`scan`]). A deleted and re-created socket is a new plugin instance.
//! * **The dial.** Like kubelet's plugin manager (grpc-go, passthrough resolver, custom
//!   dialer), every registration request carries `:authority` = the socket path; a
//!   registrar whose HTTP/2 server refuses that never registers, exactly as on a real node
//!   ([`KubeletConfig::registration_authority`] selects other clients' styles). `NodeGetInfo`
//!   goes out with `localhost`, as kubelet's CSI client sends it.
//! * **Registration** (`register.rs`): `GetInfo`, validation of type and versions, `NodeGetInfo`
//!   on the returned endpoint, optionally the Node annotation and `CSINode` entry
//!   (`node_info.rs`, when [`KubeletConfig::node_api`] is set), then `NotifyRegistrationStatus`
//!   — `true`, or `false` with kubelet's error text, also when a test says so with
//!   [`Verdict::Reject`].
//! * **Retries.** A failed attempt is retried with kubelet's exponential backoff (500 ms,
//!   doubling up to 2 min 2 s). As in kubelet, the backoff belongs to the socket *path*, not to
//!   one socket file: kubelet's operation executor runs `RegisterPlugin` through a
//!   `goroutinemap` keyed by the socket path, which keeps the last error's backoff until an
//!   operation on that path succeeds. So a registrar that replaces a stale socket
//!   (after a node reboot, or its own restart after a rejected registration) waits for what
//!   is left of the path's backoff, up to 2 min 2 s (upstream registrar issue #206).
//! * **De-registration.** When a registered socket disappears (or is replaced), the plugin is
//!   de-registered first, as kubelet's reconciler does, and removed from the CSINode.
//! * **Concurrency.** Like kubelet's operation executor, attempts on different sockets run
//!   concurrently and at most one runs per socket path.
//!
//! Not modelled: the periodic `GetInfo` health check of newer kubelets, DRA and device
//! plugins, subdirectories of the plugins directory, and kubelet's quirk of keeping a plugin
//! whose `RegisterPlugin` step failed in its actual state.
//!
//! Every attempt is recorded as a [`KubeletEvent`]; tests wait on them with
//! [`FakeKubelet::wait_until`] and its helpers.
//!
//! ```no_run
//! use std::time::Duration;
//! use testbed_kubelet::{FakeKubelet, KubeletConfig};
//!
//! # async fn example(dir: &std::path::Path) -> Result<(), testbed_kubelet::Error> {
//! let kubelet = FakeKubelet::start(KubeletConfig::new(dir))?;
//! // ... start a registrar that puts <dir>/<driver>-reg.sock there ...
//! let plugin = kubelet
//!     .wait_registered("hostpath.csi.k8s.io", Duration::from_secs(10))
//!     .await?;
//! assert_eq!(plugin.supported_versions, ["1.0.0"]);
//! # Ok(()) }
//! ```

pub mod grpc_dial;
mod node_info;
mod register;
pub mod scan;
pub mod versions;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use proto::pluginregistration::v1::PluginInfo;

use crate::grpc_dial::Authority;
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

pub use node_info::{NODE_ID_ANNOTATION, NodeApi};
pub use register::{CSI_PLUGIN_TYPE, GET_INFO_TIMEOUT, NOTIFY_TIMEOUT};

use register::{Attempt, Outcome};
use scan::SocketId;
use versions::Version;

/// Kubelet's first retry delay after a failed registration (`initialDurationBeforeRetry`).
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);

/// Kubelet's longest retry delay (`maxDurationBeforeRetry`: 2 min 2 s).
pub const MAX_BACKOFF: Duration = Duration::from_secs(122);

/// Errors of the fake kubelet.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugins directory could not be created.
    #[error("cannot create the plugins directory {}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// What a test waited for did not happen in time. `events` is the record at the deadline.
    #[error("waited {timeout:?} for {what}; events so far: {events:#?}")]
    WaitTimeout {
        /// What was awaited.
        what: String,
        /// How long.
        timeout: Duration,
        /// Everything recorded until then.
        events: Vec<KubeletEvent>,
    },
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the fake kubelet answers a registration that passed validation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Register the plugin and notify `plugin_registered: true`.
    #[default]
    Accept,
    /// Fail the registration as if kubelet's `RegisterPlugin` step had failed with this error.
    Reject(String),
}

/// How the fake kubelet behaves. [`KubeletConfig::new`] gives kubelet's timings.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// The plugins registry directory (kubelet: `/var/lib/kubelet/plugins_registry`). Created
    /// if missing, as kubelet does.
    pub plugins_dir: PathBuf,
    /// How often the directory is scanned.
    pub poll_interval: Duration,
    /// The initial [`Verdict`]; change it later with [`FakeKubelet::set_verdict`].
    pub verdict: Verdict,
    /// Whether registration dials the endpoint for `NodeGetInfo` (kubelet always does).
    pub call_node_get_info: bool,
    /// How long a dial waits for a socket to accept (kubelet: 10 s).
    pub dial_timeout: Duration,
    /// Bound on `NodeGetInfo` (kubelet's `csiTimeout`: 2 min).
    pub csi_timeout: Duration,
    /// First retry delay after a failure.
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Where to record the driver (Node annotation and CSINode); `None` writes nothing.
    pub node_api: Option<NodeApi>,
    /// The `:authority` of registration calls (`GetInfo`, `NotifyRegistrationStatus`).
    /// Kubelet's plugin manager sends the socket path (grpc-go's passthrough resolver with a
    /// custom dialer), which h2-based servers refuse unless they repair it; the other styles
    /// are what other clients send.
    pub registration_authority: Authority,
}

impl KubeletConfig {
    /// Kubelet's behaviour on `plugins_dir`, polled every 100 ms, writing no API objects.
    pub fn new(plugins_dir: impl Into<PathBuf>) -> Self {
        Self {
            plugins_dir: plugins_dir.into(),
            poll_interval: Duration::from_millis(100),
            verdict: Verdict::Accept,
            call_node_get_info: true,
            dial_timeout: Duration::from_secs(10),
            csi_timeout: Duration::from_mins(2),
            initial_backoff: INITIAL_BACKOFF,
            max_backoff: MAX_BACKOFF,
            node_api: None,
            registration_authority: Authority::SocketPath,
        }
    }
}

/// What `NodeGetInfo` returned for a registered driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// `node_id`.
    pub node_id: String,
    /// `max_volumes_per_node` (0: no limit).
    pub max_volumes_per_node: i64,
    /// `accessible_topology.segments`.
    pub topology: BTreeMap<String, String>,
}

/// How a `NotifyRegistrationStatus` call went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyOutcome {
    /// Not called (kubelet does not notify when it could not even get the plugin info).
    NotSent,
    /// The plugin answered.
    Acknowledged,
    /// The call failed (e.g. the plugin exited before answering), with grpc-go's error text.
    Failed(String),
}

/// A registered plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredPlugin {
    /// Its registration socket.
    pub socket: PathBuf,
    /// `PluginInfo.name`: the CSI driver name.
    pub name: String,
    /// `PluginInfo.endpoint` (the socket path when the plugin sent none).
    pub endpoint: String,
    /// `PluginInfo.supported_versions`.
    pub supported_versions: Vec<String>,
    /// What `NodeGetInfo` returned (`None` when not called).
    pub node: Option<NodeInfo>,
    /// How the final `NotifyRegistrationStatus(true)` went.
    pub notified: NotifyOutcome,
}

/// Something the fake kubelet did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeletEvent {
    /// A plugin was registered.
    Registered(RegisteredPlugin),
    /// A registration attempt failed.
    RegistrationFailed {
        /// The registration socket.
        socket: PathBuf,
        /// What `GetInfo` returned, if it answered.
        info: Option<PluginInfo>,
        /// Kubelet's error text (sent to the plugin when `notified` is not `NotSent`).
        error: String,
        /// How `NotifyRegistrationStatus(false)` went.
        notified: NotifyOutcome,
    },
    /// A registered plugin's socket disappeared or was replaced.
    Deregistered {
        /// The registration socket.
        socket: PathBuf,
        /// The driver name.
        name: String,
        /// Error of removing the driver from the API objects, if any.
        error: Option<String>,
    },
}

impl KubeletEvent {
    /// The registration socket the event is about.
    pub fn socket(&self) -> &Path {
        match self {
            KubeletEvent::Registered(plugin) => &plugin.socket,
            KubeletEvent::RegistrationFailed { socket, .. }
            | KubeletEvent::Deregistered { socket, .. } => socket,
        }
    }
}

/// What a test can observe.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every event so far, oldest first.
    pub events: Vec<KubeletEvent>,
    /// The plugins registered now, by socket path.
    pub registered: BTreeMap<PathBuf, RegisteredPlugin>,
}

/// A running fake kubelet. Dropping it stops it.
#[derive(Debug)]
pub struct FakeKubelet {
    snapshot: watch::Receiver<Snapshot>,
    verdict: Arc<Mutex<Verdict>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl FakeKubelet {
    /// Starts watching `config.plugins_dir` (needs a tokio runtime).
    ///
    /// # Errors
    /// [`Error::Directory`] when the directory cannot be created.
    pub fn start(config: KubeletConfig) -> Result<Self> {
        std::fs::create_dir_all(&config.plugins_dir).map_err(|source| Error::Directory {
            path: config.plugins_dir.clone(),
            source,
        })?;
        let (publish, snapshot) = watch::channel(Snapshot::default());
        let verdict = Arc::new(Mutex::new(config.verdict.clone()));
        let (stop, stopped) = oneshot::channel();
        let manager = Manager {
            config: Arc::new(config),
            verdict: Arc::clone(&verdict),
            publish,
            registered: BTreeMap::new(),
            backoff: BTreeMap::new(),
            in_flight: BTreeSet::new(),
        };
        let task = tokio::spawn(manager.run(stopped));
        Ok(Self {
            snapshot,
            verdict,
            stop: Some(stop),
            task,
        })
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<KubeletEvent> {
        self.snapshot.borrow().events.clone()
    }

    /// The plugins registered now.
    pub fn registered(&self) -> Vec<RegisteredPlugin> {
        self.snapshot
            .borrow()
            .registered
            .values()
            .cloned()
            .collect()
    }

    /// Changes how later registrations are answered.
    pub fn set_verdict(&self, verdict: Verdict) {
        *self.verdict.lock().unwrap_or_else(PoisonError::into_inner) = verdict;
    }

    /// Waits until `check` returns `Some` for the current [`Snapshot`].
    ///
    /// # Errors
    /// [`Error::WaitTimeout`] with `what` in its message.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Snapshot) -> Option<T>,
    ) -> Result<T> {
        let mut snapshot = self.snapshot.clone();
        let mut found = None;
        let waited = tokio::time::timeout(
            timeout,
            snapshot.wait_for(|s| {
                found = check(s);
                found.is_some()
            }),
        )
        .await;
        match (waited, found) {
            (Ok(Ok(_)), Some(found)) => Ok(found),
            _ => Err(Error::WaitTimeout {
                what: what.to_owned(),
                timeout,
                events: self.events(),
            }),
        }
    }

    /// Waits until a plugin named `name` is registered and returns it.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`].
    pub async fn wait_registered(&self, name: &str, timeout: Duration) -> Result<RegisteredPlugin> {
        self.wait_until(&format!("{name} to be registered"), timeout, |s| {
            s.registered.values().find(|p| p.name == name).cloned()
        })
        .await
    }

    /// Waits until no plugin named `name` is registered.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`].
    pub async fn wait_deregistered(&self, name: &str, timeout: Duration) -> Result<()> {
        self.wait_until(&format!("{name} to be de-registered"), timeout, |s| {
            (!s.registered.values().any(|p| p.name == name)).then_some(())
        })
        .await
    }

    /// Waits for an event at index `from` or later that matches `matches`, and returns it.
    /// Pass `kubelet.events().len()` to wait only for new events.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`].
    pub async fn wait_event(
        &self,
        from: usize,
        timeout: Duration,
        matches: impl Fn(&KubeletEvent) -> bool,
    ) -> Result<KubeletEvent> {
        self.wait_until("a matching event", timeout, |s| {
            s.events.iter().skip(from).find(|e| matches(e)).cloned()
        })
        .await
    }

    /// Stops watching (like a kubelet going down: plugins stay as they are).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Retry state of a socket path whose last attempt failed.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    delay: Duration,
    next: Instant,
}

/// A registered plugin with what kubelet keeps about it.
#[derive(Debug, Clone)]
struct Registered {
    id: SocketId,
    plugin: RegisteredPlugin,
    version: Version,
}

/// The background task: desired state (the directory) against actual state (registered).
struct Manager {
    config: Arc<KubeletConfig>,
    verdict: Arc<Mutex<Verdict>>,
    publish: watch::Sender<Snapshot>,
    registered: BTreeMap<PathBuf, Registered>,
    backoff: BTreeMap<PathBuf, Backoff>,
    in_flight: BTreeSet<PathBuf>,
}

type AttemptResult = (PathBuf, SocketId, Outcome);

impl Manager {
    async fn run(mut self, mut stopped: oneshot::Receiver<()>) {
        let mut attempts: JoinSet<AttemptResult> = JoinSet::new();
        let mut ticker = tokio::time::interval(self.config.poll_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                _ = ticker.tick() => self.reconcile(&mut attempts).await,
                Some(done) = attempts.join_next() => {
                    if let Ok((path, id, outcome)) = done {
                        self.finish(path, id, outcome);
                    }
                }
            }
        }
        attempts.abort_all();
    }

    /// One pass of kubelet's reconciler: de-register what went away, then start registering
    /// what is new.
    async fn reconcile(&mut self, attempts: &mut JoinSet<AttemptResult>) {
        let sockets = match scan::plugin_sockets(&self.config.plugins_dir) {
            Ok(sockets) => sockets,
            Err(err) => {
                tracing::warn!(dir = %self.config.plugins_dir.display(), error = %err, "fake kubelet cannot scan the plugins directory");
                return;
            }
        };
        let gone: Vec<PathBuf> = self
            .registered
            .iter()
            .filter(|(path, r)| sockets.get(*path) != Some(&r.id))
            .map(|(path, _)| path.clone())
            .collect();
        for path in gone {
            if let Some(registered) = self.registered.remove(&path) {
                self.deregister(registered).await;
            }
        }
        let now = Instant::now();
        for (path, id) in sockets {
            if self.registered.contains_key(&path)
                || self.in_flight.contains(&path)
                || self.backoff.get(&path).is_some_and(|b| b.next > now)
            {
                continue;
            }
            self.in_flight.insert(path.clone());
            let config = Arc::clone(&self.config);
            let verdict = self
                .verdict
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let versions: BTreeMap<String, Version> = self
                .registered
                .values()
                .map(|r| (r.plugin.name.clone(), r.version.clone()))
                .collect();
            attempts.spawn(async move {
                let lookup = move |name: &str| versions.get(name).cloned();
                let attempt = Attempt {
                    config: &config,
                    verdict,
                    registered_version: &lookup,
                };
                let outcome = attempt.run(&path).await;
                (path, id, outcome)
            });
        }
    }

    fn finish(&mut self, path: PathBuf, id: SocketId, outcome: Outcome) {
        self.in_flight.remove(&path);
        match outcome {
            Outcome::Registered { plugin, version } => {
                tracing::info!(name = %plugin.name, socket = %path.display(), "fake kubelet registered a plugin");
                self.backoff.remove(&path);
                self.registered.insert(
                    path,
                    Registered {
                        id,
                        plugin: plugin.clone(),
                        version,
                    },
                );
                self.record(KubeletEvent::Registered(plugin));
            }
            Outcome::Failed {
                info,
                error,
                notified,
            } => {
                tracing::info!(socket = %path.display(), %error, "fake kubelet failed to register a plugin");
                // Kept per path across socket files (see the module docs, issue #206).
                let delay = match self.backoff.get(&path) {
                    Some(b) => (b.delay * 2).min(self.config.max_backoff),
                    None => self.config.initial_backoff,
                };
                self.backoff.insert(
                    path.clone(),
                    Backoff {
                        delay,
                        next: Instant::now() + delay,
                    },
                );
                self.record(KubeletEvent::RegistrationFailed {
                    socket: path,
                    info,
                    error,
                    notified,
                });
            }
        }
    }

    async fn deregister(&mut self, registered: Registered) {
        let plugin = registered.plugin;
        tracing::info!(name = %plugin.name, socket = %plugin.socket.display(), "fake kubelet de-registered a plugin");
        let error = match &self.config.node_api {
            Some(api) => node_info::uninstall(api, &plugin.name).await.err(),
            None => None,
        };
        self.record(KubeletEvent::Deregistered {
            socket: plugin.socket,
            name: plugin.name,
            error,
        });
    }

    fn record(&self, event: KubeletEvent) {
        let registered = self
            .registered
            .iter()
            .map(|(path, r)| (path.clone(), r.plugin.clone()))
            .collect();
        self.publish.send_modify(|snapshot| {
            snapshot.events.push(event);
            snapshot.registered = registered;
        });
    }
}
