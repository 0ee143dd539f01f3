//! Hostile command lines for a sidecar's property test of its flags (issue 14, "Fuzz the
//! parsers ... flags"): any of the sidecar's own flags, in each spelling Go's `flag` package
//! accepts (`--name=value`, `-name=value`, `--name value`, a bare `--name`), with a value that
//! is right for some flag, wrong for most, empty, overflowing or full of control characters;
//! mixed with unknown flags, positional arguments and `--help`. A sidecar's property then says
//! what must hold for every such line: a usage error or a parsed `Args`, and no panic from
//! parsing or from turning `Args` into a `Config`.

use proptest::prelude::*;

/// Values a user (or a broken manifest) could give any flag: mostly the edges every kind of
/// flag has (zero, negative, empty, a boolean, a duration), so that lines which parse often
/// carry them into the configuration; then values right for some flags; then anything.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(&["0", "-1", "", "true", "false", "1", "10s", "0s"][..])
            .prop_map(str::to_owned),
        2 => proptest::sample::select(&[
            "3", "T", "maybe", "-5m", "1h30m", "0.5s", "1e3s", "99999999999999999999",
            "9223372036854775807ns", "1.5", ":8080", "127.0.0.1:0", "[::1]:65536",
            "unix:///tmp/csi.sock", "/tmp/csi.sock", "tcp://x", "a=b,c=d", "=", ",", "ext4",
            "Filesystem", "-v", "--", "\u{202e}", "\u{0}",
        ][..])
        .prop_map(str::to_owned),
        1 => "[\\x00-\\x7f\u{202e}\u{fffd}é]{0,24}",
        1 => any::<String>(),
    ]
}

/// One argument (or two, for `--name value`) naming a flag from `flags`.
fn flag(flags: Vec<String>) -> impl Strategy<Value = Vec<String>> {
    (proptest::sample::select(flags), value(), 0_u8..5).prop_map(|(name, value, spelling)| {
        match spelling {
            0 => vec![format!("--{name}={value}")],
            1 => vec![format!("-{name}={value}")],
            2 => vec![format!("--{name}"), value],
            3 => vec![format!("--{name}")],
            _ => vec![format!("-{name}"), value],
        }
    })
}

/// Something that is not one of the sidecar's flags.
fn stray() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        Just(vec!["--no-such-flag=1".to_owned()]),
        Just(vec!["positional".to_owned()]),
        Just(vec!["--help".to_owned()]),
        Just(vec!["-".to_owned()]),
        Just(vec!["--".to_owned()]),
        value().prop_map(|v| vec![v]),
    ]
}

/// Command lines of up to 5 flags or strays for a binary whose long flags are `flags`; the
/// binary's name comes first.
pub fn hostile_argv(
    binary: &'static str,
    flags: Vec<String>,
) -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(
        prop_oneof![8 => flag(flags), 1 => stray()],
        // Short enough that a good share of the lines parse and reach the configuration.
        0..6,
    )
    .prop_map(move |parts| {
        std::iter::once(binary.to_owned())
            .chain(parts.into_iter().flatten())
            .collect()
    })
}

/// The long flag names of a clap command (what `hostile_argv` takes).
pub fn long_flags(command: &clap::Command) -> Vec<String> {
    command
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(str::to_owned))
        .collect()
}

/// The cases each sidecar's flag property runs, seeded so that every run draws the same lines
/// and writes no failure file into the source tree.
pub fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: proptest::test_runner::RngSeed::Fixed(14),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// What a sidecar must make of one command line `argv`: `parse` gives a usage error (exit 2)
/// or `--help` (exit 0), or `Args`, which `config` turns into a runnable configuration or an
/// error whose exit code is one of `config_codes`. No panic on the way; `Err` describes the
/// first broken promise.
///
/// # Errors
/// When the exit code of the usage error or of `config`'s error is not an allowed one.
pub fn verdict<A>(
    argv: &[String],
    parse: impl FnOnce(&[String]) -> Result<A, clap::Error>,
    config: impl FnOnce(A) -> Result<(), u8>,
    config_codes: &[u8],
) -> Result<(), String> {
    match parse(argv) {
        Err(err) if matches!(err.exit_code(), 0 | 2) => Ok(()),
        Err(err) => Err(format!(
            "usage error with exit code {}: {err}",
            err.exit_code()
        )),
        Ok(args) => match config(args) {
            Ok(()) => Ok(()),
            Err(code) if config_codes.contains(&code) => Ok(()),
            Err(code) => Err(format!("configuration error with exit code {code}")),
        },
    }
}

/// Defines a sidecar's flag property test, `any_command_line_is_a_usage_error_or_a_configuration`:
/// 4000 seeded [`hostile_argv`] lines of the sidecar `$binary` whose flags are the clap
/// `$args`, each judged by [`verdict`] with `$parse`, `$config` and `$codes`. The caller needs
/// `proptest` and `clap` among its dev-dependencies.
#[macro_export]
macro_rules! flag_property {
    ($binary:literal, $args:ty, $parse:expr, $config:expr, $codes:expr $(,)?) => {
        ::proptest::proptest! {
            #![proptest_config($crate::argv::config(4000))]

            /// Any command line of this sidecar's flags in Go's spellings, with good, wrong,
            /// empty or control-character values, unknown flags and positional arguments, is
            /// a usage error (exit 2), `--help` (0), or flags that run or fail with the
            /// sidecar's exit codes; nothing panics.
            #[test]
            fn any_command_line_is_a_usage_error_or_a_configuration(
                line in $crate::argv::hostile_argv(
                    $binary,
                    $crate::argv::long_flags(&<$args as ::clap::CommandFactory>::command()),
                ),
            ) {
                let verdict = $crate::argv::verdict(&line, $parse, $config, $codes);
                ::proptest::prop_assert!(verdict.is_ok(), "{:?}: {}", line, verdict.unwrap_err());
            }
        }
    };
}
