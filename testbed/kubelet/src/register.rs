//! One registration attempt, step by step as kubelet's `GenerateRegisterPluginFunc`
//! (`pluginmanager/operationexecutor/operation_generator.go`) and its CSI handler
//! (`pkg/volume/csi/csi_plugin.go`) do it:
//!
//! 1. dial the socket (kubelet: 10 s, blocking; grpc-go's passthrough resolver, so every request
//!    carries `:authority` = the socket path, see [`crate::grpc_dial`]) and call `GetInfo`
//!    within 1 s; a failure here is only logged, the plugin is not notified;
//! 2. no handler for the plugin type (only `CSIPlugin` here) → notify `false`;
//! 3. an empty endpoint means the socket itself;
//! 4. `ValidatePlugin`: a v1 version must be among `supported_versions`, and a driver of the same
//!    name already registered must have a lower version → otherwise notify `false`;
//! 5. `RegisterPlugin`: dial the endpoint, `NodeGetInfo`, write the Node and CSINode; any error
//!    → notify `false`;
//! 6. notify `true` (kubelet: within 5 s).
//!
//! Error texts follow kubelet's so tests can assert on what a registrar logs.

use std::path::Path;
use std::time::Duration;

use csi_common::logging::error_chain;

use crate::grpc_dial::{self, Authority};

use proto::csi::v1::NodeGetInfoRequest;
use proto::csi::v1::node_client::NodeClient;
use proto::pluginregistration::v1::registration_client::RegistrationClient;
use proto::pluginregistration::v1::{InfoRequest, PluginInfo, RegistrationStatus};
use tonic::transport::Channel;

use super::node_info;
use super::versions::{self, Version};
use super::{KubeletConfig, NodeInfo, NotifyOutcome, RegisteredPlugin, Verdict};

/// `PluginInfo.type` kubelet's CSI handler is registered for.
pub const CSI_PLUGIN_TYPE: &str = "CSIPlugin";

/// Kubelet's bound on `GetInfo` during registration.
pub const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);

/// Kubelet's bound on `NotifyRegistrationStatus` (`notifyTimeoutDuration`).
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Pause between dial attempts while a blocking dial waits for the socket.
const REDIAL_INTERVAL: Duration = Duration::from_millis(100);

/// What one attempt produced.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Registered and notified (the notification may still have failed).
    Registered {
        plugin: RegisteredPlugin,
        version: Version,
    },
    /// Not registered.
    Failed {
        info: Option<PluginInfo>,
        error: String,
        notified: NotifyOutcome,
    },
}

/// Everything an attempt needs besides the socket.
pub(super) struct Attempt<'a> {
    pub(super) config: &'a KubeletConfig,
    pub(super) verdict: Verdict,
    /// The highest version of an already registered driver with this name, if any.
    pub(super) registered_version: &'a (dyn Fn(&str) -> Option<Version> + Send + Sync),
}

impl Attempt<'_> {
    pub(super) async fn run(&self, socket: &Path) -> Outcome {
        let failed = |info, error| Outcome::Failed {
            info,
            error,
            notified: NotifyOutcome::NotSent,
        };
        let channel = match dial(
            socket,
            self.config.dial_timeout,
            self.config.registration_authority,
        )
        .await
        {
            Ok(channel) => channel,
            Err(err) => {
                return failed(
                    None,
                    format!(
                        "RegisterPlugin error -- dial failed at socket {}, err: {err}",
                        socket.display()
                    ),
                );
            }
        };
        let mut client = RegistrationClient::new(channel);
        let mut request = tonic::Request::new(InfoRequest {});
        request.set_timeout(GET_INFO_TIMEOUT);
        let info = match tokio::time::timeout(GET_INFO_TIMEOUT, client.get_info(request)).await {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => {
                return failed(
                    None,
                    format!(
                        "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {}, err: {}",
                        socket.display(),
                        go_status(&status)
                    ),
                );
            }
            Err(_) => {
                return failed(
                    None,
                    format!(
                        "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {}, err: context deadline exceeded",
                        socket.display()
                    ),
                );
            }
        };

        match self.register(socket, &info).await {
            Ok((plugin, version)) => {
                let notified = notify(&mut client, true, String::new()).await;
                Outcome::Registered {
                    plugin: RegisteredPlugin { notified, ..plugin },
                    version,
                }
            }
            Err(error) => {
                let notified = notify(&mut client, false, error.clone()).await;
                Outcome::Failed {
                    info: Some(info),
                    error,
                    notified,
                }
            }
        }
    }

    /// Steps 2 to 5; the error is the text kubelet notifies.
    async fn register(
        &self,
        socket: &Path,
        info: &PluginInfo,
    ) -> Result<(RegisteredPlugin, Version), String> {
        if info.r#type != CSI_PLUGIN_TYPE {
            return Err(format!(
                "RegisterPlugin error -- no handler registered for plugin type: {} at socket {}",
                info.r#type,
                socket.display()
            ));
        }
        let endpoint = if info.endpoint.is_empty() {
            socket.display().to_string()
        } else {
            info.endpoint.clone()
        };
        let version = self.validate(&info.name, &endpoint, &info.supported_versions)?;
        let registration_failed = |err: String| {
            format!("RegisterPlugin error -- plugin registration failed with err: {err}")
        };
        if let Verdict::Reject(reason) = &self.verdict {
            return Err(registration_failed(reason.clone()));
        }
        let node = if self.config.call_node_get_info {
            let node = node_get_info(&endpoint, self.config)
                .await
                .map_err(registration_failed)?;
            if let Some(api) = &self.config.node_api {
                node_info::install(api, &info.name, &node)
                    .await
                    .map_err(registration_failed)?;
            }
            Some(node)
        } else {
            None
        };
        Ok((
            RegisteredPlugin {
                socket: socket.to_owned(),
                name: info.name.clone(),
                endpoint,
                supported_versions: info.supported_versions.clone(),
                node,
                notified: NotifyOutcome::NotSent,
            },
            version,
        ))
    }

    /// The CSI handler's `ValidatePlugin`.
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<Version, String> {
        let invalid = |err: String| {
            format!(
                "RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver {name} at endpoint {endpoint}: {err}"
            )
        };
        if versions.is_empty() {
            return Err(invalid(format!(
                "ValidatePlugin for CSI driver {name:?} failed. Plugin returned an empty list for supported versions"
            )));
        }
        let highest = versions::highest_supported(versions).map_err(|err| {
            invalid(format!(
                "ValidatePlugin for CSI driver {name:?} failed. None of the versions specified {versions:?} are supported. err={err}"
            ))
        })?;
        if let Some(existing) = (self.registered_version)(name)
            && existing >= highest
        {
            return Err(invalid(format!(
                "ValidatePlugin for CSI driver {name:?} failed. Another driver with the same name is already registered with a higher supported version: {existing:?}",
                existing = existing.to_string()
            )));
        }
        Ok(highest)
    }
}

/// Kubelet's blocking dial: retry until a connection is made or `timeout` passes.
pub(super) async fn dial(
    path: &Path,
    timeout: Duration,
    authority: Authority,
) -> Result<Channel, String> {
    let attempts = async {
        loop {
            match connect_once(path, authority).await {
                Ok(channel) => return Ok::<_, String>(channel),
                Err(err) => {
                    tracing::trace!(path = %path.display(), error = %err, "dial attempt failed");
                }
            }
            tokio::time::sleep(REDIAL_INTERVAL).await;
        }
    };
    tokio::time::timeout(timeout, attempts)
        .await
        .unwrap_or_else(|_| Err("context deadline exceeded".to_owned()))
}

async fn connect_once(path: &Path, authority: Authority) -> Result<Channel, String> {
    grpc_dial::dial(path, authority)
        .await
        .map_err(|err| error_chain(&err))
}

/// `NodeGetInfo` on the driver endpoint. Kubelet's CSI client dials it with
/// `grpc.WithAuthority("localhost")` since kubernetes#112597, unlike the registration dial.
async fn node_get_info(endpoint: &str, config: &KubeletConfig) -> Result<NodeInfo, String> {
    let channel = dial(
        Path::new(endpoint),
        config.dial_timeout,
        Authority::Localhost,
    )
    .await
    .map_err(|err| format!("failed to dial CSI driver at {endpoint}: {err}"))?;
    let mut request = tonic::Request::new(NodeGetInfoRequest {});
    request.set_timeout(config.csi_timeout);
    let call = async { NodeClient::new(channel).node_get_info(request).await };
    let response = tokio::time::timeout(config.csi_timeout, call)
        .await
        .map_err(|_| {
            "rpc error: code = DeadlineExceeded desc = context deadline exceeded".to_owned()
        })?
        .map_err(|status| go_status(&status))?
        .into_inner();
    Ok(NodeInfo {
        node_id: response.node_id,
        max_volumes_per_node: response.max_volumes_per_node,
        topology: response
            .accessible_topology
            .map(|t| t.segments.into_iter().collect())
            .unwrap_or_default(),
    })
}

async fn notify(
    client: &mut RegistrationClient<Channel>,
    registered: bool,
    error: String,
) -> NotifyOutcome {
    let mut request = tonic::Request::new(RegistrationStatus {
        plugin_registered: registered,
        error,
    });
    request.set_timeout(NOTIFY_TIMEOUT);
    match tokio::time::timeout(NOTIFY_TIMEOUT, client.notify_registration_status(request)).await {
        Ok(Ok(_)) => NotifyOutcome::Acknowledged,
        Ok(Err(status)) => NotifyOutcome::Failed(go_status(&status)),
        Err(_) => NotifyOutcome::Failed("context deadline exceeded".to_owned()),
    }
}

/// A gRPC status as grpc-go prints it (tonic's code names match Go's except `Cancelled`).
fn go_status(status: &tonic::Status) -> String {
    format!(
        "rpc error: code = {:?} desc = {}",
        status.code(),
        reset_reason(status).map_or_else(
            || status.message().to_owned(),
            // grpc-go's words for a stream the server reset, as kubelet logs them.
            |reason| format!("stream terminated by RST_STREAM with error code: {reason:?}")
        )
    )
}

/// The RST_STREAM reason behind a failed call, if the server reset the stream.
fn reset_reason(status: &tonic::Status) -> Option<h2::Reason> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(err) = source {
        if let Some(h2) = err.downcast_ref::<h2::Error>()
            && h2.is_reset()
        {
            return h2.reason();
        }
        source = err.source();
    }
    None
}
