//! The wire renderer against the former `DynamicMessage` renderer (the oracle): the same
//! output for hand-made encodings of every rule (merges, `oneof` switches, packed lists,
//! explicit defaults, unknown fields, duplicate map keys, bad strings) and for seeded random
//! encodings of every message in the descriptor set.

use prost::bytes::BufMut as _;
use prost::encoding::{WireType, encode_key, encode_varint};
use prost_reflect::{Kind, MessageDescriptor};

use super::super::{reflection, sanitized_json_by_name, sanitized_json_by_name_dynamic};

fn both(name: &str, bytes: &[u8]) -> (Option<String>, Option<String>) {
    (
        sanitized_json_by_name(name, bytes),
        sanitized_json_by_name_dynamic(name, bytes),
    )
}

fn assert_same(name: &str, bytes: &[u8]) -> Option<String> {
    let (wire, dynamic) = both(name, bytes);
    assert_eq!(wire, dynamic, "{name} {bytes:02x?}");
    wire
}

fn key(out: &mut Vec<u8>, number: u32, wire_type: WireType) {
    encode_key(number, wire_type, out);
}

fn varint(out: &mut Vec<u8>, number: u32, value: u64) {
    key(out, number, WireType::Varint);
    encode_varint(value, out);
}

fn delimited(out: &mut Vec<u8>, number: u32, content: &[u8]) {
    key(out, number, WireType::LengthDelimited);
    encode_varint(content.len() as u64, out);
    out.put_slice(content);
}

fn entry(key_bytes: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    delimited(&mut out, 1, key_bytes);
    delimited(&mut out, 2, value);
    out
}

#[test]
fn hand_made_encodings_of_fields_and_maps_render_as_the_dynamic_message_did() {
    // csi.v1.CreateVolumeRequest: name 1, capacity_range 2, volume_capabilities 3,
    // parameters 4, secrets 5; CapacityRange: required_bytes 1, limit_bytes 2.
    let request = "csi.v1.CreateVolumeRequest";
    let mut b = Vec::new();
    delimited(&mut b, 1, b"first");
    delimited(&mut b, 1, b"last");
    assert_eq!(assert_same(request, &b).unwrap(), r#"{"name":"last"}"#);

    // A singular message occurring twice is the merge of both.
    let mut range_a = Vec::new();
    varint(&mut range_a, 1, 10);
    let mut range_b = Vec::new();
    varint(&mut range_b, 2, 20);
    let mut b = Vec::new();
    delimited(&mut b, 2, &range_a);
    delimited(&mut b, 2, &range_b);
    assert_eq!(
        assert_same(request, &b).unwrap(),
        r#"{"capacity_range":{"limit_bytes":20,"required_bytes":10}}"#
    );

    // Explicit defaults are unset; an empty message is set.
    let mut b = Vec::new();
    delimited(&mut b, 1, b"");
    delimited(&mut b, 2, b"");
    assert_eq!(
        assert_same(request, &b).unwrap(),
        r#"{"capacity_range":{}}"#
    );

    // Duplicate map keys keep the last value; an entry without key or value has defaults.
    let mut b = Vec::new();
    delimited(&mut b, 4, &entry(b"k", b"one"));
    delimited(&mut b, 4, &entry(b"k", b"two"));
    let mut only_value = Vec::new();
    delimited(&mut only_value, 2, b"v");
    delimited(&mut b, 4, &only_value);
    delimited(&mut b, 4, b"");
    assert_eq!(
        assert_same(request, &b).unwrap(),
        r#"{"parameters":{"":"","k":"two"}}"#
    );

    // Secrets print as stripped, but must still decode.
    let mut b = Vec::new();
    delimited(&mut b, 5, &entry(b"password", b"hunter2"));
    assert_eq!(
        assert_same(request, &b).unwrap(),
        r#"{"secrets":"***stripped***"}"#
    );
    let mut b = Vec::new();
    delimited(&mut b, 5, &entry(b"password", &[0xff, 0xfe]));
    assert_eq!(assert_same(request, &b), None);

    // Unknown fields of every wire type, a group included, are skipped.
    let mut b = Vec::new();
    varint(&mut b, 900, 1);
    delimited(&mut b, 901, b"x");
    key(&mut b, 902, WireType::ThirtyTwoBit);
    b.put_u32_le(7);
    key(&mut b, 903, WireType::SixtyFourBit);
    b.put_u64_le(7);
    key(&mut b, 904, WireType::StartGroup);
    varint(&mut b, 1, 5);
    key(&mut b, 904, WireType::EndGroup);
    delimited(&mut b, 1, b"n");
    assert_eq!(assert_same(request, &b).unwrap(), r#"{"name":"n"}"#);

    // A known field with the wrong wire type, a bad string, a truncated value: undecodable.
    for bad in [
        {
            let mut b = Vec::new();
            varint(&mut b, 1, 5);
            b
        },
        {
            let mut b = Vec::new();
            delimited(&mut b, 1, &[0xc3]);
            b
        },
        vec![0x0a, 0x05, b'a'],
        vec![0x0b],
    ] {
        assert_eq!(assert_same(request, &bad), None);
    }
}

#[test]
fn oneof_switches_and_enums_render_as_the_dynamic_message_did() {
    // csi.v1.VolumeCapability: block 1 and mount 2 form a oneof; access_mode 3.
    // Setting a member clears the others, and what the member had before.
    let capability = "csi.v1.VolumeCapability";
    let mut mount_a = Vec::new();
    delimited(&mut mount_a, 1, b"ext4");
    let mut mount_b = Vec::new();
    delimited(&mut mount_b, 2, b"noatime");
    let mut b = Vec::new();
    delimited(&mut b, 2, &mount_a);
    delimited(&mut b, 1, b"");
    delimited(&mut b, 2, &mount_b);
    assert_eq!(
        assert_same(capability, &b).unwrap(),
        r#"{"mount":{"mount_flags":["noatime"]}}"#
    );
    let mut b = Vec::new();
    delimited(&mut b, 2, &mount_a);
    delimited(&mut b, 1, b"");
    assert_eq!(assert_same(capability, &b).unwrap(), r#"{"block":{}}"#);
    // An overwritten member must still decode.
    let mut bad_mount = Vec::new();
    delimited(&mut bad_mount, 1, &[0xff]);
    let mut b = Vec::new();
    delimited(&mut b, 2, &bad_mount);
    delimited(&mut b, 1, b"");
    assert_eq!(assert_same(capability, &b), None);

    // Enums by name, or by number when unknown.
    let mut mode = Vec::new();
    varint(&mut mode, 1, 1);
    let mut b = Vec::new();
    delimited(&mut b, 3, &mode);
    assert_eq!(
        assert_same(capability, &b).unwrap(),
        r#"{"access_mode":{"mode":"SINGLE_NODE_WRITER"}}"#
    );
    let mut mode = Vec::new();
    varint(&mut mode, 1, 999);
    let mut b = Vec::new();
    delimited(&mut b, 3, &mode);
    assert_eq!(
        assert_same(capability, &b).unwrap(),
        r#"{"access_mode":{"mode":999}}"#
    );
}

/// splitmix64: a seeded generator, so a failure names its case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const STRINGS: &[&[u8]] = &[
    b"",
    b"a",
    b"k",
    b"zone-1",
    "ünïcödé <&>".as_bytes(),
    b"\n\t\"q\"",
];

fn string(rng: &mut Rng) -> Vec<u8> {
    if rng.chance(3) {
        return vec![0xff, b'x'];
    }
    STRINGS[rng.below(STRINGS.len())].to_vec()
}

fn random_number(rng: &mut Rng) -> u64 {
    match rng.below(4) {
        0 => 0,
        1 => rng.next() % 4,
        2 => rng.next() % 100_000,
        _ => rng.next(),
    }
}

/// One value of `kind` for field `number`, mostly with its own wire type.
fn value(out: &mut Vec<u8>, rng: &mut Rng, number: u32, kind: &Kind, depth: u32) {
    if rng.chance(2) {
        // The wrong wire type for the kind.
        match kind {
            Kind::String | Kind::Bytes | Kind::Message(_) => varint(out, number, 1),
            _ => delimited(out, number, &[1, 2]),
        }
        return;
    }
    match kind {
        Kind::Message(message) => {
            let content = message_bytes(rng, message, depth + 1);
            delimited(out, number, &content);
        }
        Kind::String | Kind::Bytes => delimited(out, number, &string(rng)),
        Kind::Fixed32 | Kind::Sfixed32 | Kind::Float => {
            key(out, number, WireType::ThirtyTwoBit);
            out.put_u32_le(u32::try_from(random_number(rng) & 0xffff_ffff).unwrap_or(0));
        }
        Kind::Fixed64 | Kind::Sfixed64 | Kind::Double => {
            key(out, number, WireType::SixtyFourBit);
            out.put_u64_le(random_number(rng));
        }
        _ => varint(out, number, random_number(rng)),
    }
}

/// A random encoding of `message`: known fields (maps, packed and unpacked lists, repeated
/// singular fields) and unknown ones, in random order.
fn message_bytes(rng: &mut Rng, message: &MessageDescriptor, depth: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let fields: Vec<_> = message.fields().collect();
    if depth > 3 {
        return out;
    }
    for _ in 0..rng.below(7) {
        if fields.is_empty() || rng.chance(10) {
            let unknown = 5000 + u32::try_from(rng.below(3)).unwrap_or(0);
            if rng.chance(50) {
                varint(&mut out, unknown, random_number(rng));
            } else {
                delimited(&mut out, unknown, &string(rng));
            }
            continue;
        }
        let field = &fields[rng.below(fields.len())];
        let kind = field.kind();
        if field.is_map() {
            let Kind::Message(entry_type) = &kind else {
                continue;
            };
            // Map entries are always length-delimited here (see the wire module's note).
            let mut content = Vec::new();
            for part in [1_u32, 2] {
                if rng.chance(85)
                    && let Some(part_field) = entry_type.get_field(part)
                {
                    value(&mut content, rng, part, &part_field.kind(), depth);
                }
            }
            delimited(&mut out, field.number(), &content);
        } else if field.is_list()
            && !matches!(kind, Kind::String | Kind::Bytes | Kind::Message(_))
            && rng.chance(50)
        {
            let mut packed = Vec::new();
            for _ in 0..rng.below(4) {
                let mut item = Vec::new();
                value(&mut item, rng, 1, &kind, depth);
                // Drop the key: packed items are bare values.
                packed.extend_from_slice(&item[1..]);
            }
            delimited(&mut out, field.number(), &packed);
        } else {
            value(&mut out, rng, field.number(), &kind, depth);
        }
    }
    out
}

#[test]
fn random_encodings_of_every_message_render_as_the_dynamic_message_did() {
    let pool = &reflection().pool;
    let messages: Vec<MessageDescriptor> = pool
        .all_messages()
        .filter(|m| {
            !m.is_map_entry() && !m.full_name().starts_with("google.protobuf.")
                || m.full_name().starts_with("google.protobuf.Timestamp")
        })
        .collect();
    assert!(messages.len() > 50, "{}", messages.len());
    let mut rng = Rng(0x5eed);
    let (mut rendered, mut undecodable) = (0, 0);
    for case in 0..20_000 {
        let message = &messages[rng.below(messages.len())];
        let bytes = message_bytes(&mut rng, message, 0);
        let (wire, dynamic) = both(message.full_name(), &bytes);
        assert_eq!(
            wire,
            dynamic,
            "case {case}: {} {bytes:02x?}",
            message.full_name()
        );
        if wire.is_some() {
            rendered += 1;
        } else {
            undecodable += 1;
        }
    }
    // Both outcomes were exercised, not just one.
    assert!(
        rendered > 10_000 && undecodable > 1_000,
        "{rendered} {undecodable}"
    );
}

#[test]
fn truncated_and_flipped_encodings_never_render_differently() {
    let pool = &reflection().pool;
    let message = pool
        .get_message_by_name("csi.v1.CreateVolumeRequest")
        .unwrap();
    let mut rng = Rng(7);
    for case in 0..5_000 {
        let mut bytes = message_bytes(&mut rng, &message, 0);
        if bytes.is_empty() {
            continue;
        }
        let at = rng.below(bytes.len());
        if rng.chance(50) {
            bytes.truncate(at);
        } else {
            bytes[at] ^= 1 << rng.below(8);
        }
        let (wire, dynamic) = both(message.full_name(), &bytes);
        // A flipped byte may turn a map entry into another wire type, which the wire
        // renderer refuses and the dynamic one read on (the module's first difference);
        // otherwise both agree.
        if wire.is_none() && dynamic.is_some() {
            assert!(
                has_unframed_map_entry(&message, &bytes),
                "case {case}: refused but not for a map entry: {bytes:02x?}"
            );
        } else {
            assert_eq!(wire, dynamic, "case {case}: {bytes:02x?}");
        }
    }
}

/// Whether `bytes` (which decode as `message`) hold, at any depth, a map field's key with a
/// wire type other than length-delimited.
fn has_unframed_map_entry(message: &MessageDescriptor, bytes: &[u8]) -> bool {
    let mut buf = bytes;
    while !buf.is_empty() {
        let Ok((number, wire_type)) = prost::encoding::decode_key(&mut buf) else {
            return false;
        };
        let field = message.get_field(number);
        // Checked before skipping: the dynamic decode reads such an entry as framed, whatever
        // follows (a start-group key, say, that has no end).
        if field
            .as_ref()
            .is_some_and(|f| f.is_map() && wire_type != WireType::LengthDelimited)
        {
            return true;
        }
        let start = buf;
        if prost::encoding::skip_field(
            wire_type,
            number,
            &mut buf,
            prost::encoding::DecodeContext::default(),
        )
        .is_err()
        {
            return false;
        }
        let Some(field) = field else {
            continue;
        };
        if let (Kind::Message(inner), WireType::LengthDelimited) = (field.kind(), wire_type) {
            let mut value = &start[..start.len() - buf.len()];
            let Ok(_) = prost::encoding::decode_varint(&mut value) else {
                return false;
            };
            if has_unframed_map_entry(&inner, value) {
                return true;
            }
        }
    }
    false
}

#[test]
fn a_large_answer_renders_without_holding_a_decoded_copy() {
    // 40,000 distinct topologies: the output is the only large allocation, so this is
    // about the size of the JSON, not twenty times the message (checked by the chaos row's
    // peak RSS; here the output is checked).
    let mut volume = Vec::new();
    for i in 0..40_000 {
        let mut segment = Vec::new();
        delimited(&mut segment, 1, b"topology.example.com/zone");
        delimited(&mut segment, 2, format!("zone-{i:05}").as_bytes());
        let mut topology = Vec::new();
        delimited(&mut topology, 1, &segment);
        delimited(&mut volume, 5, &topology);
    }
    delimited(&mut volume, 2, b"vol-1");
    let mut response = Vec::new();
    delimited(&mut response, 1, &volume);
    let json = assert_same("csi.v1.CreateVolumeResponse", &response).unwrap();
    assert!(json.starts_with(r#"{"volume":{"accessible_topology":[{"segments":{"topology.example.com/zone":"zone-00000"}},"#));
    assert!(json.ends_with(
        r#"{"segments":{"topology.example.com/zone":"zone-39999"}}],"volume_id":"vol-1"}}"#
    ));
}
