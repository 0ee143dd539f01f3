//! Serving the mock driver on a unix socket, and the handle a test holds to control and inspect
//! it: stop ("the driver died"), restart, readiness, faults and the call record.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use csi_common::h2_authority::RepairAuthority;
use prost::Message;
use proto::csi::v1::controller_server::ControllerServer;
use proto::csi::v1::identity_server::IdentityServer;
use proto::csi::v1::node_server::NodeServer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Server};

use super::config::MockDriverConfig;
use super::fault::Fault;
use super::method::Method;
use super::record::RecordedCall;
use super::service::CsiService;
use super::shared::Shared;
use super::state::MockVolume;
use super::{Error, Result};

/// How long `stop` waits for the server task after closing every connection.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Entry point: starts a mock CSI driver.
#[derive(Debug)]
pub struct MockDriver;

impl MockDriver {
    /// Starts serving `config` on `socket_path` (a stale socket file there is removed first;
    /// missing parent directories are created).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], or the socket path is taken by something that is not a socket,
    /// or binding fails.
    #[expect(
        clippy::unused_async,
        reason = "binding and spawning need a running tokio runtime; async keeps callers in one"
    )]
    pub async fn start(
        config: MockDriverConfig,
        socket_path: impl Into<PathBuf>,
    ) -> Result<MockDriverHandle> {
        config.validate().map_err(Error::InvalidConfig)?;
        let handle = MockDriverHandle {
            shared: Arc::new(Shared::new(config)),
            socket_path: socket_path.into(),
            running: Mutex::new(None),
            temp_dir: None,
        };
        handle.serve()?;
        Ok(handle)
    }

    /// Starts serving `config` on `csi.sock` in a fresh temporary directory that lives as long
    /// as the handle.
    ///
    /// # Errors
    /// As [`MockDriver::start`], or the temporary directory cannot be created.
    pub async fn start_in_temp_dir(config: MockDriverConfig) -> Result<MockDriverHandle> {
        let dir = tempfile::Builder::new()
            .prefix("mock-csi-")
            .tempdir()
            .map_err(Error::TempDir)?;
        let mut handle = Self::start(config, dir.path().join("csi.sock")).await?;
        handle.temp_dir = Some(dir);
        Ok(handle)
    }
}

/// Control over a running (or stopped) mock driver. Dropping it stops the server and removes
/// the socket file.
#[derive(Debug)]
pub struct MockDriverHandle {
    shared: Arc<Shared>,
    socket_path: PathBuf,
    running: Mutex<Option<Running>>,
    /// The directory `start_in_temp_dir` made for the socket; deleted on drop.
    temp_dir: Option<tempfile::TempDir>,
}

impl MockDriverHandle {
    /// The socket file path.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// The CSI endpoint, `unix:///abs/path` (the form `--csi-address` accepts).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket_path.display())
    }

    /// A tonic channel to the driver over its socket (connected lazily, reconnecting on use).
    ///
    /// # Errors
    /// The endpoint cannot be parsed as a URI (a socket path that is not valid in a URI).
    pub fn channel(&self) -> Result<Channel> {
        let endpoint = Endpoint::from_shared(self.endpoint()).map_err(Error::Endpoint)?;
        Ok(endpoint.connect_lazy())
    }

    /// Whether the server is currently serving.
    pub fn is_running(&self) -> bool {
        self.lock_running().is_some()
    }

    /// Stops serving like a crashed driver: closes every open connection at once (pending calls
    /// are dropped unanswered), stops accepting, and removes the socket file. The state (volumes,
    /// faults, readiness, call record) is kept for [`restart`](Self::restart). Stopping a stopped
    /// driver only makes sure the socket file is gone.
    ///
    /// # Errors
    /// The socket file cannot be removed.
    pub async fn stop(&self) -> Result<()> {
        let running = self.lock_running().take();
        if let Some(running) = running {
            running.shut_down().await;
        }
        remove_socket(&self.socket_path)
    }

    /// Starts serving again on the same path with the same state (stopping first if running).
    ///
    /// # Errors
    /// As [`MockDriver::start`].
    pub async fn restart(&self) -> Result<()> {
        self.stop().await?;
        self.serve()
    }

    /// Sets `ProbeResponse.ready`: `Some(true)`, `Some(false)` ("still initializing") or `None`
    /// (field absent, which the CSI spec says callers must treat as ready).
    pub fn set_ready(&self, ready: Option<bool>) {
        self.shared.lock().ready = ready;
    }

    /// Arms a fault; its call counter starts now.
    pub fn inject(&self, fault: Fault) {
        self.shared.lock().faults.inject(fault);
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// A copy of the current configuration.
    pub fn config(&self) -> MockDriverConfig {
        self.shared.lock().config.clone()
    }

    /// Changes the configuration in place; later calls see the change (e.g. drop a capability
    /// or rename the driver between calls). Faults in `config.faults` are not re-armed; use
    /// [`inject`](Self::inject).
    pub fn update_config(&self, change: impl FnOnce(&mut MockDriverConfig)) {
        change(&mut self.shared.lock().config);
    }

    /// Every call received so far (since the last [`clear_calls`](Self::clear_calls)), in
    /// arrival order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.shared.lock().calls.all().to_vec()
    }

    /// The calls of one method, in arrival order.
    pub fn calls_of(&self, method: Method) -> Vec<RecordedCall> {
        let inner = self.shared.lock();
        inner
            .calls
            .all()
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// How many calls of `method` arrived.
    pub fn call_count(&self, method: Method) -> usize {
        self.shared
            .lock()
            .calls
            .all()
            .iter()
            .filter(|c| c.method == method)
            .count()
    }

    /// The requests of `method`, decoded as `M` (the request message type of that method).
    ///
    /// # Panics
    /// When a recorded request does not decode as `M`, i.e. `M` is not `method`'s request type.
    pub fn requests<M: Message + Default>(&self, method: Method) -> Vec<M> {
        self.calls_of(method)
            .iter()
            .map(|call| {
                call.decode().unwrap_or_else(|e| {
                    panic!("a recorded {method} request does not decode as the requested type: {e}")
                })
            })
            .collect()
    }

    /// Forgets the recorded calls (sequence numbers keep counting).
    pub fn clear_calls(&self) {
        self.shared.lock().calls.clear();
    }

    /// Waits until at least `n` calls of `method` have arrived and returns them.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`] when fewer than `n` arrived within `timeout` (tokio clock).
    pub async fn wait_for_calls(
        &self,
        method: Method,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedCall>> {
        self.wait_until(method, n, timeout, |_| true).await
    }

    /// Waits until at least `n` calls of `method` have been answered (their
    /// [`RecordedCall::code`] is set) and returns the calls of `method`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`] when fewer than `n` were answered within `timeout` (tokio clock).
    pub async fn wait_for_answers(
        &self,
        method: Method,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedCall>> {
        self.wait_until(method, n, timeout, |c| c.code.is_some())
            .await
    }

    async fn wait_until(
        &self,
        method: Method,
        n: usize,
        timeout: Duration,
        counts: impl Fn(&RecordedCall) -> bool,
    ) -> Result<Vec<RecordedCall>> {
        let mut changed = self.shared.subscribe_calls();
        let seen = || self.calls_of(method).iter().filter(|c| counts(c)).count();
        let wait = async {
            loop {
                if seen() >= n {
                    return self.calls_of(method);
                }
                if changed.changed().await.is_err() {
                    // The sender lives in `self.shared`; it cannot be gone while we borrow it.
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| Error::WaitTimeout {
                method,
                expected: n,
                seen: seen(),
            })
    }

    /// The driver's snapshots, in creation order.
    pub fn snapshots(&self) -> Vec<crate::MockSnapshot> {
        self.shared.lock().volumes.snapshots()
    }

    /// A snapshot of the volume table, in creation order.
    pub fn volumes(&self) -> Vec<MockVolume> {
        self.shared.lock().volumes.snapshot()
    }

    /// The volume with this id, if any.
    pub fn volume(&self, volume_id: &str) -> Option<MockVolume> {
        self.volumes()
            .into_iter()
            .find(|v| v.volume_id == volume_id)
    }

    /// Adds (or replaces, by id) a volume without any checks, e.g. a pre-provisioned volume
    /// that a static PersistentVolume points at.
    pub fn insert_volume(&self, volume: MockVolume) {
        self.shared.lock().volumes.upsert(volume);
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Binds the socket and spawns one server generation.
    fn serve(&self) -> Result<()> {
        let path = &self.socket_path;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| Error::Bind {
                path: path.clone(),
                source,
            })?;
        }
        remove_socket(path)?;
        let listener = UnixListener::bind(path).map_err(|source| Error::Bind {
            path: path.clone(),
            source,
        })?;

        let connections = Arc::new(Connections::default());
        let incoming = UnixListenerStream::new(listener).map({
            let connections = Arc::clone(&connections);
            // Real drivers are dialed by Go tools (csi-sanity, csc, kubelet's CSI client) whose
            // `:authority` h2 may refuse; accept them as a driver must.
            move |accepted| {
                accepted
                    .and_then(|stream| connections.track(stream))
                    .map(RepairAuthority::new)
            }
        });
        let (stopped_tx, stopped_rx) = watch::channel(false);
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let service = CsiService::new(Arc::clone(&self.shared), stopped_rx);
        let router = Server::builder()
            .add_service(IdentityServer::new(service.clone()))
            .add_service(ControllerServer::new(service.clone()))
            .add_service(NodeServer::new(service));
        let task = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
            // A dropped sender (handle dropped) also means "shut down".
            let _ = shutdown_rx.await;
        }));
        *self.lock_running() = Some(Running {
            shutdown: shutdown_tx,
            stopped: stopped_tx,
            connections,
            task,
        });
        Ok(())
    }
}

impl Drop for MockDriverHandle {
    fn drop(&mut self) {
        if let Some(running) = self.lock_running().take() {
            running.abandon();
        }
        let _ = remove_socket(&self.socket_path);
        // The socket is gone; now the directory can go too.
        drop(self.temp_dir.take());
    }
}

/// Removes `path` if it is a socket; a missing file is fine, anything else is refused (we never
/// delete a file we did not create).
fn remove_socket(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::RemoveSocket {
            path: path.to_owned(),
            source,
        }),
        Ok(meta) if meta.file_type().is_socket() => match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::RemoveSocket {
                path: path.to_owned(),
                source: e,
            }),
            _ => Ok(()),
        },
        Ok(_) => Err(Error::NotASocket(path.to_owned())),
    }
}

/// One server generation.
#[derive(Debug)]
struct Running {
    shutdown: oneshot::Sender<()>,
    stopped: watch::Sender<bool>,
    connections: Arc<Connections>,
    task: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
}

impl Running {
    /// Closes every connection, ends pending calls and stops accepting, without waiting.
    fn abandon(self) -> JoinHandle<std::result::Result<(), tonic::transport::Error>> {
        // Cut the connections first: a crashed driver sends no final status, so a pending
        // call must see the connection drop, not the "stopped" answer its handler gives up with.
        self.connections.close_all();
        self.stopped.send_replace(true);
        let _ = self.shutdown.send(());
        self.task
    }

    async fn shut_down(self) {
        let mut task = self.abandon();
        match tokio::time::timeout(STOP_GRACE, &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "mock CSI server ended with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "mock CSI server task failed"),
            Err(_) => {
                tracing::warn!("mock CSI server did not stop in time; aborting it");
                task.abort();
            }
        }
    }
}

/// The open connections of one server generation, so `stop` can cut them like a dying process
/// would. tonic spawns a task per connection and its graceful shutdown waits for in-flight calls,
/// so closing the listener alone would leave old connections answering.
#[derive(Debug, Default)]
struct Connections {
    inner: Mutex<ConnectionsInner>,
}

#[derive(Debug, Default)]
struct ConnectionsInner {
    closed: bool,
    next_id: u64,
    /// A duplicate descriptor of each open connection: `shutdown(2)` on it ends the connection
    /// for every descriptor, so the peer sees EOF and tonic's connection task ends.
    open: HashMap<u64, std::os::unix::net::UnixStream>,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, ConnectionsInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn track(self: &Arc<Self>, io: UnixStream) -> io::Result<TrackedStream> {
        let dup = std::os::unix::net::UnixStream::from(io.as_fd().try_clone_to_owned()?);
        let mut inner = self.lock();
        if inner.closed {
            // Accepted in the instant between `stop` and the accept loop noticing it.
            let _ = dup.shutdown(std::net::Shutdown::Both);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.open.insert(id, dup);
        Ok(TrackedStream {
            io,
            id,
            connections: Arc::clone(self),
        })
    }

    fn close_all(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        for stream in inner.open.values() {
            // ENOTCONN when the peer already left: nothing to cut.
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// An accepted connection that unregisters itself when tonic drops it.
#[derive(Debug)]
struct TrackedStream {
    io: UnixStream,
    id: u64,
    connections: Arc<Connections>,
}

impl Drop for TrackedStream {
    fn drop(&mut self) {
        self.connections.lock().open.remove(&self.id);
    }
}

impl Connected for TrackedStream {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
