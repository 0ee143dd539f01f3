//! Kubernetes `resource.Quantity` strings as whole bytes: parsing a storage request and writing a
//! capacity the way the Go sidecars write it.
//!
//! Rust counterpart of the two apimachinery calls the sidecars make on storage sizes:
//! `Quantity.Value()` on `resources.requests.storage` (CreateVolume `required_bytes`, resize
//! targets) and `resource.NewQuantity(bytes, resource.BinarySI).String()` for PV
//! `spec.capacity.storage`. The published Rust crates for this are wrong on inputs such as
//! `1.5G` or milli values, so the grammar is implemented here from apimachinery's
//! `ParseQuantity`:
//!
//! ```text
//! quantity     = [sign] number suffix
//! number       = digits | digits "." [digits] | "." digits
//! suffix       = binarySI | decimalSI | ("e" | "E") [sign] digits
//! binarySI     = "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"
//! decimalSI    = "n" | "u" | "m" | "" | "k" | "M" | "G" | "T" | "P" | "E"
//! ```
//!
//! Values are exact (no floating point): `1.5G` is 1500000000 and `0.5Ki` is 512. A value with a
//! fractional number of bytes is rounded **up**, as `Quantity.Value()` does (`100m` is 1 byte):
//! asking for some storage never yields less.

use thiserror::Error;

/// Why a quantity string could not be turned into bytes.
///
/// The first two messages are apimachinery's own (`ErrFormatWrong`, `ErrSuffix`), so what a user
/// sees matches what kube-apiserver says about the same string.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    /// Not `[sign] number suffix` at all (empty, whitespace, stray characters such as `1Gb`).
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// Shaped like a quantity but the suffix is not one Kubernetes knows (`1K`, `1Mii`).
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// A negative amount of bytes: no storage request or capacity can be below zero.
    #[error("quantity must not be negative")]
    Negative,
    /// More bytes than an `int64` holds. apimachinery silently caps such values at
    /// 9223372036854775807 (so kube-apiserver never stores one); refusing is safer than sending a
    /// size nobody asked for.
    #[error("quantity is larger than 9223372036854775807 bytes")]
    Overflow,
}

/// Shorthand for results of this module.
pub type Result<T, E = QuantityError> = std::result::Result<T, E>;

/// Parses a quantity string into whole bytes, rounding a fractional byte count up.
///
/// Equivalent to `resource.MustParse(q).Value()` for every value kube-apiserver accepts, except
/// that negative values and values beyond `i64::MAX` are errors instead of being returned
/// (negative) or capped (too large). Whitespace is not trimmed: `" 1Gi"` is malformed, as it is
/// for `ParseQuantity`.
///
/// Kept upstream quirks of the grammar: a bare sign (`"+"`, `"-"`) or a bare `"."` means zero,
/// and `"1."` means one.
pub fn parse_bytes(q: &str) -> Result<i64> {
    let parts = split(q)?;
    let (base, exponent) = interpret_suffix(parts.suffix).ok_or(QuantityError::Suffix)?;
    to_bytes(&parts, base, exponent)
}

/// Formats a byte count the way `resource.NewQuantity(bytes, resource.BinarySI).String()` does.
///
/// Exact multiples of a power of 1024 get the largest binary suffix that keeps an integer
/// (`1073741824` → `1Gi`, `1610612736` → `1536Mi`); other values ≥ 1024 are plain numbers
/// (`1500000000`). Below 1024 apimachinery switches to decimal SI, which only changes `1000`
/// into `1k`.
pub fn format_binary_si(bytes: i64) -> String {
    const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes == 0 {
        return "0".to_owned();
    }
    let value = i128::from(bytes);
    if value.abs() < 1024 {
        // DecimalSI with the exponent kept a multiple of three: only ±1000 has one to show.
        let (mantissa, tens) = remove_factors(value, 10);
        return if tens == 3 {
            format!("{mantissa}k")
        } else {
            value.to_string()
        };
    }
    let (mantissa, times) = remove_factors(value, 1024);
    // |i64| < 2^63 = 8 * 1024^6, so at most six factors of 1024 come out.
    format!("{mantissa}{}", BINARY_SUFFIXES[times])
}

/// Divides `value` by `base` while it stays an exact multiple (apimachinery
/// `removeInt64Factors`).
fn remove_factors(mut value: i128, base: i128) -> (i128, usize) {
    let mut times = 0;
    while value.abs() >= base && value % base == 0 {
        value /= base;
        times += 1;
    }
    (value, times)
}

/// The pieces of a syntactically valid quantity.
#[derive(Debug, PartialEq, Eq)]
struct Parts<'a> {
    negative: bool,
    /// Digits before the decimal point, leading zeros removed.
    integer: &'a str,
    /// Digits after the decimal point.
    fraction: &'a str,
    suffix: &'a str,
}

/// Splits a quantity into sign, digits and suffix, following the scan in apimachinery's
/// `parseQuantityString` (including where it stops and accepts the input early).
fn split(s: &str) -> Result<Parts<'_>> {
    if s.is_empty() {
        return Err(QuantityError::Format);
    }
    let bytes = s.as_bytes();
    let end = bytes.len();
    let mut pos = 0;
    let mut negative = false;
    match bytes[0] {
        b'-' => {
            negative = true;
            pos = 1;
        }
        b'+' => pos = 1,
        _ => {}
    }
    while pos < end && bytes[pos] == b'0' {
        pos += 1;
    }
    let digits = |from: usize| {
        let mut to = from;
        while to < end && bytes[to].is_ascii_digit() {
            to += 1;
        }
        to
    };
    let integer_end = digits(pos);
    let integer = &s[pos..integer_end];
    pos = integer_end;
    let mut fraction = "";
    if pos < end && bytes[pos] == b'.' {
        let fraction_end = digits(pos + 1);
        fraction = &s[pos + 1..fraction_end];
        pos = fraction_end;
    }
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < end && matches!(bytes[pos], b'+' | b'-') {
        pos += 1;
    }
    pos = digits(pos);
    if pos != end {
        return Err(QuantityError::Format);
    }
    Ok(Parts {
        negative,
        integer,
        fraction,
        suffix: &s[suffix_start..],
    })
}

/// Maps a suffix to `(base, exponent)`: base 10 for decimal SI and exponents, base 2 for binary
/// SI (apimachinery `suffixHandler.interpret`). `None` for an unknown suffix.
fn interpret_suffix(suffix: &str) -> Option<(u32, i128)> {
    let known = match suffix {
        "n" => Some((10, -9)),
        "u" => Some((10, -6)),
        "m" => Some((10, -3)),
        "" => Some((10, 0)),
        "k" => Some((10, 3)),
        "M" => Some((10, 6)),
        "G" => Some((10, 9)),
        "T" => Some((10, 12)),
        "P" => Some((10, 15)),
        "E" => Some((10, 18)),
        "Ki" => Some((2, 10)),
        "Mi" => Some((2, 20)),
        "Gi" => Some((2, 30)),
        "Ti" => Some((2, 40)),
        "Pi" => Some((2, 50)),
        "Ei" => Some((2, 60)),
        _ => None,
    };
    if known.is_some() {
        return known;
    }
    // `e3`, `E-2`, `e+6`: a signed decimal exponent (Go parses it with ParseInt, 64 bits).
    let exponent = suffix
        .strip_prefix(['e', 'E'])
        .filter(|rest| !rest.is_empty())?;
    exponent.parse::<i64>().ok().map(|e| (10, i128::from(e)))
}

/// Computes `ceil(digits × 10^exp10 × 2^exp2)` exactly, within `0..=i64::MAX`.
fn to_bytes(parts: &Parts<'_>, base: u32, exponent: i128) -> Result<i64> {
    let (mut exp10, exp2) = if base == 2 {
        // Binary suffixes are Ki..Ei, so the exponent is 10..=60 and fits.
        (0_i128, u32::try_from(exponent).unwrap_or(0))
    } else {
        (exponent, 0)
    };
    let mut digits: Vec<u8> = parts
        .integer
        .bytes()
        .chain(parts.fraction.bytes())
        .map(|c| c - b'0')
        .collect();
    exp10 -= i128::try_from(parts.fraction.len()).unwrap_or(i128::MAX);
    let leading = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..leading);
    if digits.is_empty() {
        // Any spelling of zero, including "-0" and the upstream-accepted "+" and ".".
        return Ok(0);
    }
    if parts.negative {
        return Err(QuantityError::Negative);
    }
    while digits.last() == Some(&0) {
        digits.pop();
        exp10 += 1;
    }
    // `digits` is now a non-empty run starting and ending with a non-zero digit.
    let len = i128::try_from(digits.len()).unwrap_or(i128::MAX);
    let total = if exp10 >= 0 {
        // value >= 10^(len - 1 + exp10); 10^19 is already beyond i64::MAX.
        if len - 1 + exp10 >= 19 {
            return Err(QuantityError::Overflow);
        }
        let mut value = digits_value(&digits);
        for _ in 0..exp10 {
            value *= 10;
        }
        // value < 10^19 and 2^exp2 <= 2^60: the product stays far below u128::MAX.
        value << exp2
    } else {
        let fractional_digits = -exp10;
        if fractional_digits - len > 19 {
            // 0 < value < 10^-20 × 2^60 < 1: a positive sliver, rounded up to one byte.
            return Ok(1);
        }
        let split_at = usize::try_from((len - fractional_digits).max(0)).unwrap_or(0);
        let (integer, fraction) = digits.split_at(split_at);
        if integer.len() > 19 {
            return Err(QuantityError::Overflow);
        }
        let zeros = usize::try_from((fractional_digits - len).max(0)).unwrap_or(0);
        let mut fraction: Vec<u8> = std::iter::repeat_n(0, zeros)
            .chain(fraction.iter().copied())
            .collect();
        (digits_value(integer) << exp2) + fraction_times_power_of_two_ceil(&mut fraction, exp2)
    };
    i64::try_from(total).map_err(|_| QuantityError::Overflow)
}

/// The integer spelled by at most 19 decimal digits.
fn digits_value(digits: &[u8]) -> u128 {
    digits
        .iter()
        .fold(0_u128, |acc, &d| acc * 10 + u128::from(d))
}

/// `ceil(0.f1f2…fk × 2^exp2)` for the decimal fraction digits `f1…fk`, by doubling the digit
/// string `exp2` times and collecting what carries past the decimal point.
fn fraction_times_power_of_two_ceil(fraction: &mut [u8], exp2: u32) -> u128 {
    let mut whole = 0_u128;
    for _ in 0..exp2 {
        let mut carry = 0;
        for digit in fraction.iter_mut().rev() {
            let doubled = *digit * 2 + carry;
            *digit = doubled % 10;
            carry = doubled / 10;
        }
        whole = whole * 2 + u128::from(carry);
    }
    whole + u128::from(fraction.iter().any(|&d| d != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_bytes_follows_kubernetes_quantity_rules() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("1", 1),
            ("1024", 1024),
            ("1Ki", 1024),
            ("1Mi", 1 << 20),
            ("1Gi", 1 << 30),
            ("1Ti", 1 << 40),
            ("1Pi", 1 << 50),
            ("2Ei", 1 << 61),
            ("7Ei", 7 << 60),
            ("1k", 1000),
            ("1M", 1_000_000),
            ("1G", 1_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("9E", 9_000_000_000_000_000_000),
            ("1.5Gi", 1_610_612_736),
            ("1.5G", 1_500_000_000),
            ("0.5Ki", 512),
            ("1.5", 2),
            ("100m", 1),
            ("1000m", 1),
            ("1001m", 2),
            ("1500m", 2),
            ("1n", 1),
            ("1u", 1),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1e+3", 1000),
            ("1.5e3", 1500),
            ("15e-1", 2),
            ("1e-3", 1),
            ("1e-40", 1),
            ("1e-999999999", 1),
            ("12e0", 12),
            ("1.0000000001", 2),
            ("2.000000000", 2),
            ("0.1Ki", 103),
            ("0.0009765625Ki", 1),
            ("0.00048828125Ki", 1),
            ("1.25Mi", 1_310_720),
            ("0000001Gi", 1 << 30),
            ("+1Gi", 1 << 30),
            ("1.", 1),
            (".5k", 500),
            ("-0", 0),
            ("0Gi", 0),
            ("0.000e5", 0),
            ("9223372036854775807", i64::MAX),
            ("9223372036854775807000m", i64::MAX),
            ("7.999999999999999999Ei", 9_223_372_036_854_775_807),
            // Upstream grammar quirks: a bare sign or point scans as zero.
            ("+", 0),
            ("-", 0),
            (".", 0),
        ];
        for &(input, want) in cases {
            assert_eq!(parse_bytes(input), Ok(want), "{input:?}");
        }
    }

    #[test]
    fn parse_bytes_rejects_what_is_not_a_byte_count() {
        let cases: &[(&str, QuantityError)] = &[
            ("", QuantityError::Format),
            (" 1Gi", QuantityError::Format),
            ("1Gi ", QuantityError::Format),
            ("1 Gi", QuantityError::Format),
            ("\t1", QuantityError::Format),
            ("1Gb", QuantityError::Format),
            ("1GB", QuantityError::Format),
            ("abc", QuantityError::Format),
            ("0x10", QuantityError::Format),
            ("1e3.5", QuantityError::Format),
            ("1..5", QuantityError::Format),
            // The scan reads "-1" after the sign as an exponent-like suffix, as Go's does.
            ("--1", QuantityError::Suffix),
            ("1K", QuantityError::Suffix),
            ("1Mii", QuantityError::Suffix),
            ("1e", QuantityError::Suffix),
            ("1ee3", QuantityError::Suffix),
            ("1Ki5", QuantityError::Suffix),
            ("1e-", QuantityError::Suffix),
            ("1e99999999999999999999", QuantityError::Suffix),
            ("-1Gi", QuantityError::Negative),
            ("-1", QuantityError::Negative),
            ("-100m", QuantityError::Negative),
            ("8Ei", QuantityError::Overflow),
            ("9223372036854775808", QuantityError::Overflow),
            ("10E", QuantityError::Overflow),
            ("1e19", QuantityError::Overflow),
            ("1e400", QuantityError::Overflow),
            ("100000000000000000000Ki", QuantityError::Overflow),
            ("9223372036854775807.5", QuantityError::Overflow),
            ("12345678901234567890.1", QuantityError::Overflow),
        ];
        for (input, want) in cases {
            assert_eq!(parse_bytes(input).as_ref(), Err(want), "{input:?}");
        }
    }

    #[test]
    fn errors_carry_the_apimachinery_texts() {
        assert_eq!(
            QuantityError::Format.to_string(),
            "quantities must match the regular expression \
             '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
        assert_eq!(
            QuantityError::Suffix.to_string(),
            "unable to parse quantity's suffix"
        );
    }

    #[test]
    fn format_binary_si_writes_capacity_like_new_quantity_binary_si() {
        let cases: &[(i64, &str)] = &[
            (0, "0"),
            (1, "1"),
            (100, "100"),
            (999, "999"),
            (1000, "1k"),
            (1023, "1023"),
            (1024, "1Ki"),
            (1025, "1025"),
            (2048, "2Ki"),
            (1_048_576, "1Mi"),
            (1_073_741_824, "1Gi"),
            (1_610_612_736, "1536Mi"),
            (1_500_000_000, "1500000000"),
            (2_199_023_255_552, "2Ti"),
            (1 << 50, "1Pi"),
            (1 << 61, "2Ei"),
            (1 << 62, "4Ei"),
            (i64::MAX, "9223372036854775807"),
            (-1000, "-1k"),
            (-1024, "-1Ki"),
            (i64::MIN, "-8Ei"),
        ];
        for &(bytes, want) in cases {
            assert_eq!(format_binary_si(bytes), want, "{bytes}");
        }
    }

    #[test]
    fn formatted_capacity_parses_back_to_the_same_bytes() {
        for bytes in [1, 999, 1000, 1024, 1536, 1_500_000_000, 1 << 40, i64::MAX] {
            assert_eq!(parse_bytes(&format_binary_si(bytes)), Ok(bytes), "{bytes}");
        }
    }
}
