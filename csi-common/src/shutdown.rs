//! Shutdown signals: a future that resolves on SIGTERM or SIGINT.
//!
//! Kubernetes stops a container with SIGTERM and, after the grace period, SIGKILL. Sidecars use
//! this future to stop cleanly in between (remove the registration socket, release the Lease).

/// The signal that asked the process to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: kubelet stopping the container.
    Terminate,
    /// SIGINT: Ctrl-C in a terminal.
    Interrupt,
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Signal::Terminate => "SIGTERM",
            Signal::Interrupt => "SIGINT",
        })
    }
}

/// Installs SIGTERM and SIGINT handlers and returns a future that resolves with the first of
/// them to arrive.
///
/// Install it early in `main`: a signal delivered before the handlers exist kills the process
/// with the default action.
///
/// # Errors
/// If a signal handler cannot be installed.
pub fn signals() -> std::io::Result<impl std::future::Future<Output = Signal> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => Signal::Terminate,
            _ = int.recv() => Signal::Interrupt,
        }
    })
}
