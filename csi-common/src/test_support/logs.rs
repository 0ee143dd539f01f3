//! Captures `tracing` output in memory for assertions on log lines (for example that a secret
//! never reaches the log, or that a loss is logged exactly once).

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// Formatted log output collected by [`capture`].
#[derive(Clone, Debug, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Everything logged so far, as text.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs a TRACE-level plain-text subscriber for the current thread until the guard drops,
/// and returns what it writes.
///
/// Only what runs on the calling thread is captured: use it in `#[test]` or a current-thread
/// `#[tokio::test]`, not with tasks spawned onto other worker threads.
///
/// ```
/// let (logs, _guard) = csi_common::test_support::logs::capture();
/// tracing::warn!(volume = "pvc-1", "lost the connection");
/// assert!(logs.text().contains("lost the connection volume=\"pvc-1\""));
/// ```
pub fn capture() -> (CapturedLogs, tracing::subscriber::DefaultGuard) {
    let captured = CapturedLogs::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}
