//! The writer task: every event goes through the [`Correlator`] in the order it was recorded,
//! and the resulting writes go to the API server several at a time.
//!
//! client-go's broadcaster writes one Event at a time (one goroutine drains its queue), so a
//! sidecar that records events faster than one round trip each fills the 1000-slot queue and
//! drops the rest: 3.8-4.9 k of 10 k in `bench` at `--kube-api-qps=5000` when this writer did
//! the same. Here more writes, up to [`CONCURRENT_WRITES`], start while the API client's token
//! bucket holds more than nine tenths of its burst
//! ([`RateLimitLayer::has_spare_token`]); otherwise one write at a time goes on, as in
//! client-go. The bucket is shared with the controllers, and an Event write takes a token a
//! controller's write may want next: a sidecar records "Provisioning" before CreateVolume, so
//! eight Event writes at the start of a burst would spend most of the default burst of 10 and
//! the PVs would queue behind them (`bench`, 100 claims at `--kube-api-qps=5`: claim-to-PV p50
//! 9.6 s against 8.8 s with one write at a time). The writer takes each write's token itself
//! when it starts the write ([`RateLimitLayer::reserve`]), so its next look at the bucket
//! already counts it. Writes of one Event (its creation, then the patches counting its repeats)
//! still reach the API server one after another, in order: a patch that overtook an earlier one
//! would set an older count.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Client, Resource as _};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Action, Correlator, NewEvent};
use crate::kube_client::{RateLimitLayer, Reserved};

/// How many Event writes may be in flight at once while the bucket has tokens to spare.
pub(super) const CONCURRENT_WRITES: usize = 8;
/// How often a failed write is tried. client-go tries 12 times, 10 s apart; this keeps a write
/// the API server keeps refusing from holding one of the [`CONCURRENT_WRITES`] for two minutes.
const WRITE_ATTEMPTS: u32 = 3;
const WRITE_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Which writes may start: one per Event, and besides the first only while the bucket has a
/// token to spare, at most `limit` ([`CONCURRENT_WRITES`] for a sidecar) in all. An action for an Event
/// whose write is in flight waits for it; only the newest such action waits, since each carries
/// the Event's whole state (a later patch's count, `lastTimestamp` and message supersede an
/// earlier one's, and its fallback is the whole Event).
#[derive(Debug)]
struct Writes {
    /// `namespace/name` of each Event with a write in flight, and the action waiting for it.
    in_flight: HashMap<String, Option<Action>>,
    /// The most writes in flight at once.
    limit: usize,
}

impl Writes {
    /// Room for `limit` writes at once (at least one).
    fn new(limit: usize) -> Self {
        Self {
            in_flight: HashMap::new(),
            limit: limit.max(1),
        }
    }

    /// Whether another Event's write may start, given whether the bucket has a token to spare.
    fn has_room(&self, spare_token: bool) -> bool {
        self.in_flight.is_empty() || (spare_token && self.in_flight.len() < self.limit)
    }

    /// Takes `action` for the Event `key`: returns it if it may start now, or keeps it until
    /// the Event's write in flight ends (replacing an action already kept).
    fn submit(&mut self, key: String, action: Action) -> Option<(String, Action)> {
        match self.in_flight.entry(key) {
            Entry::Occupied(mut waiting) => {
                waiting.insert(Some(action));
                None
            }
            Entry::Vacant(slot) => {
                let key = slot.key().clone();
                slot.insert(None);
                Some((key, action))
            }
        }
    }

    /// The write for the Event `key` ended: returns the action that waited for it, to start
    /// now, or frees the Event's slot.
    fn done(&mut self, key: &str) -> Option<Action> {
        let next = self.in_flight.get_mut(key)?.take();
        if next.is_none() {
            self.in_flight.remove(key);
        }
        next
    }
}

/// The Event an action writes, as `namespace/name`; `None` for a dropped event.
fn event_key(action: &Action) -> Option<String> {
    match action {
        Action::Drop => None,
        Action::Create(event) => Some(format!(
            "{}/{}",
            event.metadata.namespace.as_deref().unwrap_or_default(),
            event.metadata.name.as_deref().unwrap_or_default()
        )),
        Action::Patch {
            namespace, name, ..
        } => Some(format!("{namespace}/{name}")),
    }
}

/// Correlates events as they arrive and writes them with `client`, whose requests draw from
/// `bucket`, at most `limit` at once, until every sender is gone and every write has ended.
pub(super) async fn write_events(
    client: Client,
    bucket: RateLimitLayer,
    component: String,
    limit: usize,
    mut rx: mpsc::Receiver<NewEvent>,
) {
    let mut correlator = Correlator::new(component);
    let mut writes = Writes::new(limit);
    let mut running = FuturesUnordered::new();
    // Takes the write's first token at once, not when the write is first polled.
    let start = |key: String, action: Action| {
        let sender = Sender {
            client: client.clone(),
            bucket: bucket.clone(),
        };
        let first = bucket.reserve();
        async move {
            sender.write(action, first).await;
            key
        }
    };
    let mut open = true;
    loop {
        tokio::select! {
            // No room: the events wait in the channel, which drops what does not fit.
            event = rx.recv(), if open && writes.has_room(bucket.has_spare_token()) => {
                let Some(event) = event else {
                    open = false;
                    continue;
                };
                let action = correlator.correlate(&event, Timestamp::now(), Instant::now());
                if let Some(key) = event_key(&action)
                    && let Some((key, action)) = writes.submit(key, action)
                {
                    running.push(start(key, action));
                }
            }
            Some(key) = running.next(), if !running.is_empty() => {
                if let Some(action) = writes.done(&key) {
                    running.push(start(key, action));
                }
            }
            else => break,
        }
    }
}

/// What a write needs: the client, and the bucket it takes each attempt's token from.
struct Sender {
    client: Client,
    bucket: RateLimitLayer,
}

impl Sender {
    /// Carries out `action`; its first request's token was reserved for `first`.
    async fn write(&self, action: Action, first: Instant) {
        match action {
            Action::Drop => {}
            Action::Create(event) => self.create(&event, first).await,
            Action::Patch {
                namespace,
                name,
                patch,
                fallback,
            } => {
                let request = kube::core::Request::new(Event::url_path(&(), Some(&namespace)))
                    .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .map_err(kube::Error::BuildRequest);
                match self.send(request, first).await {
                    Ok(()) => {}
                    // Expired meanwhile: client-go creates it again.
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        self.create(&fallback, self.bucket.reserve()).await;
                    }
                    Err(err) => {
                        tracing::warn!(event = %name, error = %crate::kube_client::error_text(&err), "cannot update event");
                    }
                }
            }
        }
    }

    /// Creates `event`; the first request's token was reserved for `first`.
    async fn create(&self, event: &Event, first: Instant) {
        let namespace = event.metadata.namespace.as_deref().unwrap_or_default();
        let request = serde_json::to_vec(event)
            .map_err(kube::Error::SerdeError)
            .and_then(|body| {
                kube::core::Request::new(Event::url_path(&(), Some(namespace)))
                    .create(&PostParams::default(), body)
                    .map_err(kube::Error::BuildRequest)
            });
        match self.send(request, first).await {
            Ok(()) => {}
            // Written already, by an attempt whose answer was lost.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => {
                tracing::warn!(
                    reason = event.reason.as_deref().unwrap_or_default(),
                    error = %crate::kube_client::error_text(&err),
                    "cannot write event"
                );
            }
        }
    }

    /// Sends `request`, the first time at `first`, the instant its token was reserved for, and
    /// again while it fails in a way worth another try, up to [`WRITE_ATTEMPTS`] times, each
    /// time with a token of its own. Every attempt is marked [`Reserved`], so the client's
    /// bucket takes no second token for it.
    async fn send(
        &self,
        request: Result<http::Request<Vec<u8>>, kube::Error>,
        first: Instant,
    ) -> Result<(), kube::Error> {
        let request = request?;
        let mut at = first;
        let mut attempt = 1;
        loop {
            let mut marked = request.clone();
            marked.extensions_mut().insert(Reserved);
            // Only when there is a wait: a timer, even one already due, fires at the time
            // driver's next tick (a millisecond), which would pace every write.
            if at > Instant::now() {
                tokio::time::sleep_until(at).await;
            }
            match self.client.request::<Event>(marked).await {
                Ok(_) => return Ok(()),
                Err(err) if attempt < WRITE_ATTEMPTS && retryable(&err) => {
                    tokio::time::sleep(WRITE_RETRY_DELAY).await;
                    at = self.bucket.reserve();
                    attempt += 1;
                }
                Err(err) => return Err(err),
            }
        }
    }
}

/// Server errors, throttling and transport failures are worth another try; other 4xx are not.
fn retryable(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

#[cfg(test)]
mod tests;
