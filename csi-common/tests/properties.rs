//! Property tests of the parsers every sidecar feeds user input to (issue 14, hostile input):
//! quantities, Go-style flag values (durations, ints, bools, feature gates, lease labels,
//! vmodule, `-v`) and `--csi-address`. Arbitrary strings, control characters and unicode
//! included, never panic; what parses round-trips where a formatter exists.
//! Executions per run: the `cases` of each block below times its properties
//! (docs/reliability.md records the totals).

#![allow(clippy::unwrap_used, reason = "test assertions")]

use std::time::Duration;

use csi_common::connection::CsiAddress;
use csi_common::flags::{
    feature_gates, format_go_duration, go_bool, go_duration, go_int, go_uint, lease_labels,
    quantity, verbosity_level, vmodule,
};
use csi_common::quantity::{format_binary_si, parse_bytes};
use proptest::prelude::*;

/// Strings users could type, and worse: any unicode, control characters, quantity-ish and
/// duration-ish shapes with signs, exponents and huge digit runs.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[-+]?[0-9]{0,40}(\\.[0-9]{0,20})?([eE][-+]?[0-9]{1,5})?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m|u|n)?",
        "([-+]?[0-9]{0,25}(\\.[0-9]{0,12})?(ns|us|µs|ms|s|m|h)){0,4}",
        "[a-zA-Z0-9=,:./*\\x00-\\x1f\u{202e}\u{fffd}]{0,64}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn a_quantity_never_panics_and_is_never_negative(s in hostile()) {
        if let Ok(bytes) = parse_bytes(&s) {
            prop_assert!(bytes >= 0, "{s:?} parsed to {bytes}");
        }
        let _ = quantity(&s);
    }

    #[test]
    fn every_byte_count_round_trips_through_its_quantity(bytes in 0..=i64::MAX) {
        prop_assert_eq!(parse_bytes(&format_binary_si(bytes)).unwrap(), bytes);
    }

    #[test]
    fn flag_values_never_panic(s in hostile()) {
        let _ = go_duration(&s);
        let _ = go_int(&s);
        let _ = go_uint(&s);
        let _ = go_bool(&s);
        let _ = verbosity_level(&s);
        let _ = vmodule(&s);
        let _ = lease_labels(&s);
        let _ = feature_gates(&s);
        let _ = CsiAddress::parse(&s);
    }

    #[test]
    fn a_formatted_duration_parses_back(nanos in 0..=(i64::MAX as u64)) {
        let d = Duration::from_nanos(nanos);
        prop_assert_eq!(go_duration(&format_go_duration(d)).unwrap(), d);
    }
}
