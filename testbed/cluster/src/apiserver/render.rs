//! Turning stored objects into responses: the resource's view (events.k8s.io Events are
//! stored as core/v1 Events), and the representation the client asked for (the object,
//! `PartialObjectMetadata` for metadata-only clients, or a `Table` for kubectl get).

use std::borrow::Cow;

use serde_json::{Value, json};

use super::encode;
use super::events;
use super::request::Format;
use super::resources::{self, ResourceInfo, View};

/// The resource whose objects are actually stored for `info` (core/v1 Events for both Event
/// views).
pub(crate) fn storage_info(info: &'static ResourceInfo) -> &'static ResourceInfo {
    match info.view {
        View::Native => info,
        View::EventsV1 => resources::find("", "v1", "events").unwrap_or(info),
    }
}

/// A stored object as seen through `info`: the stored object itself for every resource but
/// the events.k8s.io view (a deep copy per answer and per watch event was a good part of the
/// test bed's CPU under load).
pub(crate) fn to_view<'a>(info: &ResourceInfo, stored: &'a Value) -> Cow<'a, Value> {
    match info.view {
        View::Native => Cow::Borrowed(stored),
        View::EventsV1 => {
            let mut v = events::core_to_events_v1(stored);
            super::admission::fill_zero(info, &mut v);
            Cow::Owned(v)
        }
    }
}

/// An object sent through `info`, converted to the stored shape.
pub(crate) fn to_storage(info: &ResourceInfo, view: Value) -> Value {
    match info.view {
        View::Native => view,
        View::EventsV1 => events::events_v1_to_core(&view),
    }
}

/// `PartialObjectMetadata` of an object.
pub(crate) fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

/// One object (already in view shape) in the requested representation.
pub(crate) fn object(info: &ResourceInfo, format: Format, obj: &Value) -> Vec<u8> {
    let mut out = match format {
        Format::Object => encode::object_bytes(info, obj),
        Format::Metadata => serde_json::to_vec(&partial(obj)).unwrap_or_default(),
        Format::Table => {
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            serde_json::to_vec(&table(&rv, None, &[Cow::Borrowed(obj)])).unwrap_or_default()
        }
    };
    out.push(b'\n');
    out
}

/// A list (items in view shape) in the requested representation.
pub(crate) fn list(
    info: &ResourceInfo,
    format: Format,
    metadata: &Value,
    items: &[Cow<'_, Value>],
) -> Vec<u8> {
    let mut out = match format {
        // LIST items of built-in kinds carry no kind/apiVersion (fixture a1); custom resources
        // are listed as unstructured objects, which keep them.
        Format::Object => encode::list_bytes(info, metadata, items, !info.custom),
        Format::Metadata => {
            let items: Vec<Value> = items
                .iter()
                .map(|o| json!({"metadata": o["metadata"]}))
                .collect();
            serde_json::to_vec(&json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": metadata,
                "items": items,
            }))
            .unwrap_or_default()
        }
        Format::Table => {
            let rv = metadata["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            let cont = metadata["continue"].as_str().map(str::to_owned);
            serde_json::to_vec(&table(&rv, cont, items)).unwrap_or_default()
        }
    };
    out.push(b'\n');
    out
}

/// The default table upstream's `DefaultTableConvertor` builds: Name and Created At.
fn table(rv: &str, cont: Option<String>, items: &[Cow<'_, Value>]) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            json!({
                "cells": [o["metadata"]["name"], o["metadata"]["creationTimestamp"]],
                "object": partial(o),
            })
        })
        .collect();
    let mut metadata = json!({"resourceVersion": rv});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0},
            {"name": "Created At", "type": "date", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.", "priority": 0}
        ],
        "rows": rows,
    })
}
