//! Connections the in-memory API server can drop all at once, as a dying kube-apiserver
//! process does: [`KillableListener`] wraps the TCP listener `axum::serve` accepts from, and
//! every connection it hands out fails its next read or write once the kill flag is set.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The TCP listener, handing out connections that fail once `killed` is set.
pub(crate) struct KillableListener {
    listener: TcpListener,
    killed: watch::Receiver<bool>,
}

impl KillableListener {
    /// Hands out connections of `listener` that fail once `killed` is `true`.
    pub(crate) fn new(listener: TcpListener, killed: watch::Receiver<bool>) -> Self {
        Self { listener, killed }
    }
}

impl axum::serve::Listener for KillableListener {
    type Io = Killable;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((io, addr)) => {
                    // kube-apiserver is a Go server, and Go turns Nagle's algorithm off on
                    // every TCP connection (net.TCPConn, SetNoDelay's default). With it on, a
                    // watch's first event waited for the client's delayed ACK of the response
                    // headers: a fixed 40 ms on a sidecar's start that the real server never
                    // adds (docs/bench.md, "Start-to-ready by the sidecar's own clock").
                    if let Err(e) = io.set_nodelay(true) {
                        tracing::debug!(error = %e, "TCP_NODELAY not set");
                    }
                    let mut killed = self.killed.clone();
                    let killed = Box::pin(async move {
                        // An error means the sender is gone: the server is gone too.
                        let _ = killed.wait_for(|k| *k).await;
                    });
                    return (
                        Killable {
                            io,
                            killed: Some(killed),
                        },
                        addr,
                    );
                }
                // Out of descriptors and the like: wait and retry, as axum's own listener
                // does (it waits 1 s; a test server can retry sooner).
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
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
/// kill future, polled before the socket on every call (hyper's HTTP/1 dispatcher flushes on
/// every pass of its loop, so a connection waiting on a handler or a body is woken too).
pub(crate) struct Killable {
    io: TcpStream,
    /// `None` once the kill came: a finished future must not be polled again (an `async`
    /// block panics if it is), and hyper calls on after the first error.
    killed: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Killable {
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(killed) = self.killed.as_mut() else {
            return Err(io::ErrorKind::ConnectionReset.into());
        };
        match killed.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.killed = None;
                Err(io::ErrorKind::ConnectionReset.into())
            }
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

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn connections_are_accepted_without_nagles_algorithm_as_go_accepts_them() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_kill, killed) = watch::channel(false);
        let mut listener = KillableListener::new(listener, killed);
        let ((connection, _), _client) = tokio::join!(
            axum::serve::Listener::accept(&mut listener),
            TcpStream::connect(addr)
        );
        assert!(connection.io.nodelay().unwrap());
    }

    #[tokio::test]
    async fn every_read_and_write_after_the_kill_fails_and_none_panics() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (kill, killed) = watch::channel(false);
        let mut listener = KillableListener::new(listener, killed);
        let ((mut connection, _), _client) = tokio::join!(
            axum::serve::Listener::accept(&mut listener),
            TcpStream::connect(addr)
        );
        kill.send(true).unwrap();
        // The first failure sees the kill; the later ones must not poll it again.
        for _ in 0..3 {
            let reset = io::ErrorKind::ConnectionReset;
            assert_eq!(
                connection.read(&mut [0; 8]).await.unwrap_err().kind(),
                reset
            );
            assert_eq!(connection.write(b"x").await.unwrap_err().kind(), reset);
            assert_eq!(connection.flush().await.unwrap_err().kind(), reset);
        }
    }
}
