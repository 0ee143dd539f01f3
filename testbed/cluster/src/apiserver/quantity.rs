//! Just enough of Kubernetes' `resource.Quantity` parsing to reject what kube-apiserver rejects
//! at decode time (400, fixture h6) and to tell the sign of a value (422 "must be greater than
//! zero", fixture h2). The grammar follows upstream `ParseQuantity`: sign, digits with at most
//! one decimal point, then a binary (`Ki`..`Ei`) or decimal (`n`..`E`) suffix or an exponent.

/// Why a quantity string was rejected (upstream's two error texts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuantityError {
    /// `ErrFormatWrong`.
    Format,
    /// `ErrSuffix`.
    Suffix,
}

impl QuantityError {
    /// The upstream error text.
    pub(crate) fn message(self) -> &'static str {
        match self {
            QuantityError::Format => {
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Suffix => "unable to parse quantity's suffix",
        }
    }
}

/// A parsed quantity: only what validation needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Quantity {
    negative: bool,
    zero: bool,
    /// Approximate value, for comparisons.
    pub(crate) value: f64,
}

impl Quantity {
    /// Strictly greater than zero.
    pub(crate) fn is_positive(&self) -> bool {
        !self.negative && !self.zero
    }

    /// Strictly less than zero.
    pub(crate) fn is_negative(&self) -> bool {
        self.negative && !self.zero
    }
}

/// Parse a quantity string.
pub(crate) fn parse(s: &str) -> Result<Quantity, QuantityError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(QuantityError::Format);
    }
    let bytes = s.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    if matches!(bytes[0], b'+' | b'-') {
        negative = bytes[0] == b'-';
        pos = 1;
    }
    let num_start = pos;
    let mut seen_dot = false;
    while pos < bytes.len() && (bytes[pos].is_ascii_digit() || (bytes[pos] == b'.' && !seen_dot)) {
        seen_dot |= bytes[pos] == b'.';
        pos += 1;
    }
    let number = &s[num_start..pos];
    if number.is_empty() || number == "." {
        return Err(QuantityError::Format);
    }
    let suffix_start = pos;
    while pos < bytes.len() && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < bytes.len() && matches!(bytes[pos], b'+' | b'-') {
        pos += 1;
    }
    while pos < bytes.len() && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos != bytes.len() {
        return Err(QuantityError::Format);
    }
    let suffix = &s[suffix_start..];
    let multiplier = suffix_multiplier(suffix).ok_or(QuantityError::Suffix)?;
    let magnitude: f64 = number.parse().map_err(|_| QuantityError::Format)?;
    let zero = magnitude == 0.0;
    let value = if negative { -magnitude } else { magnitude } * multiplier;
    Ok(Quantity {
        negative,
        zero,
        value,
    })
}

fn suffix_multiplier(suffix: &str) -> Option<f64> {
    let binary = |p: i32| Some(1024f64.powi(p));
    let decimal = |p: i32| Some(10f64.powi(p));
    match suffix {
        "" => decimal(0),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        _ => {
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let exp: i32 = rest.parse().ok()?;
            decimal(exp)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_like_upstream() {
        type Case = (&'static str, Result<(bool, f64), QuantityError>);
        let cases: &[Case] = &[
            ("1Gi", Ok((true, 1_073_741_824.0))),
            ("100Gi", Ok((true, 107_374_182_400.0))),
            ("1Ti", Ok((true, 1_099_511_627_776.0))),
            ("1.5G", Ok((true, 1_500_000_000.0))),
            ("500m", Ok((true, 0.5))),
            ("1e3", Ok((true, 1000.0))),
            ("0", Ok((false, 0.0))),
            ("-1Gi", Ok((false, -1_073_741_824.0))),
            ("1GB", Err(QuantityError::Format)),
            ("abc", Err(QuantityError::Format)),
            ("", Err(QuantityError::Format)),
            ("1Gii", Err(QuantityError::Suffix)),
            ("1kK", Err(QuantityError::Suffix)),
        ];
        for (input, want) in cases {
            let got = parse(input).map(|q| (q.is_positive(), q.value));
            assert_eq!(&got, want, "{input}");
        }
    }
}
