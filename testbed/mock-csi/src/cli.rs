//! Command-line flags of the `mock-csi-driver` binary and their translation into a
//! [`MockDriverConfig`]. Parsing is a pure function of the arguments given, so it is unit-tested
//! with `Args::try_parse_from`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tonic::Code;

use super::config::{
    DEFAULT_DRIVER_NAME, DEFAULT_NODE_ID, DEFAULT_TOPOLOGY_KEY, MockDriverConfig,
    UnknownCapability, parse_controller_rpc, parse_node_rpc,
};
use super::fault::{Action, Fault, When};
use super::method::{Method, UnknownMethod};

/// A flag value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// `--endpoint` is neither `unix:///abs/path` nor an absolute path.
    #[error("endpoint {0:?} is not unix:///absolute/path or an absolute path")]
    Endpoint(String),
    /// A size is not a byte count with an optional binary/decimal suffix.
    #[error(
        "size {0:?} is not a number of bytes with an optional suffix (Ki, Mi, Gi, Ti, K, M, G, T)"
    )]
    Size(String),
    /// A duration is not a number with a unit.
    #[error("duration {0:?} is not a number followed by ms, s, m or h")]
    Duration(String),
    /// A gRPC code is neither a name (`NotFound`, `NOT_FOUND`) nor a number 0-16.
    #[error("unknown gRPC code {0:?}")]
    Code(String),
    /// A topology entry is not `key=value`.
    #[error("topology entry {0:?} is not key=value")]
    Topology(String),
    /// A fault flag does not have the documented shape.
    #[error("fault {0:?} is not METHOD:{1}[:NTH]")]
    FaultShape(String, &'static str),
    /// The n-th call is not a positive number.
    #[error("call number {0:?} is not a positive integer")]
    Nth(String),
    /// An unknown CSI method.
    #[error(transparent)]
    Method(#[from] UnknownMethod),
    /// An unknown capability name.
    #[error(transparent)]
    Capability(#[from] UnknownCapability),
}

/// Flags of `mock-csi-driver`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "mock-csi-driver",
    version,
    about = "A mock CSI driver (Identity, Controller, Node) with an in-memory volume table"
)]
pub struct Args {
    /// CSI endpoint to listen on: unix:///path/to/csi.sock or an absolute path.
    #[arg(long, value_parser = parse_endpoint)]
    pub endpoint: PathBuf,
    /// Driver name reported by GetPluginInfo.
    #[arg(long, default_value = DEFAULT_DRIVER_NAME)]
    pub name: String,
    /// Vendor version reported by GetPluginInfo.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    pub vendor_version: String,
    /// Node id reported by NodeGetInfo and accepted by ControllerPublishVolume.
    #[arg(long, default_value = DEFAULT_NODE_ID)]
    pub node_id: String,
    /// More node ids accepted by ControllerPublishVolume, comma-separated.
    #[arg(long, default_value = "")]
    pub extra_node_ids: String,
    /// Plugin capabilities, comma-separated spec names (CONTROLLER_SERVICE,
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS, ONLINE, OFFLINE, ...); "" for none. Default: the
    /// library default.
    #[arg(long)]
    pub plugin_capabilities: Option<String>,
    /// Controller capabilities, comma-separated spec names (CREATE_DELETE_VOLUME,
    /// PUBLISH_UNPUBLISH_VOLUME, EXPAND_VOLUME, ...); "" for none.
    #[arg(long)]
    pub controller_capabilities: Option<String>,
    /// Node capabilities, comma-separated spec names (STAGE_UNSTAGE_VOLUME, EXPAND_VOLUME,
    /// ...); "" for none.
    #[arg(long)]
    pub node_capabilities: Option<String>,
    /// Topology segments key=value,...; "" for none. Default: `topology.mock.csi.k8s.io/node=<node id>`.
    #[arg(long)]
    pub topology: Option<String>,
    /// Total capacity (bytes or with a suffix such as 100Gi); unlimited when not set.
    #[arg(long, value_parser = parse_size)]
    pub capacity: Option<i64>,
    /// Largest volume that can be created or expanded to.
    #[arg(long, value_parser = parse_size, default_value = "1Ti")]
    pub max_volume_size: i64,
    /// Size of a volume created without a capacity range.
    #[arg(long, value_parser = parse_size, default_value = "1Gi")]
    pub default_volume_size: i64,
    /// NodeGetInfo max_volumes_per_node (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_volumes_per_node: i64,
    /// Value of node_expansion_required in ControllerExpandVolume answers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub node_expansion_required: bool,
    /// Probe answers ready=false.
    #[arg(long)]
    pub probe_not_ready: bool,
    /// Log every call (method and request) at info level.
    #[arg(long)]
    pub log_calls: bool,
    /// Fail calls: `METHOD:CODE[:NTH]`, e.g. `CreateVolume:RESOURCE_EXHAUSTED:2` (every call when
    /// NTH is left out). Repeatable.
    #[arg(long = "fail", value_parser = parse_fail)]
    pub fail: Vec<Fault>,
    /// Delay calls: `METHOD:DURATION[:NTH]`, e.g. `Probe:2s`. Repeatable.
    #[arg(long = "delay", value_parser = parse_delay)]
    pub delay: Vec<Fault>,
}

impl Args {
    /// The socket path and driver configuration these flags describe.
    ///
    /// # Errors
    /// An unknown capability name or a malformed topology entry.
    pub fn into_config(self) -> Result<(PathBuf, MockDriverConfig), ArgError> {
        let defaults = MockDriverConfig::default();
        let topology = match &self.topology {
            None => BTreeMap::from([(DEFAULT_TOPOLOGY_KEY.to_owned(), self.node_id.clone())]),
            Some(list) => parse_topology(list)?,
        };
        let config = MockDriverConfig {
            driver_name: self.name,
            vendor_version: self.vendor_version,
            plugin_capabilities: match &self.plugin_capabilities {
                None => defaults.plugin_capabilities,
                Some(list) => split(list).map(str::parse).collect::<Result<_, _>>()?,
            },
            controller_capabilities: match &self.controller_capabilities {
                None => defaults.controller_capabilities,
                Some(list) => split(list)
                    .map(parse_controller_rpc)
                    .collect::<Result<_, _>>()?,
            },
            node_capabilities: match &self.node_capabilities {
                None => defaults.node_capabilities,
                Some(list) => split(list).map(parse_node_rpc).collect::<Result<_, _>>()?,
            },
            node_id: self.node_id,
            extra_node_ids: split(&self.extra_node_ids).map(str::to_owned).collect(),
            max_volumes_per_node: self.max_volumes_per_node,
            topology,
            total_capacity: self.capacity,
            max_volume_size: self.max_volume_size,
            default_volume_size: self.default_volume_size,
            node_expansion_required: self.node_expansion_required,
            probe_ready: if self.probe_not_ready {
                Some(false)
            } else {
                defaults.probe_ready
            },
            log_calls: self.log_calls,
            faults: self.fail.into_iter().chain(self.delay).collect(),
            ..defaults
        };
        Ok((self.endpoint, config))
    }
}

/// Non-empty, trimmed comma-separated items.
fn split(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `unix:///abs/path`, `unix:/abs/path` or `/abs/path` → `/abs/path`.
///
/// # Errors
/// Anything that does not end up as an absolute path.
pub fn parse_endpoint(s: &str) -> Result<PathBuf, ArgError> {
    let path = s
        .strip_prefix("unix://")
        .or_else(|| s.strip_prefix("unix:"))
        .unwrap_or(s);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(ArgError::Endpoint(s.to_owned()))
    }
}

/// A byte count, optionally with a binary (`Ki`..`Pi`) or decimal (`K`/`k`..`P`) suffix.
///
/// # Errors
/// Not a non-negative integer with a known suffix, or too large for `i64`.
pub fn parse_size(s: &str) -> Result<i64, ArgError> {
    const SUFFIXES: [(&str, i64); 11] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("k", 1_000),
        ("K", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
    ];
    let s = s.trim();
    let (digits, factor) = SUFFIXES
        .iter()
        .find_map(|(suffix, f)| s.strip_suffix(suffix).map(|d| (d, *f)))
        .unwrap_or((s, 1));
    digits
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| ArgError::Size(s.to_owned()))
}

/// A duration such as `250ms`, `2s`, `1m`, `1h`.
///
/// # Errors
/// No number or no known unit.
pub fn parse_duration(s: &str) -> Result<Duration, ArgError> {
    let s = s.trim();
    let bad = || ArgError::Duration(s.to_owned());
    let split_at = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = s.split_at(split_at);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        _ => Err(bad()),
    }
}

/// A gRPC code by name in either spelling (`NotFound`, `NOT_FOUND`, `not_found`) or number.
///
/// # Errors
/// No such code.
pub fn parse_code(s: &str) -> Result<Code, ArgError> {
    let wanted: String = s.trim().chars().filter(|c| *c != '_').collect();
    if let Ok(n) = wanted.parse::<i32>() {
        return (0..=16)
            .contains(&n)
            .then(|| Code::from_i32(n))
            .ok_or_else(|| ArgError::Code(s.to_owned()));
    }
    (0..=16)
        .map(Code::from_i32)
        .find(|code| format!("{code:?}").eq_ignore_ascii_case(&wanted))
        .ok_or_else(|| ArgError::Code(s.to_owned()))
}

fn parse_topology(list: &str) -> Result<BTreeMap<String, String>, ArgError> {
    split(list)
        .map(|item| {
            item.split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| ArgError::Topology(item.to_owned()))
        })
        .collect()
}

/// `METHOD:VALUE[:NTH]` → (method, value, when).
fn fault_parts<'a>(s: &'a str, shape: &'static str) -> Result<(Method, &'a str, When), ArgError> {
    let mut parts = s.split(':');
    let (Some(method), Some(value), nth, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ArgError::FaultShape(s.to_owned(), shape));
    };
    let when = match nth {
        None => When::Every,
        Some(n) => When::Nth(
            n.parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ArgError::Nth(n.to_owned()))?,
        ),
    };
    Ok((method.parse()?, value, when))
}

/// `--fail METHOD:CODE[:NTH]`.
///
/// # Errors
/// Wrong shape, unknown method or code, or a non-positive call number.
pub fn parse_fail(s: &str) -> Result<Fault, ArgError> {
    let (method, code, when) = fault_parts(s, "CODE")?;
    let code = parse_code(code)?;
    Ok(Fault {
        method,
        when,
        action: Action::Error(code, format!("injected by mock-csi-driver --fail {s}")),
    })
}

/// `--delay METHOD:DURATION[:NTH]`.
///
/// # Errors
/// Wrong shape, unknown method, bad duration, or a non-positive call number.
pub fn parse_delay(s: &str) -> Result<Fault, ArgError> {
    let (method, duration, when) = fault_parts(s, "DURATION")?;
    Ok(Fault {
        method,
        when,
        action: Action::Delay(parse_duration(duration)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ControllerRpc, PluginCapability, PluginService};

    fn config(args: &[&str]) -> Result<(PathBuf, MockDriverConfig), String> {
        let args = Args::try_parse_from(
            ["mock-csi-driver", "--endpoint", "unix:///tmp/csi.sock"]
                .iter()
                .chain(args),
        )
        .map_err(|e| e.to_string())?;
        args.into_config().map_err(|e| e.to_string())
    }

    #[test]
    fn endpoint_accepts_unix_urls_and_absolute_paths_only() {
        assert_eq!(
            parse_endpoint("unix:///a/b.sock"),
            Ok(PathBuf::from("/a/b.sock"))
        );
        assert_eq!(
            parse_endpoint("unix:/a/b.sock"),
            Ok(PathBuf::from("/a/b.sock"))
        );
        assert_eq!(parse_endpoint("/a/b.sock"), Ok(PathBuf::from("/a/b.sock")));
        assert!(parse_endpoint("relative.sock").is_err());
        assert!(parse_endpoint("tcp://127.0.0.1:1").is_err());
    }

    #[test]
    fn sizes_accept_binary_and_decimal_suffixes() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("2Gi"), Ok(2 << 30));
        assert_eq!(parse_size("1Ti"), Ok(1 << 40));
        assert_eq!(parse_size("5G"), Ok(5_000_000_000));
        assert_eq!(parse_size("3k"), Ok(3000));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("1Xi").is_err());
        assert!(parse_size("9999999Pi").is_err());
    }

    #[test]
    fn durations_and_codes_parse_in_the_usual_spellings() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_mins(1)));
        assert!(parse_duration("2").is_err());
        assert!(parse_duration("s").is_err());
        assert_eq!(parse_code("NotFound"), Ok(Code::NotFound));
        assert_eq!(
            parse_code("RESOURCE_EXHAUSTED"),
            Ok(Code::ResourceExhausted)
        );
        assert_eq!(parse_code("14"), Ok(Code::Unavailable));
        assert!(parse_code("17").is_err());
        assert!(parse_code("Nope").is_err());
    }

    #[test]
    fn fault_flags_become_faults() {
        assert_eq!(
            parse_fail("CreateVolume:RESOURCE_EXHAUSTED:2").map(|f| (f.method, f.when)),
            Ok((Method::CreateVolume, When::Nth(2)))
        );
        assert!(matches!(
            parse_fail("/csi.v1.Identity/Probe:Internal").map(|f| f.action),
            Ok(Action::Error(Code::Internal, _))
        ));
        assert_eq!(
            parse_delay("Probe:2s"),
            Ok(Fault::delay(Method::Probe, Duration::from_secs(2)))
        );
        assert!(parse_fail("CreateVolume").is_err());
        assert!(parse_fail("CreateVolume:Internal:0").is_err());
        assert!(parse_fail("Nope:Internal").is_err());
        assert!(parse_delay("Probe:2s:1:9").is_err());
    }

    #[test]
    fn flags_override_the_library_defaults() {
        let (path, cfg) = config(&[
            "--name",
            "x.csi.example.com",
            "--node-id",
            "n1",
            "--controller-capabilities",
            "create_delete_volume, EXPAND_VOLUME",
            "--plugin-capabilities",
            "CONTROLLER_SERVICE",
            "--topology",
            "zone=a,rack=1",
            "--capacity",
            "10Gi",
            "--probe-not-ready",
            "--fail",
            "CreateVolume:Internal",
            "--delay",
            "Probe:1s:3",
            "--node-expansion-required",
            "false",
        ])
        .unwrap();
        assert_eq!(path, PathBuf::from("/tmp/csi.sock"));
        assert_eq!(cfg.driver_name, "x.csi.example.com");
        assert_eq!(cfg.node_id, "n1");
        assert_eq!(
            cfg.controller_capabilities,
            [
                ControllerRpc::CreateDeleteVolume,
                ControllerRpc::ExpandVolume
            ]
        );
        assert_eq!(
            cfg.plugin_capabilities,
            [PluginCapability::Service(PluginService::ControllerService)]
        );
        assert_eq!(
            cfg.topology,
            BTreeMap::from([("rack".into(), "1".into()), ("zone".into(), "a".into())])
        );
        assert_eq!(cfg.total_capacity, Some(10 << 30));
        assert_eq!(cfg.probe_ready, Some(false));
        assert!(!cfg.node_expansion_required);
        assert_eq!(cfg.faults.len(), 2);
    }

    #[test]
    fn defaults_put_the_node_id_in_the_topology_and_empty_lists_mean_none() {
        let (_, cfg) = config(&["--node-id", "n7"]).unwrap();
        assert_eq!(
            cfg.topology.get(DEFAULT_TOPOLOGY_KEY).map(String::as_str),
            Some("n7")
        );
        assert_eq!(
            cfg.controller_capabilities,
            MockDriverConfig::default().controller_capabilities
        );
        let (_, cfg) = config(&["--topology", "", "--controller-capabilities", ""]).unwrap();
        assert!(cfg.topology.is_empty());
        assert!(cfg.controller_capabilities.is_empty());
        assert!(config(&["--controller-capabilities", "FLY"]).is_err());
        assert!(config(&["--topology", "novalue"]).is_err());
    }
}
