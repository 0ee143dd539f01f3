//! The registration socket: its name, clearing a stale one, binding it privately, accepting
//! connections, and putting it back if it disappears.
//!
//! Upstream facts (node-driver-registrar v2.17, sidecars.md §3.2): the socket is
//! `<plugin-registration-path>/<driver name>-reg.sock`; a stale *socket* there is deleted, any
//! other file is a fatal error; on Linux it is created under umask 0077, so it is `srwx------`.
//!
//! # Private binding without `umask`
//!
//! `umask(2)` is process-wide (racy with other threads) and needs `unsafe`, which the workspace
//! denies (its one exception is glibc's `malloc_trim`, in `csi_common::memory`). Linux gives the
//! file that `bind(2)` creates the mode of the socket's own inode, masked by the umask, and
//! `fchmod(2)` on an unbound socket sets that inode's mode. So
//! [`bind_private`] creates the socket, `fchmod`s it to `0700` (through a duplicated descriptor
//! and `File::set_permissions`, all safe std APIs), and only then binds: the file appears as
//! `srwx------` at once, like upstream's under umask 0077. Like any `bind(2)`, it fails if
//! something already exists at the path, so it never replaces another file.
//!
//! # Re-creation (not in upstream)
//!
//! Upstream never re-creates a deleted socket (issue #57 asked for it; the liveness probe on
//! `/healthz` is upstream's recovery path). [`RegistrationSocket::check`] is called periodically
//! and binds a new socket when the path has disappeared, so kubelet registers the driver again
//! without a container restart. A socket at the path that is not ours (another registrar
//! instance replaced it) is left alone, and so is ours at shutdown if it has been replaced.

use std::fs::Permissions;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixSocket, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What upstream appends to the driver name.
pub(crate) const SOCKET_SUFFIX: &str = "-reg.sock";

/// Mode of the registration socket: what upstream's umask 0077 produces.
pub(crate) const SOCKET_MODE: u32 = 0o700;

/// Longest socket path `bind(2)` accepts on Linux: `sun_path` is 108 bytes including the
/// terminating NUL.
pub(crate) const MAX_SOCKET_PATH_LEN: usize = 107;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The driver name cannot be used as (the start of) a file name.
    #[error("driver name {name:?} cannot form a registration socket file name: {reason}")]
    InvalidDriverName {
        /// The name GetPluginInfo returned.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The socket path is longer than a unix socket address can hold.
    #[error(
        "registration socket path {} is {len} bytes long; unix socket paths are limited to {MAX_SOCKET_PATH_LEN}",
        path.display()
    )]
    PathTooLong {
        /// The socket path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// The plugin registration directory does not exist or cannot be read.
    #[error("plugin registration directory {} is not accessible", dir.display())]
    Directory {
        /// `--plugin-registration-path`.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// `--plugin-registration-path` is not a directory.
    #[error("plugin registration path {} is not a directory", dir.display())]
    NotADirectory {
        /// `--plugin-registration-path`.
        dir: PathBuf,
    },
    /// Something other than a socket is at the socket path (upstream's message).
    #[error("file exists in socketPath {} but it's not a socket.", path.display())]
    NotASocket {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket path could not be examined.
    #[error("failed to stat the socket {}", path.display())]
    Stat {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A stale socket could not be removed (upstream's message).
    #[error("failed to remove stale socket {}", path.display())]
    RemoveStale {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Creating the listening socket failed.
    #[error("failed to listen on socket {}", path.display())]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Result type of this module.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// `<dir>/<driver>-reg.sock`.
///
/// Upstream formats the path with the name verbatim. Names that would not make a plain file in
/// `dir` are refused here instead of failing later or landing elsewhere: an empty name, one
/// with `/` (a path into another directory) or NUL, and one starting with `.` (kubelet's plugin
/// watcher ignores such files, so the driver would silently never register). None of them is a
/// valid CSI driver name anyway (CSI spec: domain-name notation, alphanumeric first character).
///
/// # Errors
/// [`Error::InvalidDriverName`], or [`Error::PathTooLong`] when the result does not fit a unix
/// socket address.
pub(crate) fn socket_path(dir: &Path, driver: &str) -> Result<PathBuf> {
    let invalid = |reason| Error::InvalidDriverName {
        name: driver.to_owned(),
        reason,
    };
    if driver.is_empty() {
        return Err(invalid("it is empty"));
    }
    if driver.contains('/') {
        return Err(invalid("it contains '/'"));
    }
    if driver.contains('\0') {
        return Err(invalid("it contains a NUL character"));
    }
    if driver.starts_with('.') {
        return Err(invalid(
            "it starts with '.', and kubelet ignores socket files whose name starts with '.'",
        ));
    }
    let path = dir.join(format!("{driver}{SOCKET_SUFFIX}"));
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH_LEN {
        return Err(Error::PathTooLong { path, len });
    }
    Ok(path)
}

/// Checks that `dir` is an existing directory.
///
/// # Errors
/// [`Error::Directory`] or [`Error::NotADirectory`].
pub(crate) fn check_directory(dir: &Path) -> Result<()> {
    let meta = std::fs::metadata(dir).map_err(|source| Error::Directory {
        dir: dir.to_owned(),
        source,
    })?;
    if meta.is_dir() {
        Ok(())
    } else {
        Err(Error::NotADirectory {
            dir: dir.to_owned(),
        })
    }
}

/// What is at a socket path, as upstream's `DoesSocketExist` sees it (following symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathState {
    /// Nothing is there.
    Missing,
    /// A unix socket is there.
    Socket,
}

/// Stats `path` the way upstream does.
///
/// # Errors
/// [`Error::NotASocket`] when a non-socket file is there, [`Error::Stat`] when stat fails for
/// another reason than "not found".
pub(crate) fn path_state(path: &Path) -> Result<PathState> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => Ok(PathState::Socket),
        Ok(_) => Err(Error::NotASocket {
            path: path.to_owned(),
        }),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(PathState::Missing),
        Err(source) => Err(Error::Stat {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Removes a stale socket at `path` (upstream `CleanupSocketFile`): a socket is deleted, a
/// missing path is fine, anything else is an error and left untouched.
///
/// # Errors
/// As [`path_state`], or [`Error::RemoveStale`].
pub(crate) fn remove_stale(path: &Path) -> Result<()> {
    if path_state(path)? == PathState::Socket {
        match std::fs::remove_file(path) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => {
                return Err(Error::RemoveStale {
                    path: path.to_owned(),
                    source: err,
                });
            }
            _ => tracing::info!(path = %path.display(), "Removed stale registration socket"),
        }
    }
    Ok(())
}

/// The identity of a file: device and inode. Survives renames and links, unlike the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    /// The identity of whatever is at `path` (not following symlinks), `None` if nothing is.
    ///
    /// # Errors
    /// When `path` cannot be examined for another reason than "not found".
    pub(crate) fn at(path: &Path) -> io::Result<Option<Self>> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) => Ok(Some(Self::of(&meta))),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// Backlog of the registration socket: as large as the kernel allows (`listen(2)` caps it at
/// `net.core.somaxconn`), which is what Go's `net.Listen` asks for. kubelet connects a few times
/// at most, but every `/healthz` request dials this socket too (upstream's check), and a unix
/// socket whose backlog is full refuses a non-blocking connect at once (`EAGAIN`): with 128,
/// 500 requests at once (`chaos --node-fault=registrar-flood`) got 160-330 answers of `500
/// error connecting to node-registrar socket ...: Resource temporarily unavailable` per flood,
/// each a failed liveness probe where upstream's answers 200.
const BACKLOG: u32 = 0x7fff_ffff;

/// Binds a listening unix socket at `path` with mode [`SOCKET_MODE`] from the start (see the
/// module docs). Needs a tokio runtime.
///
/// # Errors
/// [`Error::Listen`]; the cause is `AddrInUse` when something is at `path`.
pub(crate) fn bind_private(path: &Path) -> Result<(UnixListener, FileId)> {
    let listen = |source| Error::Listen {
        path: path.to_owned(),
        source,
    };
    let socket = bind_with_mode(path).map_err(listen)?;
    let meta = std::fs::symlink_metadata(path).map_err(listen)?;
    if meta.permissions().mode() & 0o777 != SOCKET_MODE {
        // Not expected on Linux; keep the promised mode anyway (briefly wider until here).
        std::fs::set_permissions(path, Permissions::from_mode(SOCKET_MODE)).map_err(listen)?;
    }
    let listener = socket.listen(BACKLOG).map_err(listen)?;
    Ok((listener, FileId::of(&meta)))
}

/// Creates a unix stream socket, sets its mode to [`SOCKET_MODE`], then binds it to `path`.
fn bind_with_mode(path: &Path) -> io::Result<UnixSocket> {
    let socket = UnixSocket::new_stream()?;
    // fchmod on a duplicate acts on the same socket inode; the duplicate is closed right away.
    let duplicate = socket.as_fd().try_clone_to_owned()?;
    std::fs::File::from(duplicate).set_permissions(Permissions::from_mode(SOCKET_MODE))?;
    socket.bind(path)?;
    Ok(socket)
}

/// What [`RegistrationSocket::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckOutcome {
    /// Our socket is in place.
    Present,
    /// The path was empty; a new socket now listens there.
    Recreated,
    /// Another file (e.g. another registrar's socket) is at the path; it was left alone.
    Replaced,
}

/// The registration socket while the registrar runs: accepts connections into a channel that
/// the gRPC server reads, so the listener can be swapped without restarting the server.
#[derive(Debug)]
pub(crate) struct RegistrationSocket {
    path: PathBuf,
    id: FileId,
    connections: mpsc::Sender<UnixStream>,
    acceptor: JoinHandle<()>,
}

impl RegistrationSocket {
    /// Binds `path` privately (the caller has removed a stale socket) and starts accepting
    /// into `connections`.
    ///
    /// # Errors
    /// As [`bind_private`].
    pub(crate) fn bind(path: PathBuf, connections: mpsc::Sender<UnixStream>) -> Result<Self> {
        let (listener, id) = bind_private(&path)?;
        let acceptor = tokio::spawn(accept(listener, connections.clone()));
        Ok(Self {
            path,
            id,
            connections,
            acceptor,
        })
    }

    /// The socket path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes sure our socket is still at the path, binding a new one if the path is empty.
    ///
    /// # Errors
    /// When the path cannot be examined or a new socket cannot be bound; the old state is kept
    /// and the next check tries again.
    pub(crate) fn check(&mut self) -> Result<CheckOutcome> {
        let current = FileId::at(&self.path).map_err(|source| Error::Stat {
            path: self.path.clone(),
            source,
        })?;
        match current {
            Some(id) if id == self.id => Ok(CheckOutcome::Present),
            Some(_) => Ok(CheckOutcome::Replaced),
            None => {
                let (listener, id) = bind_private(&self.path)?;
                // The old listener's file is gone: nobody can connect to it any more.
                self.acceptor.abort();
                self.acceptor = tokio::spawn(accept(listener, self.connections.clone()));
                self.id = id;
                Ok(CheckOutcome::Recreated)
            }
        }
    }

    /// Stops accepting and removes the socket file if it is still ours (upstream removes the
    /// path on SIGTERM; a socket another instance put there since is not ours to delete).
    ///
    /// # Errors
    /// When the file cannot be examined or removed.
    pub(crate) fn remove(self) -> io::Result<()> {
        self.acceptor.abort();
        match FileId::at(&self.path)? {
            Some(id) if id == self.id => match std::fs::remove_file(&self.path) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
                _ => Ok(()),
            },
            Some(_) => {
                tracing::info!(
                    path = %self.path.display(),
                    "Registration socket was replaced by another process; leaving it in place"
                );
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl Drop for RegistrationSocket {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// Accepts connections until the listener fails for good or the server side is gone.
async fn accept(listener: UnixListener, connections: mpsc::Sender<UnixStream>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if connections.send(stream).await.is_err() {
                    return;
                }
            }
            Err(err) => {
                // EMFILE and friends are transient; back off briefly instead of spinning.
                tracing::error!(error = %err, "Failed to accept a registration connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_named_after_the_driver() {
        let path = socket_path(Path::new("/registration"), "hostpath.csi.k8s.io").unwrap();
        assert_eq!(
            path,
            Path::new("/registration/hostpath.csi.k8s.io-reg.sock")
        );
        // A trailing slash on the directory changes nothing.
        let path = socket_path(Path::new("/registration/"), "x").unwrap();
        assert_eq!(path, Path::new("/registration/x-reg.sock"));
    }

    #[test]
    fn names_that_are_not_a_plain_file_name_are_refused() {
        for name in ["", "a/b", "../escape", "nul\0byte", ".hidden", "/abs"] {
            let err = socket_path(Path::new("/registration"), name).unwrap_err();
            assert!(
                matches!(err, Error::InvalidDriverName { .. }),
                "{name:?}: {err}"
            );
        }
        // Anything else is used verbatim, as upstream does.
        for name in ["UPPER.example.com", "with space", "a-b_c"] {
            assert!(
                socket_path(Path::new("/registration"), name).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn a_path_longer_than_sun_path_is_refused() {
        let dir = "/".to_owned() + &"d".repeat(80);
        let fits = "n".repeat(MAX_SOCKET_PATH_LEN - dir.len() - 1 - SOCKET_SUFFIX.len());
        assert!(socket_path(Path::new(&dir), &fits).is_ok());
        let err = socket_path(Path::new(&dir), &format!("{fits}n")).unwrap_err();
        assert!(matches!(err, Error::PathTooLong { len: 108, .. }), "{err}");
    }

    #[test]
    fn stale_sockets_are_removed_but_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        remove_stale(&path).unwrap();

        let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(stale);
        assert_eq!(path_state(&path).unwrap(), PathState::Socket);
        remove_stale(&path).unwrap();
        assert!(!path.exists());

        std::fs::write(&path, b"not a socket").unwrap();
        let err = remove_stale(&path).unwrap_err();
        assert!(matches!(err, Error::NotASocket { .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    }

    #[test]
    fn the_directory_must_exist_and_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        check_directory(dir.path()).unwrap();
        let missing = dir.path().join("missing");
        assert!(matches!(
            check_directory(&missing),
            Err(Error::Directory { .. })
        ));
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(matches!(
            check_directory(&file),
            Err(Error::NotADirectory { .. })
        ));
    }

    #[tokio::test]
    async fn the_socket_is_bound_with_mode_0700_and_nothing_else_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        let (_listener, id) = bind_private(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o7777, SOCKET_MODE);
        assert_eq!(FileId::at(&path).unwrap(), Some(id));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x-reg.sock")]);
        // The listener really listens at the final path.
        UnixStream::connect(&path).await.unwrap();
    }

    #[tokio::test]
    async fn the_mode_is_set_before_bind_creates_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        // Under the usual umask 022 a plain bind gives 0755; without fchmod this would fail.
        let _socket = bind_with_mode(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, SOCKET_MODE);
    }

    #[tokio::test]
    async fn binding_never_replaces_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        std::fs::write(&path, b"keep").unwrap();
        let err = bind_private(&path).unwrap_err();
        let Error::Listen { source, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(source.kind(), io::ErrorKind::AddrInUse);
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[tokio::test]
    async fn a_deleted_socket_is_recreated_and_a_foreign_one_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        let (tx, mut rx) = mpsc::channel(4);
        let mut socket = RegistrationSocket::bind(path.clone(), tx).unwrap();
        assert_eq!(socket.check().unwrap(), CheckOutcome::Present);

        UnixStream::connect(&path).await.unwrap();
        assert!(rx.recv().await.is_some());

        std::fs::remove_file(&path).unwrap();
        assert_eq!(socket.check().unwrap(), CheckOutcome::Recreated);
        UnixStream::connect(&path).await.unwrap();
        assert!(
            rx.recv().await.is_some(),
            "the new listener feeds the same channel"
        );

        // Another instance took the path over: neither re-created nor removed.
        std::fs::remove_file(&path).unwrap();
        let foreign = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert_eq!(socket.check().unwrap(), CheckOutcome::Replaced);
        socket.remove().unwrap();
        assert!(path.exists());
        drop(foreign);
    }

    #[tokio::test]
    async fn remove_deletes_our_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-reg.sock");
        let (tx, _rx) = mpsc::channel(1);
        let socket = RegistrationSocket::bind(path.clone(), tx).unwrap();
        socket.remove().unwrap();
        assert!(!path.exists());
    }
}
