//! The `livenessprobe` binary: parse flags, set up logging and the runtime, run.

use std::process::ExitCode;

use livenessprobe::Config;
use livenessprobe::args::Args;

fn main() -> ExitCode {
    let args: Args = match csi_common::flags::parse(std::env::args_os()) {
        Ok(args) => args,
        // Usage errors exit 2 and --help exits 0, like Go's flag package.
        Err(err) => err.exit(),
    };
    let _logging = match csi_common::logging::init(&args.logging) {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("{}", csi_common::logging::error_chain(&err));
            return ExitCode::from(1);
        }
    };
    if args.logging.automaxprocs {
        tracing::info!("--automaxprocs has no effect: livenessprobe runs on one thread");
    }
    let config = match Config::try_from(args) {
        Ok(config) => config,
        Err(err) => {
            tracing::error!("{err}");
            return ExitCode::from(1);
        }
    };
    tracing::info!(
        version = csi_common::version::version(),
        "livenessprobe starting"
    );

    // One thread: the probe's work is waiting on the driver's Probe, so more threads would
    // only add memory (a stack and an allocator arena each) on every node of the DaemonSet.
    csi_common::runtime::block_on_until_signal(
        csi_common::runtime::Threads::One,
        "shutting down",
        |shutdown| async move {
            match livenessprobe::run(config, shutdown).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    tracing::error!(
                        error = csi_common::logging::error_chain(&err),
                        "livenessprobe failed"
                    );
                    ExitCode::from(1)
                }
            }
        },
    )
}
