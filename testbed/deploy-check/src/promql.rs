//! The metric names a PromQL expression reads. Not a PromQL parser: it drops what cannot hold a
//! metric name (label matchers in `{...}`, ranges in `[...]`, `by (...)`/`without (...)`/
//! `on (...)`/`ignoring (...)` label lists, string literals and numbers), then keeps the
//! identifiers that are not functions (followed by `(`) or keywords. That is enough for the
//! dashboard's expressions, which a test pins.

use std::collections::BTreeSet;

/// Modifiers followed by a parenthesised label list.
const LABEL_LIST_MODIFIERS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Other PromQL keywords and the aggregation operators (`sum by (x) (...)` puts a word between
/// the operator and its parenthesis) that look like identifiers.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

fn strip_delimited(text: &str, open: char, close: char) -> String {
    let mut out = String::new();
    let mut depth = 0_usize;
    for c in text.chars() {
        if c == open {
            depth += 1;
        } else if c == close && depth > 0 {
            depth -= 1;
        } else if depth == 0 {
            out.push(c);
        }
    }
    out
}

/// Removes the parenthesised label list after each of `by`, `without`, `on`, `ignoring`.
fn strip_label_lists(text: &str) -> String {
    let mut out = text.to_owned();
    for keyword in LABEL_LIST_MODIFIERS {
        let mut rest = out.as_str();
        let mut kept = String::new();
        while let Some(at) = find_word(rest, keyword) {
            kept.push_str(&rest[..at + keyword.len()]);
            let after = &rest[at + keyword.len()..];
            let trimmed = after.trim_start();
            if let Some(inner) = trimmed.strip_prefix('(') {
                let end = inner.find(')').map_or(inner.len(), |e| e + 1);
                rest = &inner[end..];
            } else {
                rest = after;
            }
        }
        kept.push_str(rest);
        out = kept;
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Byte offset of `word` as a whole identifier in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    text.match_indices(word).map(|(at, _)| at).find(|&at| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident_char) && !after.is_some_and(is_ident_char)
    })
}

/// The metric names `expr` reads.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let no_strings = strip_delimited(expr, '"', '"');
    let text = strip_delimited(&strip_delimited(&no_strings, '{', '}'), '[', ']');
    let text = strip_label_lists(&text);
    let mut names = BTreeSet::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            if c.is_ascii_digit() {
                // A number (1e3, 0.5) is not a name.
                while chars
                    .next_if(|(_, c)| is_ident_char(*c) || *c == '.')
                    .is_some()
                {}
            }
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some((i, c)) = chars.next_if(|(_, c)| is_ident_char(*c)) {
            end = i + c.len_utf8();
        }
        let ident = &text[start..end];
        let is_call = text[end..].trim_start().starts_with('(');
        if !is_call && !KEYWORDS.contains(&ident) && !LABEL_LIST_MODIFIERS.contains(&ident) {
            names.insert(ident.to_owned());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_and_functions_labels_ranges_and_numbers_dropped() {
        let cases: &[(&str, &[&str])] = &[
            (
                r#"sum by (method_name) (rate(csi_sidecar_operations_seconds_count{job=~"$job",grpc_status_code!="OK"}[5m]))"#,
                &["csi_sidecar_operations_seconds_count"],
            ),
            (
                "histogram_quantile(0.99, sum without (instance) (rate(csi_sidecar_operations_seconds_bucket[5m])))",
                &["csi_sidecar_operations_seconds_bucket"],
            ),
            (
                "max by (name) (workqueue_depth) / on (name) group_left max(workqueue_adds_total) * 1e3",
                &["workqueue_adds_total", "workqueue_depth"],
            ),
            (
                "leader_election_master_status == bool 1",
                &["leader_election_master_status"],
            ),
        ];
        for (expr, expected) in cases {
            let expected: BTreeSet<String> = expected.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(metric_names(expr), expected, "{expr}");
        }
    }
}
