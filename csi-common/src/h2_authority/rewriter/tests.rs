use super::*;

const SOCKET: &[u8] = b"/var/lib/kubelet/plugins_registry/hostpath.csi.k8s.io-reg.sock";

/// Client SETTINGS as grpc-go sends them first (one setting: an initial window size).
const SETTINGS: &[u8] = &[0, 0, 6, 0x4, 0, 0, 0, 0, 0, 0, 0x4, 0, 0x40, 0, 0];

fn request(authority: Option<&[u8]>) -> Vec<Field> {
    let mut fields = vec![
        Field::new(":method", "POST"),
        Field::new(":scheme", "http"),
        Field::new(":path", "/pluginregistration.Registration/GetInfo"),
    ];
    if let Some(authority) = authority {
        fields.push(Field::new(":authority", authority));
    }
    fields.push(Field::new("content-type", "application/grpc"));
    fields.push(Field::new("user-agent", "grpc-go/1.72.1"));
    fields.push(Field::new("te", "trailers"));
    fields
}

fn block(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    Encoder::Literal.encode(fields, &mut out);
    out
}

/// A HEADERS frame with `flags` around `payload` (already padded or prioritised).
fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_head(&mut out, payload.len(), kind, flags, stream_id);
    out.extend_from_slice(payload);
    out
}

fn connection(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = PREFACE.to_vec();
    bytes.extend_from_slice(SETTINGS);
    for f in frames {
        bytes.extend_from_slice(f);
    }
    bytes
}

fn rewrite(policy: Policy, input: &[u8]) -> (Vec<u8>, Rewriter) {
    let mut rewriter = Rewriter::new(policy, Encoding::Literal);
    let mut out = Vec::new();
    rewriter.push(input, &mut out);
    (out, rewriter)
}

/// Splits a rewritten connection into its frames and decodes every header block.
fn frames_of(bytes: &[u8]) -> Vec<(Head, Vec<Field>)> {
    assert_eq!(&bytes[..PREFACE.len()], PREFACE);
    let mut rest = &bytes[PREFACE.len()..];
    let mut decoder = Decoder::new();
    let mut frames = Vec::new();
    let mut block = Vec::new();
    while let Some(head) = Head::parse(rest) {
        let payload = &rest[HEAD_LEN..HEAD_LEN + head.len];
        rest = &rest[HEAD_LEN + head.len..];
        match head.kind {
            HEADERS | CONTINUATION => {
                let skip = if head.has(PRIORITY) { 5 } else { 0 };
                assert!(!head.has(PADDED), "padding is never forwarded");
                block.extend_from_slice(&payload[skip..]);
                if head.has(END_HEADERS) {
                    frames.push((head, decoder.decode(&block).unwrap()));
                    block.clear();
                }
            }
            _ => frames.push((head, Vec::new())),
        }
    }
    assert!(rest.is_empty(), "trailing octets: {rest:?}");
    frames
}

#[test]
fn the_socket_path_grpc_go_sends_becomes_localhost() {
    let input = connection(&[frame(
        HEADERS,
        END_HEADERS,
        1,
        &block(&request(Some(SOCKET))),
    )]);
    let (out, rewriter) = rewrite(Policy::Repair, &input);
    let frames = frames_of(&out);
    assert_eq!(frames[0].0.kind, 0x4, "SETTINGS passes first, untouched");
    assert_eq!(
        &out[PREFACE.len()..PREFACE.len() + SETTINGS.len()],
        SETTINGS
    );
    assert_eq!(frames[1].1, request(Some(b"localhost")));
    assert_eq!(frames[1].0.flags, END_HEADERS);
    assert_eq!(rewriter.rewritten(), 1);
}

#[test]
fn each_authority_is_repaired_only_when_h2_would_refuse_it() {
    type Sent<'a> = Option<&'a [u8]>;
    let cases: &[(Sent<'_>, Sent<'_>)] = &[
        (Some(SOCKET), Some(b"localhost")),
        (Some(b""), Some(b"localhost")),
        (Some(b"unix:/run/csi/socket"), Some(b"localhost")),
        (Some(b"localhost"), Some(b"localhost")),
        (Some(b"csi.example.com:443"), Some(b"csi.example.com:443")),
        (Some(b"[::1]:8080"), Some(b"[::1]:8080")),
        (None, None),
    ];
    for &(sent, expected) in cases {
        let input = connection(&[frame(HEADERS, END_HEADERS, 1, &block(&request(sent)))]);
        let (out, _) = rewrite(Policy::Repair, &input);
        assert_eq!(frames_of(&out)[1].1, request(expected), "sent {sent:?}");
    }
}

#[test]
fn octet_by_octet_input_gives_the_same_output_as_one_push() {
    let body = frame(0x0, 0x1, 1, &[7; 100]);
    let input = connection(&[
        frame(HEADERS, END_HEADERS, 1, &block(&request(Some(SOCKET)))),
        body,
        frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &block(&[Field::new("grpc-status", "0")]),
        ),
    ]);
    let (whole, _) = rewrite(Policy::Repair, &input);
    let mut rewriter = Rewriter::new(Policy::Repair, Encoding::Literal);
    let mut pieces = Vec::new();
    for octet in &input {
        rewriter.push(std::slice::from_ref(octet), &mut pieces);
    }
    assert_eq!(pieces, whole);
    let frames = frames_of(&whole);
    assert_eq!(frames[2].0.kind, 0x0, "DATA passes untouched");
    assert_eq!(
        frames[3].1,
        [Field::new("grpc-status", "0")],
        "trailers untouched"
    );
}

#[test]
fn padding_is_dropped_and_priority_and_end_stream_are_kept() {
    let fragment = block(&request(Some(SOCKET)));
    let mut payload = vec![10];
    payload.extend_from_slice(&[0x80, 0, 0, 0, 42]);
    payload.extend_from_slice(&fragment);
    payload.extend_from_slice(&[0; 10]);
    let input = connection(&[frame(
        HEADERS,
        END_HEADERS | END_STREAM | PADDED | PRIORITY,
        3,
        &payload,
    )]);
    let (out, _) = rewrite(Policy::Repair, &input);
    let start = PREFACE.len() + SETTINGS.len();
    let head = Head::parse(&out[start..]).unwrap();
    assert_eq!(head.flags, END_HEADERS | END_STREAM | PRIORITY);
    assert_eq!(head.stream_id, 3);
    assert_eq!(
        &out[start + HEAD_LEN..start + HEAD_LEN + 5],
        [0x80, 0, 0, 0, 42]
    );
    assert_eq!(frames_of(&out)[1].1, request(Some(b"localhost")));
}

#[test]
fn continuations_are_joined_into_one_block() {
    let fragment = block(&request(Some(SOCKET)));
    let (a, rest) = fragment.split_at(5);
    let (b, c) = rest.split_at(20);
    let input = connection(&[
        frame(HEADERS, 0, 5, a),
        frame(CONTINUATION, 0, 5, b),
        frame(CONTINUATION, END_HEADERS, 5, c),
    ]);
    let (out, _) = rewrite(Policy::Repair, &input);
    let frames = frames_of(&out);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[1].0.kind, HEADERS);
    assert_eq!(frames[1].1, request(Some(b"localhost")));
}

#[test]
fn framing_errors_reach_h2_exactly_as_sent() {
    let fragment = block(&request(Some(b"localhost")));
    let cases: &[(&str, Vec<Vec<u8>>)] = &[
        (
            "CONTINUATION without HEADERS",
            vec![frame(CONTINUATION, END_HEADERS, 1, &fragment)],
        ),
        (
            "HEADERS on stream 0",
            vec![frame(HEADERS, END_HEADERS, 0, &fragment)],
        ),
        (
            "padding longer than the payload",
            vec![frame(HEADERS, END_HEADERS | PADDED, 1, &[200, 0x82])],
        ),
        (
            "PRIORITY flag without its fields",
            vec![frame(HEADERS, END_HEADERS | PRIORITY, 1, &[0, 0])],
        ),
        (
            "client PUSH_PROMISE",
            vec![frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x82])],
        ),
        (
            "DATA while a block is open",
            vec![frame(HEADERS, 0, 1, &fragment[..3]), frame(0x0, 0, 1, b"x")],
        ),
        (
            "CONTINUATION of another stream",
            vec![
                frame(HEADERS, 0, 1, &fragment[..3]),
                frame(CONTINUATION, END_HEADERS, 3, &fragment[3..]),
            ],
        ),
        (
            "frame over 16 KiB",
            vec![frame(HEADERS, END_HEADERS, 1, &vec![0; MAX_FRAME_SIZE + 1])],
        ),
    ];
    for (what, frames) in cases {
        let input = connection(frames);
        let (out, rewriter) = rewrite(Policy::Repair, &input);
        assert_eq!(out, input, "{what}");
        // And everything after it too.
        let mut more = Vec::new();
        let mut rewriter = rewriter;
        rewriter.push(&frame(HEADERS, END_HEADERS, 7, &fragment), &mut more);
        assert_eq!(more, frame(HEADERS, END_HEADERS, 7, &fragment), "{what}");
    }
    // A client that does not speak HTTP/2 at all.
    let (out, _) = rewrite(Policy::Repair, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(out, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
}

#[test]
fn an_undecodable_block_becomes_one_h2_refuses_and_nothing_follows() {
    let input = connection(&[
        frame(HEADERS, END_HEADERS, 1, &[0xbe]),
        frame(0x6, 0, 0, &[0; 8]),
    ]);
    let (out, rewriter) = rewrite(Policy::Repair, &input);
    let start = PREFACE.len() + SETTINGS.len();
    assert_eq!(&out[..start], &input[..start]);
    assert_eq!(
        &out[start..],
        frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x80])
    );
    assert!(rewriter.is_closed());
}

#[test]
fn a_block_over_the_limit_is_refused_before_it_is_complete() {
    let mut frames = vec![frame(HEADERS, 0, 1, &[0; MAX_FRAME_SIZE])];
    for _ in 0..MAX_BLOCK_SIZE / MAX_FRAME_SIZE {
        frames.push(frame(CONTINUATION, 0, 1, &[0; MAX_FRAME_SIZE]));
    }
    let (out, rewriter) = rewrite(Policy::Repair, &connection(&frames));
    assert!(rewriter.is_closed());
    assert!(out.ends_with(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x80])));
}

#[test]
fn a_large_block_is_cut_into_frames_h2_accepts() {
    let mut fields = request(Some(SOCKET));
    fields.push(Field::new("x-big", vec![b'v'; 40_000]));
    let fragment = block(&fields);
    let mut frames = vec![frame(HEADERS, 0, 1, &fragment[..MAX_FRAME_SIZE])];
    for chunk in fragment[MAX_FRAME_SIZE..].chunks(MAX_FRAME_SIZE) {
        frames.push(frame(CONTINUATION, 0, 1, chunk));
    }
    let last = frames.len() - 1;
    frames[last][4] = END_HEADERS;
    let (out, _) = rewrite(Policy::Repair, &connection(&frames));
    let mut expected = fields.clone();
    expected[3].value = b"localhost".to_vec();
    assert_eq!(frames_of(&out)[1].1, expected);
}

#[test]
fn a_client_side_policy_sets_or_removes_the_authority_of_requests_only() {
    let input = connection(&[
        frame(
            HEADERS,
            END_HEADERS,
            1,
            &block(&request(Some(b"localhost"))),
        ),
        frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &block(&[Field::new("grpc-status", "0")]),
        ),
    ]);
    let (out, rewriter) = rewrite(Policy::Set(SOCKET.to_vec()), &input);
    let frames = frames_of(&out);
    assert_eq!(frames[1].1, request(Some(SOCKET)));
    assert_eq!(frames[2].1, [Field::new("grpc-status", "0")]);
    assert_eq!(rewriter.rewritten(), 1);

    let (out, _) = rewrite(Policy::Remove, &input);
    assert_eq!(frames_of(&out)[1].1, request(None));

    // Inserted after the pseudo-header fields when the client sent none.
    let input = connection(&[frame(HEADERS, END_HEADERS, 1, &block(&request(None)))]);
    let (out, _) = rewrite(Policy::Set(b"".to_vec()), &input);
    assert_eq!(frames_of(&out)[1].1, request(Some(b"")));
}

#[test]
fn at_the_end_of_input_held_back_octets_go_out_as_received() {
    let fragment = block(&request(Some(SOCKET)));
    let open_block = frame(HEADERS, 0, 1, &fragment);
    let half_frame = frame(CONTINUATION, END_HEADERS, 1, &[0x82; 50]);
    let input = connection(&[open_block, half_frame[..20].to_vec()]);
    let (mut out, mut rewriter) = rewrite(Policy::Repair, &input);
    assert_eq!(
        out,
        connection(&[]),
        "the open block and the partial frame are held back"
    );
    rewriter.end(&mut out);
    assert_eq!(out, input);
    // Nothing is held back or rewritten after that.
    let mut more = Vec::new();
    rewriter.push(&half_frame[20..], &mut more);
    assert_eq!(more, &half_frame[20..]);
}
