//! The version every sidecar prints for `--version` and logs at start-up.
//!
//! Format: `v<workspace version>+<revision>`, where the revision is the first 12 hex digits of
//! the commit the binary was built from (`v0.1.0+1a2b3c4d5e6f`, semantic-versioning build
//! metadata), or `v<workspace version>` alone when the build could not ask git (an image built
//! without `.git`). Uncommitted changes are not marked. Upstream prints its release tag
//! (`v6.3.0`); ours has no release tags yet, and the revision says exactly what was built.

use std::sync::LazyLock;

/// Digits of the commit hash kept, as `git rev-parse --short=12` prints.
const REVISION_DIGITS: usize = 12;

static VERSION: LazyLock<String> =
    LazyLock::new(|| format_version(env!("CARGO_PKG_VERSION"), env!("CSI_SIDECARS_GIT_REVISION")));

/// This build's version (see the module docs for the format).
pub fn version() -> &'static str {
    &VERSION
}

/// `v<crate_version>`, plus `+<first 12 digits>` when `revision` is a commit hash (at least 12
/// hex digits); anything else in `revision`, such as nothing, is left out.
pub fn format_version(crate_version: &str, revision: &str) -> String {
    let revision = revision.trim().to_ascii_lowercase();
    if revision.len() >= REVISION_DIGITS && revision.chars().all(|c| c.is_ascii_hexdigit()) {
        format!("v{crate_version}+{}", &revision[..REVISION_DIGITS])
    } else {
        format!("v{crate_version}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_is_appended_only_when_it_is_a_commit_hash() {
        let cases = [
            (
                "21eb386ae90a1c2b3c4d5e6f708192a3b4c5d6e7",
                "v0.1.0+21eb386ae90a",
            ),
            ("21EB386AE90A", "v0.1.0+21eb386ae90a"),
            ("", "v0.1.0"),
            ("21eb386", "v0.1.0"),
            ("not-a-commit-hash", "v0.1.0"),
        ];
        for (revision, want) in cases {
            assert_eq!(format_version("0.1.0", revision), want, "{revision:?}");
        }
    }

    #[test]
    fn this_build_has_the_declared_format() {
        let version = version();
        let rest = version
            .strip_prefix(concat!("v", env!("CARGO_PKG_VERSION")))
            .unwrap_or_else(|| panic!("{version}"));
        assert!(
            rest.is_empty()
                || rest.strip_prefix('+').is_some_and(|hex| {
                    hex.len() == REVISION_DIGITS
                        && hex.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
                }),
            "{version}"
        );
    }
}
