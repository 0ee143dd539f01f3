//! Child processes of the sandbox: spawned with their output in a log file, stopped with
//! SIGTERM first (so they clean up sockets as they would under kubelet) and SIGKILL after a
//! grace period, and killed on drop so a crashed sandbox leaves nothing behind.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

/// Errors of process handling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log file could not be created.
    #[error("cannot create log file {path}")]
    LogFile {
        /// The log file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The binary could not be started.
    #[error("cannot start {binary}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The process exited while we waited for it to become ready.
    #[error("{name} exited with {status} before it was ready (log: {log})")]
    ExitedEarly {
        /// Process name.
        name: String,
        /// How it exited.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
    },
    /// It did not become ready in time.
    #[error("{name} was not ready within {timeout:?} (log: {log})")]
    NotReady {
        /// Process name.
        name: String,
        /// How long we waited.
        timeout: Duration,
        /// Its log file.
        log: PathBuf,
    },
    /// Waiting for the process failed.
    #[error("cannot wait for {name}")]
    Wait {
        /// Process name.
        name: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long a process gets between SIGTERM and SIGKILL.
pub const GRACE_PERIOD: Duration = Duration::from_secs(5);

/// A running child process.
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    binary: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Child,
}

impl ChildProcess {
    /// Starts `binary` with `args`, appending stdout and stderr to `log`.
    ///
    /// # Errors
    /// When the log file cannot be opened or the binary cannot be executed.
    pub fn spawn(name: &str, binary: &Path, args: &[String], log: &Path) -> Result<Self> {
        let file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|source| Error::LogFile {
                path: log.to_owned(),
                source,
            })?;
        let err_file = file.try_clone().map_err(|source| Error::LogFile {
            path: log.to_owned(),
            source,
        })?;
        let child = Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err_file))
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| Error::Spawn {
                binary: binary.to_owned(),
                source,
            })?;
        tracing::info!(name, pid = child.id(), log = %log.display(), "started");
        Ok(Self {
            name: name.to_owned(),
            binary: binary.to_owned(),
            args: args.to_vec(),
            log: log.to_owned(),
            child,
        })
    }

    /// Starts the same command again (after it exited), appending to the same log.
    ///
    /// # Errors
    /// As [`ChildProcess::spawn`].
    pub fn respawn(&mut self) -> Result<()> {
        let fresh = Self::spawn(&self.name, &self.binary, &self.args, &self.log)?;
        self.child = fresh.child;
        Ok(())
    }

    /// Process name (as shown in the report).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The command line, for the report.
    pub fn command_line(&self) -> String {
        std::iter::once(self.binary.display().to_string())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether it exited, and how.
    ///
    /// # Errors
    /// When the status cannot be read.
    pub fn exit_status(&mut self) -> Result<Option<ExitStatus>> {
        self.child.try_wait().map_err(|source| Error::Wait {
            name: self.name.clone(),
            source,
        })
    }

    /// Polls `ready` every 50 ms until it returns true; fails early when the process exits.
    ///
    /// # Errors
    /// [`Error::ExitedEarly`] or [`Error::NotReady`].
    pub async fn wait_ready<F, Fut>(&mut self, timeout: Duration, mut ready: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status()? {
                return Err(Error::ExitedEarly {
                    name: self.name.clone(),
                    status,
                    log: self.log.clone(),
                });
            }
            if ready().await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::NotReady {
                    name: self.name.clone(),
                    timeout,
                    log: self.log.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then SIGKILL after [`GRACE_PERIOD`]; returns how it exited.
    ///
    /// # Errors
    /// When waiting for the process fails.
    pub async fn terminate(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.exit_status()? {
            return Ok(status);
        }
        if let Some(pid) = self
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if let Ok(status) = tokio::time::timeout(GRACE_PERIOD, self.child.wait()).await {
            return status.map_err(|source| Error::Wait {
                name: self.name.clone(),
                source,
            });
        }
        tracing::warn!(name = %self.name, "did not stop after SIGTERM, killing");
        let _ = self.child.start_kill();
        self.child.wait().await.map_err(|source| Error::Wait {
            name: self.name.clone(),
            source,
        })
    }
}

/// The last `lines` lines of a log file (for failure notes).
pub fn log_tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A free TCP port on 127.0.0.1 (bound and released; a tiny race is accepted).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.local_addr()
}

/// Whether something accepts TCP connections at `addr`.
pub async fn accepts_tcp(addr: SocketAddr) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_ok()
}

/// Whether something accepts connections on the unix socket `path`.
pub async fn accepts_unix(path: &Path) -> bool {
    tokio::net::UnixStream::connect(path).await.is_ok()
}
