//! Installs the process-wide `tracing` subscriber from the klog/component-base logging flags
//! ([`LoggingArgs`]).
//!
//! A global subscriber is process-global by nature, so [`init`] is the one place that
//! installs it and `main` calls it once, before anything logs. Nothing here reads the
//! environment (`RUST_LOG` is ignored); a binary that wants extra filter directives passes
//! them to [`init_with_directives`] explicitly.
//!
//! # Output
//!
//! Logs go to stderr, as klog writes them. `--logging-format=text` gives one human-readable
//! line per event (no colours: the reader is usually a container log); `--logging-format=json`
//! gives one JSON object per line with the event's fields at the top level (`timestamp`,
//! `level`, `message`, `target`, and the event's own fields).
//!
//! # Verbosity
//!
//! klog's `-v` levels map onto `tracing` levels so that `tracing::info!` is what upstream
//! logs unconditionally (`klog.Info`, `V(0)`/`V(1)`), `tracing::debug!` is `V(2)`..`V(4)`
//! detail, and `tracing::trace!` is `V(5)` and up, where upstream starts logging every gRPC
//! call. Warnings and errors are always on.
//!
//! | `-v`   | our crates | HTTP/2, gRPC and Kubernetes client internals |
//! |--------|------------|-----------------------------------------------|
//! | 0, 1   | INFO       | INFO                                          |
//! | 2 to 4 | DEBUG      | INFO                                          |
//! | 5      | TRACE      | INFO                                          |
//! | 6, 7   | TRACE      | DEBUG (client-go logs each API request at 6)  |
//! | 8+     | TRACE      | TRACE (client-go logs bodies at 8)            |
//!
//! The internals (`h2`, `hyper`, `hyper_util`, `tonic`, `tower`, `rustls`, `mio`, `want`,
//! `kube_client`) are held back because at DEBUG/TRACE they log every frame and poll, which
//! would drown the sidecar's own messages at the levels users pick for debugging a driver.
//! Code that switches behaviour on a level, like gRPC call logging at `-v>=5`, asks
//! [`verbosity_enabled`].
//!
//! # Flags that are accepted but have no effect
//!
//! * `--vmodule` (syntax checked by [`crate::flags`]): klog matches Go source file names;
//!   Rust log targets are module paths, and `tracing`'s filters cannot glob them, so no
//!   faithful mapping exists. [`init`] logs a warning once when it is set.
//! * `--log-flush-frequency`: every event is written to stderr unbuffered, so there is
//!   nothing to flush periodically.

use tracing::Subscriber;
use tracing_subscriber::filter::{EnvFilter, ParseError};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::{SubscriberInitExt, TryInitError};
use tracing_subscriber::{Layer, Registry};

use crate::flags::{self, LogFormat, LoggingArgs};

/// Why logging could not be set up. `main` exits 1 on any of these, as upstream does for an
/// invalid logging configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags parse but describe a configuration upstream rejects.
    #[error("invalid logging configuration")]
    InvalidConfiguration(#[source] flags::Error),

    /// The extra filter directives given to [`init_with_directives`] do not parse.
    #[error("invalid log filter directives {directives:?}")]
    InvalidDirectives {
        /// The directives as given.
        directives: String,
        /// What the filter parser objected to.
        #[source]
        source: ParseError,
    },

    /// A global subscriber was already installed (`init` called twice, or by someone else).
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled(#[source] TryInitError),
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Keeps logging alive until `main` returns; drop it last.
///
/// Dropping it flushes stderr. With today's unbuffered stderr writer that is a formality, but
/// holding the guard keeps `main` unchanged if a buffered or background writer is ever used
/// (which is what `--log-flush-frequency` would then govern).
#[derive(Debug)]
#[must_use = "dropping the guard at once ends the point of holding it until exit"]
pub struct LoggingGuard {
    _private: (),
}

impl Drop for LoggingGuard {
    fn drop(&mut self) {
        use std::io::Write as _;
        // Nothing sensible to do if stderr itself is gone.
        let _ = std::io::stderr().flush();
    }
}

/// Validates `args` and installs the global subscriber: text or JSON to stderr, filtered by
/// `-v` as described in the module docs. Call once, from `main`.
pub fn init(args: &LoggingArgs) -> Result<LoggingGuard> {
    init_with_directives(args, "")
}

/// Like [`init`], with extra `tracing` filter directives (`EnvFilter` syntax, for example
/// `kube_runtime=debug`) applied on top of the `-v` mapping; a directive for a target also
/// named by the mapping replaces it. An empty string adds nothing.
pub fn init_with_directives(args: &LoggingArgs, extra_directives: &str) -> Result<LoggingGuard> {
    subscriber(args, extra_directives, std::io::stderr)?
        .try_init()
        .map_err(Error::AlreadyInstalled)?;
    startup_notes(args);
    Ok(LoggingGuard { _private: () })
}

/// Whether klog's `V(level)` would be enabled: `-v` is at least `level`.
///
/// For behaviour that depends on the verbosity beyond which messages are shown, such as
/// logging every gRPC call and response at `-v>=5`.
pub fn verbosity_enabled(args: &LoggingArgs, level: u32) -> bool {
    args.verbosity >= level
}

/// Targets that log transport internals, held back as the module docs describe.
const NOISY_TARGETS: &[&str] = &[
    "h2",
    "hyper",
    "hyper_util",
    "kube_client",
    "mio",
    "rustls",
    "tonic",
    "tower",
    "want",
];

/// The `EnvFilter` directives for a klog verbosity (the table in the module docs).
pub fn filter_directives(verbosity: u32) -> String {
    let (ours, internals) = match verbosity {
        0 | 1 => ("info", "info"),
        2..=4 => ("debug", "info"),
        5 => ("trace", "info"),
        6 | 7 => ("trace", "debug"),
        _ => ("trace", "trace"),
    };
    if internals == ours {
        return ours.to_owned();
    }
    let held_back = NOISY_TARGETS
        .iter()
        .map(|target| format!(",{target}={internals}"));
    std::iter::once(ours.to_owned()).chain(held_back).collect()
}

/// Builds (without installing) the subscriber [`init`] installs, writing to `writer`.
fn subscriber<W>(
    args: &LoggingArgs,
    extra_directives: &str,
    writer: W,
) -> Result<impl Subscriber + Send + Sync + 'static>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    args.validate().map_err(Error::InvalidConfiguration)?;
    let mut directives = filter_directives(args.verbosity);
    if !extra_directives.is_empty() {
        directives.push(',');
        directives.push_str(extra_directives);
    }
    let filter =
        EnvFilter::builder()
            .parse(&directives)
            .map_err(|source| Error::InvalidDirectives {
                directives: extra_directives.to_owned(),
                source,
            })?;
    let format: Box<dyn Layer<Registry> + Send + Sync> = match args.logging_format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(false)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(writer)
            .boxed(),
    };
    Ok(tracing_subscriber::registry().with(format.with_filter(filter)))
}

/// Messages about flags that are accepted but not applied, logged once after set-up.
fn startup_notes(args: &LoggingArgs) {
    if args.vmodule_items().next().is_some() {
        tracing::warn!(
            "--vmodule is accepted for compatibility but not applied: it selects Go source files, \
             which this implementation does not have; use -v instead"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Args {
        #[command(flatten)]
        logging: LoggingArgs,
    }

    fn args(argv: &[&str]) -> LoggingArgs {
        let mut full = vec!["test"];
        full.extend_from_slice(argv);
        flags::parse::<Args, _, _>(full)
            .expect("test flags parse")
            .logging
    }

    /// An in-memory log sink.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    impl io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Sink {
        type Writer = Sink;
        fn make_writer(&'w self) -> Self::Writer {
            self.clone()
        }
    }

    /// Runs `log` under the subscriber `init` would install and returns what it wrote.
    fn capture(argv: &[&str], extra: &str, log: impl FnOnce()) -> String {
        let sink = Sink::default();
        let subscriber = subscriber(&args(argv), extra, sink.clone()).expect("valid config");
        tracing::subscriber::with_default(subscriber, log);
        sink.text()
    }

    fn log_every_level() {
        tracing::error!(target: "csi_attacher", "error-msg");
        tracing::warn!(target: "csi_attacher", "warn-msg");
        tracing::info!(target: "csi_attacher", "info-msg");
        tracing::debug!(target: "csi_attacher", "debug-msg");
        tracing::trace!(target: "csi_attacher", "trace-msg");
        tracing::info!(target: "h2::codec", "h2-info");
        tracing::debug!(target: "h2::codec", "h2-debug");
        tracing::trace!(target: "h2::codec", "h2-trace");
    }

    fn shown(out: &str) -> Vec<&'static str> {
        [
            "error-msg",
            "warn-msg",
            "info-msg",
            "debug-msg",
            "trace-msg",
            "h2-info",
            "h2-debug",
            "h2-trace",
        ]
        .into_iter()
        .filter(|m| out.contains(m))
        .collect()
    }

    #[test]
    fn verbosity_maps_klog_levels_onto_tracing_levels() {
        let base = ["error-msg", "warn-msg", "info-msg"];
        let table: &[(&str, &[&str])] = &[
            ("-v=0", &["h2-info"]),
            ("-v=1", &["h2-info"]),
            ("-v=2", &["debug-msg", "h2-info"]),
            ("-v=4", &["debug-msg", "h2-info"]),
            ("-v=5", &["debug-msg", "trace-msg", "h2-info"]),
            ("-v=6", &["debug-msg", "trace-msg", "h2-info", "h2-debug"]),
            (
                "-v=8",
                &["debug-msg", "trace-msg", "h2-info", "h2-debug", "h2-trace"],
            ),
        ];
        for (flag, extra) in table {
            let out = capture(&[flag], "", log_every_level);
            let mut want: Vec<&str> = base.to_vec();
            want.extend_from_slice(extra);
            want.sort_unstable();
            let mut got = shown(&out);
            got.sort_unstable();
            assert_eq!(got, want, "{flag}:\n{out}");
        }
    }

    #[test]
    fn text_format_writes_plain_lines_with_level_target_and_fields() {
        let out = capture(
            &[],
            "",
            || tracing::info!(target: "csi_attacher", volume = "pv-1", "attached"),
        );
        assert_eq!(out.lines().count(), 1, "{out}");
        for part in [" INFO ", "csi_attacher", "attached", "volume=\"pv-1\""] {
            assert!(out.contains(part), "{part} missing in {out}");
        }
        assert!(
            !out.contains('\u{1b}'),
            "no ANSI colours in container logs: {out:?}"
        );
    }

    #[test]
    fn json_format_writes_one_object_per_line_with_flattened_fields() {
        let out = capture(&["--logging-format=json"], "", || {
            tracing::info!(target: "csi_attacher", volume = "pv-1", "attached");
            tracing::warn!(target: "csi_attacher", "second");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        let first = lines[0];
        assert!(first.starts_with('{') && first.ends_with('}'), "{first}");
        for part in [
            r#""level":"INFO""#,
            r#""message":"attached""#,
            r#""volume":"pv-1""#,
            r#""target":"csi_attacher""#,
        ] {
            assert!(first.contains(part), "{part} missing in {first}");
        }
    }

    #[test]
    fn extra_directives_refine_the_verbosity_mapping() {
        let out = capture(&["-v=2"], "h2=trace,csi_attacher=warn", log_every_level);
        let mut got = shown(&out);
        got.sort_unstable();
        assert_eq!(
            got,
            ["error-msg", "h2-debug", "h2-info", "h2-trace", "warn-msg"],
            "{out}"
        );
    }

    #[test]
    fn bad_extra_directives_are_an_error_naming_them() {
        let err = subscriber(&args(&[]), "h2=loud", Sink::default())
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidDirectives { directives, .. } if directives == "h2=loud"),
            "{err}"
        );
    }

    #[test]
    fn an_invalid_logging_configuration_is_refused_before_installing_anything() {
        let err = subscriber(&args(&["--log-text-split-stream"]), "", Sink::default())
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidConfiguration(flags::Error::AlphaLoggingOptions { .. })
        ));
        let err = subscriber(
            &args(&["--vmodule=x=1", "--logging-format=json"]),
            "",
            Sink::default(),
        )
        .map(|_| ())
        .unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidConfiguration(flags::Error::VModuleRequiresText)
        ));
    }

    #[test]
    fn vmodule_is_announced_once_as_not_applied() {
        let a = args(&["--vmodule=controller*=5"]);
        let out = capture(&["--vmodule=controller*=5"], "", || startup_notes(&a));
        assert_eq!(out.matches("--vmodule").count(), 1, "{out}");
        assert!(out.contains("WARN"), "{out}");
        let quiet = args(&[]);
        assert_eq!(capture(&[], "", || startup_notes(&quiet)), "");
    }

    #[test]
    fn verbosity_enabled_follows_klog_v_semantics() {
        let a = args(&["-v=5"]);
        assert!(verbosity_enabled(&a, 0));
        assert!(verbosity_enabled(&a, 5));
        assert!(!verbosity_enabled(&a, 6));
        assert!(!verbosity_enabled(&args(&[]), 5));
    }
}

/// An error and all its sources joined with `": "`, the way Go prints wrapped errors.
///
/// Error types in this workspace keep the cause out of their own message (STYLE.md §1.3), so
/// a log line or a `/healthz` body needs the whole chain to be useful.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod error_chain_tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn error_chain_joins_every_source() {
        let err = Outer(std::io::Error::other("inner"));
        assert_eq!(super::error_chain(&err), "outer: inner");
    }
}
