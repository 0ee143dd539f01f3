//! Dials a unix socket the way non-Rust gRPC clients do, `:authority` included.
//!
//! tonic (through hyper and h2) can only send an `:authority` that is a valid URI authority,
//! so a Rust client cannot reproduce what kubelet's plugin manager sends: grpc-go dials the
//! registration socket with the passthrough resolver and a custom dialer, and every request
//! carries `:authority` = the socket path. Other clients send an empty authority (grpc-java,
//! some C-core versions), `localhost` (grpc-go with `unix:` targets, and kubelet's CSI client
//! since kubernetes#112597) or none. A server that h2 leaves unprotected resets each such
//! request with `PROTOCOL_ERROR`, which is exactly the failure real kubelets report.
//!
//! [`dial`] wraps the client side of the socket: every request header block the tonic client
//! writes is decoded and re-encoded with the chosen [`Authority`] by
//! [`csi_common::h2_authority::Rewriter`], using the dynamic table like grpc-go's HPACK encoder
//! does. Everything else (the preface, SETTINGS, DATA, trailers, what the server sends) passes
//! through unchanged. The tests in `tests/grpc_dial.rs` check the bytes on the wire and that a
//! plain tonic server refuses the socket path the way it refuses kubelet.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use csi_common::h2_authority::{Encoding, Policy, Rewriter};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// The `:authority` a dialed connection sends with every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Authority {
    /// The socket path as given: grpc-go with the passthrough resolver and a custom dialer,
    /// as kubelet's plugin manager dials registration sockets.
    #[default]
    SocketPath,
    /// An empty value (grpc-java, some C-core versions over unix sockets).
    Empty,
    /// `localhost` (grpc-go with `unix:` targets; kubelet's CSI client).
    Localhost,
    /// No `:authority` at all.
    Absent,
}

impl Authority {
    /// Every style, for tests that try them all.
    pub const ALL: [Authority; 4] = [
        Authority::SocketPath,
        Authority::Empty,
        Authority::Localhost,
        Authority::Absent,
    ];

    fn policy(self, path: &Path) -> Policy {
        match self {
            Authority::SocketPath => Policy::Set(path.as_os_str().as_encoded_bytes().to_vec()),
            Authority::Empty => Policy::Set(Vec::new()),
            Authority::Localhost => Policy::Set(b"localhost".to_vec()),
            Authority::Absent => Policy::Remove,
        }
    }
}

/// Connects to the unix socket at `path` once (no retries) and returns a channel whose
/// requests carry `authority`.
///
/// # Errors
/// If the socket cannot be connected or the HTTP/2 handshake fails.
pub async fn dial(path: &Path, authority: Authority) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_owned();
    // The URI is only tonic's; the rewriter replaces what it puts into :authority.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = UnixStream::connect(&path).await?;
                Ok::<_, io::Error>(TokioIo::new(SpeakAs::new(stream, authority.policy(&path))))
            }
        }))
        .await
}

/// A client connection whose outgoing header blocks are rewritten.
#[derive(Debug)]
struct SpeakAs {
    inner: UnixStream,
    rewriter: Rewriter,
    /// Rewritten octets not yet written, from `written` on.
    pending: Vec<u8>,
    written: usize,
}

impl SpeakAs {
    fn new(inner: UnixStream, policy: Policy) -> SpeakAs {
        SpeakAs {
            inner,
            rewriter: Rewriter::new(policy, Encoding::Indexing),
            pending: Vec::new(),
            written: 0,
        }
    }

    /// Writes out what the rewriter produced so far.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for SpeakAs {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SpeakAs {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Accept new octets only once the previous ones are out, so at most one write's
        // worth is buffered here.
        ready!(this.poll_drain(cx))?;
        this.rewriter.push(buf, &mut this.pending);
        // What cannot be written now goes out on the next write or flush.
        let _ = this.poll_drain(cx)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.written == 0 && this.pending.is_empty() {
            this.rewriter.end(&mut this.pending);
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}
