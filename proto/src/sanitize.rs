//! One-line JSON of CSI messages with secrets stripped, for logs.
//!
//! Rust counterpart of csi-lib-utils `protosanitizer.StripSecrets` (the form the Go
//! sidecars and drivers log, see the hostpath driver's `GRPC request: {...}` lines):
//!
//! - keys are the proto field names (`volume_capabilities`, not `volumeCapabilities`),
//!   sorted byte-wise as Go's `encoding/json` sorts map keys;
//! - only fields that are set appear: proto3 scalars at their default value, empty
//!   lists/maps and unset messages are left out, a set but empty message is `{}`;
//! - the chosen member of a `oneof` appears directly under its own name (`"mount":{...}`);
//! - enums are printed by name, 64-bit integers as plain JSON numbers;
//! - every field whose options carry `(csi.v1.csi_secret) = true` is replaced by the
//!   string [`STRIPPED`], wherever it occurs;
//! - strings are escaped as Go's `encoding/json` does (including `<`, `>` and `&`).
//!
//! Unknown fields (sent by a peer built from a newer spec) are never printed: we
//! cannot know whether they hold secrets.
//!
//! The encoded message is read field by field with its descriptor from
//! [`FILE_DESCRIPTOR_SET`](crate::FILE_DESCRIPTOR_SET), so this works for every message
//! without per-type code, and written out as it is read (the `wire` module): nothing but
//! the output and one list of field positions per nesting level is held. Decoding into a
//! `prost_reflect::DynamicMessage` first, as this did before, cost about 20 times the
//! message's size (a map node per nested message): a CreateVolume answer of 40,000
//! topologies (1.5 MB) took about 50 MiB to log at `-v=5`. Call it only when the log line
//! is actually emitted.

#[cfg(test)]
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, ExtensionDescriptor, FieldDescriptor};
#[cfg(test)]
use prost_reflect::{DynamicMessage, Kind, MapKey, Value};

use crate::redact::STRIPPED;

/// Full name of the field option that marks a secret.
const SECRET_OPTION: &str = "csi.v1.csi_secret";

/// The decoded descriptor set and the `csi_secret` extension, built on first use.
struct Reflection {
    pool: DescriptorPool,
    secret: ExtensionDescriptor,
}

/// Immutable after initialisation, so sharing it process-wide is not global mutable
/// state: it only saves decoding the same bytes again on every log line.
static REFLECTION: OnceLock<Reflection> = OnceLock::new();

fn reflection() -> &'static Reflection {
    REFLECTION.get_or_init(|| {
        // Invariant: descriptor.bin is generated with the code and checked by the
        // bootstrap test and this module's tests; it always decodes and declares
        // csi_secret. A failure here is a build defect, not a runtime condition.
        #[allow(clippy::expect_used)]
        let pool = DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET)
            .expect("checked-in descriptor.bin decodes");
        #[allow(clippy::expect_used)]
        let secret = pool
            .get_extension_by_name(SECRET_OPTION)
            .expect("descriptor.bin declares csi.v1.csi_secret");
        Reflection { pool, secret }
    })
}

/// Renders `msg` as one-line JSON with its secret fields replaced by `"***stripped***"`.
///
/// `msg` must be a message of this crate (CSI or plugin registration). For any other
/// type nothing of its content is printed, only a `<<...>>` placeholder naming it,
/// because we could not tell which of its fields are secret.
pub fn sanitized_json<M: prost::Message + prost::Name>(msg: &M) -> String {
    let full_name = M::full_name();
    sanitized_json_by_name(&full_name, &msg.encode_to_vec())
        .unwrap_or_else(|| format!("<<{full_name}: not a message of the CSI descriptor set>>"))
}

/// Like [`sanitized_json`] for callers that hold only the encoded bytes, such as a
/// gRPC interceptor: `full_name` is the protobuf name without a leading dot
/// (`csi.v1.CreateVolumeRequest`).
///
/// Returns `None` when the name is not in the descriptor set or the bytes do not
/// decode as that message.
pub fn sanitized_json_by_name(full_name: &str, encoded: &[u8]) -> Option<String> {
    let reflection = reflection();
    let descriptor = reflection.pool.get_message_by_name(full_name)?;
    let mut out = String::new();
    wire::write_message(&mut out, &descriptor, &[encoded], &reflection.secret, 0).ok()?;
    Some(out)
}

/// The former renderer, through a `DynamicMessage`: the tests' oracle for [`wire`].
#[cfg(test)]
fn sanitized_json_by_name_dynamic(full_name: &str, encoded: &[u8]) -> Option<String> {
    let reflection = reflection();
    let descriptor = reflection.pool.get_message_by_name(full_name)?;
    let message = DynamicMessage::decode(descriptor, encoded).ok()?;
    let mut out = String::new();
    write_message(&mut out, &message, &reflection.secret);
    Some(out)
}

fn is_secret(field: &FieldDescriptor, secret: &ExtensionDescriptor) -> bool {
    field.options().get_extension(secret).as_bool() == Some(true)
}

#[cfg(test)]
fn write_message(out: &mut String, message: &DynamicMessage, secret: &ExtensionDescriptor) {
    // `fields()` yields exactly the set fields, like Go's protoreflect `Range`.
    let fields: BTreeMap<String, (FieldDescriptor, &Value)> = message
        .fields()
        .map(|(field, value)| (field.name().to_owned(), (field, value)))
        .collect();
    out.push('{');
    for (i, (name, (field, value))) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, name);
        out.push(':');
        if is_secret(field, secret) {
            write_string(out, STRIPPED);
        } else {
            write_field_value(out, field, value, secret);
        }
    }
    out.push('}');
}

#[cfg(test)]
fn write_field_value(
    out: &mut String,
    field: &FieldDescriptor,
    value: &Value,
    secret: &ExtensionDescriptor,
) {
    match value {
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, &field.kind(), item, secret);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            let value_kind = match field.kind() {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other,
            };
            // Go's encoding/json sorts map keys as strings, whatever their proto type.
            let sorted: BTreeMap<String, &Value> = entries
                .iter()
                .map(|(key, value)| (map_key(key), value))
                .collect();
            out.push('{');
            for (i, (key, value)) in sorted.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, &value_kind, value, secret);
            }
            out.push('}');
        }
        single => write_value(out, &field.kind(), single, secret),
    }
}

#[cfg(test)]
fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

#[cfg(test)]
fn write_value(out: &mut String, kind: &Kind, value: &Value, secret: &ExtensionDescriptor) {
    match value {
        Value::Message(message) => write_message(out, message, secret),
        scalar => wire::write_scalar(out, kind, scalar),
    }
}

fn push_display(out: &mut String, value: impl std::fmt::Display) {
    // Writing to a String cannot fail.
    let _ = write!(out, "{value}");
}

/// CSI has no floating-point fields; this keeps the output valid JSON if one appears.
fn write_float(out: &mut String, x: f64) {
    if x.is_finite() {
        push_display(out, x);
    } else {
        write_string(out, &x.to_string());
    }
}

/// Escapes like Go's `encoding/json` with its default HTML-safe setting.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Standard base64 with padding, as Go's `encoding/json` renders `[]byte`.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

mod wire;

#[cfg(test)]
mod tests;
