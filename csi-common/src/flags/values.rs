//! Value parsers that reproduce Go's `flag`/`strconv`/`time` syntax, for use as clap
//! `value_parser`s, so a manifest written for the Go sidecars means the same thing here.
//!
//! Each parser returns `Result<T, String>`: clap wraps the message into its usual
//! "invalid value 'x' for '--flag <..>': message" usage error, which exits 2 like Go's
//! `flag.ExitOnError`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Parses a boolean the way Go's `strconv.ParseBool` does, which is what Go's `flag` package
/// uses for `--flag=<bool>`.
///
/// Accepted: `1`, `t`, `T`, `TRUE`, `true`, `True`, `0`, `f`, `F`, `FALSE`, `false`, `False`.
/// Anything else (including `yes`, `on` and the empty string) is an error, as in Go.
///
/// Use it with the bool recipe documented on [`crate::flags`]:
/// `#[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true,
/// default_missing_value = "true", default_value = "false", value_parser = flags::go_bool)]`.
pub fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "invalid boolean value {s:?} (Go syntax: 1, 0, t, f, T, F, true, false, TRUE, FALSE, True, False)"
        )),
    }
}

/// Parses the value of a Go `flag.BoolFunc` flag such as `--automaxprocs`.
///
/// Same as [`go_bool`], except that the empty string means `true`: csi-lib-utils'
/// `handleAutomaxprocs` treats `--automaxprocs=` like the bare `--automaxprocs`.
pub fn go_bool_func(s: &str) -> Result<bool, String> {
    if s.is_empty() { Ok(true) } else { go_bool(s) }
}

/// Parses a non-negative Go duration (`time.ParseDuration` syntax) into a [`Duration`].
///
/// Go syntax: an optional sign, then one or more `<number><unit>` pairs where the number may
/// have a fraction (`1.5h`, `.5s`, `1.s`) and the unit is one of `ns`, `us`, `µs` (U+00B5),
/// `μs` (U+03BC), `ms`, `s`, `m`, `h`; pairs combine (`1h2m3.5s`). A lone `0` needs no unit.
/// Values above Go's `time.Duration` range (about 292 years) are rejected as Go rejects them.
///
/// Go's `flag` package accepts negative durations; none of the sidecars' duration flags (lease
/// timings, timeouts, intervals) has a meaning for one, so we reject them at parse time with a
/// clear message instead (a usage error, exit 2). `-0s` is zero and accepted.
pub fn go_duration(s: &str) -> Result<Duration, String> {
    let nanos = parse_duration_nanos(s)?;
    if nanos < 0 {
        return Err(format!(
            "negative duration {s:?} is not allowed for this flag"
        ));
    }
    Ok(Duration::from_nanos(nanos.unsigned_abs()))
}

/// Go's `1<<63`: the magnitude limit `time.ParseDuration` checks against.
const GO_DURATION_LIMIT: u64 = 1 << 63;

/// Nanoseconds per Go duration unit. Both micro signs are accepted, as in Go's `unitMap`.
fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{00b5}s" | "\u{03bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Signed Go `time.ParseDuration`: the value in nanoseconds, within `i64` like Go's
/// `time.Duration`. Error texts follow Go's (`time: invalid duration "x"`, ...).
pub(super) fn parse_duration_nanos(orig: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {orig:?}");
    let mut s = orig;
    let mut neg = false;
    if let Some(rest) = s.strip_prefix('-') {
        neg = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    // Go special-cases a bare "0" (after the sign); "00" or "0.0" still need a unit.
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        let b = s.as_bytes();
        if !(b[0] == b'.' || b[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // Integer part.
        let int_len = b.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut whole: u64 = 0;
        for &c in &b[..int_len] {
            // Go's leadingInt overflows above 1<<63.
            whole = whole
                .checked_mul(10)
                .and_then(|x| x.checked_add(u64::from(c - b'0')))
                .filter(|&x| x <= GO_DURATION_LIMIT)
                .ok_or_else(invalid)?;
        }
        s = &s[int_len..];
        // Fraction part: like Go's leadingFraction, keep consuming digits but stop
        // accumulating once more precision would overflow.
        let mut frac: u64 = 0;
        let mut scale: u64 = 1;
        let mut frac_len = 0;
        if let Some(rest) = s.strip_prefix('.') {
            s = rest;
            let fb = s.as_bytes();
            frac_len = fb.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for &c in &fb[..frac_len] {
                if overflow {
                    continue;
                }
                // The scale can overflow before the value does (leading zeros: ".000…"); Go
                // keeps it in a float64. Digits past 10^19 are below a nanosecond of any unit,
                // so stopping there changes nothing.
                match frac
                    .checked_mul(10)
                    .and_then(|x| x.checked_add(u64::from(c - b'0')))
                    .filter(|&x| x < GO_DURATION_LIMIT)
                    .zip(scale.checked_mul(10))
                {
                    Some((x, next_scale)) => {
                        frac = x;
                        scale = next_scale;
                    }
                    None => overflow = true,
                }
            }
            s = &s[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            // ".s" or "." has no digits at all.
            return Err(invalid());
        }
        // Unit: everything up to the next digit or '.'.
        let unit_len = s
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map_or(s.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {orig:?}"));
        }
        let unit_str = &s[..unit_len];
        s = &s[unit_len..];
        let unit = unit_nanos(unit_str)
            .ok_or_else(|| format!("time: unknown unit {unit_str:?} in duration {orig:?}"))?;
        if whole > GO_DURATION_LIMIT / unit {
            return Err(invalid());
        }
        let mut value = whole * unit;
        if frac > 0 {
            // Exact integer arithmetic; Go uses float64 here, which can differ by a
            // nanosecond only for pathological inputs.
            let extra = u128::from(frac) * u128::from(unit) / u128::from(scale);
            value = u64::try_from(u128::from(value) + extra)
                .ok()
                .filter(|&v| v <= GO_DURATION_LIMIT)
                .ok_or_else(invalid)?;
        }
        total = total
            .checked_add(value)
            .filter(|&t| t <= GO_DURATION_LIMIT)
            .ok_or_else(invalid)?;
    }
    if neg {
        // -(1<<63) is exactly i64::MIN, which Go allows.
        return Ok(0_i64.wrapping_sub_unsigned(total));
    }
    i64::try_from(total).map_err(|_| invalid())
}

/// Formats a duration the way Go's `time.Duration.String` does (`0s`, `500ms`, `300µs`,
/// `1.5s`, `1m30s`, `5m0s`, `1h0m0s`), for help texts and log lines that users compare with
/// the upstream sidecars' output.
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        // Below one second Go picks the largest unit that keeps an integer part.
        let (unit_nanos, unit) = if nanos < 1_000 {
            (1, "ns")
        } else if nanos < 1_000_000 {
            (1_000, "\u{00b5}s")
        } else {
            (1_000_000, "ms")
        };
        return format!("{}{unit}", FixedPoint::new(nanos, unit_nanos));
    }
    let total_secs = nanos / 1_000_000_000;
    let sub_nanos = nanos % 1_000_000_000;
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let seconds = FixedPoint::new((total_secs % 60) * 1_000_000_000 + sub_nanos, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, _) => format!("{minutes}m{seconds}s"),
        _ => format!("{hours}h{minutes}m{seconds}s"),
    }
}

/// `value / unit` printed with the fraction's trailing zeros removed, as Go's `fmtFrac` does.
struct FixedPoint {
    int: u128,
    frac: u128,
    unit: u128,
}

impl FixedPoint {
    fn new(value: u128, unit: u128) -> Self {
        Self {
            int: value / unit,
            frac: value % unit,
            unit,
        }
    }
}

impl fmt::Display for FixedPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.int)?;
        if self.frac == 0 {
            return Ok(());
        }
        let width = self.unit.ilog10() as usize;
        let digits = format!("{:0width$}", self.frac);
        write!(f, ".{}", digits.trim_end_matches('0'))
    }
}

/// Parses an integer the way Go's `flag.IntVar` does (`strconv.ParseInt(s, 0, 64)`): an
/// optional sign, then decimal, `0x`/`0X` hex, `0o`/`0O` or leading-`0` octal, or `0b`/`0B`
/// binary, with `_` allowed between digits when a base prefix is used. The result must fit
/// in an `i32` because every integer flag we share (`--kube-api-burst`) is a small count.
pub fn go_int(s: &str) -> Result<i32, String> {
    let err = || format!("invalid integer {s:?} (Go syntax: decimal, 0x hex, 0o octal, 0b binary)");
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits, prefixed) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d, true)
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d, true)
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d, true)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..], true)
        } else {
            (10, body, false)
        };
    // Go allows underscores only with base 0 and a prefix, only between digits.
    let cleaned: String = if prefixed {
        // `0x_1f` is fine in Go (the prefix counts as a digit for this rule); `1_` and `1__2` are not.
        if digits.ends_with('_') || digits.contains("__") {
            return Err(err());
        }
        digits.chars().filter(|&c| c != '_').collect()
    } else {
        digits.to_owned()
    };
    if cleaned.is_empty() || !cleaned.chars().all(|c| c.is_digit(radix)) {
        return Err(err());
    }
    let magnitude = i64::from_str_radix(&cleaned, radix).map_err(|_| err())?;
    let value = if neg { -magnitude } else { magnitude };
    i32::try_from(value).map_err(|_| format!("integer {s:?} is out of range"))
}

/// Parses a Go `uint` flag value (`strconv.ParseUint(s, 0, ...)`, csi-provisioner's and
/// csi-attacher's `--worker-threads`): [`go_int`] syntax without a sign.
pub fn go_uint(s: &str) -> Result<u32, String> {
    if s.starts_with('-') || s.starts_with('+') {
        return Err(format!("invalid unsigned integer {s:?}"));
    }
    let value = go_int(s)?;
    u32::try_from(value).map_err(|_| format!("invalid unsigned integer {s:?}"))
}

/// Parses a klog verbosity level (`-v`): a non-negative decimal integer, as component-base's
/// `VerbosityLevel` flag does with `strconv.ParseUint(s, 10, 32)`.
pub fn verbosity_level(s: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid verbosity level {s:?} (expected a non-negative integer)"
        ));
    }
    s.parse::<u32>()
        .map_err(|_| format!("verbosity level {s:?} is out of range"))
}

/// One `pattern=N` item of `--vmodule`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VModuleItem {
    /// Go source file glob the level applies to (for example `controller*`).
    pub pattern: String,
    /// Verbosity for files matching `pattern`.
    pub verbosity: u32,
}

/// The parsed value of one `--vmodule` occurrence: a comma-separated list of `pattern=N`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VModule(pub Vec<VModuleItem>);

/// Parses one `--vmodule` value with component-base's rules: items are separated by `,`,
/// empty items (a trailing comma) are skipped, every other item must be `pattern=N` with a
/// non-empty pattern and an unsigned level that fits in 31 bits.
pub fn vmodule(s: &str) -> Result<VModule, String> {
    let mut items = Vec::new();
    for item in s.split(',') {
        if item.is_empty() {
            continue;
        }
        let parts: Vec<&str> = item.split('=').collect();
        let [pattern, level] = parts.as_slice() else {
            return Err(format!("{item:?} does not have the pattern=N format"));
        };
        if pattern.is_empty() || level.is_empty() {
            return Err(format!("{item:?} does not have the pattern=N format"));
        }
        let verbosity = verbosity_level(level)
            .ok()
            .filter(|&v| v <= i32::MAX.unsigned_abs())
            .ok_or_else(|| format!("parsing verbosity in {item:?}: invalid level {level:?}"))?;
        items.push(VModuleItem {
            pattern: (*pattern).to_owned(),
            verbosity,
        });
    }
    Ok(VModule(items))
}

/// The parsed value of one `--leader-election-labels` occurrence.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseLabels(pub BTreeMap<String, String>);

/// Parses one `--leader-election-labels` value, `k1:v1,k2:v2`, with csi-lib-utils'
/// `stringMap.Set` rules: split on `,`, then every item must split on `:` into exactly two
/// parts (keys and values are taken verbatim, not trimmed). `a=b`, `a:b:c` and the empty
/// string are errors, which upstream reports as a usage error (exit 2).
///
/// Beyond upstream, a key that is not a Kubernetes qualified name or a value that is not a
/// valid label value is refused here too: upstream accepts it and then retries creating a Lease
/// the API server refuses (422) forever, never leading and never saying why at start-up.
pub fn lease_labels(s: &str) -> Result<LeaseLabels, String> {
    let mut map = BTreeMap::new();
    for item in s.split(',') {
        let parts: Vec<&str> = item.split(':').collect();
        let [key, value] = parts.as_slice() else {
            return Err(format!(
                "malformed item in list of labels: {item:?} (expected key:value)"
            ));
        };
        if !is_qualified_name(key) || !is_label_value(value) {
            return Err(format!(
                "invalid label {item:?}: the key must be a qualified name ([prefix/]name) and the value at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric"
            ));
        }
        map.insert((*key).to_owned(), (*value).to_owned());
    }
    Ok(LeaseLabels(map))
}

/// apimachinery `IsQualifiedName`'s name part (also a label value when not empty): at most 63
/// characters of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
fn is_label_name(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !s.is_empty()
        && s.len() <= 63
        && alnum(s.chars().next())
        && alnum(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// apimachinery `IsQualifiedName`: `name` or `prefix/name`, the prefix a DNS-1123 subdomain.
/// A label key, and the key of a node selector requirement, must be one (kube-apiserver
/// refuses the object with 422 otherwise).
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        None => is_label_name(s),
        Some((prefix, name)) => {
            let subdomain = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|part| {
                    !part.is_empty()
                        && part.starts_with(|c: char| c.is_ascii_alphanumeric())
                        && part.ends_with(|c: char| c.is_ascii_alphanumeric())
                        && part
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                });
            subdomain && is_label_name(name)
        }
    }
}

/// apimachinery `IsValidLabelValue`: empty, or a label name.
fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

/// One `--feature-gates` occurrence, `Key=bool,...` (component-base `mapStringBool`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureGates(pub BTreeMap<String, bool>);

impl FeatureGates {
    /// Every occurrence merged in command-line order, a later value for the same gate winning
    /// (pflag's map flag writes into one map).
    pub fn merge<'a>(occurrences: impl IntoIterator<Item = &'a Self>) -> BTreeMap<String, bool> {
        let mut merged = BTreeMap::new();
        for occurrence in occurrences {
            merged.extend(occurrence.0.iter().map(|(k, v)| (k.clone(), *v)));
        }
        merged
    }
}

/// Parses a `--feature-gates` value with component-base's rules: comma-separated items, each
/// `Key=bool` ([`go_bool`] syntax), whitespace around keys and values trimmed, empty items
/// skipped.
pub fn feature_gates(s: &str) -> Result<FeatureGates, String> {
    let mut gates = BTreeMap::new();
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("missing bool value for {item}"));
        };
        let (key, value) = (key.trim(), value.trim());
        let value = go_bool(value).map_err(|e| format!("invalid value of {key}={value}: {e}"))?;
        gates.insert(key.to_owned(), value);
    }
    Ok(FeatureGates(gates))
}

/// A Kubernetes `resource.Quantity` as accepted on the command line (the logging
/// `--log-*-info-buffer-size` flags). Only the syntax is checked and whether the value is zero
/// is remembered: nothing here uses the size, because upstream rejects any non-zero value in
/// validation (the alpha logging options cannot be enabled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    text: String,
    zero: bool,
}

impl Quantity {
    /// The value as the user wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the quantity is zero (`0`, `0Ki`, `0.0`, `-0`, `0e3`, ...).
    pub fn is_zero(&self) -> bool {
        self.zero
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Parses a `resource.Quantity`: `<sign?><digits>[.<digits>]<suffix>` where the suffix is a
/// binary SI suffix (`Ki` .. `Ei`), a decimal SI suffix (`n`, `u`, `m`, none, `k`, `M`, `G`,
/// `T`, `P`, `E`) or a decimal exponent (`e3`, `E-2`).
pub fn quantity(s: &str) -> Result<Quantity, String> {
    let err = || {
        format!(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {s:?}"
        )
    };
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let num_len = body
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (number, suffix) = body.split_at(num_len);
    let digits: String = number.chars().filter(char::is_ascii_digit).collect();
    if digits.is_empty() || number.matches('.').count() > 1 {
        return Err(err());
    }
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
        .is_some_and(|exp| !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit()));
    if !suffix_ok {
        return Err(err());
    }
    Ok(Quantity {
        text: s.to_owned(),
        zero: digits.bytes().all(|b| b == b'0'),
    })
}
