//! An object's metadata in a fraction of `ObjectMeta`'s room, for caches that hold thousands.
//!
//! k8s-openapi's `ObjectMeta` is 360 bytes inline, fifteen `Option`s of which a cached
//! claim or volume sets seven or eight, and each string is its own allocation. [`Meta`] keeps
//! the same values: the uid and the resourceVersion in place when they have the API server's
//! usual forms (a UUID, a decimal number), the namespace, finalizers, labels and annotations as
//! shared copies from an [`Interner`], and the fields objects rarely set behind one pointer.
//! [`Meta::to_object_meta`] gives the `ObjectMeta` back, equal to the one it was made from but
//! for `managedFields` (which no sidecar reads).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use crate::intern::{Interner, SharedList, SharedPairs, to_map, to_vec};

/// An object's metadata without `managedFields`, compact (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    name: Option<Box<str>>,
    namespace: Option<Arc<str>>,
    uid: Option<Token>,
    resource_version: Option<Token>,
    creation_timestamp: Option<Time>,
    finalizers: Option<SharedList>,
    annotations: Option<SharedPairs>,
    labels: Option<SharedPairs>,
    rare: Option<Box<Rare>>,
}

/// What few cached objects set (claims and volumes have no `generation`; a deletionTimestamp
/// is set only while finalizers hold an object).
#[derive(Debug, Clone, PartialEq)]
struct Rare {
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    generation: Option<i64>,
    generate_name: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    self_link: Option<String>,
}

impl Meta {
    /// The compact form of `meta`, its shared strings from `interner`.
    #[must_use]
    pub fn new(meta: ObjectMeta, interner: &mut Interner) -> Self {
        let ObjectMeta {
            annotations,
            creation_timestamp,
            deletion_grace_period_seconds,
            deletion_timestamp,
            finalizers,
            generate_name,
            generation,
            labels,
            managed_fields: _,
            name,
            namespace,
            owner_references,
            resource_version,
            self_link,
            uid,
        } = meta;
        let rare = Rare {
            deletion_grace_period_seconds,
            deletion_timestamp,
            generation,
            generate_name,
            owner_references,
            self_link,
        };
        let is_set = rare.deletion_grace_period_seconds.is_some()
            || rare.deletion_timestamp.is_some()
            || rare.generation.is_some()
            || rare.generate_name.is_some()
            || rare.owner_references.is_some()
            || rare.self_link.is_some();
        Self {
            name: name.map(String::into_boxed_str),
            namespace: interner.opt_str(namespace),
            uid: uid.map(Token::new),
            resource_version: resource_version.map(Token::new),
            creation_timestamp,
            finalizers: interner.opt_list(finalizers),
            annotations: interner.opt_map(annotations),
            labels: interner.opt_map(labels),
            rare: is_set.then(|| Box::new(rare)),
        }
    }

    /// The `ObjectMeta` this was made from, without `managedFields`.
    #[must_use]
    pub fn to_object_meta(&self) -> ObjectMeta {
        let rare = self.rare.as_deref();
        ObjectMeta {
            annotations: self
                .annotations
                .as_deref()
                .map(|a| to_map(a, str::to_owned)),
            creation_timestamp: self.creation_timestamp.clone(),
            deletion_grace_period_seconds: rare.and_then(|r| r.deletion_grace_period_seconds),
            deletion_timestamp: rare.and_then(|r| r.deletion_timestamp.clone()),
            finalizers: self.finalizers.as_deref().map(to_vec),
            generate_name: rare.and_then(|r| r.generate_name.clone()),
            generation: rare.and_then(|r| r.generation),
            labels: self.labels.as_deref().map(|l| to_map(l, str::to_owned)),
            managed_fields: None,
            name: self.name.as_deref().map(str::to_owned),
            namespace: self.namespace.as_deref().map(str::to_owned),
            owner_references: rare.and_then(|r| r.owner_references.clone()),
            resource_version: self.resource_version.as_ref().map(Token::to_text),
            self_link: rare.and_then(|r| r.self_link.clone()),
            uid: self.uid.as_ref().map(Token::to_text),
        }
    }

    /// `metadata.name`.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// `metadata.namespace`.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The namespace and name a store finds the object by (`informer::Keyed::key`; an object
    /// without a name is cached under the empty name, as for a whole object).
    #[must_use]
    pub fn key(&self) -> (Option<&str>, &str) {
        (self.namespace(), self.name().unwrap_or_default())
    }
}

/// An `ObjectReference` (a PV's `claimRef`), compact: its API version, kind and namespace
/// shared, its uid and resourceVersion kept in place when they have the usual forms.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    api_version: Option<Arc<str>>,
    field_path: Option<Box<str>>,
    kind: Option<Arc<str>>,
    name: Option<Box<str>>,
    namespace: Option<Arc<str>>,
    resource_version: Option<Token>,
    uid: Option<Token>,
}

impl Reference {
    /// The compact form of `reference`, its shared strings from `interner`.
    #[must_use]
    pub fn new(reference: ObjectReference, interner: &mut Interner) -> Self {
        Self {
            api_version: interner.opt_str(reference.api_version),
            field_path: reference.field_path.map(String::into_boxed_str),
            kind: interner.opt_str(reference.kind),
            name: reference.name.map(String::into_boxed_str),
            namespace: interner.opt_str(reference.namespace),
            resource_version: reference.resource_version.map(Token::new),
            uid: reference.uid.map(Token::new),
        }
    }

    /// The `ObjectReference` this was made from.
    #[must_use]
    pub fn to_object_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: self.api_version.as_deref().map(str::to_owned),
            field_path: self.field_path.as_deref().map(str::to_owned),
            kind: self.kind.as_deref().map(str::to_owned),
            name: self.name.as_deref().map(str::to_owned),
            namespace: self.namespace.as_deref().map(str::to_owned),
            resource_version: self.resource_version.as_ref().map(Token::to_text),
            uid: self.uid.as_ref().map(Token::to_text),
        }
    }
}

/// A uid or resourceVersion: in place when it has the API server's usual form (a UUID in its
/// canonical lowercase text; a decimal number, as etcd's revisions are), else its text. Either
/// way [`Token::to_text`] gives back exactly the text it was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token(Repr);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Repr {
    Uuid([u8; 16]),
    Decimal(u64),
    Text(Box<str>),
}

impl Token {
    /// The token for `text`.
    #[must_use]
    pub(crate) fn new(text: String) -> Self {
        Self(if let Some(bytes) = parse_uuid(&text) {
            Repr::Uuid(bytes)
        } else if let Some(number) = parse_decimal(&text) {
            Repr::Decimal(number)
        } else {
            Repr::Text(text.into_boxed_str())
        })
    }

    /// The text the token was made from.
    #[must_use]
    pub(crate) fn to_text(&self) -> String {
        match &self.0 {
            Repr::Uuid(bytes) => format_uuid(bytes),
            Repr::Decimal(number) => number.to_string(),
            Repr::Text(text) => text.to_string(),
        }
    }
}

/// The 16 bytes of a UUID written as `8-4-4-4-12` lowercase hex digits (what the API server
/// writes), `None` for any other text (uppercase included, which would not read back the same).
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let text = text.as_bytes();
    if text.len() != 36 {
        return None;
    }
    let mut bytes = [0; 16];
    let mut digits = text
        .iter()
        .enumerate()
        .filter(|(i, _)| !matches!(i, 8 | 13 | 18 | 23));
    if [8, 13, 18, 23].iter().any(|&i| text[i] != b'-') {
        return None;
    }
    for byte in &mut bytes {
        let (_, &high) = digits.next()?;
        let (_, &low) = digits.next()?;
        *byte = hex_digit(high)? << 4 | hex_digit(low)?;
    }
    Some(bytes)
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn format_uuid(bytes: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    text
}

/// A decimal number written without sign or leading zeros, as `u64` prints it; `None` for any
/// other text (`007` or `+7` would not read back the same).
fn parse_decimal(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|c| c.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}

#[cfg(test)]
mod tests;
