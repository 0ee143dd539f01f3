//! The Lease lock: reads and writes of one `coordination.k8s.io/v1` Lease with optimistic
//! concurrency, and the Events upstream posts on it.
//!
//! Rust counterpart of client-go `resourcelock.LeaseLock`. Like upstream, the lock keeps the last
//! Lease object it read or wrote and sends it back on update, so its `resourceVersion` makes the
//! API server refuse (409 Conflict) an update based on a stale read.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

/// Why a read or write of the Lease failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// An update was attempted before any Lease had been read or created (client-go refuses
    /// this the same way).
    #[error("lease not initialized, get or create it first")]
    NotInitialized,
    /// The API server refused the request or could not be reached (409 Conflict means another
    /// writer changed the Lease since it was read).
    #[error("lease request failed")]
    Api(#[source] crate::kube_client::KubeError),
}

/// The election state stored in a Lease spec (client-go `LeaderElectionRecord`). Missing
/// fields read as zero values, as in client-go `LeaseSpecToLeaderElectionRecord`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) holder_identity: String,
    pub(super) lease_duration_seconds: i32,
    pub(super) acquire_time: Option<Timestamp>,
    pub(super) renew_time: Option<Timestamp>,
    pub(super) lease_transitions: i32,
}

impl Record {
    pub(super) fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return Self::default();
        };
        Self {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            lease_transitions: spec.lease_transitions.unwrap_or_default(),
        }
    }

    /// `leaseDurationSeconds` as a duration; a negative value counts as zero, so such a Lease
    /// is expired at once (client-go multiplies by `time.Second` and gets a negative duration,
    /// with the same effect).
    pub(super) fn lease_duration(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.lease_duration_seconds).unwrap_or(0))
    }

    /// The whole spec client-go writes: every field set, `holderIdentity` even when empty (a
    /// released Lease carries `""`), nothing else kept.
    pub(super) fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.lease_transitions),
            ..LeaseSpec::default()
        }
    }
}

/// One Lease, addressed by namespace and name, plus the last copy read or written.
pub(super) struct Lock {
    leases: Api<Lease>,
    events: Api<Event>,
    namespace: String,
    name: String,
    identity: String,
    labels: BTreeMap<String, String>,
    lease: Option<Lease>,
}

impl Lock {
    pub(super) fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        labels: BTreeMap<String, String>,
    ) -> Self {
        Self {
            leases: Api::namespaced(client.clone(), namespace),
            // csi-lib-utils records its Events in the Lease namespace.
            events: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            labels,
            lease: None,
        }
    }

    /// `<namespace>/<name>`, the form upstream logs (`LeaseLock.Describe`).
    pub(super) fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Reads the Lease; `None` when it does not exist.
    pub(super) async fn get(&mut self) -> Result<Option<Record>, LockError> {
        let lease = self
            .leases
            .get_opt(&self.name)
            .await
            .map_err(|err| LockError::Api(err.into()))?;
        let record = lease.as_ref().map(|l| Record::from_spec(l.spec.as_ref()));
        self.lease = lease;
        Ok(record)
    }

    /// Creates the Lease holding `record`, with the configured labels.
    pub(super) async fn create(&mut self, record: &Record) -> Result<(), LockError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: (!self.labels.is_empty()).then(|| self.labels.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(record.to_spec()),
        };
        let created = self
            .leases
            .create(&PostParams::default(), &lease)
            .await
            .map_err(|err| LockError::Api(err.into()))?;
        self.lease = Some(created);
        Ok(())
    }

    /// Replaces the spec of the last Lease seen with `record` and PUTs it back. The configured
    /// labels overwrite same-named labels; other labels on the Lease are kept (client-go only
    /// overwrites the keys it was given).
    pub(super) async fn update(&mut self, record: &Record) -> Result<(), LockError> {
        let lease = self.lease.as_mut().ok_or(LockError::NotInitialized)?;
        lease.spec = Some(record.to_spec());
        if !self.labels.is_empty() {
            let labels = lease.metadata.labels.get_or_insert_with(BTreeMap::new);
            labels.extend(self.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let updated = self
            .leases
            .replace(&self.name, &PostParams::default(), lease)
            .await
            .map_err(|err| LockError::Api(err.into()))?;
        self.lease = Some(updated);
        Ok(())
    }

    /// The core/v1 Event csi-lib-utils' recorder posts for a leadership change: reason
    /// `LeaderElection`, type Normal, on the Lease, message `<identity> <action>`, source
    /// component `<lease name>/<identity>`. `None` before any Lease was seen.
    ///
    /// core/v1 rather than events.k8s.io/v1 (kube-runtime's `Recorder`) because upstream RBAC
    /// only grants `events` in the core group.
    pub(super) fn event(&self, action: &str, now: Timestamp) -> Option<Event> {
        let lease = self.lease.as_ref()?;
        let component = format!("{}/{}", self.name, self.identity);
        Some(Event {
            metadata: ObjectMeta {
                // client-record names events `<object name>.<unix nanoseconds in hex>`.
                name: Some(format!("{}.{:x}", self.name, now.as_nanosecond())),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("coordination.k8s.io/v1".to_owned()),
                kind: Some("Lease".to_owned()),
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                uid: lease.metadata.uid.clone(),
                resource_version: lease.metadata.resource_version.clone(),
                field_path: None,
            },
            reason: Some("LeaderElection".to_owned()),
            message: Some(format!("{} {action}", self.identity)),
            source: Some(EventSource {
                component: Some(component.clone()),
                host: None,
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            type_: Some("Normal".to_owned()),
            reporting_component: Some(component),
            reporting_instance: Some(String::new()),
            ..Event::default()
        })
    }

    /// A handle that can post Events without borrowing the lock.
    pub(super) fn events(&self) -> Api<Event> {
        self.events.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn record_round_trips_through_the_lease_spec_with_microsecond_times() {
        let record = Record {
            holder_identity: "vm".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(ts("2026-11-21T15:36:56.181130Z")),
            renew_time: Some(ts("2026-11-21T15:36:56.187558Z")),
            lease_transitions: 0,
        };
        let spec = record.to_spec();
        let json = serde_json::to_value(&spec).unwrap();
        // Same shape as the golden fixture objects/lease-1-acquired.json.
        assert_eq!(
            json,
            serde_json::json!({
                "holderIdentity": "vm",
                "leaseDurationSeconds": 15,
                "acquireTime": "2026-11-21T15:36:56.181130Z",
                "renewTime": "2026-11-21T15:36:56.187558Z",
                "leaseTransitions": 0
            })
        );
        assert_eq!(Record::from_spec(Some(&spec)), record);
    }

    #[test]
    fn a_released_record_keeps_an_empty_holder_identity() {
        let record = Record {
            lease_duration_seconds: 1,
            ..Record::default()
        };
        let json = serde_json::to_value(record.to_spec()).unwrap();
        assert_eq!(json["holderIdentity"], "");
        assert_eq!(json["leaseDurationSeconds"], 1);
    }

    #[test]
    fn missing_spec_fields_read_as_zero_values() {
        assert_eq!(Record::from_spec(None), Record::default());
        assert_eq!(
            Record::from_spec(Some(&LeaseSpec::default())),
            Record::default()
        );
    }
}
