//! The `csi-provisioner` binary: parse flags, set up logging and the runtime, read the process
//! environment, run, and turn the outcome into upstream's exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use csi_common::sidecar::Prepared;
use provisioner::args::{Args, Config, ConfigError};
use provisioner::{Environment, RunError};

fn main() -> ExitCode {
    let prepared = csi_common::sidecar::prepare(
        "csi-provisioner",
        &std::env::args_os().collect::<Vec<_>>(),
        |args: &Args| &args.common,
        Config::try_from,
        ConfigError::exit_code,
    );
    let Prepared {
        mut config,
        logging: _logging,
        automaxprocs,
    } = match prepared {
        Ok(prepared) => prepared,
        Err(code) => return code,
    };
    if let Err(err) = config.set_node_name(std::env::var("NODE_NAME").ok()) {
        tracing::error!("{err}");
        return ExitCode::from(err.exit_code());
    }
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    if let Some(capacity) = &mut config.capacity
        && let Err(err) = capacity.read_environment(&|key| std::env::var(key).ok())
    {
        // A manifest without the downward-API variables: a usage error, like a bad flag.
        tracing::error!("{err}");
        return ExitCode::from(2);
    }
    let environment = environment(
        config
            .leader_election
            .as_ref()
            .map(|le| le.namespace.as_str()),
    );

    csi_common::runtime::block_on_until_signal(
        csi_common::runtime::Threads::Workers { automaxprocs },
        "shutting down",
        |shutdown| async move {
            // Boxed: the controllers' state machines make a large future (clippy::large_futures).
            let result = Box::pin(provisioner::run(config, environment, shutdown)).await;
            csi_common::sidecar::finish(
                "csi-provisioner",
                result,
                RunError::sidecar,
                RunError::exit_code,
            )
        },
    )
}

/// Everything `run` needs from the process environment, read once here (the library never
/// reads the environment itself). csi-provisioner, unlike the other sidecars, honours
/// `KUBECONFIG`.
fn environment(leader_election_namespace: Option<&str>) -> Environment {
    let var = |key: &str| std::env::var(key).ok();
    Environment {
        kubeconfig_env: var("KUBECONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        ..Environment::from_lookup(leader_election_namespace, &var, &|path| {
            std::fs::read_to_string(path).ok()
        })
    }
}
