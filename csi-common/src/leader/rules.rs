//! Pure naming and parsing rules of csi-lib-utils `leaderelection` and `standardflags`: the Lease
//! name, the holder identity, the Lease namespace and the `--leader-election-labels` syntax.
//!
//! A Go replica and a Rust replica only share one lock during a rollout if both derive the same
//! Lease name in the same namespace, so these functions copy upstream byte for byte, quirks
//! included.

use std::collections::BTreeMap;
use std::path::Path;

/// Environment variable holding the pod namespace (set through the downward API in upstream
/// deployment manifests).
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";

/// File holding the namespace of the pod's service account (in-cluster only).
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Namespace used when neither the flag, `POD_NAMESPACE` nor the service-account file name one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Makes `name` usable as a Lease name or holder identity the way csi-lib-utils `sanitizeName`
/// does: every character outside `[a-zA-Z0-9-]` becomes `-`, case is kept, and an `X` is
/// appended when the result ends with `-` (a DNS label must not end with a dash).
///
/// Multi-byte characters become a single `-`, as Go's regexp replaces whole runes. Upstream
/// panics on an empty name; here an empty name stays empty and
/// [`LeaderElector::new`](super::LeaderElector::new) rejects it.
///
/// ```
/// use csi_common::leader::sanitize;
///
/// assert_eq!(sanitize("ebs.csi.aws.com"), "ebs-csi-aws-com");
/// assert_eq!(sanitize("example.com/driver"), "example-com-driver");
/// assert_eq!(sanitize("driver."), "driver-X");
/// ```
pub fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if out.ends_with('-') {
        out.push('X');
    }
    out
}

/// The Lease name for a lock name: [`sanitize`] applied to the whole lock name, as
/// csi-lib-utils does before creating the lock.
///
/// Each sidecar composes its own lock name (upstream's choices, kept so mixed rollouts share one
/// Lease):
///
/// ```
/// use csi_common::leader::lease_name;
///
/// let driver = "hostpath.csi.k8s.io";
/// // external-provisioner: the driver name alone
/// assert_eq!(lease_name(driver), "hostpath-csi-k8s-io");
/// // external-attacher
/// assert_eq!(
///     lease_name(&format!("external-attacher-leader-{driver}")),
///     "external-attacher-leader-hostpath-csi-k8s-io"
/// );
/// // external-resizer
/// assert_eq!(
///     lease_name(&format!("external-resizer-{driver}")),
///     "external-resizer-hostpath-csi-k8s-io"
/// );
/// ```
pub fn lease_name(lock_name: &str) -> String {
    sanitize(lock_name)
}

/// The holder identity written into `spec.holderIdentity`: the sanitized host name (the pod
/// name in a cluster). The caller reads the host name; upstream uses `os.Hostname()`.
///
/// Two processes on one host get the same identity and both believe they lead (seen in the
/// golden capture); that is upstream behaviour, not corrected here.
///
/// ```
/// assert_eq!(csi_common::leader::identity("csi-resizer-7d9f_0"), "csi-resizer-7d9f-0");
/// ```
pub fn identity(hostname: &str) -> String {
    sanitize(hostname)
}

/// Picks the Lease namespace: the `--leader-election-namespace` flag, else `POD_NAMESPACE`,
/// else the service-account namespace file (whitespace-trimmed), else `default`.
///
/// Empty values count as unset, as in csi-lib-utils `inClusterNamespace` (only the file content
/// is trimmed there, so only the file content is trimmed here).
///
/// ```
/// use csi_common::leader::resolve_namespace;
///
/// assert_eq!(resolve_namespace(None, Some("csi".into()), None), "csi");
/// assert_eq!(resolve_namespace(Some("".into()), None, Some("kube-system\n".into())), "kube-system");
/// assert_eq!(resolve_namespace(None, None, None), "default");
/// ```
pub fn resolve_namespace(
    flag: Option<String>,
    pod_namespace: Option<String>,
    service_account_namespace: Option<String>,
) -> String {
    if let Some(ns) = flag.filter(|ns| !ns.is_empty()) {
        return ns;
    }
    if let Some(ns) = pod_namespace.filter(|ns| !ns.is_empty()) {
        return ns;
    }
    if let Some(ns) = service_account_namespace
        .map(|ns| ns.trim().to_owned())
        .filter(|ns| !ns.is_empty())
    {
        return ns;
    }
    DEFAULT_NAMESPACE.to_owned()
}

/// [`resolve_namespace`] with the two lookups injected, so `main` can pass the real environment
/// and file system and tests can pass closures (no `set_var`):
///
/// ```no_run
/// let namespace = csi_common::leader::namespace_from(
///     None,
///     &|key| std::env::var(key).ok(),
///     &|path| std::fs::read_to_string(path).ok(),
/// );
/// ```
///
/// The environment and the file are only consulted when the flag is empty.
pub fn namespace_from(
    flag: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    read_file: &dyn Fn(&Path) -> Option<String>,
) -> String {
    if let Some(ns) = flag.filter(|ns| !ns.is_empty()) {
        return ns.to_owned();
    }
    let pod_namespace = env(POD_NAMESPACE_ENV);
    let file = if pod_namespace.as_deref().is_some_and(|ns| !ns.is_empty()) {
        None
    } else {
        read_file(Path::new(SERVICE_ACCOUNT_NAMESPACE_FILE))
    };
    resolve_namespace(None, pod_namespace, file)
}

/// One `--leader-election-labels` value that is not a `key:value` list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed item in list of labels: {item}")]
pub struct MalformedLabel {
    /// The offending item, exactly as given (upstream prints it the same way).
    pub item: String,
}

/// Parses one `--leader-election-labels` value, `k1:v1,k2:v2`, like csi-lib-utils `stringMap.Set`:
/// split on `,`, each item must split on `:` into exactly two parts (so `a=b`, `a:b:c` and an
/// empty value are errors), nothing is trimmed, a later duplicate key wins.
///
/// ```
/// use csi_common::leader::parse_labels;
///
/// let labels = parse_labels("team:storage,tier:gold").unwrap();
/// assert_eq!(labels["team"], "storage");
/// assert!(parse_labels("team=storage").is_err());
/// ```
pub fn parse_labels(value: &str) -> Result<BTreeMap<String, String>, MalformedLabel> {
    let mut labels = BTreeMap::new();
    for item in value.split(',') {
        let parts: Vec<&str> = item.split(':').collect();
        let [key, value] = parts.as_slice() else {
            return Err(MalformedLabel {
                item: item.to_owned(),
            });
        };
        labels.insert((*key).to_owned(), (*value).to_owned());
    }
    Ok(labels)
}

/// Merges the values of a repeated `--leader-election-labels` flag in command-line order: the
/// flag accumulates, and a key given again later overrides the earlier value (upstream writes
/// every occurrence into one map).
///
/// ```
/// use csi_common::leader::{merge_labels, parse_labels};
///
/// let merged = merge_labels([parse_labels("a:1,b:2").unwrap(), parse_labels("b:3").unwrap()]);
/// assert_eq!(merged.into_iter().collect::<Vec<_>>(), [("a".into(), "1".into()), ("b".into(), "3".into())]);
/// ```
pub fn merge_labels(
    values: impl IntoIterator<Item = BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    values.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_matches_csi_lib_utils_for_every_case() {
        let cases = [
            ("ebs.csi.aws.com", "ebs-csi-aws-com"),
            ("hostpath.csi.k8s.io", "hostpath-csi-k8s-io"),
            ("fake.csi.example.com", "fake-csi-example-com"),
            ("example.com/my-driver", "example-com-my-driver"),
            ("UPPER.Case", "UPPER-Case"),
            ("ends-with-dash-", "ends-with-dash-X"),
            ("ends.with.dot.", "ends-with-dot-X"),
            ("under_score", "under-score"),
            ("ümlaut", "-mlaut"),
            ("a b", "a-b"),
            ("-", "-X"),
            ("plain", "plain"),
            ("", ""),
        ];
        for (input, expected) in cases {
            assert_eq!(sanitize(input), expected, "sanitize({input:?})");
        }
    }

    #[test]
    fn lease_names_match_the_upstream_sidecars() {
        // Verified names from the spec (sidecars.md 5.4, fixtures README item 10).
        assert_eq!(
            lease_name("external-attacher-leader-fake.csi.example.com"),
            "external-attacher-leader-fake-csi-example-com"
        );
        assert_eq!(
            lease_name("external-resizer-fake.csi.example.com"),
            "external-resizer-fake-csi-example-com"
        );
        assert_eq!(
            lease_name("external-resizer-hostpath.csi.k8s.io"),
            "external-resizer-hostpath-csi-k8s-io"
        );
        assert_eq!(lease_name("ebs.csi.aws.com"), "ebs-csi-aws-com");
    }

    #[test]
    fn identity_is_the_sanitized_hostname() {
        assert_eq!(identity("vm"), "vm");
        assert_eq!(
            identity("node-1.example.internal"),
            "node-1-example-internal"
        );
    }

    #[test]
    fn namespace_prefers_flag_then_pod_namespace_then_file_then_default() {
        let s = |v: &str| Some(v.to_owned());
        let cases = [
            ((s("flag"), s("pod"), s("file")), "flag"),
            ((None, s("pod"), s("file")), "pod"),
            ((s(""), s("pod"), s("file")), "pod"),
            ((None, None, s("file")), "file"),
            ((None, s(""), s("  file\n")), "file"),
            ((None, None, s(" \n")), "default"),
            ((None, None, None), "default"),
            // Only the file content is trimmed, as upstream.
            ((s(" flag "), None, None), " flag "),
        ];
        for ((flag, pod, file), expected) in cases {
            assert_eq!(
                resolve_namespace(flag.clone(), pod.clone(), file.clone()),
                expected,
                "resolve_namespace({flag:?}, {pod:?}, {file:?})"
            );
        }
    }

    #[test]
    fn namespace_from_reads_env_and_file_only_when_needed() {
        let env = |key: &str| (key == POD_NAMESPACE_ENV).then(|| "from-env".to_owned());
        let no_env = |_: &str| None;
        let file = |path: &Path| {
            (path == Path::new(SERVICE_ACCOUNT_NAMESPACE_FILE)).then(|| "from-file\n".to_owned())
        };
        let no_file = |_: &Path| None;
        let panicking_file = |_: &Path| -> Option<String> { panic!("file must not be read") };

        assert_eq!(namespace_from(Some("flag"), &env, &panicking_file), "flag");
        assert_eq!(namespace_from(None, &env, &panicking_file), "from-env");
        assert_eq!(namespace_from(Some(""), &no_env, &file), "from-file");
        assert_eq!(namespace_from(None, &no_env, &no_file), "default");
    }

    #[test]
    fn labels_parse_like_standardflags_string_map() {
        let ok = [
            ("a:b", vec![("a", "b")]),
            ("a:b,c:d", vec![("a", "b"), ("c", "d")]),
            ("a:1,a:2", vec![("a", "2")]),
            ("a:", vec![("a", "")]),
            (":v", vec![("", "v")]),
            (
                "example.com/team:storage",
                vec![("example.com/team", "storage")],
            ),
            (" a : b ", vec![(" a ", " b ")]),
        ];
        for (input, expected) in ok {
            let expected: BTreeMap<String, String> = expected
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            assert_eq!(parse_labels(input), Ok(expected), "parse_labels({input:?})");
        }
        let bad = [
            ("a=b", "a=b"),
            ("a:b:c", "a:b:c"),
            ("", ""),
            ("a:b,", ""),
            ("a:b,c", "c"),
        ];
        for (input, item) in bad {
            let err = parse_labels(input).unwrap_err();
            assert_eq!(err.item, item, "parse_labels({input:?})");
            assert_eq!(
                err.to_string(),
                format!("malformed item in list of labels: {item}")
            );
        }
    }

    #[test]
    fn repeated_label_flags_accumulate_and_later_values_win() {
        let merged = merge_labels([
            parse_labels("a:1,b:2").unwrap(),
            parse_labels("c:3").unwrap(),
            parse_labels("a:9").unwrap(),
        ]);
        let got: Vec<(&str, &str)> = merged
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, [("a", "9"), ("b", "2"), ("c", "3")]);
        assert!(merge_labels([]).is_empty());
    }
}
