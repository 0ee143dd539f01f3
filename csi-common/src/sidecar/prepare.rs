//! The first half of a controller sidecar's `main`, the same in each: parse argv with Go's
//! flag rules, answer `--version`, start logging, validate the flags into the sidecar's
//! `Config`, and log the start with the version.

use std::ffi::OsString;
use std::process::ExitCode;

use crate::flags::CommonArgs;
use crate::logging::LoggingGuard;

/// A sidecar ready to run: its validated configuration, and logging, which stays installed
/// while the guard lives.
#[derive(Debug)]
pub struct Prepared<C> {
    /// The sidecar's `Config`.
    pub config: C,
    /// Keep until the process ends.
    pub logging: LoggingGuard,
    /// `--automaxprocs`, for [`crate::runtime::block_on_until_signal`].
    pub automaxprocs: bool,
}

/// Parses `argv` into `A`, then: a usage error prints clap's message and ends with its code
/// (2; 0 for `--help`); `--version` prints `<argv0> <version>` and ends with 0; otherwise
/// logging is started (a bad logging setting ends with 1), `config` validates the flags (its
/// error is logged and ends with the code it gives) and the start is logged. `Err` carries the
/// code `main` returns; nothing here exits the process.
pub fn prepare<A, C, E>(
    name: &str,
    argv: &[OsString],
    common: fn(&A) -> &CommonArgs,
    config: impl FnOnce(A) -> Result<C, E>,
    exit_code: fn(&E) -> u8,
) -> Result<Prepared<C>, ExitCode>
where
    A: clap::Parser,
    E: std::fmt::Display,
{
    let args: A = match crate::flags::parse(argv.iter().cloned()) {
        Ok(args) => args,
        Err(err) => {
            // Usage errors exit 2 and --help exits 0, like Go's flag.ExitOnError.
            let _ = err.print();
            return Err(ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2)));
        }
    };
    let shared = common(&args);
    if shared.version {
        let argv0 = argv
            .first()
            .map_or_else(|| name.to_owned(), |a| a.to_string_lossy().into_owned());
        #[allow(
            clippy::print_stdout,
            reason = "--version prints to stdout like upstream"
        )]
        {
            println!("{argv0} {}", crate::version::version());
        }
        return Err(ExitCode::SUCCESS);
    }
    let logging = match crate::logging::init(&shared.logging) {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("{}", crate::logging::error_chain(&err));
            return Err(ExitCode::from(1));
        }
    };
    let automaxprocs = shared.logging.automaxprocs;
    let config = config(args).map_err(|err| {
        tracing::error!("{err}");
        ExitCode::from(exit_code(&err))
    })?;
    tracing::info!(version = crate::version::version(), "{name} starting");
    Ok(Prepared {
        config,
        logging,
        automaxprocs,
    })
}

/// The last step of a controller sidecar's `main`: `Ok` is exit 0; an error is logged with its
/// causes, a lost driver connection also leaves upstream's message in [`super::TERMINATION_LOG`]
/// (best effort: the file only exists inside a container), and the exit code is the one
/// `exit_code` gives.
pub fn finish<E>(
    name: &str,
    result: Result<(), E>,
    sidecar_error: fn(&E) -> Option<&super::Error>,
    exit_code: fn(&E) -> u8,
) -> ExitCode
where
    E: std::error::Error,
{
    let Err(err) = result else {
        return ExitCode::SUCCESS;
    };
    tracing::error!(error = crate::logging::error_chain(&err), "{name} failed");
    if let Some(message) = sidecar_error(&err).and_then(super::Error::termination_message) {
        let _ = std::fs::write(super::TERMINATION_LOG, message);
    }
    ExitCode::from(exit_code(&err))
}
