//! HTTP/2 frame headers (RFC 9113 §4.1) and the few frame types the rewriter treats specially.
//!
//! Only what the rewriter needs: parsing the 9-octet frame header and writing header-block
//! frames. Everything else about a frame is h2's business and passes through untouched.

/// The client connection preface (RFC 9113 §3.4).
pub(super) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Length of a frame header.
pub(super) const HEAD_LEN: usize = 9;

/// `SETTINGS_MAX_FRAME_SIZE` of the servers behind the rewriter: the protocol's initial value,
/// which h2 keeps unless told otherwise and tonic's `Server` never changes by default
/// (pinned by a test that reads the SETTINGS a tonic server sends). Larger frames are h2's
/// FRAME_SIZE_ERROR, so they pass through untouched for h2 to refuse, and re-encoded header
/// blocks are cut into frames of at most this size.
pub(super) const MAX_FRAME_SIZE: usize = 16_384;

/// `HEADERS` (RFC 9113 §6.2).
pub(super) const HEADERS: u8 = 0x1;
/// `PUSH_PROMISE` (§6.6): carries a header block, but a client never sends one legally.
pub(super) const PUSH_PROMISE: u8 = 0x5;
/// `CONTINUATION` (§6.10).
pub(super) const CONTINUATION: u8 = 0x9;

/// `END_STREAM` flag of `HEADERS`.
pub(super) const END_STREAM: u8 = 0x1;
/// `END_HEADERS` flag of `HEADERS` and `CONTINUATION`.
pub(super) const END_HEADERS: u8 = 0x4;
/// `PADDED` flag of `HEADERS`.
pub(super) const PADDED: u8 = 0x8;
/// `PRIORITY` flag of `HEADERS`.
pub(super) const PRIORITY: u8 = 0x20;

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    /// Payload length.
    pub(super) len: usize,
    /// Frame type.
    pub(super) kind: u8,
    /// Flags.
    pub(super) flags: u8,
    /// Stream identifier, reserved bit cleared (§4.1: "MUST be ignored when receiving").
    pub(super) stream_id: u32,
}

impl Head {
    /// Parses the first [`HEAD_LEN`] octets of `bytes`, or `None` if there are fewer.
    pub(super) fn parse(bytes: &[u8]) -> Option<Head> {
        let head: &[u8; HEAD_LEN] = bytes.get(..HEAD_LEN)?.try_into().ok()?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let stream_id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        Some(Head {
            len,
            kind: head[3],
            flags: head[4],
            stream_id,
        })
    }

    /// Whether `flag` is set.
    pub(super) fn has(self, flag: u8) -> bool {
        self.flags & flag == flag
    }
}

/// Appends a frame header for a payload of `len` octets (24 bits).
pub(super) fn write_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream_id: u32) {
    let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
}

/// Appends a header block as one `HEADERS` frame followed by as many `CONTINUATION` frames
/// as [`MAX_FRAME_SIZE`] requires. `priority` (the 5 octets of the PRIORITY flag) goes into
/// the first frame; `END_STREAM` is set on it when `end_stream`; `END_HEADERS` on the last.
pub(super) fn write_header_block(
    out: &mut Vec<u8>,
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    block: &[u8],
) {
    let prefix = priority.map_or(0, |p| p.len());
    let first = block.len().min(MAX_FRAME_SIZE - prefix);
    let (head_part, mut rest) = block.split_at(first);
    let mut flags = 0;
    if end_stream {
        flags |= END_STREAM;
    }
    if priority.is_some() {
        flags |= PRIORITY;
    }
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    write_head(out, prefix + head_part.len(), HEADERS, flags, stream_id);
    if let Some(priority) = priority {
        out.extend_from_slice(&priority);
    }
    out.extend_from_slice(head_part);
    while !rest.is_empty() {
        let (part, tail) = rest.split_at(rest.len().min(MAX_FRAME_SIZE));
        rest = tail;
        let flags = if rest.is_empty() { END_HEADERS } else { 0 };
        write_head(out, part.len(), CONTINUATION, flags, stream_id);
        out.extend_from_slice(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_round_trips_and_the_reserved_bit_is_ignored() {
        let mut out = Vec::new();
        write_head(&mut out, 0x01_02_03, HEADERS, END_HEADERS | PADDED, 7);
        assert_eq!(out, [1, 2, 3, 1, 0x0c, 0, 0, 0, 7]);
        let head = Head::parse(&out).unwrap();
        assert_eq!(
            head,
            Head {
                len: 0x01_02_03,
                kind: HEADERS,
                flags: END_HEADERS | PADDED,
                stream_id: 7
            }
        );
        out[5] |= 0x80;
        assert_eq!(Head::parse(&out).unwrap().stream_id, 7);
        assert_eq!(Head::parse(&out[..8]), None);
    }

    #[test]
    fn a_large_block_is_cut_into_continuations_of_the_maximum_frame_size() {
        let block = vec![0xaa; 2 * MAX_FRAME_SIZE + 10];
        let mut out = Vec::new();
        write_header_block(&mut out, 3, true, Some([0, 0, 0, 1, 15]), &block);

        let mut frames = Vec::new();
        let mut rest = &out[..];
        let mut payload = Vec::new();
        while let Some(head) = Head::parse(rest) {
            frames.push((head.kind, head.flags, head.len));
            payload.extend_from_slice(&rest[HEAD_LEN..HEAD_LEN + head.len]);
            rest = &rest[HEAD_LEN + head.len..];
        }
        assert!(rest.is_empty());
        assert_eq!(
            frames,
            [
                (HEADERS, END_STREAM | PRIORITY, MAX_FRAME_SIZE),
                (CONTINUATION, 0, MAX_FRAME_SIZE),
                (CONTINUATION, END_HEADERS, 15),
            ]
        );
        assert_eq!(&payload[..5], [0, 0, 0, 1, 15]);
        assert_eq!(&payload[5..], &block[..]);
    }

    #[test]
    fn an_empty_block_is_one_headers_frame() {
        let mut out = Vec::new();
        write_header_block(&mut out, 1, false, None, &[]);
        assert_eq!(out, [0, 0, 0, HEADERS, END_HEADERS, 0, 0, 0, 1]);
    }
}
