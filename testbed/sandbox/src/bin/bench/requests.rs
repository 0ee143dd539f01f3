//! The API requests a sidecar sent during one bench phase, from two snapshots of the API
//! server's request counter minus the requests the bench itself sent, and how they compare with
//! what upstream sends for the same operation.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Requests by (Kubernetes verb, resource), as [`testbed_cluster::apiserver::RequestCounts`]
/// counts them (`resource` is `plural` or `plural/status`).
pub(crate) type Counts = BTreeMap<(String, String), usize>;

/// One (verb, resource, requests) entry of a known traffic pattern.
pub(crate) type Expected = (&'static str, &'static str, usize);

/// `after - before - own`: what everyone but the bench sent between the two snapshots.
pub(crate) fn sent_by_others(before: &Counts, after: &Counts, own: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(key, &count)| {
            let earlier = before.get(key).copied().unwrap_or_default();
            let mine = own.get(key).copied().unwrap_or_default();
            let left = count.saturating_sub(earlier).saturating_sub(mine);
            (left > 0).then(|| (key.clone(), left))
        })
        .collect()
}

/// `count` requests of `verb` on `resource`, as a one-entry [`Counts`].
pub(crate) fn own(verb: &str, resource: &str, count: usize) -> Counts {
    Counts::from([((verb.to_owned(), resource.to_owned()), count)])
}

/// Whether `verb` changes an object (what a client's QPS budget and etcd pay for most).
pub(crate) fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// The write requests in `counts`.
pub(crate) fn writes(counts: &Counts) -> usize {
    counts
        .iter()
        .filter(|((verb, _), _)| is_write(verb))
        .map(|(_, n)| n)
        .sum()
}

/// A Markdown table of `counts` per operation (`operations` of them, named `per`), next to
/// `upstream`'s requests per operation; rows for every request either side sent.
pub(crate) fn table(
    counts: &Counts,
    operations: usize,
    per: &str,
    upstream: &[Expected],
) -> String {
    let mut keys: Vec<(String, String)> = counts.keys().cloned().collect();
    for (verb, resource, _) in upstream {
        let key = ((*verb).to_owned(), (*resource).to_owned());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.sort();
    let upstream_of = |verb: &str, resource: &str| {
        upstream
            .iter()
            .find(|(v, r, _)| *v == verb && *r == resource)
            .map_or(0, |(_, _, n)| *n)
    };
    let mut s = String::new();
    let _ = writeln!(s, "| verb | resource | requests | {per} | upstream {per} |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for (verb, resource) in &keys {
        let count = counts
            .get(&(verb.clone(), resource.clone()))
            .copied()
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {verb} | {resource} | {count} | {} | {} |",
            ratio(count, operations),
            upstream_of(verb, resource)
        );
    }
    let upstream_writes: usize = upstream
        .iter()
        .filter(|(verb, _, _)| is_write(verb))
        .map(|(_, _, n)| n)
        .sum();
    let _ = writeln!(
        s,
        "| **writes** | | {} | {} | {upstream_writes} |",
        writes(counts),
        ratio(writes(counts), operations)
    );
    s
}

fn ratio(count: usize, operations: usize) -> String {
    if operations == 0 {
        return "n/a".to_owned();
    }
    #[allow(
        clippy::cast_precision_loss,
        reason = "request and operation counts are far below 2^52"
    )]
    let value = count as f64 / operations as f64;
    format!("{value:.2}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(entries: &[Expected]) -> Counts {
        entries
            .iter()
            .map(|(v, r, n)| (((*v).to_owned(), (*r).to_owned()), *n))
            .collect()
    }

    #[test]
    fn the_benchs_own_requests_and_earlier_ones_are_left_out() {
        let before = counts(&[
            ("watch", "volumeattachments", 2),
            ("patch", "volumeattachments", 5),
        ]);
        let after = counts(&[
            ("watch", "volumeattachments", 2),
            ("patch", "volumeattachments", 9),
            ("create", "volumeattachments", 4),
            ("create", "events", 4),
        ]);
        let got = sent_by_others(&before, &after, &own("create", "volumeattachments", 4));
        assert_eq!(
            got,
            counts(&[("patch", "volumeattachments", 4), ("create", "events", 4)])
        );
        assert_eq!(writes(&got), 8);
    }

    #[test]
    fn the_table_shows_requests_per_operation_next_to_upstreams() {
        let sent = counts(&[("patch", "volumeattachments", 4), ("get", "secrets", 2)]);
        let upstream = [
            ("patch", "volumeattachments", 1),
            ("patch", "persistentvolumes", 1),
        ];
        let text = table(&sent, 4, "per attach", &upstream);
        assert!(
            text.contains("| verb | resource | requests | per attach | upstream per attach |"),
            "{text}"
        );
        assert!(text.contains("| get | secrets | 2 | 0.50 | 0 |"), "{text}");
        assert!(
            text.contains("| patch | persistentvolumes | 0 | 0.00 | 1 |"),
            "{text}"
        );
        assert!(
            text.contains("| patch | volumeattachments | 4 | 1.00 | 1 |"),
            "{text}"
        );
        assert!(text.contains("| **writes** | | 4 | 1.00 | 2 |"), "{text}");
        assert!(table(&sent, 0, "per attach", &[]).contains("| 2 | n/a | 0 |"));
    }
}
