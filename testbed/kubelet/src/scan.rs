//! Finding plugin sockets in the plugins directory, the way kubelet's plugin watcher decides
//! what to register.
//!
//! Kubelet (`pluginwatcher/plugin_watcher.go`) reacts to fsnotify `Create` events (an inotify
//! `IN_CREATE` or `IN_MOVED_TO`) and at start-up walks the directory. A file is a plugin when
//! it is a unix socket and its name does not start with `.`; the extension does not matter.
//! Each create event stamps the socket path with a new timestamp, so a socket deleted and
//! re-created counts as a new plugin instance. Polling cannot see events, so a socket's
//! identity here is its inode plus its change time: a re-created socket differs even if the
//! file system reuses the inode number.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Identity of one socket file instance (kubelet: the timestamp of its create event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketId {
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
}

impl SocketId {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: meta.ctime(),
            ctime_nsec: meta.ctime_nsec(),
        }
    }
}

/// The plugin sockets directly in `dir`, by path.
///
/// Kubelet also descends into subdirectories; registrars only use the top level.
///
/// # Errors
/// When `dir` cannot be read. Entries that vanish while scanning are skipped.
pub fn plugin_sockets(dir: &Path) -> io::Result<BTreeMap<PathBuf, SocketId>> {
    let mut sockets = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        // Kubelet stats (follows symlinks) to decide whether a file is a socket.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.file_type().is_socket() {
            sockets.insert(path, SocketId::of(&meta));
        }
    }
    Ok(sockets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_visible_sockets_count_as_plugins() {
        let dir = tempfile::tempdir().unwrap();
        let _a = std::os::unix::net::UnixListener::bind(dir.path().join("a-reg.sock")).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(dir.path().join("no-extension")).unwrap();
        let _hidden = std::os::unix::net::UnixListener::bind(dir.path().join(".hidden")).unwrap();
        std::fs::write(dir.path().join("file.sock"), b"").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let _nested =
            std::os::unix::net::UnixListener::bind(dir.path().join("sub/n-reg.sock")).unwrap();

        let found: Vec<_> = plugin_sockets(dir.path()).unwrap().into_keys().collect();
        assert_eq!(
            found,
            vec![
                dir.path().join("a-reg.sock"),
                dir.path().join("no-extension")
            ]
        );
    }

    #[test]
    fn a_recreated_socket_has_a_new_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a-reg.sock");
        let first = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let before = plugin_sockets(dir.path()).unwrap()[&path];
        assert_eq!(plugin_sockets(dir.path()).unwrap()[&path], before);
        drop(first);
        std::fs::remove_file(&path).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let _second = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert_ne!(plugin_sockets(dir.path()).unwrap()[&path], before);
    }
}
