//! core/v1 and events.k8s.io/v1 Events are two views of one stored object (fixtures m3, m6).
//! The store keeps the core/v1 shape; these functions convert between the two, field by field
//! as upstream's conversion does (involvedObject <-> regarding, message <-> note,
//! source <-> deprecatedSource, count <-> deprecatedCount, firstTimestamp <->
//! deprecatedFirstTimestamp, reportingComponent <-> reportingController, ...).

use serde_json::{Map, Value, json};

/// (core/v1 field, events.k8s.io/v1 field) pairs copied one to one.
const PAIRS: &[(&str, &str)] = &[
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("reason", "reason"),
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("type", "type"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

fn convert(obj: &Value, api_version: &str, from_core: bool) -> Value {
    let mut out = Map::new();
    out.insert("kind".to_owned(), json!("Event"));
    out.insert("apiVersion".to_owned(), json!(api_version));
    out.insert("metadata".to_owned(), obj["metadata"].clone());
    for (core, v1) in PAIRS {
        let (src, dst) = if from_core { (core, v1) } else { (v1, core) };
        if let Some(v) = obj.get(*src) {
            // Zero values of omitempty fields vanish in the other view (e.g. an empty
            // reportingComponent is no reportingController).
            let keep_zero = matches!(
                *dst,
                "eventTime"
                    | "deprecatedFirstTimestamp"
                    | "deprecatedLastTimestamp"
                    | "firstTimestamp"
                    | "lastTimestamp"
            );
            if !is_zero(v) || (keep_zero && !v.is_null()) {
                out.insert((*dst).to_owned(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// Stored (core/v1) Event to its events.k8s.io/v1 view.
pub(crate) fn core_to_events_v1(obj: &Value) -> Value {
    convert(obj, "events.k8s.io/v1", true)
}

/// events.k8s.io/v1 Event to the stored (core/v1) shape.
pub(crate) fn events_v1_to_core(obj: &Value) -> Value {
    convert(obj, "v1", false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_event_reads_as_events_k8s_io_like_upstream() {
        let core = json!({"kind": "Event", "apiVersion": "v1", "metadata": {"name": "e"},
            "involvedObject": {"kind": "PersistentVolumeClaim", "name": "p"}, "reason": "Provisioning",
            "message": "m", "source": {"component": "c"}, "firstTimestamp": "2026-11-21T15:41:00Z",
            "lastTimestamp": "2026-11-21T15:41:00Z", "count": 1, "type": "Normal", "eventTime": null,
            "reportingComponent": "c", "reportingInstance": ""});
        let v1 = core_to_events_v1(&core);
        assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v1["regarding"]["name"], "p");
        assert_eq!(v1["note"], "m");
        assert_eq!(v1["deprecatedSource"]["component"], "c");
        assert_eq!(v1["deprecatedCount"], 1);
        assert_eq!(v1["reportingController"], "c");
        assert!(v1.get("reportingInstance").is_none());
    }

    #[test]
    fn an_events_k8s_io_event_reads_as_core_without_count() {
        let v1 = json!({"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": {"name": "e"},
            "eventTime": "2026-11-21T15:41:01.123456Z", "reportingController": "ctl",
            "reportingInstance": "i", "action": "Provisioning", "reason": "R",
            "regarding": {"name": "p"}, "note": "n", "type": "Normal"});
        let core = events_v1_to_core(&v1);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "n");
        assert_eq!(core["reportingComponent"], "ctl");
        assert_eq!(core["action"], "Provisioning");
        assert!(core.get("count").is_none());
    }
}
