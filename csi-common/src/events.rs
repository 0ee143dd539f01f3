//! core/v1 Events with client-go's `EventCorrelator`, so a claim that fails for hours shows one
//! Event with `count: 379` instead of 379 Events.
//!
//! [`EventRecorder::event`] never blocks the controllers: events go through a bounded channel
//! (client-go's broadcaster drops events when its 1000-slot queue is full, so do we) to one
//! writer task. The writer runs every event, in order, through the [`Correlator`]:
//!
//! * spam filter: per (source, object, type, reason, message) token bucket, burst 25, one token
//!   per 5 minutes (client-go `EventSourceObjectSpamFilter`); events over it are dropped;
//! * aggregation: more than 10 different messages for the same (source, object, type, reason)
//!   within 10 minutes are folded into one Event whose message starts with
//!   `(combined from similar events): ` (client-go `EventAggregator`);
//! * deduplication: an Event identical to one already written (LRU of 4096 keys) is not
//!   created again; the existing one gets a strategic-merge PATCH
//!   `{"count":N,"lastTimestamp":...,"message":...}` (client-go `eventLogger`), exactly what the
//!   Go provisioner sends (fixtures: traffic/go-sidecar-requests.txt).
//!
//! A PATCH of an Event that expired meanwhile (404) falls back to creating it, as client-go does.
//! Unlike client-go, which writes one Event at a time, the writer keeps several writes in flight
//! (one per Event, in order) while the API client's token bucket has tokens to spare, so a burst
//! of events is not dropped for want of round trips.
//!
//! Every controller sidecar records its events through this one recorder:
//!
//! ```no_run
//! use csi_common::events::{EventRecorder, EventType, reference};
//! use k8s_openapi::api::core::v1::PersistentVolumeClaim;
//!
//! # async fn example(client: kube::Client, claim: &PersistentVolumeClaim) {
//! let (recorder, writer) = EventRecorder::new(client, "external-provisioner".to_owned());
//! tokio::spawn(writer);
//! recorder.event(&reference(claim), EventType::Warning, "ProvisioningFailed", "no space left");
//! # }
//! ```

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::kube_client::RateLimitLayer;
use writer::write_events;

mod writer;

/// client-go `maxQueuedEvents`: events beyond this many waiting to be written are dropped.
pub const QUEUE_LENGTH: usize = 1000;
/// client-go `maxLruCacheEntries` of the dedup and aggregation caches.
pub const CACHE_SIZE: usize = 4096;
/// client-go `defaultAggregateMaxEvents`: distinct messages before aggregation kicks in.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// client-go `defaultAggregateIntervalInSeconds`.
pub const AGGREGATE_INTERVAL: Duration = Duration::from_mins(10);
/// client-go `defaultSpamBurst`.
pub const SPAM_BURST: f64 = 25.0;
/// client-go `defaultSpamQPS`: one event per 5 minutes.
pub const SPAM_QPS: f64 = 1.0 / 300.0;
/// Prefix of an aggregated Event's message.
pub const AGGREGATED_PREFIX: &str = "(combined from similar events): ";

/// The Event `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong.
    Warning,
}

impl EventType {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One event to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// The object it is about (kind, namespace, name, uid, apiVersion, resourceVersion).
    pub object: ObjectReference,
    /// Normal or Warning.
    pub type_: EventType,
    /// Upstream's PascalCase reason (`ProvisioningFailed`, ...).
    pub reason: &'static str,
    /// Human-readable text.
    pub message: String,
}

/// Cheap handle the controllers record events with.
#[derive(Debug, Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<NewEvent>,
}

impl EventRecorder {
    /// A recorder whose events are written with `client` as `source.component` /
    /// `reportingComponent` `component`. Spawn the returned writer; it ends when every
    /// recorder clone is dropped and the queue is drained. The writer knows nothing of
    /// `client`'s token bucket and keeps as many writes in flight as it may; a sidecar's
    /// recorder is made with [`EventRecorder::with_bucket`].
    pub fn new(client: Client, component: String) -> (Self, impl Future<Output = ()> + Send) {
        Self::with_bucket(client, RateLimitLayer::unlimited(), component)
    }

    /// As [`EventRecorder::new`], for a `client` that draws from `bucket`: unless the bucket
    /// has tokens to spare, the writer keeps one write in flight, as client-go's, and leaves
    /// the rest of the burst to the controllers.
    pub fn with_bucket(
        client: Client,
        bucket: RateLimitLayer,
        component: String,
    ) -> (Self, impl Future<Output = ()> + Send) {
        let (tx, rx) = mpsc::channel(QUEUE_LENGTH);
        let task = write_events(client, bucket, component, writer::CONCURRENT_WRITES, rx);
        (Self { tx }, task)
    }

    /// As [`EventRecorder::new`], but the writer keeps one write in flight and waits for its
    /// answer before the next, as client-go's broadcaster does (one goroutine drains its
    /// queue into the sink). For stand-ins of Go components, whose Events a test bed must
    /// write at the pace the real component does; a sidecar's recorder is made with
    /// [`EventRecorder::with_bucket`].
    pub fn one_at_a_time(
        client: Client,
        component: String,
    ) -> (Self, impl Future<Output = ()> + Send) {
        let (tx, rx) = mpsc::channel(QUEUE_LENGTH);
        let task = write_events(client, RateLimitLayer::unlimited(), component, 1, rx);
        (Self { tx }, task)
    }

    /// A recorder and the receiving end, for tests that assert on recorded events.
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<NewEvent>) {
        let (tx, rx) = mpsc::channel(capacity);
        (Self { tx }, rx)
    }

    /// Queues an event; drops it (with a log line) when the queue is full.
    pub fn event(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &'static str,
        message: impl Into<String>,
    ) {
        let event = NewEvent {
            object: object.clone(),
            type_,
            reason,
            message: message.into(),
        };
        match self.tx.try_send(event) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(event)) => {
                tracing::warn!(reason = event.reason, message = %event.message, "event queue full, dropping event");
            }
        }
    }
}

/// What to send to the API server for one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// POST this new Event.
    Create(Box<Event>),
    /// PATCH the existing Event `namespace/name`; fall back to creating `fallback` on 404.
    Patch {
        /// Namespace of the existing Event.
        namespace: String,
        /// Name of the existing Event.
        name: String,
        /// The strategic-merge patch body.
        patch: serde_json::Value,
        /// The full Event to create if the existing one is gone.
        fallback: Box<Event>,
    },
    /// Dropped by the spam filter.
    Drop,
}

/// What the dedup cache remembers about a written Event.
///
/// No strings: the Event's namespace and name follow from the object, which is part of the
/// key, and from the nanoseconds of its creation. The caches fill to [`CACHE_SIZE`] entries each
/// on a busy sidecar, so every byte here counts 8,192 times (hashbrown's table for 4,096 entries);
/// the two `String`s this held cost about 100 more bytes of heap per entry (an object name and
/// a namespace), on top of 48 bytes more in the table itself.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The suffix of the Event's name.
    name_nanos: u64,
    /// `firstTimestamp`, in whole seconds as metav1.Time serializes it.
    first_second: i64,
    count: i32,
    last_used: u64,
}

#[derive(Debug)]
struct Aggregate {
    messages: Distinct,
    last: Instant,
    last_used: u64,
}

/// The distinct messages of one aggregation window, as 64-bit hashes, and no more than
/// [`AGGREGATE_MAX_EVENTS`] of them: only whether that many were seen matters.
///
/// The first is kept inline because nearly every object reports one message per reason; a
/// set allocated per cache entry was about a tenth of the recorder's memory.
#[derive(Debug, Default)]
struct Distinct {
    first: Option<u64>,
    more: Vec<u64>,
}

impl Distinct {
    fn insert(&mut self, message: u64) {
        match self.first {
            None => self.first = Some(message),
            Some(first) if first == message => {}
            Some(_) => {
                if self.len() < AGGREGATE_MAX_EVENTS && !self.more.contains(&message) {
                    self.more.push(message);
                }
            }
        }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
    last_used: u64,
}

/// client-go's `EventCorrelator` for one event source.
#[derive(Debug)]
pub struct Correlator {
    component: String,
    seen: HashMap<Fingerprint, Seen>,
    aggregates: HashMap<Fingerprint, Aggregate>,
    spam: HashMap<Fingerprint, Bucket>,
    tick: u64,
}

/// A cache key: a 128-bit hash of the strings client-go joins into its key.
///
/// client-go keys its three caches with the joined strings themselves (source, object, type,
/// reason and message: a few hundred bytes), so 3 × 4,096 entries hold several MiB once a busy
/// sidecar has filled them; the churn run of `chaos` saw RSS climb 4-5 MiB after the first
/// minute for that reason. A fingerprint keeps the same entries in 16 bytes each; two different
/// keys meet with a probability of about 2^-128 per pair, far below any other failure here.
type Fingerprint = u128;

fn fingerprint(parts: &[&str]) -> Fingerprint {
    let half = |salt: u8| {
        let mut hasher = DefaultHasher::new();
        salt.hash(&mut hasher);
        // `str`'s Hash writes a terminator after the bytes, so ("ab", "c") and ("a", "bc")
        // differ, as client-go's keys with their separators do.
        for part in parts {
            part.hash(&mut hasher);
        }
        hasher.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

impl Correlator {
    /// A correlator for Events with `source.component` = `component`.
    pub fn new(component: String) -> Self {
        // Each cache fills to CACHE_SIZE on any busy sidecar: its table is made that size at
        // once rather than doubled on the way (the last doubling came a few minutes into the
        // churn of `chaos`, after its first-minute level). Pages of it nobody wrote yet take
        // no memory.
        Self {
            component,
            seen: HashMap::with_capacity(table_capacity(CACHE_SIZE)),
            aggregates: HashMap::with_capacity(table_capacity(CACHE_SIZE)),
            spam: HashMap::with_capacity(table_capacity(CACHE_SIZE)),
            tick: 0,
        }
    }

    /// Decides what to write for `event` observed at `now` (wall clock, for timestamps) /
    /// `instant` (monotonic, for windows and buckets).
    pub fn correlate(&mut self, event: &NewEvent, now: Timestamp, instant: Instant) -> Action {
        self.tick += 1;
        let tick = self.tick;
        let object = object_key(&event.object);
        let type_ = event.type_.as_str();

        // client-go's keys: the spam filter's and the dedup cache's are source, object, type,
        // reason and message; the aggregator's the same without the message.
        let message_key = fingerprint(&[
            &self.component,
            &object,
            type_,
            event.reason,
            &event.message,
        ]);
        if !self.take_token(message_key, instant, tick) {
            return Action::Drop;
        }

        let aggregate_key = fingerprint(&[&self.component, &object, type_, event.reason]);
        let aggregate = self
            .aggregates
            .entry(aggregate_key)
            .or_insert_with(|| Aggregate {
                messages: Distinct::default(),
                last: instant,
                last_used: tick,
            });
        if instant.saturating_duration_since(aggregate.last) > AGGREGATE_INTERVAL {
            aggregate.messages.clear();
        }
        aggregate.last = instant;
        aggregate.last_used = tick;
        aggregate.messages.insert(message_hash(&event.message));
        let (dedup_key, message) = if aggregate.messages.len() < AGGREGATE_MAX_EVENTS {
            (message_key, event.message.clone())
        } else {
            (
                aggregate_key,
                format!("{AGGREGATED_PREFIX}{}", event.message),
            )
        };
        evict_oldest(&mut self.aggregates, |a| a.last_used);

        // The name keeps nanoseconds (two events in one second must not collide); the
        // timestamps are whole seconds as metav1.Time serializes them.
        let name_nanos = now_nanos(now);
        let now = truncate_to_seconds(now);
        let namespace = event_namespace(event);
        if let Some(seen) = self.seen.get_mut(&dedup_key) {
            seen.count += 1;
            seen.last_used = tick;
            let name = event_name(event, seen.name_nanos);
            let first = Timestamp::from_second(seen.first_second).unwrap_or(now);
            let fallback = build(
                &self.component,
                event,
                &message,
                (&name, &namespace),
                seen.count,
                (first, now),
            );
            return Action::Patch {
                namespace,
                name,
                patch: serde_json::json!({
                    "count": seen.count,
                    "lastTimestamp": Time(now),
                    "message": message,
                }),
                fallback: Box::new(fallback),
            };
        }
        let name = event_name(event, name_nanos);
        let created = build(
            &self.component,
            event,
            &message,
            (&name, &namespace),
            1,
            (now, now),
        );
        self.seen.insert(
            dedup_key,
            Seen {
                name_nanos,
                first_second: now.as_second(),
                count: 1,
                last_used: tick,
            },
        );
        evict_oldest(&mut self.seen, |s| s.last_used);
        Action::Create(Box::new(created))
    }

    fn take_token(&mut self, key: Fingerprint, instant: Instant, tick: u64) -> bool {
        let bucket = self.spam.entry(key).or_insert(Bucket {
            tokens: SPAM_BURST,
            last: instant,
            last_used: tick,
        });
        let refill = instant.saturating_duration_since(bucket.last).as_secs_f64() * SPAM_QPS;
        bucket.tokens = (bucket.tokens + refill).min(SPAM_BURST);
        bucket.last = instant;
        bucket.last_used = tick;
        let allowed = bucket.tokens >= 1.0;
        if allowed {
            bucket.tokens -= 1.0;
        }
        evict_oldest(&mut self.spam, |b| b.last_used);
        allowed
    }
}

/// One Event as client-go writes it: `(name, namespace)` of the Event, `(first, last)`
/// timestamps.
fn build(
    component: &str,
    event: &NewEvent,
    message: &str,
    (name, namespace): (&str, &str),
    count: i32,
    (first, last): (Timestamp, Timestamp),
) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        involved_object: event.object.clone(),
        reason: Some(event.reason.to_owned()),
        message: Some(message.to_owned()),
        source: Some(EventSource {
            component: Some(component.to_owned()),
            host: None,
        }),
        first_timestamp: Some(Time(first)),
        last_timestamp: Some(Time(last)),
        count: Some(count),
        type_: Some(event.type_.as_str().to_owned()),
        reporting_component: Some(component.to_owned()),
        reporting_instance: Some(String::new()),
        ..Event::default()
    }
}

/// The entries a cache bounded at `bound` is made for: the bound, the one inserted before an
/// eviction, and a quarter more so a rebuilt table has room to grow before the next rebuild
/// (7,168 entries, 8,192 slots, at [`CACHE_SIZE`]).
fn table_capacity(bound: usize) -> usize {
    bound + 1 + bound / 4
}

/// Keeps a cache at [`CACHE_SIZE`] entries by dropping the least recently used one.
fn evict_oldest<V>(map: &mut HashMap<Fingerprint, V>, last_used: impl Fn(&V) -> u64) {
    // Whether it rebuilt the table only matters to the tests.
    let _ = evict_oldest_to(map, CACHE_SIZE, last_used);
}

/// Keeps `map` at `bound` entries by dropping the least recently used one, in a table that
/// stays the size [`table_capacity`] gives; whether it rebuilt the table.
///
/// Why the rebuild: a removal from a `std` (hashbrown) table leaves a tombstone, and an insert
/// into a never-used slot uses up the table's room for growth, which tombstones do not give
/// back. Once it is used up with more than half the table's capacity still live (4,097 of
/// 7,168 here), the next insert doubles the table instead of rehashing it in place. A cache
/// that evicts one entry per insert reaches that point after tens of thousands of events (36
/// minutes into the churn of `chaos`: a step of 1.1 MiB in the heap of every sidecar, three
/// caches doubling at once). Rebuilding the table at that moment clears the tombstones at the
/// same size instead: at [`CACHE_SIZE`] about once per 40,000 evictions. The rebuilt table
/// has [`table_capacity`]'s headroom, so a bound whose table would be exactly full cannot make
/// every eviction a rebuild.
fn evict_oldest_to<V>(
    map: &mut HashMap<Fingerprint, V>,
    bound: usize,
    last_used: impl Fn(&V) -> u64,
) -> bool {
    if map.len() <= bound {
        return false;
    }
    if let Some(oldest) = map
        .iter()
        .min_by_key(|(_, v)| last_used(v))
        .map(|(k, _)| *k)
    {
        map.remove(&oldest);
    }
    // `capacity()` is the live entries plus the room for growth.
    if map.capacity() > map.len() {
        return false;
    }
    let mut rebuilt = HashMap::with_capacity(table_capacity(bound));
    rebuilt.extend(map.drain());
    *map = rebuilt;
    true
}

fn object_key(object: &ObjectReference) -> String {
    let field = |v: &Option<String>| v.clone().unwrap_or_default();
    [
        field(&object.kind),
        field(&object.namespace),
        field(&object.name),
        field(&object.uid),
        field(&object.api_version),
    ]
    .join("\u{0}")
}

fn truncate_to_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// Nanoseconds since the epoch; they fit a `u64` until the year 2554.
fn now_nanos(t: Timestamp) -> u64 {
    u64::try_from(t.as_nanosecond()).unwrap_or_default()
}

/// client-go names an Event `<object name>.<creation time in hex nanoseconds>`.
fn event_name(event: &NewEvent, nanos: u64) -> String {
    format!(
        "{}.{nanos:x}",
        event.object.name.as_deref().unwrap_or_default()
    )
}

/// The object's namespace; Events about cluster-scoped objects go to `default`, as client-go's.
fn event_namespace(event: &NewEvent) -> String {
    event
        .object
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

fn message_hash(message: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    message.hash(&mut hasher);
    hasher.finish()
}

/// A reference to `object` for an Event's `involvedObject`, as client-go's `reference.GetReference`
/// builds it (kind, namespace, name, uid, apiVersion, resourceVersion).
pub fn reference<K>(object: &K) -> ObjectReference
where
    K: kube::Resource<DynamicType = ()>,
{
    let meta = object.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        resource_version: meta.resource_version.clone(),
        uid: meta.uid.clone(),
        field_path: None,
    }
}

#[cfg(test)]
mod tests;
