//! The server-side connection wrapper.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

use super::{Encoding, Policy, Rewriter};

/// Size of one read from the socket.
const READ_CHUNK: usize = 8 * 1024;

/// An accepted connection whose incoming requests have their `:authority` repaired before
/// the HTTP/2 server sees them ([`Policy::Repair`]); writes pass through untouched.
#[derive(Debug)]
pub struct RepairAuthority<S> {
    inner: S,
    rewriter: Rewriter,
    /// Rewritten octets not yet handed to the reader, from `out_pos` on.
    out: Vec<u8>,
    out_pos: usize,
    scratch: Vec<u8>,
    eof: bool,
}

impl<S> RepairAuthority<S> {
    /// Wraps the server side of a freshly accepted connection.
    pub fn new(inner: S) -> RepairAuthority<S> {
        RepairAuthority {
            inner,
            rewriter: Rewriter::new(Policy::Repair, Encoding::Literal),
            out: Vec::new(),
            out_pos: 0,
            scratch: vec![0; READ_CHUNK],
            eof: false,
        }
    }

    /// How many requests had their `:authority` repaired on this connection.
    pub fn repaired(&self) -> u64 {
        self.rewriter.rewritten()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for RepairAuthority<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.out_pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_pos);
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    this.out.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            // After a refused block nothing more may reach the server: end of stream.
            if this.eof || this.rewriter.is_closed() {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk))?;
            if chunk.filled().is_empty() {
                this.eof = true;
                this.rewriter.end(&mut this.out);
            } else {
                this.rewriter.push(chunk.filled(), &mut this.out);
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for RepairAuthority<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for RepairAuthority<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
