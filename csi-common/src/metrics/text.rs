//! The Prometheus text exposition format (0.0.4), written the way Go's `expfmt` writes it.
//!
//! The `prometheus` crate's encoder prints numbers with Rust's `Display` (`0.00001`,
//! `1795275302.32`), while every upstream sidecar prints them with Go's
//! `strconv.FormatFloat(f, 'g', -1, 64)` (`1e-05`, `1.79527530232e+09`). For sample values the
//! difference is cosmetic, but a bucket bound is the `le` label, a string: a series with
//! `le="0.00001"` is not the series a dashboard or recording rule written against upstream's
//! `le="1e-05"` selects. So the whole body is written here, with Go's number format, in the
//! layout and escaping `expfmt.MetricFamilyToText` uses.

use std::fmt::Write as _;
use std::num::FpCategory;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

/// Renders `families` (as `Registry::gather` returns them: sorted by name) in the text format.
pub(super) fn encode(families: &[MetricFamily]) -> String {
    let mut out = String::new();
    for family in families {
        let name = family.name();
        if !family.help().is_empty() {
            let _ = writeln!(out, "# HELP {name} {}", escape(family.help(), false));
        }
        let kind = family.get_field_type();
        let _ = writeln!(out, "# TYPE {name} {}", type_name(kind));
        for metric in family.get_metric() {
            match kind {
                MetricType::COUNTER => {
                    sample(
                        &mut out,
                        name,
                        metric,
                        None,
                        metric.get_counter().get_value(),
                    );
                }
                MetricType::GAUGE => {
                    sample(&mut out, name, metric, None, metric.get_gauge().get_value());
                }
                // Nothing registers untyped families (the crate cannot even create them), and
                // its accessor for their value is deprecated.
                MetricType::UNTYPED => {}
                MetricType::HISTOGRAM => histogram(&mut out, name, metric),
                MetricType::SUMMARY => summary(&mut out, name, metric),
            }
        }
    }
    out
}

fn type_name(kind: MetricType) -> &'static str {
    match kind {
        MetricType::COUNTER => "counter",
        MetricType::GAUGE => "gauge",
        MetricType::HISTOGRAM => "histogram",
        MetricType::SUMMARY => "summary",
        MetricType::UNTYPED => "untyped",
    }
}

/// Go's `float64(count)` of a bucket or sample count. Counts above 2^53 lose precision in Go
/// exactly the same way.
#[allow(
    clippy::cast_precision_loss,
    reason = "the text format carries counts as float64, as Go does"
)]
fn count(n: u64) -> f64 {
    n as f64
}

fn histogram(out: &mut String, name: &str, metric: &Metric) {
    let histogram = metric.get_histogram();
    let bucket_name = format!("{name}_bucket");
    let mut infinity_seen = false;
    for bucket in histogram.get_bucket() {
        let bound = bucket.upper_bound();
        infinity_seen |= bound.is_infinite() && bound > 0.0;
        sample(
            out,
            &bucket_name,
            metric,
            Some(("le", bound)),
            count(bucket.cumulative_count()),
        );
    }
    // The +Inf bucket is implied in the data model and always written out (expfmt does too).
    if !infinity_seen {
        sample(
            out,
            &bucket_name,
            metric,
            Some(("le", f64::INFINITY)),
            count(histogram.get_sample_count()),
        );
    }
    sample(
        out,
        &format!("{name}_sum"),
        metric,
        None,
        histogram.get_sample_sum(),
    );
    sample(
        out,
        &format!("{name}_count"),
        metric,
        None,
        count(histogram.get_sample_count()),
    );
}

fn summary(out: &mut String, name: &str, metric: &Metric) {
    let summary = metric.get_summary();
    for quantile in summary.get_quantile() {
        sample(
            out,
            name,
            metric,
            Some(("quantile", quantile.quantile())),
            quantile.value(),
        );
    }
    sample(
        out,
        &format!("{name}_sum"),
        metric,
        None,
        summary.sample_sum(),
    );
    sample(
        out,
        &format!("{name}_count"),
        metric,
        None,
        count(summary.sample_count()),
    );
}

/// One line: `name{labels[,extra]} value`.
fn sample(out: &mut String, name: &str, metric: &Metric, extra: Option<(&str, f64)>, value: f64) {
    out.push_str(name);
    labels(out, metric.get_label(), extra);
    out.push(' ');
    out.push_str(&go_float(value));
    out.push('\n');
}

fn labels(out: &mut String, pairs: &[LabelPair], extra: Option<(&str, f64)>) {
    if pairs.is_empty() && extra.is_none() {
        return;
    }
    let mut separator = '{';
    for pair in pairs {
        let _ = write!(
            out,
            "{separator}{}=\"{}\"",
            pair.name(),
            escape(pair.value(), true)
        );
        separator = ',';
    }
    if let Some((label, value)) = extra {
        let _ = write!(out, "{separator}{label}=\"{}\"", go_float(value));
    }
    out.push('}');
}

/// `\` and newline always, `"` in label values (the text format's escaping).
fn escape(text: &str, quotes: bool) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '\n' => escaped.push_str("\\n"),
            '"' if quotes => escaped.push_str("\\\""),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A number as Go's `expfmt` writes it: `strconv.FormatFloat(f, 'g', -1, 64)`, that is the
/// shortest digits that read back as `f`, in exponent form when the decimal exponent is below
/// -4 or at least 6 (`1e-05`, `1.032192e+06`, `452298`, `0.0001`), plus `+Inf`, `-Inf`, `NaN`
/// and `0` for both zeros.
pub(super) fn go_float(f: f64) -> String {
    match f.classify() {
        FpCategory::Nan => return "NaN".to_owned(),
        FpCategory::Infinite if f > 0.0 => return "+Inf".to_owned(),
        FpCategory::Infinite => return "-Inf".to_owned(),
        FpCategory::Zero => return "0".to_owned(),
        FpCategory::Subnormal | FpCategory::Normal => {}
    }
    // Rust's `{:e}` gives the same shortest round-trip digits, as `d.ddde<exp>`.
    let scientific = format!("{:e}", f.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{point}{rest}e{exponent_sign}{:02}",
            exponent.unsigned_abs()
        );
    }
    // Digits before the decimal point: exponent + 1, which is 1..=6 or, below 1, none.
    let before = usize::try_from(exponent + 1).unwrap_or(0);
    if before == 0 {
        let zeros = usize::try_from(-exponent - 1).unwrap_or(0);
        format!("{sign}0.{}{digits}", "0".repeat(zeros))
    } else if before >= digits.len() {
        format!("{sign}{digits}{}", "0".repeat(before - digits.len()))
    } else {
        let (whole, fraction) = digits.split_at(before);
        format!("{sign}{whole}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_go_formats_them() {
        // Each expected text appears in the upstream scrapes (shared/fixtures/metrics) or is
        // what Go's strconv.FormatFloat(f, 'g', -1, 64) prints.
        let ten_to_minus_five = 10e-9 * 10.0 * 10.0 * 10.0;
        let cases: [(f64, &str); 22] = [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (10.0, "10"),
            (25.0, "25"),
            (20000.0, "20000"),
            (452_298.0, "452298"),
            (1_032_192.0, "1.032192e+06"),
            (305_651_084.0, "3.05651084e+08"),
            (1_795_275_347.93, "1.79527534793e+09"),
            (18_446_744_073_709_551_615.0, "1.8446744073709552e+19"),
            (0.048_651_413, "0.048651413"),
            (0.0001, "0.0001"),
            (8.3955e-05, "8.3955e-05"),
            (1e-08, "1e-08"),
            (ten_to_minus_five, "9.999999999999999e-06"),
            (2.5, "2.5"),
            (-0.25, "-0.25"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for (value, want) in cases {
            assert_eq!(go_float(value), want, "{value:e}");
        }
    }

    #[test]
    fn families_are_laid_out_and_escaped_like_expfmt() {
        let registry = prometheus::Registry::new();
        let counter = prometheus::IntCounterVec::new(
            prometheus::Opts::new("demo_total", "Help with \\ and\nnewline."),
            &["path"],
        )
        .unwrap();
        counter.with_label_values(&["a\"b\\c\nd"]).inc_by(1_234_567);
        let histogram = prometheus::Histogram::with_opts(
            prometheus::HistogramOpts::new("demo_seconds", "Durations.").buckets(vec![1e-05, 2.5]),
        )
        .unwrap();
        histogram.observe(0.5);
        registry.register(Box::new(counter)).unwrap();
        registry.register(Box::new(histogram)).unwrap();
        assert_eq!(
            encode(&registry.gather()),
            "# HELP demo_seconds Durations.\n\
             # TYPE demo_seconds histogram\n\
             demo_seconds_bucket{le=\"1e-05\"} 0\n\
             demo_seconds_bucket{le=\"2.5\"} 1\n\
             demo_seconds_bucket{le=\"+Inf\"} 1\n\
             demo_seconds_sum 0.5\n\
             demo_seconds_count 1\n\
             # HELP demo_total Help with \\\\ and\\nnewline.\n\
             # TYPE demo_total counter\n\
             demo_total{path=\"a\\\"b\\\\c\\nd\"} 1.234567e+06\n"
        );
    }
}
