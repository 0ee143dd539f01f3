//! Go's `%q` for strings (`strconv.Quote`), because upstream sidecars quote names that way in the
//! error texts that become Events and logs, and users search for those texts.
//!
//! ```
//! use csi_common::quote::go_quote;
//!
//! assert_eq!(go_quote("gold"), r#""gold""#);
//! assert_eq!(go_quote("a\"b\n"), r#""a\"b\n""#);
//! assert_eq!(go_quote("\u{1}\u{a0}"), r#""\x01\u00a0""#);
//! ```

use std::fmt::Write as _;

/// Quotes `s` as Go's `strconv.Quote` does: double quotes around it; `\"` and `\\`; the C escapes
/// `\a \b \f \n \r \t \v`; other non-printable characters as `\xNN` (below U+0080), `\uNNNN` or
/// `\UNNNNNNNN`; printable Unicode as it is.
///
/// "Printable" follows Go's `unicode.IsPrint` where std can tell: control characters, spaces
/// other than U+0020 (U+00A0, U+2028, ...), the common format characters (soft hyphen,
/// zero-width and bidi marks, U+FEFF) and private-use characters are escaped. Unassigned code
/// points, which Go also escapes, are kept: telling them apart needs Unicode tables std does not
/// have, and they do not occur in Kubernetes names. Invalid UTF-8, which Go escapes as `\xNN`,
/// cannot occur in a `&str`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if is_printable(c) => out.push(c),
            c => {
                let code = u32::from(c);
                // Writing to a String cannot fail.
                let _ = if code < 0x80 {
                    write!(out, "\\x{code:02x}")
                } else if code <= 0xffff {
                    write!(out, "\\u{code:04x}")
                } else {
                    write!(out, "\\U{code:08x}")
                };
            }
        }
    }
    out.push('"');
    out
}

/// Go's `unicode.IsPrint` as far as std can tell (see [`go_quote`]).
fn is_printable(c: char) -> bool {
    let format = matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
    );
    let private_use = matches!(
        c,
        '\u{e000}'..='\u{f8ff}' | '\u{f0000}'..='\u{ffffd}' | '\u{100000}'..='\u{10fffd}'
    );
    !(c.is_control() || (c.is_whitespace() && c != ' ') || format || private_use)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_strconv_quote() {
        // Expected values are what Go 1.24 `strconv.Quote` returns.
        let cases = [
            ("", r#""""#),
            ("plain", r#""plain""#),
            (" spaces are printable ", r#"" spaces are printable ""#),
            ("${pvc.name}", r#""${pvc.name}""#),
            ("pvc.annotations['k']", r#""pvc.annotations['k']""#),
            ("a\"b", r#""a\"b""#),
            ("back\\slash", r#""back\\slash""#),
            ("\u{7}\u{8}\u{c}\n\r\t\u{b}", r#""\a\b\f\n\r\t\v""#),
            ("\u{0}\u{1}\u{1b}\u{7f}", r#""\x00\x01\x1b\x7f""#),
            ("\u{80}\u{85}\u{9f}", r#""\u0080\u0085\u009f""#),
            (
                "\u{a0}\u{2028}\u{2029}\u{3000}",
                r#""\u00a0\u2028\u2029\u3000""#,
            ),
            (
                "\u{ad}\u{200b}\u{200e}\u{feff}",
                r#""\u00ad\u200b\u200e\ufeff""#,
            ),
            ("\u{e000}\u{10fffd}", r#""\ue000\U0010fffd""#),
            ("ünïcode ✓ 日本", r#""ünïcode ✓ 日本""#),
            ("\u{1f600}", "\"\u{1f600}\""),
        ];
        for (input, want) in cases {
            assert_eq!(go_quote(input), want, "{input:?}");
        }
    }
}
