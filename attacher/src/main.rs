//! The `csi-attacher` binary: parse flags, set up logging and the runtime, read the process
//! environment, run, and turn the outcome into upstream's exit codes.

use std::process::ExitCode;

use attacher::args::{Args, Config};
use attacher::{Environment, RunError};
use csi_common::sidecar::TERMINATION_LOG;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let args: Args = match csi_common::flags::parse(argv.iter().cloned()) {
        Ok(args) => args,
        // Usage errors exit 2 and --help exits 0, like Go's flag.ExitOnError.
        Err(err) => err.exit(),
    };
    if args.common.version {
        let argv0 = argv.first().map_or_else(
            || "csi-attacher".into(),
            |a| a.to_string_lossy().into_owned(),
        );
        #[allow(
            clippy::print_stdout,
            reason = "--version prints to stdout like upstream"
        )]
        {
            println!("{argv0} {}", csi_common::version::version());
        }
        return ExitCode::SUCCESS;
    }
    let _logging = match csi_common::logging::init(&args.common.logging) {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("{}", csi_common::logging::error_chain(&err));
            return ExitCode::from(1);
        }
    };
    let automaxprocs = args.common.logging.automaxprocs;
    let config = match Config::try_from(args) {
        Ok(config) => config,
        Err(err) => {
            tracing::error!("{err}");
            return ExitCode::from(err.exit_code());
        }
    };
    tracing::info!(
        version = csi_common::version::version(),
        "csi-attacher starting"
    );
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let var = |key: &str| std::env::var(key).ok();
    let environment = Environment::from_lookup(
        config
            .common
            .leader_election
            .as_ref()
            .map(|le| le.namespace.as_str()),
        &var,
        &|path| std::fs::read_to_string(path).ok(),
    );
    let runtime = match csi_common::runtime::build(automaxprocs) {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!(error = %err, "cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async {
        let signals = match csi_common::shutdown::signals() {
            Ok(signals) => signals,
            Err(err) => {
                tracing::error!(error = %err, "cannot install signal handlers");
                return ExitCode::from(1);
            }
        };
        let shutdown = async move {
            let signal = signals.await;
            tracing::info!(%signal, "shutting down");
        };
        match attacher::run(config, environment, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!(
                    error = csi_common::logging::error_chain(&err),
                    "csi-attacher failed"
                );
                if let RunError::Sidecar(err) = &err
                    && let Some(message) = err.termination_message()
                {
                    // Best effort, as upstream: the file only exists inside a container.
                    let _ = std::fs::write(TERMINATION_LOG, message);
                }
                ExitCode::from(err.exit_code())
            }
        }
    })
}
