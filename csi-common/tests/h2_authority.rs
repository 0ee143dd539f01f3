//! The `:authority` layer against the real h2 server it protects.
//!
//! * A differential property test: random connections (header blocks encoded with and without
//!   the dynamic table, never-indexed fields, size updates, CONTINUATION splits, padding,
//!   priority, corrupted octets, random read boundaries) go once straight to an h2 server and
//!   once through [`RepairAuthority`]. With valid authorities both servers must see the same
//!   requests, field for field, and send the same connection and stream errors.
//! * Invalid authorities as grpc-go, grpc-java and C-core send them over unix sockets: h2 alone
//!   resets the stream with PROTOCOL_ERROR (the kubelet bug), through the layer it accepts.
//! * A real h2 client encoder (Huffman strings, dynamic table with eviction) through the layer.
//! * The defaults the layer relies on, read from the SETTINGS a tonic server really sends.

// Test helpers outside #[test] functions unwrap too: a failed set-up step should fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use csi_common::h2_authority::RepairAuthority;
use proptest::prelude::*;
use proto::pluginregistration::v1::registration_server::RegistrationServer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const PING: u8 = 0x6;
const SETTINGS: u8 = 0x4;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = len[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// What one side of the comparison observed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Observed {
    /// Requests the server application received, in order.
    requests: Vec<Request>,
    /// The connection error the server ended with: error code, and whether it sent GOAWAY.
    error: Option<(Option<u32>, bool)>,
    /// RST_STREAM frames the client received: (stream, code).
    resets: BTreeSet<(u32, u32)>,
}

#[derive(Debug, PartialEq, Eq)]
struct Request {
    method: String,
    authority: Option<String>,
    path: String,
    /// (name, value, sensitive) in order.
    fields: Vec<(String, Vec<u8>, bool)>,
}

/// Runs an h2 server on `io` that records every request (answering 200) and how it ended.
async fn serve<T: AsyncRead + AsyncWrite + Unpin>(
    io: T,
) -> (Vec<Request>, Option<(Option<u32>, bool)>) {
    let mut requests = Vec::new();
    let mut connection = match h2::server::handshake(io).await {
        Ok(connection) => connection,
        Err(err) => {
            return (
                requests,
                Some((err.reason().map(u32::from), err.is_go_away())),
            );
        }
    };
    while let Some(accepted) = connection.accept().await {
        let (request, mut respond) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                return (
                    requests,
                    Some((err.reason().map(u32::from), err.is_go_away())),
                );
            }
        };
        requests.push(Request {
            method: request.method().to_string(),
            authority: request.uri().authority().map(ToString::to_string),
            path: request.uri().path().to_owned(),
            fields: request
                .headers()
                .iter()
                .map(|(name, value)| {
                    (
                        name.to_string(),
                        value.as_bytes().to_vec(),
                        value.is_sensitive(),
                    )
                })
                .collect(),
        });
        let _ = respond.send_response(http::Response::new(()), true);
    }
    (requests, None)
}

/// Sends a client connection block by block: each block's chunks (with a task switch between
/// chunks, so reads see random boundaries), then a PING whose ACK proves h2 processed the
/// block and handed its request to the server application. Stops at a GOAWAY or the end of
/// the stream; a last PING round trip collects late RST_STREAM frames.
async fn exchange(blocks: &[Vec<Vec<u8>>], through_layer: bool) -> Observed {
    exchange_with(blocks, through_layer, true).await
}

/// [`exchange`], or with `rounds` false: everything at once, then the end of input, without
/// waiting for PING ACKs (for arbitrary octets, which may swallow a PING into a frame).
async fn exchange_with(blocks: &[Vec<Vec<u8>>], through_layer: bool, rounds: bool) -> Observed {
    let (mut client, server) = tokio::io::duplex(1 << 20);
    let server = if through_layer {
        tokio::spawn(serve(RepairAuthority::new(server)))
    } else {
        tokio::spawn(serve(server))
    };
    let mut resets = BTreeSet::new();
    let client_side = async {
        let mut start = PREFACE.to_vec();
        start.extend(frame(SETTINGS, 0, 0, &[]));
        client.write_all(&start).await.ok()?;
        for (round, chunks) in (0u64..).zip(blocks.iter().chain([&Vec::new()])) {
            for chunk in chunks {
                client.write_all(chunk).await.ok()?;
                tokio::task::yield_now().await;
            }
            if !rounds {
                continue;
            }
            client
                .write_all(&frame(PING, 0, 0, &round.to_be_bytes()))
                .await
                .ok()?;
            if !ping_acked(&mut client, round, &mut resets).await {
                break;
            }
        }
        // End of input: the server stops waiting for a frame that never completes.
        client.shutdown().await.ok()?;
        if !rounds {
            // Read to the end: the server closes once it has seen the end of input.
            ping_acked(&mut client, u64::MAX, &mut resets).await;
        }
        Some(())
    };
    tokio::time::timeout(Duration::from_secs(30), client_side)
        .await
        .expect("every PING was answered or the connection ended");
    let (requests, error) = tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("the server ended")
        .unwrap();
    drop(client);
    Observed {
        requests,
        error,
        resets,
    }
}

/// Reads server frames until the ACK of PING `round` (true) or a GOAWAY or the end (false).
async fn ping_acked(
    client: &mut DuplexStream,
    round: u64,
    resets: &mut BTreeSet<(u32, u32)>,
) -> bool {
    let mut head = [0u8; 9];
    loop {
        if client.read_exact(&mut head).await.is_err() {
            return false;
        }
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0; len];
        if client.read_exact(&mut payload).await.is_err() {
            return false;
        }
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        match head[3] {
            PING if head[4] & 1 == 1 && payload == round.to_be_bytes() => return true,
            RST_STREAM => {
                resets.insert((stream, code(&payload[..4])));
            }
            GOAWAY => return false,
            _ => {}
        }
    }
}

fn code(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes.try_into().unwrap())
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// How one header block is encoded and framed.
#[derive(Debug, Clone)]
struct BlockPlan {
    get: bool,
    authority: Option<&'static str>,
    extra: Vec<(String, String, u8)>,
    /// 0 = literal without indexing, 1 = never indexed, 2 = loona's indexing encoder.
    encoding: u8,
    size_update: Option<usize>,
    end_stream: bool,
    splits: Vec<prop::sample::Index>,
    padding: Option<u8>,
    priority: Option<(u32, u8)>,
    corrupt: Option<(prop::sample::Index, u8)>,
}

/// What clients send over unix sockets and h2 refuses: grpc-go's socket path (passthrough
/// resolver), an empty value (grpc-java, C-core), C-core's `unix:` target.
const INVALID_AUTHORITIES: &[&str] = &[
    "/var/lib/kubelet/plugins_registry/hostpath.csi.k8s.io-reg.sock",
    "",
    "unix:/csi/csi.sock",
    "unix:///csi/csi.sock",
];

const VALID_AUTHORITIES: &[&str] = &["localhost", "csi.example.com:443", "10.0.0.1", "[::1]:8080"];

fn block_plan() -> impl Strategy<Value = BlockPlan> {
    (
        any::<bool>(),
        prop::option::of(prop::sample::select(VALID_AUTHORITIES)),
        prop::collection::vec(("[a-z][a-z0-9-]{0,11}", "[ -~]{0,40}", 0u8..3), 0..6),
        0u8..3,
        prop::option::weighted(0.15, 0usize..=4096),
        any::<bool>(),
        prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        prop::option::weighted(0.3, 0u8..24),
        prop::option::weighted(0.3, (0u32..12, any::<u8>())),
        prop::option::weighted(0.2, (any::<prop::sample::Index>(), 1u8..=255)),
    )
        .prop_map(
            |(
                get,
                authority,
                extra,
                encoding,
                size_update,
                end_stream,
                splits,
                padding,
                priority,
                corrupt,
            )| {
                BlockPlan {
                    get,
                    authority,
                    extra,
                    encoding,
                    size_update,
                    end_stream,
                    splits,
                    padding,
                    priority,
                    corrupt,
                }
            },
        )
}

/// Encodes a plan's fields; `encoder` is the connection's indexing encoder.
fn encode(plan: &BlockPlan, encoder: &mut loona_hpack::Encoder<'static>) -> Vec<u8> {
    let mut fields: Vec<(Vec<u8>, Vec<u8>, u8)> = vec![
        (
            b":method".to_vec(),
            if plan.get {
                b"GET".to_vec()
            } else {
                b"POST".to_vec()
            },
            plan.encoding,
        ),
        (b":scheme".to_vec(), b"http".to_vec(), plan.encoding),
    ];
    if let Some(authority) = plan.authority {
        fields.push((
            b":authority".to_vec(),
            authority.as_bytes().to_vec(),
            plan.encoding,
        ));
    }
    fields.push((
        b":path".to_vec(),
        b"/csi.v1.Identity/Probe".to_vec(),
        plan.encoding,
    ));
    for (name, value, encoding) in &plan.extra {
        fields.push((
            name.clone().into_bytes(),
            value.clone().into_bytes(),
            *encoding.max(&plan.encoding),
        ));
    }
    let mut block = Vec::new();
    if let Some(size) = plan.size_update {
        encode_int(size, 5, 0x20, &mut block);
        encoder.set_max_table_size(size);
    }
    for (name, value, encoding) in &fields {
        match encoding {
            2 => encoder
                .encode_header_into((name, value), &mut block)
                .unwrap(),
            mode => {
                block.push(if *mode == 1 { 0x10 } else { 0x00 });
                encode_int(name.len(), 7, 0, &mut block);
                block.extend_from_slice(name);
                encode_int(value.len(), 7, 0, &mut block);
                block.extend_from_slice(value);
            }
        }
    }
    block
}

fn encode_int(value: usize, prefix: u8, bits: u8, out: &mut Vec<u8>) {
    loona_hpack::encoder::encode_integer_into(value, prefix, bits, out).unwrap();
}

/// The same block as one HEADERS frame without padding (PRIORITY and END_STREAM kept).
fn one_frame(plan: &BlockPlan) -> BlockPlan {
    BlockPlan {
        splits: Vec::new(),
        padding: None,
        ..plan.clone()
    }
}

/// The block with the plan's corruption applied.
fn corrupted(plan: &BlockPlan, mut block: Vec<u8>) -> Vec<u8> {
    if let Some((at, xor)) = plan.corrupt
        && !block.is_empty()
    {
        let at = at.index(block.len());
        block[at] ^= xor;
    }
    block
}

/// Whether a corruption turned some `:authority` into one h2 refuses, which the layer then
/// repairs on purpose (covered by the next property). Decodes the blocks in order with one
/// decoder, as a server would; stops at the first undecodable one (the connection ends there).
fn corruption_made_an_invalid_authority(plans: &[BlockPlan]) -> bool {
    let mut encoder = loona_hpack::Encoder::new();
    let mut decoder = loona_hpack::Decoder::new();
    for plan in plans {
        let block = corrupted(plan, encode(plan, &mut encoder));
        let Ok(fields) = decoder.decode(&block) else {
            return false;
        };
        if fields.iter().any(|(name, value)| {
            name == b":authority" && http::uri::Authority::try_from(&value[..]).is_err()
        }) {
            return true;
        }
    }
    false
}

/// Frames a plan's block on `stream_id`.
fn frames(plan: &BlockPlan, stream_id: u32, block: &[u8]) -> Vec<u8> {
    let mut cuts: Vec<usize> = plan
        .splits
        .iter()
        .map(|i| i.index(block.len() + 1))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut last = 0;
    for cut in cuts {
        pieces.push(&block[last..cut]);
        last = cut;
    }
    pieces.push(&block[last..]);

    let mut out = Vec::new();
    let count = pieces.len();
    for (i, piece) in pieces.into_iter().enumerate() {
        let end_headers = if i + 1 == count { END_HEADERS } else { 0 };
        if i == 0 {
            let mut flags = end_headers;
            let mut payload = Vec::new();
            if plan.end_stream {
                flags |= END_STREAM;
            }
            if let Some(pad) = plan.padding {
                flags |= PADDED;
                payload.push(pad);
            }
            if let Some((dependency, weight)) = plan.priority {
                flags |= PRIORITY;
                // Never the stream itself: h2 answers a self-dependency with a stream error
                // before it decodes the block, a case the layer handles better (see the
                // module docs of the rewriter).
                let dependency = if dependency == stream_id {
                    0
                } else {
                    dependency
                };
                payload.extend_from_slice(&dependency.to_be_bytes());
                payload.push(weight);
            }
            payload.extend_from_slice(piece);
            payload.extend(std::iter::repeat_n(
                0,
                usize::from(plan.padding.unwrap_or(0)),
            ));
            out.extend(frame(HEADERS, flags, stream_id, &payload));
        } else {
            out.extend(frame(CONTINUATION, end_headers, stream_id, piece));
        }
    }
    out
}

/// A client connection as per-block chunks: each plan's block encoded (one indexing encoder
/// for the whole connection), corrupted and framed on its own stream, then cut at the chunk
/// sizes.
fn connection(plans: &[BlockPlan], chunk_sizes: &[prop::sample::Index]) -> Vec<Vec<Vec<u8>>> {
    let mut encoder = loona_hpack::Encoder::new();
    let mut sizes = chunk_sizes.iter().cycle();
    let mut blocks = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let stream_id = u32::try_from(2 * i + 1).unwrap();
        let block = encode(plan, &mut encoder);
        let bytes = frames(plan, stream_id, &corrupted(plan, block));
        let mut chunks = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let size = sizes.next().map_or(rest.len(), |i| 1 + i.index(64));
            let (chunk, tail) = rest.split_at(size.min(rest.len()));
            chunks.push(chunk.to_vec());
            rest = tail;
        }
        blocks.push(chunks);
    }
    blocks
}

/// What h2 behind the layer observes of `sent`, and what h2 alone observes of `reference`.
fn layered_and_direct(
    sent: &[BlockPlan],
    reference: &[BlockPlan],
    chunk_sizes: &[prop::sample::Index],
) -> (Observed, Observed) {
    block_on(async {
        (
            exchange(&connection(sent, chunk_sizes), true).await,
            exchange(&connection(reference, chunk_sizes), false).await,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Valid authorities: h2 behind the layer sees exactly what h2 alone sees when the same
    /// blocks come in one unpadded HEADERS frame each, which is how the layer forwards them.
    /// (Compared with the split form itself, h2 alone is inconsistent: a malformed field in a
    /// CONTINUATION gets no RST_STREAM at all, while the same field in one HEADERS frame does.)
    #[test]
    fn with_valid_authorities_the_layer_is_invisible_to_h2(
        plans in prop::collection::vec(block_plan(), 1..5),
        chunk_sizes in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        prop_assume!(!corruption_made_an_invalid_authority(&plans));
        let reference: Vec<BlockPlan> = plans.iter().map(one_frame).collect();
        let (layered, direct) = layered_and_direct(&plans, &reference, &chunk_sizes);
        prop_assert_eq!(layered, direct);
    }

    /// Invalid authorities: through the layer h2 sees exactly what it sees when the client
    /// sends `localhost` instead (without the layer it resets every such stream).
    #[test]
    fn invalid_authorities_look_to_h2_like_localhost(
        plans in prop::collection::vec(block_plan(), 1..5),
        invalid in prop::collection::vec(prop::sample::select(INVALID_AUTHORITIES), 1..5),
        chunk_sizes in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let clean = |plan: &BlockPlan| BlockPlan { corrupt: None, ..plan.clone() };
        let sent: Vec<BlockPlan> = plans
            .iter()
            .zip(invalid.iter().cycle())
            .map(|(plan, &authority)| BlockPlan { authority: Some(authority), ..clean(plan) })
            .collect();
        let reference: Vec<BlockPlan> = plans
            .iter()
            .map(|plan| BlockPlan { authority: Some("localhost"), ..one_frame(&clean(plan)) })
            .collect();
        let (layered, direct) = layered_and_direct(&sent, &reference, &chunk_sizes);
        prop_assert_eq!(layered, direct);
    }

    /// Arbitrary octets after the preface: no panic, and h2 behind the layer never accepts a
    /// request h2 alone would not accept.
    #[test]
    fn random_octets_never_panic_and_never_make_a_request_h2_alone_refuses(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        headers_first in any::<bool>(),
    ) {
        let mut input = Vec::new();
        if headers_first {
            // Make a header frame likely: a HEADERS head whose length covers the rest.
            let len = u32::try_from(bytes.len()).unwrap().to_be_bytes();
            input.extend_from_slice(&len[1..]);
            input.extend_from_slice(&[HEADERS, END_HEADERS, 0, 0, 0, 1]);
        }
        input.extend_from_slice(&bytes);
        let blocks = vec![vec![input]];
        let (direct, layered) = block_on(async {
            (exchange_with(&blocks, false, false).await, exchange_with(&blocks, true, false).await)
        });
        prop_assert!(layered.requests.len() <= direct.requests.len());
        prop_assert_eq!(&layered.requests[..], &direct.requests[..layered.requests.len()]);
    }
}

fn grpc_request(authority: Option<&[u8]>) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (&b":method"[..], &b"POST"[..]),
        (b":scheme", b"http"),
        (b":path", b"/pluginregistration.Registration/GetInfo"),
    ] {
        literal(name, value, &mut block);
    }
    if let Some(authority) = authority {
        literal(b":authority", authority, &mut block);
    }
    literal(b"content-type", b"application/grpc", &mut block);
    literal(b"te", b"trailers", &mut block);
    frame(HEADERS, END_HEADERS | END_STREAM, 1, &block)
}

fn literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    encode_int(name.len(), 7, 0, out);
    out.extend_from_slice(name);
    encode_int(value.len(), 7, 0, out);
    out.extend_from_slice(value);
}

#[test]
fn the_authorities_of_unix_socket_clients_are_refused_by_h2_and_accepted_through_the_layer() {
    let cases: &[&[u8]] = &[
        // grpc-go with the passthrough resolver and a custom dialer (kubelet's plugin manager).
        b"/var/lib/kubelet/plugins_registry/hostpath.csi.k8s.io-reg.sock",
        // An empty authority (grpc-java and some C-core versions over unix sockets).
        b"",
        // C-core's unix: targets.
        b"unix:/csi/csi.sock",
    ];
    for &authority in cases {
        let blocks = vec![vec![grpc_request(Some(authority))]];
        let (direct, layered) = block_on(async {
            (
                exchange(&blocks, false).await,
                exchange(&blocks, true).await,
            )
        });
        // PROTOCOL_ERROR = 1: "stream terminated by RST_STREAM with error code: PROTOCOL_ERROR".
        assert_eq!(
            direct.resets,
            BTreeSet::from([(1, 1)]),
            "{}",
            String::from_utf8_lossy(authority)
        );
        assert!(direct.requests.is_empty());
        assert_eq!(
            layered.resets,
            BTreeSet::new(),
            "{}",
            String::from_utf8_lossy(authority)
        );
        assert_eq!(layered.requests.len(), 1);
        assert_eq!(layered.requests[0].authority.as_deref(), Some("localhost"));
        assert_eq!(
            layered.requests[0].path,
            "/pluginregistration.Registration/GetInfo"
        );
    }
    // `localhost` (grpc-go with unix: targets) and no authority at all pass as they are.
    for (authority, expected) in [(Some(&b"localhost"[..]), Some("localhost")), (None, None)] {
        let layered = block_on(exchange(&[vec![grpc_request(authority)]], true));
        assert_eq!(layered.requests[0].authority.as_deref(), expected);
    }
}

#[test]
fn a_real_h2_client_encoder_passes_through_unchanged() {
    // h2's client encoder uses Huffman strings and the dynamic table; 300 requests with
    // repeating and changing fields fill the 4 KiB table and force evictions.
    block_on(async {
        let (client, server) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(serve(RepairAuthority::new(server)));
        let (mut send, connection) = h2::client::handshake(client).await.unwrap();
        let driver = tokio::spawn(connection);
        let mut sent = Vec::new();
        for i in 0..300u32 {
            let value = format!("value-{}-{}", i % 17, "x".repeat((i % 7 * 40) as usize));
            let request = http::Request::builder()
                .method("POST")
                .uri(format!("http://csi.example.com/csi.v1.Node/Call{}", i % 5))
                .header("x-repeated", "same every time")
                .header(format!("x-name-{}", i % 11), value.as_str())
                .header(
                    "authorization",
                    http::HeaderValue::from_str(&format!("Bearer {i}"))
                        .map(|mut v| {
                            v.set_sensitive(true);
                            v
                        })
                        .unwrap(),
                )
                .body(())
                .unwrap();
            sent.push((i % 5, i % 11, value));
            let (response, _) = send.send_request(request, true).unwrap();
            assert_eq!(response.await.unwrap().status(), 200);
        }
        drop(send);
        driver.abort();
        let (requests, _) = server.await.unwrap();
        assert_eq!(requests.len(), 300);
        for (i, (request, (call, name, value))) in requests.iter().zip(&sent).enumerate() {
            assert_eq!(request.authority.as_deref(), Some("csi.example.com"));
            assert_eq!(request.path, format!("/csi.v1.Node/Call{call}"));
            let field = |n: &str| request.fields.iter().find(|f| f.0 == n).unwrap();
            assert_eq!(field("x-repeated").1, b"same every time");
            assert_eq!(field(&format!("x-name-{name}")).1, value.as_bytes());
            let authorization = field("authorization");
            assert_eq!(authorization.1, format!("Bearer {i}").as_bytes());
        }
    });
}

#[test]
fn tonic_servers_advertise_the_defaults_the_layer_relies_on() {
    // The layer assumes SETTINGS_HEADER_TABLE_SIZE 4096 and SETTINGS_MAX_FRAME_SIZE 16384: a
    // tonic server must not send other values.
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(Unused))
                .serve_with_incoming(incoming),
        );
        let mut client = tokio::net::UnixStream::connect(&path).await.unwrap();
        let mut start = PREFACE.to_vec();
        start.extend(frame(SETTINGS, 0, 0, &[]));
        client.write_all(&start).await.unwrap();
        let mut head = [0u8; 9];
        client.read_exact(&mut head).await.unwrap();
        assert_eq!(head[3], SETTINGS, "the server's first frame");
        let len = usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0; len];
        client.read_exact(&mut payload).await.unwrap();
        for setting in payload.chunks(6) {
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            match id {
                0x1 => assert_eq!(value, 4096, "SETTINGS_HEADER_TABLE_SIZE"),
                0x5 => assert_eq!(value, 16_384, "SETTINGS_MAX_FRAME_SIZE"),
                _ => {}
            }
        }
        server.abort();
    });
}

/// Any service will do: a Registration server that is never called.
#[derive(Debug)]
struct Unused;

#[tonic::async_trait]
impl proto::pluginregistration::v1::registration_server::Registration for Unused {
    async fn get_info(
        &self,
        _: tonic::Request<proto::pluginregistration::v1::InfoRequest>,
    ) -> Result<tonic::Response<proto::pluginregistration::v1::PluginInfo>, tonic::Status> {
        Err(tonic::Status::unimplemented("unused"))
    }

    async fn notify_registration_status(
        &self,
        _: tonic::Request<proto::pluginregistration::v1::RegistrationStatus>,
    ) -> Result<
        tonic::Response<proto::pluginregistration::v1::RegistrationStatusResponse>,
        tonic::Status,
    > {
        Err(tonic::Status::unimplemented("unused"))
    }
}

/// RFC 9113 §5.3.1: a stream depending on itself is a stream error. h2 alone resets the stream
/// without decoding the block, so when the block continues in a CONTINUATION it then ends the
/// whole connection; behind the layer the block arrives joined and only the stream is reset.
#[test]
fn a_self_dependent_split_block_costs_the_stream_not_the_connection() {
    let mut block = Vec::new();
    literal(b":method", b"POST", &mut block);
    literal(b":scheme", b"http", &mut block);
    literal(b":path", b"/x", &mut block);
    let (first, rest) = block.split_at(4);
    let mut payload = vec![0, 0, 0, 1, 16];
    payload.extend_from_slice(first);
    let mut bytes = frame(HEADERS, PRIORITY | END_STREAM, 1, &payload);
    bytes.extend(frame(CONTINUATION, END_HEADERS, 1, rest));
    let blocks = vec![vec![bytes]];
    let (direct, layered) = block_on(async {
        (
            exchange(&blocks, false).await,
            exchange(&blocks, true).await,
        )
    });
    assert_eq!(direct.error, Some((Some(1), true)), "{direct:?}");
    assert_eq!(layered.error, None, "{layered:?}");
    assert_eq!(layered.resets, BTreeSet::from([(1, 1)]));
    assert!(layered.requests.is_empty());
}
