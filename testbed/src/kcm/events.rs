//! core/v1 Events the way kube-controller-manager's client-go recorder writes them: POST a new
//! Event named `<object>.<hex nanoseconds>` with count 1, then PATCH (strategic merge) `count`,
//! `lastTimestamp` and `message` when the same event repeats (client-go's EventCorrelator;
//! fixture `traffic/kube-controller-manager-volume-requests.txt`). Recording is best effort,
//! as in client-go: failures are logged, never returned.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// Event type `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Something needs attention.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event to record: type, reason (PascalCase, upstream string) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Normal or Warning.
    pub type_: EventType,
    /// Upstream reason string, e.g. `ExternalProvisioning`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

impl EventSpec {
    /// A Normal event.
    pub fn normal(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason,
            message: message.into(),
        }
    }

    /// A Warning event.
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            reason,
            message: message.into(),
        }
    }
}

#[derive(Debug)]
struct Seen {
    namespace: String,
    name: String,
    count: i32,
}

/// Writes Events for one component (`source.component` and `reportingComponent`).
pub struct EventRecorder {
    client: Client,
    component: String,
    seen: Mutex<HashMap<String, Seen>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("component", &self.component)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder writing as `component` (e.g. `persistentvolume-controller`).
    pub fn new(client: Client, component: impl Into<String>) -> Self {
        Self {
            client,
            component: component.into(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Records `event` about `object`.
    pub async fn record(&self, object: &ObjectReference, event: &EventSpec) {
        // Cluster-scoped objects get their events in "default", as client-go does.
        let namespace = object
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        // client-go's aggregation key: source, involved object, type, reason, message.
        let key = format!(
            "{}|{}|{}|{}|{}|{}|{}|{}",
            self.component,
            object.kind.as_deref().unwrap_or(""),
            namespace,
            object.name.as_deref().unwrap_or(""),
            object.uid.as_deref().unwrap_or(""),
            event.type_.as_str(),
            event.reason,
            event.message
        );
        let now = Time(jiff::Timestamp::now());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let repeat = {
            let mut seen = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            seen.get_mut(&key).map(|s| {
                s.count += 1;
                (s.namespace.clone(), s.name.clone(), s.count)
            })
        };
        if let Some((ns, name, count)) = repeat {
            let body = serde_json::json!({
                "count": count,
                "lastTimestamp": now,
                "message": event.message,
            });
            let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
            match api
                .patch(&name, &PatchParams::default(), &Patch::Strategic(body))
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    // Someone deleted the event: start a new one, like client-go does.
                }
                Err(err) => {
                    tracing::warn!(error = %err, event = name, "cannot update event");
                    return;
                }
            }
        }
        let object_name = object.name.clone().unwrap_or_default();
        let nanos = now.0.as_nanosecond();
        let name = format!("{object_name}.{nanos:x}");
        let body = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(event.reason.to_owned()),
            message: Some(event.message.clone()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            type_: Some(event.type_.as_str().to_owned()),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(String::new()),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &body).await {
            Ok(_) => {
                let mut seen = self
                    .seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                seen.insert(
                    key,
                    Seen {
                        namespace,
                        name,
                        count: 1,
                    },
                );
            }
            Err(err) => tracing::warn!(error = %err, reason = event.reason, "cannot create event"),
        }
    }
}
