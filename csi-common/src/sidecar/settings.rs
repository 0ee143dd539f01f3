//! The shared flag groups of [`crate::flags`] validated into the settings [`super::Sidecar`]
//! starts from.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::connection::{self, CsiAddress};
use crate::flags::{self, CommonArgs, HttpArgs, KubeArgs, LeaderElectionArgs, MasterArgs};

/// A flag combination that parses but cannot run; upstream reports each of these after parsing
/// and exits 1 (a value clap refuses is a usage error, exit 2, before this).
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `--http-endpoint` together with `--metrics-address`, or a bad logging setting.
    #[error(transparent)]
    Flags(#[from] flags::Error),
    /// `--csi-address` is not a unix socket path.
    #[error(transparent)]
    Address(#[from] connection::Error),
    /// `--kube-api-burst` is negative.
    #[error("--kube-api-burst must not be negative, got {0}")]
    NegativeBurst(i32),
}

impl SettingsError {
    /// The exit code upstream uses: 1 for every one of these.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Flags(_) | Self::Address(_) | Self::NegativeBurst(_) => 1,
        }
    }
}

/// Every shared flag of a controller sidecar, validated (from [`CommonArgs`] and, where the
/// sidecar has it, [`MasterArgs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CommonSettings {
    /// `--csi-address`.
    pub csi_address: CsiAddress,
    /// Kubernetes client settings.
    pub kube: KubeSettings,
    /// Leader election, when `--leader-election` is on.
    pub leader_election: Option<LeaderElectionSettings>,
    /// Diagnostics HTTP server.
    pub http: HttpSettings,
    /// `-v >= 5`: log every CSI call (secrets stripped).
    pub log_grpc_calls: bool,
}

impl CommonSettings {
    /// Validates the shared flags: the checks of [`CommonArgs::validate`], then the driver
    /// address and the client settings.
    ///
    /// ```
    /// use csi_common::flags::{self, CommonArgs, MasterArgs};
    /// use csi_common::sidecar::CommonSettings;
    ///
    /// #[derive(clap::Parser)]
    /// struct Args {
    ///     #[command(flatten)]
    ///     common: CommonArgs,
    ///     #[command(flatten)]
    ///     master: MasterArgs,
    /// }
    ///
    /// let args: Args = flags::parse(["csi-resizer", "--leader-election", "-http-endpoint=:8080"])
    ///     .expect("usage errors exit 2 in main");
    /// let settings = CommonSettings::from_args(&args.common, Some(&args.master))
    ///     .expect("bad combinations exit 1 in main");
    /// assert_eq!(settings.csi_address.to_string(), "unix:///run/csi/socket");
    /// assert_eq!(settings.http.listen_address(), Some((":8080", true)));
    /// assert!(settings.leader_election.is_some());
    ///
    /// let args: Args = flags::parse(["csi-resizer", "--kube-api-burst=-1"]).unwrap();
    /// let err = CommonSettings::from_args(&args.common, None).unwrap_err();
    /// assert_eq!(err.exit_code(), 1);
    /// ```
    ///
    /// # Errors
    /// The first check that fails; every one exits 1 upstream.
    pub fn from_args(
        args: &CommonArgs,
        master: Option<&MasterArgs>,
    ) -> Result<Self, SettingsError> {
        args.validate()?;
        Ok(Self {
            csi_address: CsiAddress::parse(&args.csi.csi_address)?,
            kube: KubeSettings::from_args(&args.kube, master)?,
            leader_election: LeaderElectionSettings::from_args(&args.leader_election),
            http: HttpSettings::from_args(&args.http)?,
            log_grpc_calls: args.logging.verbosity >= 5,
        })
    }
}

/// `--kubeconfig`, `--master`, `--kube-api-qps`, `--kube-api-burst`.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeSettings {
    /// `--kubeconfig` (empty: in-cluster, unless `main` passes a `KUBECONFIG`).
    pub kubeconfig: String,
    /// `--master`: overrides the API server URL.
    pub master: Option<String>,
    /// `--kube-api-qps`, narrowed to float32 as client-go's rest config holds it.
    pub qps: f32,
    /// `--kube-api-burst`.
    pub burst: u32,
}

impl KubeSettings {
    /// The client settings of `kube` and, for sidecars that have the flag, `--master`.
    ///
    /// # Errors
    /// [`SettingsError::NegativeBurst`].
    pub fn from_args(kube: &KubeArgs, master: Option<&MasterArgs>) -> Result<Self, SettingsError> {
        let burst = u32::try_from(kube.kube_api_burst)
            .map_err(|_| SettingsError::NegativeBurst(kube.kube_api_burst))?;
        Ok(Self {
            kubeconfig: kube.kubeconfig.clone(),
            master: master.and_then(|m| non_empty(&m.master)),
            qps: narrow_qps(kube.kube_api_qps),
            burst,
        })
    }
}

/// Leader-election flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionSettings {
    /// `--leader-election-namespace` (empty: the pod's namespace).
    pub namespace: String,
    /// `--leader-election-lease-duration`.
    pub lease_duration: Duration,
    /// `--leader-election-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--leader-election-retry-period`.
    pub retry_period: Duration,
    /// `--leader-election-labels`, every occurrence merged.
    pub labels: BTreeMap<String, String>,
}

impl LeaderElectionSettings {
    /// The settings when `--leader-election` is on, else `None`. The timings are checked when
    /// the elector is built ([`crate::leader::LeaderElectionConfig::validate`]).
    pub fn from_args(args: &LeaderElectionArgs) -> Option<Self> {
        args.leader_election.then(|| Self {
            namespace: args.leader_election_namespace.clone(),
            lease_duration: args.leader_election_lease_duration,
            renew_deadline: args.leader_election_renew_deadline,
            retry_period: args.leader_election_retry_period,
            labels: args.labels(),
        })
    }
}

/// Diagnostics HTTP flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// `--http-endpoint`: metrics plus `/healthz/leader-election`.
    pub endpoint: Option<String>,
    /// `--metrics-address` (deprecated): metrics only.
    pub metrics_address: Option<String>,
    /// `--metrics-path`.
    pub metrics_path: String,
}

impl HttpSettings {
    /// The settings of `args`.
    ///
    /// # Errors
    /// [`flags::Error::HttpEndpointAndMetricsAddress`] when both addresses are set.
    pub fn from_args(args: &HttpArgs) -> Result<Self, flags::Error> {
        args.validate()?;
        Ok(Self {
            endpoint: non_empty(&args.http_endpoint),
            metrics_address: non_empty(&args.metrics_address),
            metrics_path: args.metrics_path.clone(),
        })
    }

    /// The address to listen on, if any, and whether the leader-election check is served there.
    pub fn listen_address(&self) -> Option<(&str, bool)> {
        match (&self.endpoint, &self.metrics_address) {
            (Some(endpoint), _) => Some((endpoint, true)),
            (None, Some(metrics)) => Some((metrics, false)),
            (None, None) => None,
        }
    }
}

/// `--kube-api-qps` is a float64 flag upstream but client-go's rest config holds a float32.
#[allow(
    clippy::cast_possible_truncation,
    reason = "client-go narrows the flag to float32 the same way"
)]
fn narrow_qps(qps: f64) -> f32 {
    qps as f32
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}
