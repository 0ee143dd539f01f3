//! The patch bodies the attacher sends, as values. Which body is sent when is decided in
//! `decide`; the executor only sends them.
//!
//! VolumeAttachments get JSON merge patches (RFC 7386), on the main resource for metadata and on
//! `/status` for the status, like external-attacher's `createMergePatch` of the old and new
//! object: a merge patch replaces a list as a whole and `null` deletes a field. PersistentVolumes
//! get JSON patches (RFC 6902) whose `test` operations make a concurrent change fail the patch
//! (409/422) instead of being overwritten; the item is then retried with backoff.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::cached::{PersistentVolume, VolumeAttachment};
use crate::names::has_finalizer;

fn finalizers(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &[String] {
    meta.finalizers.as_deref().unwrap_or_default()
}

/// Adds the finalizer and the annotations an attach records (node ID, volume handle, publish
/// Secret) to a VolumeAttachment, or `None` when all are already there. One patch, so the
/// attacher never holds a finalizer without knowing how to detach.
pub(crate) fn va_attach_metadata(
    va: &VolumeAttachment,
    finalizer: &str,
    annotations: &[(&str, &str)],
) -> Option<Value> {
    let mut metadata = serde_json::Map::new();
    if !has_finalizer(&va.metadata, finalizer) {
        let mut list = finalizers(&va.metadata).to_vec();
        list.push(finalizer.to_owned());
        metadata.insert("finalizers".into(), json!(list));
    }
    let missing: serde_json::Map<String, Value> = annotations
        .iter()
        .filter(|(key, value)| va.annotation(key).is_none_or(|v| v != *value))
        .map(|(key, value)| ((*key).to_owned(), json!(value)))
        .collect();
    if !missing.is_empty() {
        metadata.insert("annotations".into(), Value::Object(missing));
    }
    (!metadata.is_empty()).then(|| json!({ "metadata": metadata }))
}

/// Removes the finalizer from a VolumeAttachment (main resource), or `None` when it is not
/// there. Sent before the detached status so that a failure in between cannot make the next
/// sync call ControllerUnpublishVolume again (upstream v4.9, issue #587).
pub(crate) fn va_remove_finalizer(va: &VolumeAttachment, finalizer: &str) -> Option<Value> {
    if !has_finalizer(&va.metadata, finalizer) {
        return None;
    }
    let rest: Vec<&String> = finalizers(&va.metadata)
        .iter()
        .filter(|f| *f != finalizer)
        .collect();
    let value = if rest.is_empty() {
        Value::Null
    } else {
        json!(rest)
    };
    Some(json!({ "metadata": { "finalizers": value } }))
}

/// kube-apiserver's `maxAttachedVolumeMetadataSize`: the keys and values of
/// `status.attachmentMetadata` together may have at most this many bytes; a bigger status is
/// refused with 422 Invalid.
const MAX_ATTACHMENT_METADATA_BYTES: usize = 256 * 1024;

/// kube-apiserver's `maxVolumeErrorMessageSize`: the longest `message` of `status.attachError` /
/// `status.detachError`; a longer one makes the whole status write fail with 422 Invalid.
const MAX_ERROR_MESSAGE_BYTES: usize = 1024;

/// A publish context the API server would not store. The CSI spec makes `publish_context`
/// opaque to the CO, so its size is the only thing that can be wrong with it; upstream sends it
/// anyway and only logs the 422, so the VolumeAttachment shows nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the driver's publish context has {0} bytes of keys and values, more than the {MAX_ATTACHMENT_METADATA_BYTES} that status.attachmentMetadata of a VolumeAttachment can hold"
)]
pub(crate) struct PublishContextTooLarge(pub(crate) usize);

/// `/status` after a successful ControllerPublishVolume, or the error when the API server
/// would refuse the publish context as `attachmentMetadata` (an empty one is valid: no
/// metadata).
pub(crate) fn attached(
    publish_context: &std::collections::HashMap<String, String>,
) -> Result<Value, PublishContextTooLarge> {
    let size: usize = publish_context.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_ATTACHMENT_METADATA_BYTES {
        return Err(PublishContextTooLarge(size));
    }
    let metadata = if publish_context.is_empty() {
        Value::Null
    } else {
        let sorted: std::collections::BTreeMap<_, _> = publish_context.iter().collect();
        json!(sorted)
    };
    Ok(json!({ "status": {
        "attached": true,
        "attachmentMetadata": metadata,
        "attachError": null,
    }}))
}

/// `message` cut to what the API server accepts in a `VolumeError`, at a character boundary
/// (a driver's error text has no length limit in the CSI spec).
fn error_message(message: &str) -> &str {
    if message.len() <= MAX_ERROR_MESSAGE_BYTES {
        return message;
    }
    let mut end = MAX_ERROR_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// `/status` after a successful ControllerUnpublishVolume.
pub(crate) fn detached() -> Value {
    json!({ "status": {
        "attached": false,
        "detachError": null,
        "attachmentMetadata": null,
    }})
}

/// `/status` of the trivial handler: attached, no metadata, no CSI call.
pub(crate) fn trivially_attached() -> Value {
    json!({ "status": { "attached": true } })
}

/// `/status` after a failed attach. `error_code` is the numeric gRPC code, set only for gRPC
/// errors and only with the `MutableCSINodeAllocatableCount` gate (the scheduler uses
/// RESOURCE_EXHAUSTED to refresh the node's attach limit).
pub(crate) fn attach_error(message: &str, time: Timestamp, error_code: Option<i32>) -> Value {
    let mut error = json!({ "message": error_message(message), "time": time_text(time) });
    if let Some(code) = error_code {
        error["errorCode"] = json!(code);
    }
    json!({ "status": { "attachError": error } })
}

/// `/status` after a failed detach; detach errors never carry `errorCode` (upstream).
pub(crate) fn detach_error(message: &str, time: Timestamp) -> Value {
    json!({ "status": { "detachError": { "message": error_message(message), "time": time_text(time) } } })
}

/// Kubernetes `metav1.Time`: RFC 3339 in UTC, fractions of a second dropped (Go's
/// `metav1.Time.MarshalJSON`).
fn time_text(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Adds the finalizer to a PersistentVolume, or `None` when it is already there. A non-empty
/// list is appended to; an absent or empty one is set whole, guarded by a `test` of the
/// resourceVersion so a finalizer someone else added meanwhile is not overwritten.
pub(crate) fn pv_add_finalizer(pv: &PersistentVolume, finalizer: &str) -> Option<Value> {
    if has_finalizer(&pv.metadata, finalizer) {
        return None;
    }
    if finalizers(&pv.metadata).is_empty() {
        Some(json!([
            { "op": "test", "path": "/metadata/resourceVersion",
              "value": pv.metadata.resource_version.clone().unwrap_or_default() },
            { "op": "add", "path": "/metadata/finalizers", "value": [finalizer] },
        ]))
    } else {
        Some(json!([{ "op": "add", "path": "/metadata/finalizers/-", "value": finalizer }]))
    }
}

/// Removes the finalizer from a PersistentVolume by index, testing the index first, or `None`
/// when it is not there.
pub(crate) fn pv_remove_finalizer(pv: &PersistentVolume, finalizer: &str) -> Option<Value> {
    let index = finalizers(&pv.metadata)
        .iter()
        .position(|f| f == finalizer)?;
    let path = format!("/metadata/finalizers/{index}");
    Some(json!([
        { "op": "test", "path": path, "value": finalizer },
        { "op": "remove", "path": path },
    ]))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::names::NODE_ID_ANNOTATION;

    const F: &str = "external-attacher/d";

    fn meta(finalizers: &[&str], node_id: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some("x".into()),
            resource_version: Some("7".into()),
            finalizers: (!finalizers.is_empty())
                .then(|| finalizers.iter().map(|f| (*f).to_owned()).collect()),
            annotations: node_id
                .map(|id| BTreeMap::from([(NODE_ID_ANNOTATION.to_owned(), id.to_owned())])),
            ..Default::default()
        }
    }

    fn va(finalizers: &[&str], node_id: Option<&str>) -> VolumeAttachment {
        VolumeAttachment {
            metadata: meta(finalizers, node_id),
            ..Default::default()
        }
    }

    fn pv(finalizers: &[&str]) -> PersistentVolume {
        PersistentVolume {
            metadata: meta(finalizers, None),
            ..Default::default()
        }
    }

    #[test]
    fn attach_metadata_adds_only_what_is_missing() {
        let cases = [
            (
                "nothing yet",
                va(&[], None),
                Some(
                    json!({"metadata": {"finalizers": [F], "annotations": {NODE_ID_ANNOTATION: "n1"}}}),
                ),
            ),
            (
                "other finalizer kept",
                va(&["a"], Some("n1")),
                Some(json!({"metadata": {"finalizers": ["a", F]}})),
            ),
            (
                "node changed",
                va(&[F], Some("old")),
                Some(json!({"metadata": {"annotations": {NODE_ID_ANNOTATION: "n1"}}})),
            ),
            ("all there", va(&[F], Some("n1")), None),
        ];
        for (name, va, want) in cases {
            assert_eq!(
                va_attach_metadata(&va, F, &[(NODE_ID_ANNOTATION, "n1")]),
                want,
                "{name}"
            );
        }
        assert_eq!(
            va_attach_metadata(
                &va(&[F], Some("n1")),
                F,
                &[(NODE_ID_ANNOTATION, "n1"), ("h", "vol-1")]
            ),
            Some(json!({"metadata": {"annotations": {"h": "vol-1"}}})),
            "only the missing annotation"
        );
    }

    #[test]
    fn finalizer_removal_replaces_the_list_or_deletes_it() {
        let cases = [
            (
                "ours alone",
                va(&[F], None),
                Some(json!({"metadata": {"finalizers": null}})),
            ),
            (
                "others kept in order",
                va(&["a", F, "b"], None),
                Some(json!({"metadata": {"finalizers": ["a", "b"]}})),
            ),
            ("not ours", va(&["a"], None), None),
        ];
        for (name, va, want) in cases {
            assert_eq!(va_remove_finalizer(&va, F), want, "{name}");
        }
    }

    #[test]
    fn status_bodies_match_external_attacher() {
        let time = Timestamp::from_second(1_700_000_000).unwrap();
        assert_eq!(
            attached(&HashMap::from([
                ("b".into(), "2".into()),
                ("a".into(), "1".into())
            ])),
            Ok(
                json!({"status": {"attached": true, "attachmentMetadata": {"a": "1", "b": "2"}, "attachError": null}})
            )
        );
        assert_eq!(
            attached(&HashMap::new()),
            Ok(
                json!({"status": {"attached": true, "attachmentMetadata": null, "attachError": null}})
            )
        );
        assert_eq!(
            detached(),
            json!({"status": {"attached": false, "detachError": null, "attachmentMetadata": null}})
        );
        assert_eq!(trivially_attached(), json!({"status": {"attached": true}}));
        assert_eq!(
            attach_error("boom", time, Some(8)),
            json!({"status": {"attachError": {"message": "boom", "time": "2023-11-14T22:13:20Z", "errorCode": 8}}})
        );
        assert_eq!(
            attach_error("boom", time, None),
            json!({"status": {"attachError": {"message": "boom", "time": "2023-11-14T22:13:20Z"}}})
        );
        assert_eq!(
            detach_error("boom", time),
            json!({"status": {"detachError": {"message": "boom", "time": "2023-11-14T22:13:20Z"}}})
        );
    }

    #[test]
    fn a_publish_context_is_stored_only_within_the_api_servers_limit() {
        // kube-apiserver counts the bytes of every key and value; 256 KiB is still valid.
        let at_limit = HashMap::from([("k".to_owned(), "v".repeat(256 * 1024 - 1))]);
        assert!(attached(&at_limit).is_ok());
        let over = HashMap::from([
            ("k".to_owned(), "v".repeat(256 * 1024 - 1)),
            ("x".to_owned(), String::new()),
        ]);
        assert_eq!(attached(&over), Err(PublishContextTooLarge(256 * 1024 + 1)));
    }

    #[test]
    fn error_messages_are_cut_to_what_the_api_server_stores() {
        let time = Timestamp::from_second(1_700_000_000).unwrap();
        let cases = [
            ("short", "boom".to_owned(), "boom".to_owned()),
            ("at limit", "a".repeat(1024), "a".repeat(1024)),
            ("over", "a".repeat(1500), "a".repeat(1024)),
            // 'é' is two bytes: byte 1024 falls inside the 513th one.
            ("multi-byte", "é".repeat(600), "é".repeat(512)),
        ];
        for (name, message, want) in cases {
            assert_eq!(
                attach_error(&message, time, None)["status"]["attachError"]["message"],
                json!(want),
                "{name}: attach"
            );
            assert_eq!(
                detach_error(&message, time)["status"]["detachError"]["message"],
                json!(want),
                "{name}: detach"
            );
        }
    }

    #[test]
    fn pv_finalizer_patches_fail_instead_of_overwriting() {
        assert_eq!(
            pv_add_finalizer(&pv(&[]), F),
            Some(json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "add", "path": "/metadata/finalizers", "value": [F]},
            ]))
        );
        assert_eq!(
            pv_add_finalizer(&pv(&["kubernetes.io/pv-protection"]), F),
            Some(json!([{"op": "add", "path": "/metadata/finalizers/-", "value": F}]))
        );
        assert_eq!(pv_add_finalizer(&pv(&[F]), F), None);
        assert_eq!(
            pv_remove_finalizer(&pv(&["kubernetes.io/pv-protection", F]), F),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": F},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ]))
        );
        assert_eq!(
            pv_remove_finalizer(&pv(&["kubernetes.io/pv-protection"]), F),
            None
        );
    }
}
