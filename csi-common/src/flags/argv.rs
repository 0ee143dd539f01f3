//! Rewriting Go-style command lines into the form clap parses, and the [`parse`] entry point
//! binaries use.
//!
//! Go's `flag` package (attacher, resizer, registrar, livenessprobe) accepts `-name` and
//! `--name` alike and lets a non-bool flag take the next argument as its value whatever it
//! looks like. pflag (provisioner) accepts `--name` and the `-v` shorthand (`-v=5`, `-v 5`,
//! `-v5`). Manifests in the wild use all of these, so every binary accepts all of them.

use std::ffi::OsString;

use clap::ArgAction;
use clap::{Command, Parser};

/// Rewrites Go-style single-dash long flags into the double-dash form clap parses.
///
/// * `argv[0]` is left alone.
/// * `-name`, `-name=value` become `--name`, `--name=value`, but only when the character after
///   the dash is an ASCII letter, so negative numbers such as `-1` pass through as values.
/// * `-v5` (pflag's shorthand with an attached value) becomes `--v=5`.
/// * `-h` and `-help` become `--help`, as Go's `flag` package treats them.
/// * Everything after a `--` argument is copied unchanged (Go stops flag parsing there too).
///
/// The separate-value form (`-csi-address /x`) needs no rewrite beyond the flag itself.
/// Without knowledge of which flags take a value this function cannot tell that `-x` in
/// `--csi-address -x` is a value; [`parse`] knows the command and handles that case.
pub fn normalize_args<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    rewrite(args, None)
}

/// Parses `argv` (including `argv[0]`) into `A` with Go `flag` semantics.
///
/// On top of [`normalize_args`] this:
/// * joins a value-taking flag and its following argument (`--csi-address -x` →
///   `--csi-address=-x`), because Go's `flag` takes the next argument as the value verbatim;
/// * lets a repeated flag override its earlier occurrence (`--v=1 --v=5` means 5) as Go does,
///   instead of clap's default "cannot be used multiple times" error; flags declared as
///   accumulating (`--leader-election-labels`, `--vmodule`) still accumulate.
///
/// Positional arguments are rejected with a usage error. This deliberately differs from Go,
/// which stops parsing at the first positional argument and silently ignores every later
/// flag (`-leader-election false --version` does not print a version there).
///
/// The caller (a binary's `main`) prints the error and exits with [`clap::Error::exit_code`]:
/// 2 for usage errors, 0 for `--help`. This function never exits by itself.
pub fn parse<A, I, T>(argv: I) -> Result<A, clap::Error>
where
    A: Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut cmd = go_bools(A::command().args_override_self(true));
    let args = rewrite(argv.into_iter().map(Into::into), Some(&cmd));
    let mut matches = cmd.try_get_matches_from_mut(args)?;
    A::from_arg_matches_mut(&mut matches).map_err(|err| err.format(&mut cmd))
}

/// Turns every plain `bool` switch (clap's `SetTrue`, what `#[arg(long)] flag: bool` derives)
/// into a Go `flag` boolean: `--flag` sets it, `--flag=<value>` takes any [`go_bool`] spelling,
/// and `--flag <value>` gives it no value (Go's rule: the value would be a positional argument).
/// The declared default is kept (`#[arg(long, default_value = "true")]`) and, when `false`, not
/// shown in `--help`, as Go's usage text omits zero values. One place for what every boolean of
/// every sidecar would otherwise repeat in its attribute.
///
/// [`go_bool`]: super::values::go_bool
fn go_bools(cmd: Command) -> Command {
    cmd.mut_args(|arg| {
        if !matches!(arg.get_action(), ArgAction::SetTrue) {
            return arg;
        }
        let default_true = arg
            .get_default_values()
            .first()
            .is_some_and(|value| super::values::go_bool(&value.to_string_lossy()) == Ok(true));
        arg.action(ArgAction::Set)
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .default_value(if default_true { "true" } else { "false" })
            .hide_default_value(!default_true)
            .value_name("bool")
            .value_parser(super::values::go_bool)
    })
}

fn rewrite<I: IntoIterator<Item = OsString>>(args: I, cmd: Option<&Command>) -> Vec<OsString> {
    let mut iter = args.into_iter();
    let mut out: Vec<OsString> = iter.next().into_iter().collect();
    while let Some(arg) = iter.next() {
        // Non-UTF-8 arguments cannot be flags we know; clap reports them as it sees fit.
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            out.push(arg);
            out.extend(iter);
            break;
        }
        let Some(long) = long_form(text) else {
            out.push(arg);
            continue;
        };
        if !long.contains('=')
            && cmd.is_some_and(|cmd| takes_separate_value(cmd, &long[2..]))
            && let Some(value) = iter.next()
        {
            let mut joined = OsString::from(long);
            joined.push("=");
            joined.push(value);
            out.push(joined);
            continue;
        }
        out.push(long.into());
    }
    out
}

/// The `--name[=value]` spelling of a flag argument, or `None` for a non-flag argument.
fn long_form(arg: &str) -> Option<String> {
    if arg.starts_with("--") {
        return Some(arg.to_owned());
    }
    let name = arg.strip_prefix('-')?;
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    if name == "h" || name == "help" {
        return Some("--help".to_owned());
    }
    if let Some(level) = name.strip_prefix('v')
        && !level.is_empty()
        && level.bytes().all(|b| b.is_ascii_digit())
    {
        return Some(format!("--v={level}"));
    }
    Some(format!("--{name}"))
}

/// Whether `--name` takes its value from the next argument: a value-taking flag that does
/// not insist on the `=` form (Go-style bools do, so `--leader-election false` leaves `false`
/// as a positional argument, exactly as in Go).
fn takes_separate_value(cmd: &Command, name: &str) -> bool {
    cmd.get_arguments().any(|arg| {
        arg.get_long() == Some(name)
            && arg.get_action().takes_values()
            && !arg.is_require_equals_set()
    })
}
