//! Sizing the tokio runtime for `--automaxprocs`, from the container's cgroup CPU quota.
//!
//! The Go sidecars accept `--automaxprocs` (csi-lib-utils `standardflags`), which sets
//! `GOMAXPROCS` from the cgroup CPU quota through Uber's automaxprocs. Our counterpart is the
//! number of tokio worker threads, which `main` passes to the runtime builder:
//!
//! * without `--automaxprocs`: `available`, the value `main` gets from
//!   `std::thread::available_parallelism()`, which is also tokio's default. On Linux the
//!   standard library already caps that by the affinity mask and by the cgroup quota rounded
//!   *down* (so a 1.5-CPU limit gives 1 thread).
//! * with `--automaxprocs`: the quota read here, rounded *up* with a minimum of 1 (1.5 CPUs
//!   give 2 threads, 0.5 gives 1), so a fractional limit is used rather than wasted; with no
//!   quota (or an unreadable one) it falls back to `available`. As with automaxprocs, the
//!   quota is not capped by the core count.
//!
//! Only the cgroup mounted at `cgroup_root` is read, which inside a container (cgroup
//! namespace, or the per-container v1 bind mounts) is the container's own cgroup. Nested
//! cgroup paths from `/proc/self/cgroup` are not followed.
//!
//! Reading uses blocking `std::fs`, because it happens in `main` before the runtime exists.
//!
//! A sidecar that only waits on the driver and kubelet (livenessprobe, node-driver-registrar)
//! asks for [`Threads::One`] instead and ignores the flag: one thread on every node, whatever
//! its core count.

use std::io;
use std::path::{Path, PathBuf};

/// Where cgroup file systems are mounted on Linux; what `main` passes as `cgroup_root`.
pub const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A CFS bandwidth limit: `quota_us` of CPU time per `period_us`, so `quota_us / period_us`
/// CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuQuota {
    /// CPU time allowed per period, in microseconds.
    pub quota_us: u64,
    /// Length of a period, in microseconds (never zero).
    pub period_us: u64,
}

impl CpuQuota {
    /// The quota in whole CPUs, rounded up, at least 1.
    pub fn threads(&self) -> usize {
        let cpus = self.quota_us.div_ceil(self.period_us).max(1);
        usize::try_from(cpus).unwrap_or(usize::MAX)
    }
}

/// Why the cgroup CPU quota could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A quota file exists but could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },

    /// A quota file does not have the kernel's format.
    #[error("unexpected content {content:?} in {}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What it contained (trimmed).
        content: String,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Reads the CPU quota of the cgroup mounted at `cgroup_root`.
///
/// cgroup v2: `<root>/cpu.max`, `"<quota> <period>"` or `"max <period>"` (no limit).
/// cgroup v1: `<root>/cpu/cpu.cfs_quota_us` (`-1` is no limit) and `cpu.cfs_period_us`, also
/// looked up under `<root>/cpu,cpuacct/` where the v1 controllers are co-mounted.
///
/// `Ok(None)` means no limit is set or no cgroup CPU controller is mounted there.
pub fn cpu_quota(cgroup_root: &Path) -> Result<Option<CpuQuota>> {
    let v2 = cgroup_root.join("cpu.max");
    if let Some(content) = read_optional(&v2)? {
        return parse_cpu_max(&v2, &content);
    }
    for controller in ["cpu", "cpu,cpuacct"] {
        let dir = cgroup_root.join(controller);
        let quota_path = dir.join("cpu.cfs_quota_us");
        let Some(quota) = read_optional(&quota_path)? else {
            continue;
        };
        let quota = quota.trim();
        if quota == "-1" {
            return Ok(None);
        }
        let quota_us = parse_positive(&quota_path, quota)?;
        let period_path = dir.join("cpu.cfs_period_us");
        let period = std::fs::read_to_string(&period_path).map_err(|source| Error::Read {
            path: period_path.clone(),
            source,
        })?;
        let period_us = parse_positive(&period_path, period.trim())?;
        return Ok(Some(CpuQuota {
            quota_us,
            period_us,
        }));
    }
    Ok(None)
}

/// The CPU quota of the cgroup at `cgroup_root` in whole CPUs (rounded up, at least 1), or
/// `None` when there is no limit or it cannot be read (like automaxprocs, which then leaves
/// `GOMAXPROCS` alone).
pub fn cpu_quota_threads(cgroup_root: &Path) -> Option<usize> {
    cpu_quota(cgroup_root)
        .ok()
        .flatten()
        .map(|quota| quota.threads())
}

/// The number of tokio worker threads `main` should build the runtime with; see the module
/// docs. `available` is `std::thread::available_parallelism()` (a value below 1 is treated
/// as 1).
pub fn worker_threads(automaxprocs: bool, cgroup_root: &Path, available: usize) -> usize {
    let available = available.max(1);
    if !automaxprocs {
        return available;
    }
    cpu_quota_threads(cgroup_root).unwrap_or(available)
}

/// The file's content, or `None` if it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(content) => Ok(Some(content)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

fn parse_cpu_max(path: &Path, content: &str) -> Result<Option<CpuQuota>> {
    let malformed = || Error::Malformed {
        path: path.to_owned(),
        content: content.trim().to_owned(),
    };
    let mut fields = content.split_whitespace();
    let (Some(quota), Some(period), None) = (fields.next(), fields.next(), fields.next()) else {
        return Err(malformed());
    };
    let period_us = parse_positive(path, period)?;
    if quota == "max" {
        return Ok(None);
    }
    let quota_us = parse_positive(path, quota)?;
    Ok(Some(CpuQuota {
        quota_us,
        period_us,
    }))
}

fn parse_positive(path: &Path, text: &str) -> Result<u64> {
    text.parse::<u64>()
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| Error::Malformed {
            path: path.to_owned(),
            content: text.to_owned(),
        })
}

/// The threads a sidecar's runtime runs its tasks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// Only `main`'s thread (tokio's current-thread runtime). For a sidecar whose work is
    /// waiting on the driver: one thread whatever the node's core count, one allocator arena,
    /// so the memory a burst of requests leaves behind is bounded and small.
    One,
    /// Worker threads sized by [`worker_threads`] from the container's cgroup at
    /// [`DEFAULT_CGROUP_ROOT`]; `automaxprocs` is the `--automaxprocs` flag.
    Workers {
        /// `--automaxprocs`.
        automaxprocs: bool,
    },
}

/// Builds the tokio runtime a sidecar's `main` runs on, with the given [`Threads`].
///
/// # Errors
/// If the runtime cannot be created (for example when threads cannot be spawned).
pub fn build(threads: Threads) -> std::io::Result<tokio::runtime::Runtime> {
    match threads {
        Threads::One => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Threads::Workers { automaxprocs } => {
            let available = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            let workers = worker_threads(automaxprocs, Path::new(DEFAULT_CGROUP_ROOT), available);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
        }
    }
}

/// The end of every sidecar's `main`: builds the runtime ([`build`]), installs the
/// SIGTERM/SIGINT handlers ([`crate::shutdown::signals`]), starts
/// [`crate::memory::release_freed_memory`] and runs `main` with a future that
/// resolves at the first signal (logged with `stopping`). Returns what `main` returns, or 1 when
/// the runtime or the handlers cannot be set up (upstream: a fatal start-up error). Tasks still
/// running when `main` returns are not waited for: the process is about to exit.
///
/// ```no_run
/// use std::process::ExitCode;
///
/// fn main() -> ExitCode {
///     let threads = csi_common::runtime::Threads::Workers { automaxprocs: false };
///     csi_common::runtime::block_on_until_signal(threads, "shutting down", |shutdown| async move {
///         shutdown.await; // a sidecar's run(config, shutdown) goes here
///         ExitCode::SUCCESS
///     })
/// }
/// ```
pub fn block_on_until_signal<F, Fut>(
    threads: Threads,
    stopping: &'static str,
    main: F,
) -> std::process::ExitCode
where
    F: FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>) -> Fut,
    Fut: std::future::Future<Output = std::process::ExitCode>,
{
    let runtime = match build(threads) {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!(error = %err, "cannot start the async runtime");
            return std::process::ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        let signals = match crate::shutdown::signals() {
            Ok(signals) => signals,
            Err(err) => {
                tracing::error!(error = %err, "cannot install signal handlers");
                return std::process::ExitCode::from(1);
            }
        };
        // Dropped with the runtime when `main` returns.
        tokio::spawn(crate::memory::release_freed_memory());
        main(Box::pin(async move {
            let signal = signals.await;
            tracing::info!(%signal, "{stopping}");
        }))
        .await
    });
    runtime.shutdown_background();
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files of a fake cgroup mount: (path relative to the root, content).
    type Files<'a> = &'a [(&'a str, &'a str)];

    /// A fake cgroup mount with the given files.
    fn cgroup(files: Files<'_>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        dir
    }

    #[test]
    fn cpu_quota_threads_reads_cgroup_v1_and_v2_and_rounds_up() {
        let table: &[(&str, Files<'_>, Option<usize>)] = &[
            ("v2 unlimited", &[("cpu.max", "max 100000\n")], None),
            (
                "v2 one and a half",
                &[("cpu.max", "150000 100000\n")],
                Some(2),
            ),
            ("v2 exactly two", &[("cpu.max", "200000 100000\n")], Some(2)),
            ("v2 half a cpu", &[("cpu.max", "50000 100000\n")], Some(1)),
            ("v2 tiny", &[("cpu.max", "1000 100000")], Some(1)),
            ("v2 other period", &[("cpu.max", "250000 50000")], Some(5)),
            (
                "v1 unlimited",
                &[
                    ("cpu/cpu.cfs_quota_us", "-1\n"),
                    ("cpu/cpu.cfs_period_us", "100000\n"),
                ],
                None,
            ),
            (
                "v1 limited",
                &[
                    ("cpu/cpu.cfs_quota_us", "350000\n"),
                    ("cpu/cpu.cfs_period_us", "100000\n"),
                ],
                Some(4),
            ),
            (
                "v1 co-mounted",
                &[
                    ("cpu,cpuacct/cpu.cfs_quota_us", "100000\n"),
                    ("cpu,cpuacct/cpu.cfs_period_us", "100000\n"),
                ],
                Some(1),
            ),
            ("nothing mounted", &[], None),
            ("v2 malformed", &[("cpu.max", "lots 100000")], None),
            ("v2 zero period", &[("cpu.max", "100000 0")], None),
            ("v2 one field", &[("cpu.max", "100000")], None),
            (
                "v1 without period",
                &[("cpu/cpu.cfs_quota_us", "100000")],
                None,
            ),
        ];
        for (name, files, want) in table {
            let dir = cgroup(files);
            assert_eq!(cpu_quota_threads(dir.path()), *want, "{name}");
        }
    }

    #[test]
    fn cpu_quota_reports_malformed_files_instead_of_guessing() {
        let dir = cgroup(&[("cpu.max", "lots 100000")]);
        let err = cpu_quota(dir.path()).unwrap_err();
        assert!(
            matches!(&err, Error::Malformed { content, .. } if content == "lots"),
            "{err}"
        );
        let dir = cgroup(&[("cpu/cpu.cfs_quota_us", "100000")]);
        assert!(matches!(cpu_quota(dir.path()), Err(Error::Read { .. })));
        let dir = cgroup(&[("cpu.max", "150000 100000\n")]);
        assert_eq!(
            cpu_quota(dir.path()).unwrap(),
            Some(CpuQuota {
                quota_us: 150_000,
                period_us: 100_000
            })
        );
    }

    #[test]
    fn worker_threads_follow_the_quota_only_with_automaxprocs() {
        let limited = cgroup(&[("cpu.max", "150000 100000")]);
        let unlimited = cgroup(&[("cpu.max", "max 100000")]);
        let broken = cgroup(&[("cpu.max", "garbage")]);
        assert_eq!(worker_threads(false, limited.path(), 8), 8);
        assert_eq!(worker_threads(true, limited.path(), 8), 2);
        // Rounding up is the point: std's available_parallelism already floors 1.5 to 1.
        assert_eq!(worker_threads(true, limited.path(), 1), 2);
        assert_eq!(worker_threads(true, unlimited.path(), 8), 8);
        assert_eq!(worker_threads(true, broken.path(), 3), 3);
        assert_eq!(worker_threads(false, unlimited.path(), 0), 1);
    }
}
