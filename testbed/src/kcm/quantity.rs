//! Storage sizes as the binder compares them: a Kubernetes `resource.Quantity` string turned
//! into whole bytes, rounded up like upstream `Quantity.Value()` ("1.5" is 2, "500m" is 1).
//! Only what volume matching needs; the API server validates the syntax before we see it.

/// Bytes in `quantity`, or `None` when it does not parse or overflows.
pub(crate) fn bytes(quantity: &str) -> Option<i128> {
    let s = quantity.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." {
        return None;
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{whole}{fraction}");
    let mut numerator: i128 = digits.parse().ok()?;
    // value = numerator / 10^scale * multiplier
    let mut scale = u32::try_from(fraction.len()).ok()?;
    let mut multiplier: i128 = 1;
    let binary = |exp: u32| 1i128.checked_shl(exp);
    match suffix {
        "" => {}
        "Ki" => multiplier = binary(10)?,
        "Mi" => multiplier = binary(20)?,
        "Gi" => multiplier = binary(30)?,
        "Ti" => multiplier = binary(40)?,
        "Pi" => multiplier = binary(50)?,
        "Ei" => multiplier = binary(60)?,
        "n" => scale += 9,
        "u" => scale += 6,
        "m" => scale += 3,
        "k" => multiplier = 10i128.pow(3),
        "M" => multiplier = 10i128.pow(6),
        "G" => multiplier = 10i128.pow(9),
        "T" => multiplier = 10i128.pow(12),
        "P" => multiplier = 10i128.pow(15),
        "E" => multiplier = 10i128.pow(18),
        exp => {
            let exp = exp.strip_prefix(['e', 'E'])?;
            let exp: i32 = exp.parse().ok()?;
            if exp >= 0 {
                multiplier = 10i128.checked_pow(exp.unsigned_abs())?;
            } else {
                scale += exp.unsigned_abs();
            }
        }
    }
    numerator = numerator.checked_mul(multiplier)?;
    let divisor = 10i128.checked_pow(scale)?;
    let value = (numerator + divisor - 1) / divisor;
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn binary_and_decimal_suffixes_give_bytes() {
        for (q, want) in [
            ("1Gi", 1 << 30),
            ("1G", 1_000_000_000),
            ("1.5Gi", 3 << 29),
            ("100Mi", 100 << 20),
            ("2Ti", 2 << 40),
            ("1024", 1024),
            ("1e3", 1000),
            ("5E", 5_000_000_000_000_000_000),
            ("-1Ki", -1024),
        ] {
            assert_eq!(bytes(q), Some(want), "{q}");
        }
    }

    #[test]
    fn fractions_of_a_byte_round_up() {
        assert_eq!(bytes("500m"), Some(1));
        assert_eq!(bytes("1.5"), Some(2));
        assert_eq!(bytes("1e-3"), Some(1));
    }

    #[test]
    fn garbage_does_not_parse() {
        for q in ["", "Gi", "1Xi", "1.2.3", "."] {
            assert_eq!(bytes(q), None, "{q}");
        }
    }
}
