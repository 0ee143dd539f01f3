//! Kubelet's check of a plugin's `supported_versions` (`utilversion.ParseGeneric` and
//! `HighestSupportedVersion` in k8s.io/apimachinery, used by the CSI registration handler).
//!
//! * A version is an optional `v`, then at least two dot-separated decimal numbers without
//!   leading zeros; anything after the numbers is ignored ("generic", not semver).
//! * Versions that do not parse and versions with a major above 1 are skipped; the highest of
//!   the rest must have major 1 (CSI 0.x has been unsupported since Kubernetes 1.17).

use std::cmp::Ordering;
use std::fmt;

/// A parsed generic version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(Vec<u64>);

impl Version {
    /// Parses like `ParseGeneric`.
    ///
    /// # Errors
    /// A message in the spirit of apimachinery's.
    pub fn parse_generic(s: &str) -> Result<Self, String> {
        let trimmed = s.trim_start();
        let trimmed = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let numbers_end = trimmed
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(trimmed.len());
        let mut numbers = &trimmed[..numbers_end];
        // The regexp takes `[0-9]+(\.[0-9]+)*`: a trailing dot belongs to the ignored rest.
        while let Some(stripped) = numbers.strip_suffix('.') {
            numbers = stripped;
        }
        if numbers.is_empty() || numbers.starts_with('.') || numbers.contains("..") {
            return Err(format!("could not parse {s:?} as version"));
        }
        let components: Vec<&str> = numbers.split('.').collect();
        if components.len() < 2 {
            return Err(format!("illegal version string {s:?}"));
        }
        let mut parsed = Vec::with_capacity(components.len());
        for component in components {
            if component.len() > 1 && component.starts_with('0') {
                return Err(format!(
                    "illegal zero-prefixed version component {component:?} in {s:?}"
                ));
            }
            let number = component.parse::<u64>().map_err(|err| {
                format!("illegal non-numeric version component {component:?} in {s:?}: {err}")
            })?;
            parsed.push(number);
        }
        Ok(Self(parsed))
    }

    /// The first component.
    pub fn major(&self) -> u64 {
        self.0[0]
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        // Missing components count as 0 ("1.0" == "1.0.0").
        let len = self.0.len().max(other.0.len());
        (0..len)
            .map(|i| {
                let a = self.0.get(i).copied().unwrap_or(0);
                let b = other.0.get(i).copied().unwrap_or(0);
                a.cmp(&b)
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&text.join("."))
    }
}

/// The highest supported version, as `HighestSupportedVersion`.
///
/// # Errors
/// For an empty list, no parseable version of major ≤ 1, or a highest version of major 0.
pub fn highest_supported(versions: &[String]) -> Result<Version, String> {
    if versions.is_empty() {
        return Err("empty array for supported versions".to_owned());
    }
    let mut highest: Option<Version> = None;
    let mut last_error = None;
    for text in versions.iter().rev() {
        match Version::parse_generic(text) {
            Ok(version) if version.major() > 1 => {}
            Ok(version) => {
                if highest.as_ref().is_none_or(|h| *h < version) {
                    highest = Some(version);
                }
            }
            Err(err) => last_error = Some(err),
        }
    }
    let Some(highest) = highest else {
        return Err(format!(
            "could not find a highest supported version from versions ({}) reported: {}",
            versions.join(" "),
            last_error.unwrap_or_else(|| "<nil>".to_owned())
        ));
    };
    if highest.major() != 1 {
        return Err(format!(
            "highest supported version reported is {highest}, must be v1.x"
        ));
    }
    Ok(highest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn generic_versions_parse_like_apimachinery() {
        for (text, expected) in [
            ("1.0.0", Some(vec![1, 0, 0])),
            ("v1.2", Some(vec![1, 2])),
            ("  1.5.0-beta.1", Some(vec![1, 5, 0])),
            ("1.0.0+meta", Some(vec![1, 0, 0])),
            ("1", None),
            ("1.01", None),
            ("x1.0", None),
            ("", None),
            ("v", None),
        ] {
            let parsed = Version::parse_generic(text).ok().map(|v| v.0);
            assert_eq!(parsed, expected, "{text:?}");
        }
    }

    #[test]
    fn the_registrars_versions_are_accepted() {
        assert_eq!(
            highest_supported(&strings(&["1.0.0"])).unwrap().to_string(),
            "1.0.0"
        );
        assert_eq!(
            highest_supported(&strings(&["0.3.0", "1.2.0", "1.10.0", "2.0.0"]))
                .unwrap()
                .to_string(),
            "1.10.0"
        );
    }

    #[test]
    fn lists_without_a_v1_version_are_refused() {
        for versions in [
            &[][..],
            &["0.3.0"],
            &["2.0.0"],
            &["garbage"],
            &["0.1", "junk"],
        ] {
            assert!(
                highest_supported(&strings(versions)).is_err(),
                "{versions:?}"
            );
        }
    }
}
