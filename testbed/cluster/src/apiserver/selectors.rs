//! Label and field selectors of LIST and WATCH (`labelSelector`, `fieldSelector`).
//!
//! Label selectors support the full set-based grammar (`=`, `==`, `!=`, `in`, `notin`, `key`,
//! `!key`); field selectors support `metadata.name` and `metadata.namespace` on every resource
//! plus the few per-kind fields upstream registers for the kinds served (e.g. `spec.nodeName`
//! on Pods, `involvedObject.*` on Events). Anything else is a 400, as upstream answers
//! `field label not supported`.

use serde_json::Value;

use super::resources::ResourceInfo;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A parsed label selector (all requirements must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<(String, LabelOp)>);

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

/// Split on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{rest}', expected: '('"))?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

impl LabelSelector {
    /// Parse `labelSelector`; the error is the 400 message.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                (key.trim().to_owned(), LabelOp::NotExists)
            } else if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_owned(), LabelOp::NotEq(v.trim().to_owned()))
            } else if let Some((k, v)) = part.split_once("==") {
                (k.trim().to_owned(), LabelOp::Eq(v.trim().to_owned()))
            } else if let Some((k, v)) = part.split_once('=') {
                (k.trim().to_owned(), LabelOp::Eq(v.trim().to_owned()))
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                (k.trim().to_owned(), LabelOp::NotIn(parse_set(rest)?))
            } else if let Some((k, rest)) = part.split_once(" in ") {
                (k.trim().to_owned(), LabelOp::In(parse_set(rest)?))
            } else if part.contains(char::is_whitespace) || part.contains(['(', ')', '<', '>']) {
                return Err(format!("unable to parse requirement: found '{part}'"));
            } else {
                (part.to_owned(), LabelOp::Exists)
            };
            if req.0.is_empty() {
                return Err(format!(
                    "unable to parse requirement: found '{part}', expected: identifier"
                ));
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether `obj`'s labels satisfy every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0.iter().all(|(key, op)| {
            let value = labels.get(key).and_then(Value::as_str);
            match op {
                LabelOp::Eq(v) => value == Some(v.as_str()),
                LabelOp::NotEq(v) => value != Some(v.as_str()),
                LabelOp::In(vs) => value.is_some_and(|x| vs.iter().any(|v| v == x)),
                LabelOp::NotIn(vs) => value.is_none_or(|x| vs.iter().all(|v| v != x)),
                LabelOp::Exists => value.is_some(),
                LabelOp::NotExists => value.is_none(),
            }
        })
    }

    /// No requirement at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Fields upstream registers for field selectors, besides metadata.name/namespace.
fn extra_fields(info: &ResourceInfo) -> &'static [&'static str] {
    match (info.group, info.plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parse `fieldSelector` for `info`; the error is the 400 message.
    pub(crate) fn parse(info: &ResourceInfo, s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            let known = matches!(field, "metadata.name" | "metadata.namespace")
                || extra_fields(info).contains(&field);
            if !known {
                return Err(format!("field label not supported: {field}"));
            }
            reqs.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    /// Whether `obj` satisfies every requirement (`obj` in storage shape).
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, equal, want)| {
            let got = field_value(obj, field);
            (got == *want) == *equal
        })
    }

    /// No requirement at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn field_value(obj: &Value, field: &str) -> String {
    if field == "source" {
        return obj["source"]["component"].as_str().unwrap_or("").to_owned();
    }
    let mut v = obj;
    for part in field.split('.') {
        v = &v[part];
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Null => match field {
            "spec.unschedulable" | "spec.hostNetwork" => "false".to_owned(),
            _ => String::new(),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources;
    use serde_json::json;

    fn obj(labels: &Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_selectors_follow_the_set_based_grammar() {
        let o = obj(&json!({"app": "web", "tier": "db"}));
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, api)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing!=x", true),
            ("app=web,tier in (db)", true),
            ("app=web,tier=x", false),
            ("", true),
        ];
        for (sel, want) in cases {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn field_selectors_know_name_and_namespace_and_reject_others() {
        let pvcs = resources::find("", "v1", "persistentvolumeclaims").unwrap();
        let o = obj(&json!({}));
        assert!(
            FieldSelector::parse(pvcs, "metadata.name=a")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse(pvcs, "metadata.name!=a")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse(pvcs, "metadata.namespace==ns")
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse(pvcs, "spec.volumeName=x").unwrap_err(),
            "field label not supported: spec.volumeName"
        );
        let pods = resources::find("", "v1", "pods").unwrap();
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}});
        assert!(
            FieldSelector::parse(pods, "spec.nodeName=n1")
                .unwrap()
                .matches(&pod)
        );
    }
}
