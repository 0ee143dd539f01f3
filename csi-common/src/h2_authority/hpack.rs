//! Decoding a client's header block and encoding it again (RFC 7541).
//!
//! Decoding keeps the client's dynamic table in step, exactly as the server's decoder would
//! have; the re-encoded block uses only literal representations that do not touch the
//! server's dynamic table (or, for a client-side test double, an indexing encoder).
//!
//! h2 is the reference for what counts as malformed, so the checks here follow its decoder:
//! integers of at most 5 octets, dynamic table size updates only before the first field and
//! never above the table size the server advertised (h2's `InvalidMaxDynamicSize`), indices
//! inside the tables, well-formed Huffman strings. loona-hpack does the decoding proper
//! (tables, Huffman); [`scan`] walks the representations first so size updates are placed and
//! bounded as h2 requires and the never-indexed flag of each field is kept for the re-encoding
//! (RFC 7541 §6.2.3: an intermediary MUST keep it).

/// The dynamic table size the server behind the rewriter advertises: the protocol's initial
/// `SETTINGS_HEADER_TABLE_SIZE`, which h2 uses unless told otherwise and tonic never changes
/// (pinned by a test that reads the SETTINGS a tonic server sends).
pub(super) const MAX_TABLE_SIZE: usize = 4_096;

/// The largest header list (RFC 9113 §6.5.2 size: name + value + 32 per field) and the
/// largest encoded block the rewriter holds for one request. Far above anything a gRPC client
/// sends over a unix socket (grpc-go and tonic refuse lists over 16 KiB by default); a block
/// past it ends the connection instead of growing memory without bound.
pub(super) const MAX_BLOCK_SIZE: usize = 1 << 20;

/// Why a header block cannot be decoded. Every case is an HPACK decoding error, which h2
/// answers with a connection error, so none is recoverable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum BlockError {
    /// The block ends inside a representation.
    #[error("header block ends inside a field")]
    Truncated,
    /// An integer longer than the 5 octets h2 accepts.
    #[error("integer representation too long")]
    IntegerOverflow,
    /// A dynamic table size update after a field (RFC 7541 §4.2).
    #[error("dynamic table size update after a header field")]
    SizeUpdateAfterField,
    /// A dynamic table size update above the advertised maximum (RFC 7541 §6.3).
    #[error("dynamic table size update to {0} above the maximum of {MAX_TABLE_SIZE}")]
    TableSizeTooLarge(usize),
    /// loona-hpack refused the fields (index out of range, bad Huffman string, …).
    #[error("HPACK decoding failed: {0}")]
    Decode(String),
    /// The decoded list or the block is larger than [`MAX_BLOCK_SIZE`].
    #[error("header list larger than {MAX_BLOCK_SIZE} bytes")]
    TooLarge,
}

/// One decoded header field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Field {
    pub(super) name: Vec<u8>,
    pub(super) value: Vec<u8>,
    /// Sent as "literal never indexed" (RFC 7541 §6.2.3).
    pub(super) never_indexed: bool,
}

impl Field {
    /// A field sent with an ordinary representation.
    pub(super) fn new(name: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Field {
        Field {
            name: name.into(),
            value: value.into(),
            never_indexed: false,
        }
    }

    /// RFC 9113 §6.5.2 size of the field.
    fn size(&self) -> usize {
        self.name.len() + self.value.len() + 32
    }
}

/// What [`scan`] learned about a block.
#[derive(Debug, PartialEq, Eq)]
struct Scan {
    /// Dynamic table size updates, in order, all before the first field.
    size_updates: Vec<usize>,
    /// Offset of the first field.
    fields_start: usize,
    /// The never-indexed flag of every field, in order.
    never_indexed: Vec<bool>,
}

/// Walks the representations of `block` without decoding strings.
fn scan(block: &[u8]) -> Result<Scan, BlockError> {
    let mut scan = Scan {
        size_updates: Vec::new(),
        fields_start: 0,
        never_indexed: Vec::new(),
    };
    let mut rest = block;
    while let Some(&first) = rest.first() {
        if first & 0x80 != 0 {
            // Indexed field (§6.1).
            (_, rest) = integer(rest, 7)?;
            scan.never_indexed.push(false);
        } else if first & 0xe0 == 0x20 {
            // Dynamic table size update (§6.3).
            if !scan.never_indexed.is_empty() {
                return Err(BlockError::SizeUpdateAfterField);
            }
            let size;
            (size, rest) = integer(rest, 5)?;
            if size > MAX_TABLE_SIZE {
                return Err(BlockError::TableSizeTooLarge(size));
            }
            scan.size_updates.push(size);
            scan.fields_start = block.len() - rest.len();
        } else {
            // Literal with incremental indexing (§6.2.1, 6-bit index), without indexing
            // (§6.2.2, 4-bit) or never indexed (§6.2.3, 4-bit, pattern 0001).
            let prefix = if first & 0x40 != 0 { 6 } else { 4 };
            let name_index;
            (name_index, rest) = integer(rest, prefix)?;
            if name_index == 0 {
                rest = skip_string(rest)?;
            }
            rest = skip_string(rest)?;
            scan.never_indexed.push(first & 0xf0 == 0x10);
        }
    }
    Ok(scan)
}

/// Reads an integer with an `prefix`-bit prefix (§5.1), at most 5 octets like h2.
fn integer(bytes: &[u8], prefix: u8) -> Result<(usize, &[u8]), BlockError> {
    const MAX_OCTETS: usize = 5;
    let (&first, mut rest) = bytes.split_first().ok_or(BlockError::Truncated)?;
    let mask = u8::MAX >> (8 - prefix);
    let mut value = usize::from(first & mask);
    if value < usize::from(mask) {
        return Ok((value, rest));
    }
    let mut shift = 0;
    for octets in 2..=MAX_OCTETS {
        let (&byte, tail) = rest.split_first().ok_or(BlockError::Truncated)?;
        rest = tail;
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok((value, rest));
        }
        if octets == MAX_OCTETS {
            break;
        }
    }
    Err(BlockError::IntegerOverflow)
}

/// Skips a string literal (§5.2).
fn skip_string(bytes: &[u8]) -> Result<&[u8], BlockError> {
    let (len, rest) = integer(bytes, 7)?;
    rest.get(len..).ok_or(BlockError::Truncated)
}

/// The decoding side of one connection: the client's dynamic table.
pub(super) struct Decoder {
    inner: loona_hpack::Decoder<'static>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder").finish_non_exhaustive()
    }
}

impl Decoder {
    pub(super) fn new() -> Decoder {
        let mut inner = loona_hpack::Decoder::new();
        inner.set_max_allowed_table_size(MAX_TABLE_SIZE);
        Decoder { inner }
    }

    /// Decodes one complete header block. After an error the table no longer matches the
    /// client's, so the connection must end.
    pub(super) fn decode(&mut self, block: &[u8]) -> Result<Vec<Field>, BlockError> {
        if block.len() > MAX_BLOCK_SIZE {
            return Err(BlockError::TooLarge);
        }
        let scan = scan(block)?;
        for &size in &scan.size_updates {
            // Checked against MAX_TABLE_SIZE by `scan`, so loona's assertion cannot fire.
            self.inner.set_max_table_size(size);
        }
        let mut fields = Vec::with_capacity(scan.never_indexed.len());
        let mut flags = scan.never_indexed.iter();
        let mut list_size = 0usize;
        let mut too_large = false;
        let mut mismatch = false;
        self.inner
            .decode_with_cb(&block[scan.fields_start..], |name, value| {
                let Some(&never_indexed) = flags.next() else {
                    mismatch = true;
                    return;
                };
                let field = Field {
                    name: name.into_owned(),
                    value: value.into_owned(),
                    never_indexed,
                };
                list_size = list_size.saturating_add(field.size());
                // Indexed fields can expand a small block into a huge list: stop keeping
                // them, but finish decoding (the error ends the connection anyway).
                too_large |= list_size > MAX_BLOCK_SIZE;
                if !too_large {
                    fields.push(field);
                }
            })
            .map_err(|err| BlockError::Decode(err.to_string()))?;
        if too_large {
            return Err(BlockError::TooLarge);
        }
        if mismatch || flags.next().is_some() {
            return Err(BlockError::Decode(
                "field count differs between scan and decoding".to_owned(),
            ));
        }
        Ok(fields)
    }
}

/// How a re-encoded block is written.
pub(super) enum Encoder {
    /// Every field as a literal with a literal name, never entering the server's dynamic
    /// table: the server's decoder state stays empty whatever the client did.
    Literal,
    /// loona-hpack's indexing encoder: new fields enter the dynamic table and repeats are
    /// sent as indices, like grpc-go's encoder. Only for a client-side test double whose
    /// server advertises the default table size.
    Indexing(Box<loona_hpack::Encoder<'static>>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encoder::Literal => "Literal",
            Encoder::Indexing(_) => "Indexing",
        })
    }
}

impl Encoder {
    /// Appends the encoding of `fields` to `out`.
    pub(super) fn encode(&mut self, fields: &[Field], out: &mut Vec<u8>) {
        for field in fields {
            match self {
                Encoder::Indexing(encoder) if !field.never_indexed => {
                    // Writing into a Vec cannot fail.
                    let _ = encoder.encode_header_into((&field.name, &field.value), out);
                }
                _ => literal(field, out),
            }
        }
    }
}

/// A literal field with a literal name (§6.2.2, or §6.2.3 when never indexed); no Huffman
/// coding, which the decoder on the other side accepts as well.
fn literal(field: &Field, out: &mut Vec<u8>) {
    out.push(if field.never_indexed { 0x10 } else { 0x00 });
    string(&field.name, out);
    string(&field.value, out);
}

fn string(bytes: &[u8], out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = loona_hpack::encoder::encode_integer_into(bytes.len(), 7, 0, out);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(fields: &[Field]) -> Vec<u8> {
        let mut out = Vec::new();
        Encoder::Literal.encode(fields, &mut out);
        out
    }

    #[test]
    fn integers_follow_rfc_7541_and_h2s_five_octet_limit() {
        // RFC 7541 C.1.1-C.1.3.
        assert_eq!(integer(&[0x0a], 5).unwrap().0, 10);
        assert_eq!(integer(&[0x1f, 0x9a, 0x0a], 5).unwrap().0, 1337);
        assert_eq!(integer(&[0x2a], 8).unwrap().0, 42);
        // Prefix bits above the prefix are ignored.
        assert_eq!(integer(&[0xea], 5).unwrap().0, 10);
        // The longest accepted: 31 + 0x7f + (0x7f << 7) + (0x7f << 14) + (0x0f << 21).
        assert_eq!(
            integer(&[0x1f, 0xff, 0xff, 0xff, 0x0f], 5).unwrap().0,
            33_554_462
        );
        assert_eq!(
            integer(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0x01], 5),
            Err(BlockError::IntegerOverflow)
        );
        assert_eq!(integer(&[0x1f, 0xff], 5), Err(BlockError::Truncated));
        assert_eq!(integer(&[], 5), Err(BlockError::Truncated));
    }

    #[test]
    fn rfc_7541_request_examples_decode_with_the_dynamic_table() {
        // C.3.1 and C.3.2: the second request refers to the first one's dynamic entry.
        let mut decoder = Decoder::new();
        let first = b"\x82\x86\x84\x41\x0fwww.example.com";
        assert_eq!(
            decoder.decode(first).unwrap(),
            [
                Field::new(":method", "GET"),
                Field::new(":scheme", "http"),
                Field::new(":path", "/"),
                Field::new(":authority", "www.example.com"),
            ]
        );
        let second = b"\x82\x86\x84\xbe\x58\x08no-cache";
        assert_eq!(
            decoder.decode(second).unwrap()[3..],
            [
                Field::new(":authority", "www.example.com"),
                Field::new("cache-control", "no-cache"),
            ]
        );
        // C.4.1: the same request with Huffman-coded strings.
        let mut decoder = Decoder::new();
        let huffman = b"\x82\x86\x84\x41\x8c\xf1\xe3\xc2\xe5\xf2\x3a\x6b\xa0\xab\x90\xf4\xff";
        assert_eq!(
            decoder.decode(huffman).unwrap()[3],
            Field::new(":authority", "www.example.com")
        );
    }

    #[test]
    fn malformed_blocks_are_refused_as_h2_refuses_them() {
        let cases: &[(&str, &[u8], BlockError)] = &[
            ("index 0", b"\x80", BlockError::Decode(String::new())),
            (
                "index past the tables",
                b"\xbe",
                BlockError::Decode(String::new()),
            ),
            ("truncated literal", b"\x00\x05ab", BlockError::Truncated),
            (
                "size update after a field",
                b"\x82\x20",
                BlockError::SizeUpdateAfterField,
            ),
            (
                "size update above 4096",
                b"\x3f\xe2\x1f",
                BlockError::TableSizeTooLarge(4_097),
            ),
            (
                "huffman with EOS padding > 7 bits",
                b"\x00\x01a\x82\xff\xff",
                BlockError::Decode(String::new()),
            ),
        ];
        for (what, block, expected) in cases {
            let got = Decoder::new().decode(block).unwrap_err();
            match expected {
                BlockError::Decode(_) => {
                    assert!(matches!(got, BlockError::Decode(_)), "{what}: {got:?}");
                }
                expected => assert_eq!(&got, expected, "{what}"),
            }
        }
    }

    #[test]
    fn size_updates_at_the_start_are_applied_and_may_end_the_block() {
        let mut decoder = Decoder::new();
        // A new entry, then a block of only a size update 0 (legal for h2) evicts it.
        assert_eq!(
            decoder.decode(b"\x40\x01a\x01b").unwrap(),
            [Field::new("a", "b")]
        );
        assert_eq!(decoder.decode(b"\xbe").unwrap(), [Field::new("a", "b")]);
        assert_eq!(decoder.decode(b"\x20").unwrap(), []);
        assert!(decoder.decode(b"\xbe").is_err());
        // Two updates in a row, then back up to the maximum.
        assert_eq!(
            decoder.decode(b"\x20\x3f\xe1\x1f\x82").unwrap(),
            [Field::new(":method", "GET")]
        );
    }

    #[test]
    fn never_indexed_fields_keep_their_representation() {
        let fields = [
            Field::new(":method", "POST"),
            Field {
                name: b"authorization".to_vec(),
                value: b"secret".to_vec(),
                never_indexed: true,
            },
            Field::new("x", ""),
        ];
        let block = encoded(&fields);
        assert_eq!(block[0], 0x00);
        assert_eq!(Decoder::new().decode(&block).unwrap(), fields);
        let mut indexing = Encoder::Indexing(Box::default());
        let mut block = Vec::new();
        indexing.encode(&fields, &mut block);
        indexing.encode(&fields, &mut block);
        let mut decoder = Decoder::new();
        // Two copies of the list in one block: the second uses indices for the indexed fields.
        let decoded = decoder.decode(&block).unwrap();
        assert_eq!(decoded[..3], fields);
        assert_eq!(decoded[3..], fields);
    }

    #[test]
    fn a_small_block_that_expands_past_the_limit_is_refused() {
        // One 4000-byte entry, then hundreds of one-octet references to it.
        let mut block = vec![0x40];
        string(b"n", &mut block);
        string(&[b'v'; 4_000], &mut block);
        block.extend(std::iter::repeat_n(0xbe, 300));
        assert_eq!(Decoder::new().decode(&block), Err(BlockError::TooLarge));
    }
}
