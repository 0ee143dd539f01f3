//! Renders an encoded message straight from its bytes (see the parent module): one pass
//! lists where each field occurs, then the set fields are written in name order, nested
//! messages the same way from their own bytes.
//!
//! It follows what decoding into a `prost_reflect::DynamicMessage` and printing that gave,
//! using the same prost functions for every value: a singular field occurring twice keeps
//! the last value (a message merges all of them); setting a `oneof` member clears the other
//! members; repeated scalars may come packed or not; a map keeps the last value of a key.
//! Malformed input, a known field with the wrong wire type and a string that is not UTF-8
//! make the whole message undecodable, wherever they are, secrets and overwritten values
//! included. Two differences, on malformed or hostile input only: a map entry that is not
//! length-delimited is refused here, where the `DynamicMessage` read the next bytes of the
//! enclosing message as the entry; and unknown groups nested inside nested messages are
//! skipped with prost's whole recursion budget at every level of messages, where the
//! `DynamicMessage` shared one budget between both (so about 100 levels of the two together
//! render here and did not there; nothing unknown is ever printed, and the nesting of messages
//! alone is limited as prost limits it).

use std::collections::BTreeMap;

use prost::DecodeError;
use prost::bytes::Bytes;
use prost::encoding::{self, DecodeContext, WireType};
use prost_reflect::{ExtensionDescriptor, FieldDescriptor, Kind, MessageDescriptor, Value};

use super::{STRIPPED, base64, is_secret, push_display, write_float, write_string};

/// Nesting deeper than prost's own recursion limit is refused, as prost refuses it.
const MAX_DEPTH: u32 = 100;

/// The message cannot be decoded as its type.
#[derive(Debug)]
pub(super) struct Undecodable;

impl From<DecodeError> for Undecodable {
    fn from(_: DecodeError) -> Self {
        Self
    }
}

/// One occurrence of a field: its number, wire type and encoded value (length prefix
/// included for length-delimited values).
struct Occurrence<'a> {
    number: u32,
    wire_type: WireType,
    value: &'a [u8],
}

/// Every field occurrence of a message given as one or more byte spans (a singular message
/// field that occurs several times is the merge of all of them), in wire order.
fn scan<'a>(spans: &[&'a [u8]]) -> Result<Vec<Occurrence<'a>>, Undecodable> {
    let mut found = Vec::new();
    for span in spans {
        let mut buf: &'a [u8] = span;
        while !buf.is_empty() {
            let (number, wire_type) = encoding::decode_key(&mut buf)?;
            let start = buf;
            encoding::skip_field(wire_type, number, &mut buf, DecodeContext::default())?;
            found.push(Occurrence {
                number,
                wire_type,
                value: &start[..start.len() - buf.len()],
            });
        }
    }
    Ok(found)
}

/// The content of a length-delimited value (its length prefix stripped); the length was
/// checked by [`scan`].
fn delimited<'a>(occurrence: &Occurrence<'a>) -> Result<&'a [u8], Undecodable> {
    if occurrence.wire_type != WireType::LengthDelimited {
        return Err(Undecodable);
    }
    let mut buf = occurrence.value;
    encoding::decode_varint(&mut buf)?;
    Ok(buf)
}

/// A known field and its occurrences, as indexes into the message's scan.
type FieldOccurrences = (FieldDescriptor, Vec<usize>);

/// Writes the message `spans` encode, of type `descriptor`, as sorted one-line JSON.
pub(super) fn write_message(
    out: &mut String,
    descriptor: &MessageDescriptor,
    spans: &[&[u8]],
    secret: &ExtensionDescriptor,
    depth: u32,
) -> Result<(), Undecodable> {
    if depth > MAX_DEPTH {
        return Err(Undecodable);
    }
    let found = scan(spans)?;
    let mut by_number: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, occurrence) in found.iter().enumerate() {
        // Unknown fields are never printed (they may hold secrets) and were checked by `scan`.
        if descriptor.get_field(occurrence.number).is_some() {
            by_number.entry(occurrence.number).or_default().push(i);
        }
    }
    let mut fields: Vec<FieldOccurrences> = by_number
        .into_iter()
        .filter_map(|(number, at)| Some((descriptor.get_field(number)?, at)))
        .collect();
    let cleared = clear_oneofs(descriptor, &mut fields);
    // Overwritten oneof members print nothing but must still decode.
    let mut scratch = String::new();
    for (field, at) in &cleared {
        write_field(&mut scratch, field, &found, at, secret, depth)?;
        scratch.clear();
    }
    fields.sort_by(|(a, _), (b, _)| a.name().cmp(b.name()));
    out.push('{');
    let mut first = true;
    for (field, at) in &fields {
        let mark = out.len();
        if !first {
            out.push(',');
        }
        write_string(out, field.name());
        out.push(':');
        let key_end = out.len();
        let set = if is_secret(field, secret) {
            let set = write_field(&mut scratch, field, &found, at, secret, depth)?;
            scratch.clear();
            if set {
                write_string(out, STRIPPED);
            }
            set
        } else {
            write_field(out, field, &found, at, secret, depth)?
        };
        if set {
            first = false;
        } else {
            debug_assert_eq!(out.len(), key_end, "an unset field writes nothing");
            out.truncate(mark);
        }
    }
    out.push('}');
    Ok(())
}

/// Keeps of each `oneof` only the member set last, and of that member only what came after
/// another member was set (setting a member clears the others); returns what was dropped.
fn clear_oneofs(
    descriptor: &MessageDescriptor,
    fields: &mut Vec<FieldOccurrences>,
) -> Vec<FieldOccurrences> {
    let mut cleared = Vec::new();
    for oneof in descriptor.oneofs() {
        let members: Vec<u32> = oneof.fields().map(|f| f.number()).collect();
        let last_of = |fields: &[FieldOccurrences], except: Option<u32>| {
            fields
                .iter()
                .filter(|(f, _)| members.contains(&f.number()) && Some(f.number()) != except)
                .filter_map(|(f, at)| at.last().map(|&i| (i, f.number())))
                .max()
        };
        let Some((_, winner)) = last_of(fields, None) else {
            continue;
        };
        let Some((cleared_at, _)) = last_of(fields, Some(winner)) else {
            continue;
        };
        let mut kept = Vec::with_capacity(fields.len());
        for (field, at) in fields.drain(..) {
            if !members.contains(&field.number()) {
                kept.push((field, at));
            } else if field.number() == winner {
                let (before, after): (Vec<usize>, Vec<usize>) =
                    at.into_iter().partition(|&i| i < cleared_at);
                cleared.push((field.clone(), before));
                kept.push((field, after));
            } else {
                cleared.push((field, at));
            }
        }
        *fields = kept;
    }
    cleared
}

/// Writes the value of `field` from its occurrences `at`; returns whether it is set (an unset
/// field writes nothing).
fn write_field(
    out: &mut String,
    field: &FieldDescriptor,
    found: &[Occurrence<'_>],
    at: &[usize],
    secret: &ExtensionDescriptor,
    depth: u32,
) -> Result<bool, Undecodable> {
    let occurrences = at.iter().map(|&i| &found[i]);
    let kind = field.kind();
    if field.is_map() {
        let Kind::Message(entry) = kind else {
            return Err(Undecodable);
        };
        write_map(out, &entry, occurrences, secret, depth)
    } else if field.is_list() {
        let mark = out.len();
        out.push('[');
        let mut count = 0_usize;
        for occurrence in occurrences {
            if occurrence.wire_type == WireType::LengthDelimited && packable(&kind) {
                let mut buf = delimited(occurrence)?;
                while !buf.is_empty() {
                    let value = decode_scalar(&kind, kind_wire_type(&kind), &mut buf)?;
                    separate(out, &mut count);
                    write_scalar(out, &kind, &value);
                }
            } else {
                separate(out, &mut count);
                write_single(out, &kind, occurrence, secret, depth)?;
            }
        }
        if count == 0 {
            out.truncate(mark);
            return Ok(false);
        }
        out.push(']');
        Ok(true)
    } else if let Kind::Message(message) = &kind {
        if at.is_empty() {
            return Ok(false);
        }
        let spans = occurrences.map(delimited).collect::<Result<Vec<_>, _>>()?;
        write_message(out, message, &spans, secret, depth + 1)?;
        Ok(true)
    } else {
        let mut value = kind.default_value();
        for occurrence in occurrences {
            let mut buf = occurrence.value;
            value = decode_scalar(&kind, occurrence.wire_type, &mut buf)?;
        }
        // proto3 fields without presence are unset at their default value.
        if at.is_empty() || (!field.supports_presence() && value == kind.default_value()) {
            return Ok(false);
        }
        write_scalar(out, &kind, &value);
        Ok(true)
    }
}

/// A comma before every list item but the first.
fn separate(out: &mut String, count: &mut usize) {
    if *count > 0 {
        out.push(',');
    }
    *count += 1;
}

/// One item of a list of messages, strings or bytes, or one unpacked scalar.
fn write_single(
    out: &mut String,
    kind: &Kind,
    occurrence: &Occurrence<'_>,
    secret: &ExtensionDescriptor,
    depth: u32,
) -> Result<(), Undecodable> {
    if let Kind::Message(message) = kind {
        return write_message(out, message, &[delimited(occurrence)?], secret, depth + 1);
    }
    let mut buf = occurrence.value;
    let value = decode_scalar(kind, occurrence.wire_type, &mut buf)?;
    write_scalar(out, kind, &value);
    Ok(())
}

/// A map field: its entries with the last value of each key, sorted by the key as a string
/// (Go's `encoding/json` sorts map keys so, whatever their proto type).
fn write_map<'a>(
    out: &mut String,
    entry: &MessageDescriptor,
    occurrences: impl Iterator<Item = &'a Occurrence<'a>>,
    secret: &ExtensionDescriptor,
    depth: u32,
) -> Result<bool, Undecodable> {
    let (Some(key_field), Some(value_field)) = (entry.get_field(1), entry.get_field(2)) else {
        return Err(Undecodable);
    };
    let key_kind = key_field.kind();
    let value_kind = value_field.kind();
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    for occurrence in occurrences {
        let mut key = key_kind.default_value();
        let mut value_spans: Vec<&[u8]> = Vec::new();
        let mut value = None;
        for part in scan(&[delimited(occurrence)?])? {
            let mut buf = part.value;
            match part.number {
                1 => key = decode_scalar(&key_kind, part.wire_type, &mut buf)?,
                2 if matches!(value_kind, Kind::Message(_)) => {
                    value_spans.push(delimited(&part)?);
                }
                2 => value = Some(decode_scalar(&value_kind, part.wire_type, &mut buf)?),
                _ => {}
            }
        }
        let mut rendered = String::new();
        match &value_kind {
            // An entry without a value has the empty message.
            Kind::Message(message) => {
                write_message(&mut rendered, message, &value_spans, secret, depth + 1)?;
            }
            _ => write_scalar(
                &mut rendered,
                &value_kind,
                &value.unwrap_or_else(|| value_kind.default_value()),
            ),
        }
        entries.insert(map_key(&key), rendered);
    }
    if entries.is_empty() {
        return Ok(false);
    }
    out.push('{');
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    Ok(true)
}

/// A map key as Go prints it.
fn map_key(key: &Value) -> String {
    match key {
        Value::Bool(b) => b.to_string(),
        Value::I32(n) => n.to_string(),
        Value::I64(n) => n.to_string(),
        Value::U32(n) => n.to_string(),
        Value::U64(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

/// Scalar kinds, which a repeated field may carry packed.
fn packable(kind: &Kind) -> bool {
    !matches!(kind, Kind::String | Kind::Bytes | Kind::Message(_))
}

/// The wire type of one packed item of `kind`.
fn kind_wire_type(kind: &Kind) -> WireType {
    match kind {
        Kind::Fixed32 | Kind::Sfixed32 | Kind::Float => WireType::ThirtyTwoBit,
        Kind::Fixed64 | Kind::Sfixed64 | Kind::Double => WireType::SixtyFourBit,
        Kind::String | Kind::Bytes | Kind::Message(_) => WireType::LengthDelimited,
        _ => WireType::Varint,
    }
}

/// Decodes one scalar of `kind` with prost's own functions (wire type and UTF-8 checked).
fn decode_scalar(kind: &Kind, wire_type: WireType, buf: &mut &[u8]) -> Result<Value, Undecodable> {
    let ctx = DecodeContext::default();
    Ok(match kind {
        Kind::Bool => {
            let mut v = false;
            encoding::bool::merge(wire_type, &mut v, buf, ctx)?;
            Value::Bool(v)
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 | Kind::Enum(_) => {
            let mut v = 0_i32;
            match kind {
                Kind::Sint32 => encoding::sint32::merge(wire_type, &mut v, buf, ctx)?,
                Kind::Sfixed32 => encoding::sfixed32::merge(wire_type, &mut v, buf, ctx)?,
                _ => encoding::int32::merge(wire_type, &mut v, buf, ctx)?,
            }
            if matches!(kind, Kind::Enum(_)) {
                Value::EnumNumber(v)
            } else {
                Value::I32(v)
            }
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            let mut v = 0_i64;
            match kind {
                Kind::Sint64 => encoding::sint64::merge(wire_type, &mut v, buf, ctx)?,
                Kind::Sfixed64 => encoding::sfixed64::merge(wire_type, &mut v, buf, ctx)?,
                _ => encoding::int64::merge(wire_type, &mut v, buf, ctx)?,
            }
            Value::I64(v)
        }
        Kind::Uint32 | Kind::Fixed32 => {
            let mut v = 0_u32;
            if matches!(kind, Kind::Fixed32) {
                encoding::fixed32::merge(wire_type, &mut v, buf, ctx)?;
            } else {
                encoding::uint32::merge(wire_type, &mut v, buf, ctx)?;
            }
            Value::U32(v)
        }
        Kind::Uint64 | Kind::Fixed64 => {
            let mut v = 0_u64;
            if matches!(kind, Kind::Fixed64) {
                encoding::fixed64::merge(wire_type, &mut v, buf, ctx)?;
            } else {
                encoding::uint64::merge(wire_type, &mut v, buf, ctx)?;
            }
            Value::U64(v)
        }
        Kind::Float => {
            let mut v = 0_f32;
            encoding::float::merge(wire_type, &mut v, buf, ctx)?;
            Value::F32(v)
        }
        Kind::Double => {
            let mut v = 0_f64;
            encoding::double::merge(wire_type, &mut v, buf, ctx)?;
            Value::F64(v)
        }
        Kind::String => {
            let mut v = String::new();
            encoding::string::merge(wire_type, &mut v, buf, ctx)?;
            Value::String(v)
        }
        Kind::Bytes => {
            let mut v = Bytes::new();
            encoding::bytes::merge(wire_type, &mut v, buf, ctx)?;
            Value::Bytes(v)
        }
        Kind::Message(_) => return Err(Undecodable),
    })
}

/// Writes a scalar value: enums by name (a number from a newer spec as the number), bytes
/// as base64.
pub(super) fn write_scalar(out: &mut String, kind: &Kind, value: &Value) {
    match value {
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::I32(n) => push_display(out, n),
        Value::I64(n) => push_display(out, n),
        Value::U32(n) => push_display(out, n),
        Value::U64(n) => push_display(out, n),
        Value::F32(x) => write_float(out, f64::from(*x)),
        Value::F64(x) => write_float(out, *x),
        Value::String(s) => write_string(out, s),
        Value::Bytes(bytes) => write_string(out, &base64(bytes)),
        Value::EnumNumber(number) => match kind {
            Kind::Enum(descriptor) => match descriptor.get_value(*number) {
                Some(enum_value) => write_string(out, enum_value.name()),
                None => push_display(out, number),
            },
            _ => push_display(out, number),
        },
        // Messages, lists and maps are written by `write_message` and `write_field`.
        Value::Message(_) | Value::List(_) | Value::Map(_) => out.push_str("null"),
    }
}

#[cfg(test)]
mod tests;
