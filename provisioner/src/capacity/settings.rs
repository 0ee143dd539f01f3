//! The capacity flags (`--enable-capacity`, `--capacity-*`, `--kube-api-capacity-*`) validated
//! into [`CapacitySettings`], and the environment capacity tracking needs (`NAMESPACE`,
//! `POD_NAME`, spec §1e), read by `main` through a lookup function so tests can feed it.

use std::time::Duration;

use crate::args::Args;

/// Why the capacity flags cannot run (exit 2, like a usage error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    /// `--capacity-threads=0`: no worker would ever publish anything.
    #[error("--capacity-threads must be greater than 0 when --enable-capacity is set")]
    NoThreads,
    /// `--capacity-poll-interval=0`: GetCapacity would be called in a tight loop.
    #[error("--capacity-poll-interval must be positive when --enable-capacity is set")]
    ZeroPollInterval,
    /// `--capacity-ownerref-level` below -1 (upstream treats it as -1 silently).
    #[error(
        "--capacity-ownerref-level must be -1 (no owner), 0 (the pod) or a positive number of controller hops, got {0}"
    )]
    OwnerLevel(i32),
    /// A negative `--kube-api-capacity-burst`, or 0 with a positive QPS (client-go refuses a
    /// rate limiter that can never hand out a token).
    #[error("--kube-api-capacity-burst must be positive when --kube-api-capacity-qps is, got {0}")]
    Burst(i32),
}

/// Capacity tracking settings, present in [`crate::args::Config`] when `--enable-capacity`.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacitySettings {
    /// `--capacity-poll-interval`: the base period between two GetCapacity calls of one key.
    pub poll_interval: Duration,
    /// `--capacity-for-immediate-binding`.
    pub for_immediate_binding: bool,
    /// `--capacity-threads`: workers of the `csistoragecapacity` queue.
    pub threads: usize,
    /// `--capacity-ownerref-level`: -1 no owner, 0 the pod, n the n-th controller up.
    pub ownerref_level: i32,
    /// `--kube-api-capacity-qps`.
    pub qps: f32,
    /// `--kube-api-capacity-burst`.
    pub burst: u32,
    /// `NAMESPACE`: where the objects live (set by [`CapacitySettings::read_environment`]).
    pub namespace: String,
    /// `POD_NAME`: the start of the owner walk (empty with `--capacity-ownerref-level=-1`).
    pub pod_name: String,
}

/// A missing environment variable (exit 2: the manifest is wrong, as with a bad flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvironmentError {
    /// `NAMESPACE` unset or empty.
    #[error(
        "--enable-capacity needs the NAMESPACE environment variable (the namespace of the CSIStorageCapacity objects, usually the pod's namespace from the downward API)"
    )]
    NoNamespace,
    /// `POD_NAME` unset or empty while the owner is the pod or one of its controllers.
    #[error(
        "--enable-capacity with --capacity-ownerref-level={0} needs the POD_NAME environment variable (the pod's name from the downward API); use --capacity-ownerref-level=-1 for objects without owner"
    )]
    NoPodName(i32),
}

impl CapacitySettings {
    /// The settings of `args`, `None` without `--enable-capacity` (then the other capacity
    /// flags are ignored, as upstream ignores them).
    ///
    /// # Errors
    /// [`SettingsError`] for values that cannot run.
    pub fn from_args(args: &Args) -> Result<Option<Self>, SettingsError> {
        if !args.enable_capacity {
            return Ok(None);
        }
        if args.capacity_threads == 0 {
            return Err(SettingsError::NoThreads);
        }
        if args.capacity_poll_interval.is_zero() {
            return Err(SettingsError::ZeroPollInterval);
        }
        if args.capacity_ownerref_level < -1 {
            return Err(SettingsError::OwnerLevel(args.capacity_ownerref_level));
        }
        let burst = u32::try_from(args.kube_api_capacity_burst)
            .ok()
            .filter(|b| *b > 0 || args.kube_api_capacity_qps <= 0.0)
            .ok_or(SettingsError::Burst(args.kube_api_capacity_burst))?;
        Ok(Some(Self {
            poll_interval: args.capacity_poll_interval,
            for_immediate_binding: args.capacity_for_immediate_binding,
            threads: args.capacity_threads as usize,
            ownerref_level: args.capacity_ownerref_level,
            qps: args.kube_api_capacity_qps,
            burst,
            namespace: String::new(),
            pod_name: String::new(),
        }))
    }

    /// Fills in `NAMESPACE` and `POD_NAME` as `var` shows them (`main` passes
    /// `std::env::var`).
    ///
    /// # Errors
    /// [`EnvironmentError`] when a variable the settings need is unset or empty.
    pub fn read_environment(
        &mut self,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), EnvironmentError> {
        let non_empty = |key: &str| var(key).filter(|v| !v.is_empty());
        self.namespace = non_empty("NAMESPACE").ok_or(EnvironmentError::NoNamespace)?;
        if self.ownerref_level >= 0 {
            self.pod_name =
                non_empty("POD_NAME").ok_or(EnvironmentError::NoPodName(self.ownerref_level))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn settings(flags: &[&str]) -> Result<Option<CapacitySettings>, SettingsError> {
        let argv = std::iter::once("csi-provisioner").chain(flags.iter().copied());
        CapacitySettings::from_args(&Args::try_parse_from(argv).unwrap())
    }

    #[test]
    fn capacity_flags_are_ignored_while_capacity_is_off() {
        assert_eq!(settings(&["--capacity-threads=0"]), Ok(None));
    }

    #[test]
    fn the_defaults_are_upstreams() {
        let s = settings(&["--enable-capacity"]).unwrap().unwrap();
        assert_eq!(s.poll_interval, Duration::from_mins(1));
        assert_eq!(s.threads, 1);
        assert_eq!(s.ownerref_level, 1);
        assert!(!s.for_immediate_binding);
        assert!((s.qps - 1.0).abs() < f32::EPSILON);
        assert_eq!(s.burst, 5);
    }

    /// Node deployment publishes this node's segment only (spec §6.2): no refusal.
    #[test]
    fn capacity_runs_with_node_deployment() {
        assert!(matches!(
            settings(&["--enable-capacity", "--node-deployment"]),
            Ok(Some(_))
        ));
    }

    #[test]
    fn values_that_cannot_run_are_refused() {
        for (flag, want) in [
            ("--capacity-threads=0", SettingsError::NoThreads),
            (
                "--capacity-poll-interval=0s",
                SettingsError::ZeroPollInterval,
            ),
            (
                "--capacity-ownerref-level=-2",
                SettingsError::OwnerLevel(-2),
            ),
            ("--kube-api-capacity-burst=-1", SettingsError::Burst(-1)),
            ("--kube-api-capacity-burst=0", SettingsError::Burst(0)),
        ] {
            assert_eq!(settings(&["--enable-capacity", flag]), Err(want), "{flag}");
        }
    }

    #[test]
    fn the_environment_needs_namespace_and_for_an_owner_the_pod_name() {
        let mut s = settings(&["--enable-capacity"]).unwrap().unwrap();
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(
            s.read_environment(&env(&[("POD_NAME", "p")])),
            Err(EnvironmentError::NoNamespace)
        );
        assert_eq!(
            s.read_environment(&env(&[("NAMESPACE", "kube-system"), ("POD_NAME", "")])),
            Err(EnvironmentError::NoPodName(1))
        );
        s.read_environment(&env(&[("NAMESPACE", "kube-system"), ("POD_NAME", "p-0")]))
            .unwrap();
        assert_eq!(
            (s.namespace.as_str(), s.pod_name.as_str()),
            ("kube-system", "p-0")
        );
        let mut no_owner = settings(&["--enable-capacity", "--capacity-ownerref-level=-1"])
            .unwrap()
            .unwrap();
        no_owner
            .read_environment(&env(&[("NAMESPACE", "ns")]))
            .unwrap();
        assert_eq!(no_owner.pod_name, "");
    }
}
