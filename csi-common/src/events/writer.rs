//! The writer task: every event goes through the [`Correlator`] in the order it was recorded,
//! and the resulting writes go to the API server several at a time.
//!
//! client-go's broadcaster writes one Event at a time (one goroutine drains its queue), so a
//! sidecar that records events faster than one round trip each fills the 1000-slot queue and
//! drops the rest: 3.8-4.9 k of 10 k in `bench` at `--kube-api-qps=5000` when this writer did
//! the same. Here up to [`CONCURRENT_WRITES`] writes are in flight, so only the API client's
//! token bucket (shared with the controllers, as in client-go) bounds them. Writes of one Event
//! (its creation, then the patches counting its repeats) still reach the API server one after
//! another, in order: a patch that overtook an earlier one would set an older count.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Action, Correlator, NewEvent};

/// How many Event writes may be in flight at once. More only queues requests behind the token
/// bucket, where each waiting write takes a token a controller's write might have had.
const CONCURRENT_WRITES: usize = 8;
/// How often a failed write is tried. client-go tries 12 times, 10 s apart; this keeps a write
/// the API server keeps refusing from holding one of the [`CONCURRENT_WRITES`] for two minutes.
const WRITE_ATTEMPTS: u32 = 3;
const WRITE_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Which writes may start: at most [`CONCURRENT_WRITES`], one per Event. An action for an Event
/// whose write is in flight waits for it; only the newest such action waits, since each carries
/// the Event's whole state (a later patch's count, `lastTimestamp` and message supersede an
/// earlier one's, and its fallback is the whole Event).
#[derive(Debug, Default)]
struct Writes {
    /// `namespace/name` of each Event with a write in flight, and the action waiting for it.
    in_flight: HashMap<String, Option<Action>>,
}

impl Writes {
    /// Whether another Event's write may start.
    fn has_room(&self) -> bool {
        self.in_flight.len() < CONCURRENT_WRITES
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

/// Correlates events as they arrive and writes them until every sender is gone and every
/// write has ended.
pub(super) async fn write_events(
    client: Client,
    component: String,
    mut rx: mpsc::Receiver<NewEvent>,
) {
    let mut correlator = Correlator::new(component);
    let mut writes = Writes::default();
    let mut running = FuturesUnordered::new();
    let start = |key: String, action: Action| {
        let client = client.clone();
        async move {
            write(&client, action).await;
            key
        }
    };
    let mut open = true;
    loop {
        tokio::select! {
            // No room: the events wait in the channel, which drops what does not fit.
            event = rx.recv(), if open && writes.has_room() => {
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

async fn write(client: &Client, action: Action) {
    match action {
        Action::Drop => {}
        Action::Create(event) => create(client, *event).await,
        Action::Patch {
            namespace,
            name,
            patch,
            fallback,
        } => {
            let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
            for attempt in 1..=WRITE_ATTEMPTS {
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    Ok(_) => return,
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        create(client, *fallback).await;
                        return;
                    }
                    Err(err) if attempt < WRITE_ATTEMPTS && retryable(&err) => {
                        tokio::time::sleep(WRITE_RETRY_DELAY).await;
                    }
                    Err(err) => {
                        tracing::warn!(event = %name, error = %crate::kube_client::error_text(&err), "cannot update event");
                        return;
                    }
                }
            }
        }
    }
}

async fn create(client: &Client, event: Event) {
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    for attempt in 1..=WRITE_ATTEMPTS {
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => return,
            Err(err) if attempt < WRITE_ATTEMPTS && retryable(&err) => {
                tokio::time::sleep(WRITE_RETRY_DELAY).await;
            }
            Err(err) => {
                tracing::warn!(
                    reason = event.reason.as_deref().unwrap_or_default(),
                    error = %crate::kube_client::error_text(&err),
                    "cannot write event"
                );
                return;
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
