//! The byte-stream state machine: client-to-server HTTP/2 bytes in, the same bytes out except
//! that every request header block is decoded, its `:authority` handled by the [`Policy`], and
//! the block encoded again.
//!
//! Frame handling, frame by frame as h2's `FramedRead` sees them:
//!
//! * the connection preface and every frame that carries no header block pass through
//!   untouched and unbuffered (DATA, SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY, …);
//! * `HEADERS` and its `CONTINUATION`s are collected into one block; padding is dropped
//!   (RFC 9113 §6.2: it carries nothing), the PRIORITY fields and `END_STREAM` are kept, and
//!   the new block goes out as `HEADERS` + `CONTINUATION`s of at most 16 KiB;
//! * input that RFC 9113 makes a connection error at the framing level (a wrong preface, a
//!   `CONTINUATION` out of place, a header frame over the maximum size, on stream 0 or with
//!   too much padding, a client `PUSH_PROMISE`) is passed on exactly as received, and so is
//!   everything after it, so h2 answers with its own GOAWAY;
//! * a header block that cannot be decoded (or is over [`MAX_BLOCK_SIZE`]) is replaced by a
//!   one-octet block that h2 cannot decode either (index 0, RFC 7541 §6.1), so h2 ends the
//!   connection with the GOAWAY it sends for any HPACK error; nothing after it is forwarded.
//!
//! [`MAX_BLOCK_SIZE`]: super::hpack::MAX_BLOCK_SIZE

use super::frame::{
    self, CONTINUATION, END_HEADERS, END_STREAM, HEAD_LEN, HEADERS, Head, MAX_FRAME_SIZE, PADDED,
    PREFACE, PRIORITY, PUSH_PROMISE,
};
use super::hpack::{self, Decoder, Encoder, Field, MAX_BLOCK_SIZE};
use super::{Encoding, Policy};

/// What the stream is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the complete client preface.
    Preface,
    /// Frame by frame.
    Frames,
    /// Everything from now on goes out as received (h2 is about to refuse the connection).
    Passthrough,
    /// An undecodable block was replaced by one h2 refuses; nothing more goes out.
    Closed,
}

/// A header block being collected.
#[derive(Debug)]
struct Pending {
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    /// The HPACK octets so far.
    fragment: Vec<u8>,
    /// The frames exactly as received, for when they must pass through after all.
    raw: Vec<u8>,
}

/// Rewrites the `:authority` of requests in one direction of one HTTP/2 connection: the
/// client-to-server bytes. See the [module documentation](super) for why.
///
/// Sans-IO: [`Rewriter::push`] takes whatever octets arrived and appends what should be
/// forwarded, so it works with any read or write loop, whole frames or single octets.
#[derive(Debug)]
pub struct Rewriter {
    policy: Policy,
    state: State,
    decoder: Decoder,
    encoder: Encoder,
    /// Octets received but not yet forwarded (an incomplete frame header or header frame).
    input: Vec<u8>,
    /// Payload octets of the current pass-through frame still to forward.
    forward: usize,
    pending: Option<Pending>,
    rewritten: u64,
}

impl Rewriter {
    /// A rewriter for a new connection.
    pub fn new(policy: Policy, encoding: Encoding) -> Rewriter {
        Rewriter {
            policy,
            state: State::Preface,
            decoder: Decoder::new(),
            encoder: match encoding {
                Encoding::Literal => Encoder::Literal,
                Encoding::Indexing => Encoder::Indexing(Box::default()),
            },
            input: Vec::new(),
            forward: 0,
            pending: None,
            rewritten: 0,
        }
    }

    /// Takes octets the client sent and appends to `out` what the server should receive.
    /// Incomplete header frames are held back until the rest arrives.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        match self.state {
            State::Closed => return,
            State::Passthrough => {
                out.extend_from_slice(input);
                return;
            }
            State::Preface | State::Frames => {}
        }
        let mut buffered = std::mem::take(&mut self.input);
        let bytes: &[u8] = if buffered.is_empty() {
            input
        } else {
            buffered.extend_from_slice(input);
            &buffered
        };
        let consumed = self.process(bytes, out);
        // At most one incomplete frame is kept, in an allocation of its own size.
        self.input = bytes[consumed..].to_vec();
    }

    /// The client closed its side: appends, exactly as received, whatever was held back (an
    /// incomplete frame cannot become a request any more), so the server sees the same
    /// truncated input it would have seen without the rewriter.
    pub fn end(&mut self, out: &mut Vec<u8>) {
        if matches!(self.state, State::Preface | State::Frames) {
            if let Some(pending) = self.pending.take() {
                out.extend_from_slice(&pending.raw);
            }
            out.append(&mut self.input);
            self.state = State::Passthrough;
        }
    }

    /// Whether an undecodable header block ended the connection: nothing more is forwarded.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// How many requests had their `:authority` changed so far.
    pub fn rewritten(&self) -> u64 {
        self.rewritten
    }

    /// Processes as much of `bytes` as possible; returns how many octets were consumed.
    fn process(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> usize {
        let mut pos = 0;
        loop {
            let rest = &bytes[pos..];
            match self.state {
                State::Preface => {
                    let n = rest.len().min(PREFACE.len());
                    if rest[..n] != PREFACE[..n] {
                        // Not HTTP/2 with prior knowledge: h2 refuses it.
                        return pos + self.pass_through(rest, out);
                    }
                    if n < PREFACE.len() {
                        return pos;
                    }
                    out.extend_from_slice(PREFACE);
                    pos += n;
                    self.state = State::Frames;
                }
                State::Frames if self.forward > 0 => {
                    let n = rest.len().min(self.forward);
                    if n == 0 {
                        return pos;
                    }
                    out.extend_from_slice(&rest[..n]);
                    self.forward -= n;
                    pos += n;
                }
                State::Frames => {
                    let Some(head) = Head::parse(rest) else {
                        return pos;
                    };
                    match self.frame(head, rest, out) {
                        Some(n) => pos += n,
                        None => return pos,
                    }
                }
                State::Passthrough => return pos + self.pass_through(rest, out),
                State::Closed => return bytes.len(),
            }
        }
    }

    /// Handles the frame at the start of `rest`; `None` while it is incomplete.
    fn frame(&mut self, head: Head, rest: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        let total = HEAD_LEN + head.len;
        if let Some(pending) = &mut self.pending {
            if head.kind != CONTINUATION
                || head.stream_id != pending.stream_id
                || head.len > MAX_FRAME_SIZE
            {
                // h2: "expected CONTINUATION" / stream mismatch (PROTOCOL_ERROR) or
                // FRAME_SIZE_ERROR. Let it see what the client sent.
                let raw = std::mem::take(&mut pending.raw);
                self.pending = None;
                out.extend_from_slice(&raw);
                return Some(self.pass_through(rest, out));
            }
            let frame = rest.get(..total)?;
            pending.raw.extend_from_slice(frame);
            pending.fragment.extend_from_slice(&frame[HEAD_LEN..]);
            if pending.fragment.len() > MAX_BLOCK_SIZE {
                let stream_id = pending.stream_id;
                self.pending = None;
                self.refuse(stream_id, &hpack::BlockError::TooLarge, out);
            } else if head.has(END_HEADERS) {
                self.finish(out);
            }
            return Some(total);
        }
        match head.kind {
            HEADERS => {
                if head.len > MAX_FRAME_SIZE || head.stream_id == 0 {
                    // h2: FRAME_SIZE_ERROR / PROTOCOL_ERROR.
                    return Some(self.pass_through(rest, out));
                }
                let frame = rest.get(..total)?;
                let Some((priority, fragment)) = split_headers_payload(head, &frame[HEAD_LEN..])
                else {
                    // h2: too much padding or a short PRIORITY field, PROTOCOL_ERROR.
                    return Some(self.pass_through(rest, out));
                };
                self.pending = Some(Pending {
                    stream_id: head.stream_id,
                    end_stream: head.has(END_STREAM),
                    priority,
                    fragment: fragment.to_vec(),
                    raw: frame.to_vec(),
                });
                if head.has(END_HEADERS) {
                    self.finish(out);
                }
                Some(total)
            }
            // h2: "received unexpected CONTINUATION frame"; a client PUSH_PROMISE is a
            // PROTOCOL_ERROR too (RFC 9113 §8.4).
            CONTINUATION | PUSH_PROMISE => Some(self.pass_through(rest, out)),
            _ => {
                out.extend_from_slice(&rest[..HEAD_LEN]);
                self.forward = head.len;
                Some(HEAD_LEN)
            }
        }
    }

    /// Decodes the complete pending block, applies the policy and writes the new frames.
    fn finish(&mut self, out: &mut Vec<u8>) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        match self.decoder.decode(&pending.fragment) {
            Ok(mut fields) => {
                if apply(&self.policy, &mut fields) {
                    self.rewritten += 1;
                }
                let mut block = Vec::with_capacity(pending.fragment.len() + 64);
                self.encoder.encode(&fields, &mut block);
                frame::write_header_block(
                    out,
                    pending.stream_id,
                    pending.end_stream,
                    pending.priority,
                    &block,
                );
            }
            Err(err) => self.refuse(pending.stream_id, &err, out),
        }
    }

    /// Ends the connection the way h2 ends it for an HPACK error: with a block it cannot
    /// decode either. The client's table state is lost, so nothing more can be forwarded.
    fn refuse(&mut self, stream_id: u32, err: &hpack::BlockError, out: &mut Vec<u8>) {
        tracing::debug!(stream_id, error = %err, "Refusing an HTTP/2 header block");
        frame::write_head(out, 1, HEADERS, END_HEADERS | END_STREAM, stream_id);
        out.push(0x80);
        self.state = State::Closed;
    }

    /// Forwards `rest` and everything after it untouched; returns `rest.len()`.
    fn pass_through(&mut self, rest: &[u8], out: &mut Vec<u8>) -> usize {
        out.extend_from_slice(rest);
        self.state = State::Passthrough;
        rest.len()
    }
}

/// Splits a HEADERS payload into its PRIORITY fields and block fragment, dropping padding, in
/// h2's order (padding first, then priority); `None` where h2 refuses the frame.
fn split_headers_payload(head: Head, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut body = payload;
    if head.has(PADDED) {
        let (&pad, rest) = body.split_first()?;
        body = rest.get(..rest.len().checked_sub(usize::from(pad))?)?;
    }
    let priority = if head.has(PRIORITY) {
        let (fields, rest) = body.split_first_chunk::<5>()?;
        body = rest;
        Some(*fields)
    } else {
        None
    };
    Some((priority, body))
}

/// Applies `policy` to one decoded block; returns whether it changed anything.
fn apply(policy: &Policy, fields: &mut Vec<Field>) -> bool {
    const AUTHORITY: &[u8] = b":authority";
    match policy {
        Policy::Repair => {
            let mut changed = false;
            for field in fields.iter_mut().filter(|f| f.name == AUTHORITY) {
                if http::uri::Authority::try_from(&field.value[..]).is_err() {
                    tracing::trace!(
                        authority = %String::from_utf8_lossy(&field.value).escape_debug(),
                        "Replacing an :authority h2 refuses with localhost"
                    );
                    field.value = b"localhost".to_vec();
                    changed = true;
                }
            }
            changed
        }
        Policy::Set(_) | Policy::Remove => {
            if !fields.iter().any(|f| f.name == b":method") {
                // Trailers: no pseudo-header fields at all.
                return false;
            }
            let before = fields.clone();
            fields.retain(|f| f.name != AUTHORITY);
            if let Policy::Set(value) = policy {
                let at = fields
                    .iter()
                    .position(|f| !f.name.starts_with(b":"))
                    .unwrap_or(fields.len());
                fields.insert(at, Field::new(AUTHORITY, value.clone()));
            }
            *fields != before
        }
    }
}

#[cfg(test)]
mod tests;
