//! WATCH: newline-delimited JSON events over a chunked HTTP/1.1 body, one event per chunk
//! (fixtures b1-b5, c1, c4, d1-d4).
//!
//! - no resourceVersion or `0`: synthetic ADDED events for the current objects, then (with
//!   `allowWatchBookmarks`) a BOOKMARK annotated `k8s.io/initial-events-end`;
//! - `sendInitialEvents=true` (requires `resourceVersionMatch=NotOlderThan`, else 422): the same,
//!   the streaming-list protocol of client-go 0.36 informers and kube-rs `streaming_lists()`;
//! - `resourceVersion=N`: the history after N, then live events; N older than the retained
//!   history answers HTTP 200 with one ERROR event (410 Expired) and ends;
//! - at `timeoutSeconds` the body ends with no final event; [`super::Faults::drop_watches`]
//!   ends every stream at once.
//!
//! Periodic bookmarks: one two seconds before the deadline of watches longer than three seconds
//! (what the fixtures show) and then every `bookmark_interval`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use super::Shared;
use super::encode;
use super::list::{ReadRv, parse_rv, selectors};
use super::render;
use super::request::{Format, ResourceRequest};
use super::requests;
use super::resources::{ResourceInfo, View};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{self, Encoded, EventType, Record};
use super::validation::FieldError;

/// Default watch length when the client sends no `timeoutSeconds` (upstream picks 30-60 min).
const DEFAULT_TIMEOUT: Duration = Duration::from_mins(30);

struct Filter {
    info: &'static ResourceInfo,
    bucket: &'static str,
    prefix: String,
    labels: LabelSelector,
    fields: FieldSelector,
    format: Format,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    fn event_line(&self, event: &str, stored: &Value) -> Bytes {
        let view = render::to_view(self.info, stored);
        let object = match self.format {
            Format::Metadata => serde_json::to_vec(&render::partial(&view)).unwrap_or_default(),
            Format::Object | Format::Table => encode::object_bytes(self.info, &view),
        };
        line(event, &object)
    }

    /// The event line of a stored object (a live record's or an initial event's): encoded once
    /// for all watchers that want the stored resource's own representation (the events.k8s.io
    /// view and metadata-only watches encode their own). The first watcher's resource info
    /// orders the keys for all: the one bucket served at two versions with that view
    /// (CSIStorageCapacity v1 and v1beta1) has the same key order in both.
    fn shared_line(&self, event: &str, object: &Value, json: &Encoded) -> Bytes {
        let shared =
            self.info.view == View::Native && matches!(self.format, Format::Object | Format::Table);
        if !shared {
            return self.event_line(event, object);
        }
        let bytes = json.get_or_init(|| encode::object_bytes(self.info, object).into());
        line(event, bytes)
    }

    /// What a live record means for this watcher (label changes turn MODIFIED into ADDED or
    /// DELETED, as upstream's filtered watch does).
    fn translate(&self, record: &Record) -> Option<Bytes> {
        if record.bucket != self.bucket || !record.key.starts_with(&self.prefix) {
            return None;
        }
        let now = self.matches(&record.object);
        let before = record.prev.as_deref().is_some_and(|p| self.matches(p));
        let event = match (record.event, before, now) {
            (EventType::Added, _, true) | (EventType::Modified, false, true) => EventType::Added,
            (EventType::Modified, true, true) => EventType::Modified,
            (EventType::Modified, true, false) | (EventType::Deleted, _, true) => {
                EventType::Deleted
            }
            _ => return None,
        };
        Some(self.shared_line(event.as_str(), &record.object, &record.json))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = match self.format {
            Format::Metadata => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
            }
            Format::Object | Format::Table => {
                let mut o = self.info.zero_value();
                o["kind"] = json!(self.info.kind);
                o["apiVersion"] = json!(self.info.api_version());
                o["metadata"] = metadata;
                o
            }
        };
        let bytes = match self.format {
            Format::Metadata => serde_json::to_vec(&object).unwrap_or_default(),
            Format::Object | Format::Table => encode::object_bytes(self.info, &object),
        };
        line("BOOKMARK", &bytes)
    }
}

/// One watch event line: `{"type":..,"object":..}` and a newline.
fn line(event: &str, object: &[u8]) -> Bytes {
    let mut line = encode::watch_event_bytes(event, object);
    line.push(b'\n');
    Bytes::from(line)
}

fn error_line(err: &ApiError) -> Bytes {
    line("ERROR", &super::status::status_bytes(&err.to_status()))
}

fn too_old(requested: u64, oldest: u64) -> ApiError {
    let mut err = ApiError::list_too_old();
    err.message = format!("too old resource version: {requested} ({oldest})");
    err
}

/// The option combinations upstream rejects with 422 (fixture d3).
fn check_options(q: &super::request::Query) -> Result<(), ApiError> {
    let send_initial = q.flag("sendInitialEvents");
    let rv_match = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    let why = if send_initial == Some(true) && rv_match != Some("NotOlderThan") {
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    } else if rv_match.is_some() && send_initial.is_none() {
        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
    } else {
        return Ok(());
    };
    Err(ApiError::invalid_options(
        "ListOptions",
        &[FieldError::forbidden("resourceVersionMatch", why)],
    ))
}

/// GET on a collection with `watch=true`.
pub(crate) fn watch(shared: &Arc<Shared>, req: &ResourceRequest) -> Result<Response, ApiError> {
    let q = &req.query;
    check_options(q)?;
    let send_initial = q.flag("sendInitialEvents");
    let (labels, fields) = selectors(req)?;
    let rv = parse_rv(q.get("resourceVersion"))?;
    let allow_bookmarks = q.flag("allowWatchBookmarks") == Some(true);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let storage = render::storage_info(req.info);
    let filter = Filter {
        info: req.info,
        bucket: storage.bucket,
        prefix: store::prefix(req.namespace.as_deref()),
        labels,
        fields,
        format: req.format,
    };

    // Under the lock only the snapshot is taken (objects are immutable `Arc`s); the lines are
    // encoded by the watch's task as it sends them, so a start with thousands of objects
    // neither holds the store nor waits for all of them before the first is sent.
    let (start, live, start_rv) = {
        let inner = shared.store.lock();
        let live = inner.subscribe();
        let current = inner.rv();
        let snapshot = send_initial == Some(true) || matches!(rv, ReadRv::Latest | ReadRv::Any);
        let (start, start_rv) = if snapshot {
            let start = Start::Snapshot {
                objects: inner.range_encoded(filter.bucket, &filter.prefix),
                end: allow_bookmarks.then_some(current),
            };
            (start, current)
        } else if let ReadRv::At(n) = rv {
            match inner.history_after(filter.bucket, n) {
                Ok(records) => (Start::History(records), current.max(n)),
                Err(e) => (Start::Expired(too_old(n, e.oldest)), current),
            }
        } else {
            (Start::History(Vec::new()), current)
        };
        (start, live, start_rv)
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let epoch = shared.store.epoch();
    // A restart sets `down` before it drops the watches: a watch whose request passed the
    // in-process client's check before that, but that subscribes only after the drop, would
    // miss the drop and stay open through the restart; it ends here instead.
    let down = shared.down.load(Ordering::SeqCst);
    let interval = shared.config.bookmark_interval;
    let agent = req
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let open = OpenWatch::new(shared.clone(), requests::client_of(agent));
    tokio::spawn(async move {
        // Counted until the stream ends: its deadline, a dropped watch, or the client gone.
        let _open = open;
        let Some(()) = send_start(&tx, &filter, start).await else {
            return;
        };
        if !down {
            stream_live(
                tx,
                live,
                epoch,
                &filter,
                start_rv,
                timeout,
                allow_bookmarks.then_some(interval),
            )
            .await;
        }
    });

    let mut response = Response::new(Body::from_stream(ReceiverStream::new(rx)));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(response)
}

/// What a watch sends before its live events.
enum Start {
    /// The objects as ADDED events, then (with bookmarks) the initial-events-end bookmark at
    /// the snapshot's resourceVersion.
    Snapshot {
        objects: Vec<(Arc<Value>, Encoded)>,
        end: Option<u64>,
    },
    /// The history after the requested resourceVersion.
    History(Vec<Arc<Record>>),
    /// The requested resourceVersion is compacted: one ERROR event, and the watch ends.
    Expired(ApiError),
}

/// Send `start`; `None` when the client is gone or the watch ends with it.
async fn send_start(
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    filter: &Filter,
    start: Start,
) -> Option<()> {
    match start {
        Start::Snapshot { objects, end } => {
            for (object, json) in objects {
                if filter.matches(&object) {
                    let line = filter.shared_line("ADDED", &object, &json);
                    tx.send(Ok(line)).await.ok()?;
                }
            }
            if let Some(rv) = end {
                tx.send(Ok(filter.bookmark(rv, true))).await.ok()?;
            }
        }
        Start::History(records) => {
            for record in records {
                if let Some(line) = filter.translate(&record) {
                    tx.send(Ok(line)).await.ok()?;
                }
            }
        }
        Start::Expired(err) => {
            // The client may be gone already; the watch ends either way.
            let _ = tx.send(Ok(error_line(&err))).await;
            return None;
        }
    }
    Some(())
}

/// A watch being served, counted in [`super::RequestCounts::open_watches`] until dropped.
struct OpenWatch {
    shared: Arc<Shared>,
    client: String,
}

impl OpenWatch {
    fn new(shared: Arc<Shared>, client: &str) -> Self {
        shared.requests.watch_opened(client);
        Self {
            shared,
            client: client.to_owned(),
        }
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.shared.requests.watch_closed(&self.client);
    }
}

async fn stream_live(
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    mut live: broadcast::Receiver<Arc<Record>>,
    mut epoch: tokio::sync::watch::Receiver<u64>,
    filter: &Filter,
    start_rv: u64,
    timeout: Duration,
    bookmark_interval: Option<Duration>,
) {
    let start = tokio::time::Instant::now();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    // Every record up to `seen` has been looked at, so a bookmark at `seen` is truthful.
    let mut seen = start_rv;
    let mut next_bookmark = bookmark_interval.map(|every| {
        if timeout > Duration::from_secs(3) {
            (start + timeout - Duration::from_secs(2)).min(start + every)
        } else {
            start + every
        }
    });
    // One bookmark timer, reset when it fired: a new one per loop turn registered and
    // removed a timer for every record every watcher saw (a profile of the bench showed it).
    let never = start + timeout + Duration::from_secs(1);
    let bookmark = tokio::time::sleep_until(next_bookmark.unwrap_or(never));
    tokio::pin!(bookmark);
    loop {
        tokio::select! {
            () = &mut deadline => break,
            changed = epoch.changed() => { let _ = changed; break }
            () = tx.closed() => break,
            () = &mut bookmark, if next_bookmark.is_some() => {
                if tx.send(Ok(filter.bookmark(seen, false))).await.is_err() {
                    break;
                }
                next_bookmark = bookmark_interval.map(|every| tokio::time::Instant::now() + every);
                bookmark.as_mut().reset(next_bookmark.unwrap_or(never));
            }
            record = live.recv() => match record {
                Ok(record) => {
                    if record.rv <= seen {
                        continue;
                    }
                    seen = record.rv;
                    if let Some(line) = filter.translate(&record)
                        && tx.send(Ok(line)).await.is_err() {
                            break;
                        }
                }
                // A watcher too slow for the live channel is ended; the client re-watches
                // from its last resourceVersion and the history fills the gap.
                Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => break,
            },
        }
    }
}
