//! The `csi-node-driver-registrar` binary: parse flags, set up logging and the runtime, run.
//!
//! Exit codes as upstream: 2 for flag syntax errors, 0 for `--help`, `--version`,
//! `--mode=kubelet-registration-probe` and a shutdown signal, 1 for every fatal error
//! (including kubelet reporting a failed registration).

use std::process::ExitCode;

use registrar::args::{Args, Startup};

fn main() -> ExitCode {
    let args: Args = match csi_common::flags::parse(std::env::args_os()) {
        Ok(args) => args,
        // Usage errors exit 2 and --help exits 0, like Go's flag package.
        Err(err) => err.exit(),
    };
    // Upstream validates the logging configuration before it looks at --version.
    let _logging = match csi_common::logging::init(&args.logging) {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!(
                "LoggingConfiguration is invalid: {}",
                csi_common::logging::error_chain(&err)
            );
            return ExitCode::from(1);
        }
    };
    let automaxprocs = args.logging.automaxprocs;
    if automaxprocs {
        tracing::info!("--automaxprocs has no effect: node-driver-registrar runs on one thread");
    }
    let connection_timeout_set = !args.connection_timeout.is_zero();
    let enable_pprof = args.enable_pprof;
    let mode = args.mode.clone();
    let config = match Startup::try_from(args) {
        Ok(Startup::PrintVersion) => {
            print_version();
            return ExitCode::SUCCESS;
        }
        Ok(Startup::RegistrationProbe) => {
            // A no-op since upstream v2.9 (#309); old manifests still use it as an exec probe.
            return ExitCode::SUCCESS;
        }
        Ok(Startup::Run(config)) => *config,
        Err(err) => {
            tracing::error!("{err}");
            return ExitCode::from(1);
        }
    };
    tracing::info!(version = csi_common::version::version(), "Version");
    tracing::info!(%mode, "Running node-driver-registrar");
    if connection_timeout_set {
        tracing::info!("--connection-timeout is deprecated and will have no effect");
    }
    if enable_pprof {
        tracing::warn!(
            "--enable-pprof has no effect: Go's pprof profiling endpoints do not exist in this implementation"
        );
    }

    // Connection tasks are not waited for (a NotifyRegistrationStatus left unanswered on
    // purpose): block_on_until_signal drops the runtime in the background. One thread: the
    // registrar only answers kubelet and its health checks, so more threads would only add
    // memory (a stack and an allocator arena each) on every node of the DaemonSet.
    csi_common::runtime::block_on_until_signal(
        csi_common::runtime::Threads::One,
        "Shutting down: removing the registration socket",
        |shutdown| async move {
            match registrar::run(config, shutdown).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    tracing::error!(error = %csi_common::logging::error_chain(&err), "node-driver-registrar failed");
                    ExitCode::from(1)
                }
            }
        },
    )
}

/// `<argv0> <version>` on stdout, as Go's `fmt.Println(os.Args[0], version)`.
#[allow(
    clippy::print_stdout,
    reason = "--version output goes to stdout, as upstream's"
)]
fn print_version() {
    let argv0 = std::env::args_os()
        .next()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    println!("{argv0} {}", csi_common::version::version());
}
