//! Lets tonic gRPC servers on unix sockets accept the `:authority` that grpc-go and other
//! non-Rust clients send there.
//!
//! # The interoperability problem
//!
//! Kubelet's plugin manager dials a registration socket with grpc-go's passthrough resolver
//! and a custom dialer, so every request carries `:authority` = the socket path, e.g.
//! `/var/lib/kubelet/plugins_registry/hostpath.csi.k8s.io-reg.sock`. Other clients send an
//! empty authority, `localhost`, or none (grpc-java, C-core, grpc-go with `unix:` targets).
//! h2, under hyper and tonic, builds an `http::Uri` from every request and resets the stream
//! with `PROTOCOL_ERROR` when `:authority` is not a valid URI authority (hyperium/h2#487,
//! hyperium/tonic#243), which kubelet reports as
//! `rpc error: code = Internal desc = stream terminated by RST_STREAM with error code:
//! PROTOCOL_ERROR`. Kubernetes fixed its own CSI client dial (kubernetes#112597) but not the
//! plugin-registration dial, and h2 keeps the check, so the server must cope.
//!
//! # The layer
//!
//! [`RepairAuthority`] wraps the server side of each accepted connection. Its read half runs
//! the client's bytes through a [`Rewriter`] with [`Policy::Repair`]: request header blocks
//! are HPACK-decoded with the client's dynamic table, an `:authority` that h2 would refuse is
//! replaced with `localhost` (what grpc-go itself sends for `unix:` targets), valid and absent
//! ones are kept, and the block is re-encoded with literal fields only, so the server's own
//! dynamic table is never touched and cannot drift from the client's. Frames without header
//! blocks, and everything the server writes, pass through unchanged: flow control, PING,
//! GOAWAY, SETTINGS, frame sizes and concurrency limits stay exactly as h2 gives them.
//! Malformed input ends the connection with h2's own connection error (see [`Rewriter`]).
//!
//! Both limits the layer relies on are the HTTP/2 defaults, which tonic's `Server` keeps:
//! `SETTINGS_HEADER_TABLE_SIZE` 4096 and `SETTINGS_MAX_FRAME_SIZE` 16384. A server that
//! raises either must not use this layer as it stands.
//!
//! ```no_run
//! use csi_common::h2_authority::RepairAuthority;
//! use tokio_stream::StreamExt;
//! use tokio_stream::wrappers::UnixListenerStream;
//!
//! # async fn serve(listener: tokio::net::UnixListener, router: tonic::transport::server::Router) {
//! let incoming = UnixListenerStream::new(listener).map(|accepted| accepted.map(RepairAuthority::new));
//! router.serve_with_incoming(incoming).await.ok();
//! # }
//! ```

mod frame;
mod hpack;
mod io;
mod rewriter;

pub use io::RepairAuthority;
pub use rewriter::Rewriter;

/// What a [`Rewriter`] does with the `:authority` of each request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Server side: an `:authority` h2 would refuse (anything `http::uri::Authority` does not
    /// parse: a socket path, an empty value, …) becomes `localhost`; valid and absent ones
    /// are kept.
    Repair,
    /// Client side, for test doubles: every request carries exactly this `:authority`, valid
    /// or not, as grpc-go sends the socket path.
    Set(Vec<u8>),
    /// Client side, for test doubles: requests carry no `:authority` at all.
    Remove,
}

/// How a [`Rewriter`] encodes the blocks it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Literal fields that never enter the receiver's dynamic table. What a server-side
    /// layer must use: the server's table stays empty whatever the client does.
    Literal,
    /// Literal fields enter the receiver's dynamic table and repeats are sent as indices, as
    /// grpc-go's encoder does. Only for client-side test doubles talking to a server that
    /// advertises the default 4096-octet table.
    Indexing,
}
