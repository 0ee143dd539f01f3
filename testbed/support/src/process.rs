//! A binary under test as a child process: stdout and stderr appended to a log file, a wait for
//! readiness or a log line that fails early when the process exits, signals, a bounded wait for
//! the exit, and SIGTERM-then-SIGKILL. The process is killed on drop, and when a test panics
//! the last lines of its log are printed, so a failure shows what the binary said.
//!
//! The one child-process helper of the workspace: the sidecars' whole-binary tests and the
//! sandbox use it. Failures are values ([`Error`]) because the sandbox reports them; tests
//! `unwrap` them.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

pub use rustix::process::Signal;
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
    /// It did not exit in time.
    #[error("{name} did not exit within {timeout:?} (log: {log})")]
    StillRunning {
        /// Process name.
        name: String,
        /// How long we waited.
        timeout: Duration,
        /// Its log file.
        log: PathBuf,
    },
    /// The process is gone (it was reaped) or the signal could not be sent.
    #[error("cannot signal {name}")]
    Signal {
        /// Process name.
        name: String,
        /// Cause.
        #[source]
        source: std::io::Error,
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

/// How long a process gets between SIGTERM and SIGKILL in [`ChildProcess::terminate`].
pub const GRACE_PERIOD: Duration = Duration::from_secs(5);

/// How many log lines a panicking test prints.
const TAIL_ON_PANIC: usize = 80;

/// What to run: the binary, its arguments and extra environment variables.
#[derive(Clone, Debug)]
pub struct CommandLine {
    /// The executable.
    pub binary: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set on top of this process's own.
    pub env: Vec<(String, String)>,
}

impl CommandLine {
    /// `binary` with `args` and no extra environment.
    pub fn new(binary: impl Into<PathBuf>, args: &[String]) -> Self {
        Self {
            binary: binary.into(),
            args: args.to_vec(),
            env: Vec::new(),
        }
    }

    /// Sets environment variable `key` to `value` (for example the `HOSTNAME` a pod has).
    #[must_use]
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }
}

/// A running child process.
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    command: CommandLine,
    log: PathBuf,
    child: Child,
}

impl ChildProcess {
    /// Starts `binary` with `args`, stdout and stderr going to a new file `log`.
    ///
    /// # Errors
    /// When the log file cannot be created or the binary cannot be executed.
    pub fn spawn(name: &str, binary: &Path, args: &[String], log: &Path) -> Result<Self> {
        Self::start(name, CommandLine::new(binary, args), log)
    }

    /// Starts `command`, stdout and stderr going to a new file `log` (an old one is replaced,
    /// so a wait for a log line never sees an earlier run's).
    ///
    /// # Errors
    /// When the log file cannot be created or the binary cannot be executed.
    pub fn start(name: &str, command: CommandLine, log: &Path) -> Result<Self> {
        let child = launch(&command, log, Log::Replace)?;
        tracing::info!(name, pid = child.id(), log = %log.display(), "started");
        Ok(Self {
            name: name.to_owned(),
            command,
            log: log.to_owned(),
            child,
        })
    }

    /// Starts the same command again (after it exited), appending to the same log.
    ///
    /// # Errors
    /// As [`ChildProcess::spawn`].
    pub fn respawn(&mut self) -> Result<()> {
        self.child = launch(&self.command, &self.log, Log::Append)?;
        tracing::info!(name = %self.name, pid = self.child.id(), "restarted");
        Ok(())
    }

    /// Process name (as shown in the report).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The command line, for the report.
    pub fn command_line(&self) -> String {
        std::iter::once(self.command.binary.display().to_string())
            .chain(self.command.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Everything it wrote so far (stdout and stderr), lossily decoded.
    pub fn log_text(&self) -> String {
        read_log(&self.log)
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

    /// Waits until its log contains `line`: the positive signal that the process got there.
    ///
    /// # Errors
    /// As [`ChildProcess::wait_ready`].
    pub async fn wait_logged(&mut self, line: &str, timeout: Duration) -> Result<()> {
        let log = self.log.clone();
        self.wait_ready(timeout, || {
            std::future::ready(read_log(&log).contains(line))
        })
        .await
    }

    /// Sends `signal` (kubelet stops a container with [`Signal::TERM`]).
    ///
    /// # Errors
    /// [`Error::Signal`] when the process was already reaped or cannot be signalled.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let signal_error = |source| Error::Signal {
            name: self.name.clone(),
            source,
        };
        let pid = self
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| signal_error(std::io::ErrorKind::NotFound.into()))?;
        rustix::process::kill_process(pid, signal).map_err(|errno| signal_error(errno.into()))
    }

    /// Waits up to `timeout` for the process to exit by itself.
    ///
    /// # Errors
    /// [`Error::StillRunning`] after `timeout`, or when waiting fails.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.map_err(|source| Error::Wait {
                name: self.name.clone(),
                source,
            }),
            Err(_) => Err(Error::StillRunning {
                name: self.name.clone(),
                timeout,
                log: self.log.clone(),
            }),
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
        // It may exit between the check and the signal; the wait below tells.
        let _ = self.signal(Signal::TERM);
        if let Ok(status) = self.wait_exit(GRACE_PERIOD).await {
            return Ok(status);
        }
        tracing::warn!(name = %self.name, "did not stop after SIGTERM, killing");
        self.kill();
        self.child.wait().await.map_err(|source| Error::Wait {
            name: self.name.clone(),
            source,
        })
    }

    /// SIGKILL, without waiting (a crash, as far as the process can tell).
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- {} log (last lines) ----", self.name);
            eprintln!("{}", log_tail(&self.log, TAIL_ON_PANIC));
        }
        // kill_on_drop as well, but say so here: nothing outlives its handle.
        self.kill();
    }
}

/// What [`launch`] does with an existing log file.
#[derive(Clone, Copy)]
enum Log {
    Replace,
    Append,
}

fn launch(command: &CommandLine, log: &Path, mode: Log) -> Result<Child> {
    let log_error = |source| Error::LogFile {
        path: log.to_owned(),
        source,
    };
    let file = match mode {
        Log::Replace => File::create(log),
        Log::Append => File::options().create(true).append(true).open(log),
    }
    .map_err(log_error)?;
    let err_file = file.try_clone().map_err(log_error)?;
    Command::new(&command.binary)
        .args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err_file))
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| Error::Spawn {
            binary: command.binary.clone(),
            source,
        })
}

fn read_log(log: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned()
}

/// The last `lines` lines of a log file (for failure notes).
pub fn log_tail(log: &Path, lines: usize) -> String {
    let text = read_log(log);
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
