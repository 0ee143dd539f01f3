//! Serving the API server on 127.0.0.1 (plain HTTP/1.1) for real binaries and kubectl, with a
//! generated kubeconfig: one cluster, context and user named `testbed`, no credentials (the
//! server authorizes everything).

use std::net::SocketAddr;
use std::path::Path;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// A running listener; the server stops when this is dropped.
#[derive(Debug)]
pub struct Listening {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    /// Set on shutdown: every accepted connection fails at once (see [`Killable`]).
    kill: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Listening {
    pub(crate) async fn start(router: axum::Router) -> std::io::Result<Self> {
        Self::start_at(router, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Listens on `addr` (port 0: a free port). A restarted server binds its old port again,
    /// which works at once because tokio's listener sets `SO_REUSEADDR`.
    pub(crate) async fn start_at(router: axum::Router, addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (kill, killed) = watch::channel(false);
        let listener = KillableListener { listener, killed };
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "in-memory API server listener failed");
            }
        });
        Ok(Self {
            addr,
            stop: Some(stop),
            kill,
            task,
        })
    }

    /// The bound address (127.0.0.1 and a free port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at this server, context `testbed`, namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testbed\n  cluster:\n    server: {url}\ncontexts:\n- name: testbed\n  context:\n    cluster: testbed\n    user: testbed\n    namespace: default\ncurrent-context: testbed\nusers:\n- name: testbed\n  user: {{}}\npreferences: {{}}\n",
            url = self.url()
        )
    }

    /// Write [`Listening::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Stops the way a kube-apiserver process that dies looks to its clients: the listener
    /// closes and every open connection fails at once, watches and requests being answered
    /// included; then waits for the listener task.
    ///
    /// A graceful stop that let requests in flight finish was not enough: a watch a client
    /// started just after the others were dropped kept its connection, and the stop waited
    /// for it until the client gave up (14 s in one `chaos --fault api-restart` run, past
    /// the leader's renew deadline), while a real restart closes every watch at once.
    pub async fn shutdown(mut self) {
        let _ = self.kill.send(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = std::mem::replace(&mut self.task, tokio::spawn(async {}));
        let _ = task.await;
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.kill.send(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// The TCP listener, handing out connections that fail once `killed` is set.
struct KillableListener {
    listener: TcpListener,
    killed: watch::Receiver<bool>,
}

impl axum::serve::Listener for KillableListener {
    type Io = Killable;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((io, addr)) => {
                    let mut killed = self.killed.clone();
                    let killed = Box::pin(async move {
                        // An error means the sender is gone: the server is gone too.
                        let _ = killed.wait_for(|k| *k).await;
                    });
                    return (Killable { io, killed }, addr);
                }
                // Out of descriptors and the like: axum's own listener waits and retries.
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// One accepted connection. Once the server is killed, every read and write fails with
/// `ConnectionReset`, so hyper drops the connection (and the socket closes) whatever it was
/// doing: an idle keep-alive, a request being answered, a watch. The wake-up comes from the
/// kill future, polled before the socket on every call.
struct Killable {
    io: TcpStream,
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Killable {
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.killed.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::ErrorKind::ConnectionReset.into()),
            Poll::Pending => Ok(()),
        }
    }
}

impl AsyncRead for Killable {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Killable {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
