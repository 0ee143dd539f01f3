//! The `csi-attacher` binary: parse flags, set up logging and the runtime, read the process
//! environment, run, and turn the outcome into upstream's exit codes.

use std::process::ExitCode;

use attacher::args::{Args, Config, ConfigError};
use attacher::{Environment, RunError};
use csi_common::sidecar::Prepared;

fn main() -> ExitCode {
    let prepared = csi_common::sidecar::prepare(
        "csi-attacher",
        &std::env::args_os().collect::<Vec<_>>(),
        |args: &Args| &args.common,
        Config::try_from,
        ConfigError::exit_code,
    );
    let Prepared {
        config,
        logging: _logging,
        automaxprocs,
    } = match prepared {
        Ok(prepared) => prepared,
        Err(code) => return code,
    };
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
    csi_common::runtime::block_on_until_signal(
        csi_common::runtime::Threads::Workers { automaxprocs },
        "shutting down",
        |shutdown| async move {
            let result = attacher::run(config, environment, shutdown).await;
            csi_common::sidecar::finish(
                "csi-attacher",
                result,
                RunError::sidecar,
                RunError::exit_code,
            )
        },
    )
}
