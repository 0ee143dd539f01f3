//! A work queue with client-go `workqueue` semantics and upstream's per-item exponential
//! backoff, instrumented with the `workqueue_*` metrics.
//!
//! The queue every controller sidecar processes its objects from, as upstream's controllers
//! use client-go's workqueue. Why not kube-runtime's `Controller`: it reconciles objects it
//! finds in its store, so an object deleted while its CSI call is in flight or in backoff
//! silently drops out (the volume leak of external-provisioner #486/#1469 that we must not
//! have), it keys by name where upstream keys claims by UID, and it has no per-item failure
//! count and no `workqueue_*` series for the dashboards.
//!
//! Semantics (client-go `Type` + `delayingType` + `ItemExponentialFailureRateLimiter`):
//! * an item is queued at most once; adding an item that is being processed marks it dirty and
//!   it is queued again when [`WorkQueue::done`] is called, so one item is never processed by
//!   two workers at once;
//! * [`WorkQueue::add_after`] keeps only the earliest pending time per item;
//! * [`WorkQueue::add_rate_limited`] waits `start * 2^failures`, capped at `max`, and counts a
//!   retry; [`WorkQueue::forget`] resets the count.
//!
//! ```
//! use std::time::Duration;
//! use csi_common::workqueue::WorkQueue;
//! use csi_common::workqueue::metrics::QueueMetrics;
//!
//! # async fn example() {
//! let (queue, delays) = WorkQueue::new(
//!     Duration::from_secs(1),
//!     Duration::from_mins(5),
//!     QueueMetrics::unregistered("claims"),
//! );
//! tokio::spawn(delays); // moves delayed and rate-limited items into the queue when due
//! queue.add("default/claim-1".to_owned());
//! while let Some(key) = queue.get().await {
//!     let failed = false; // reconcile `key` here
//!     if failed {
//!         queue.add_rate_limited(key.clone()); // retried after 1 s, 2 s, 4 s, … up to 5 min
//!     } else {
//!         queue.forget(&key);
//!     }
//!     queue.done(&key);
//!     # queue.shut_down();
//! }
//! # }
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub mod metrics;

use self::metrics::QueueMetrics;

/// Per-item exponential failure backoff (client-go `ItemExponentialFailureRateLimiter`).
#[derive(Debug)]
pub struct Backoff<K> {
    start: Duration,
    max: Duration,
    failures: HashMap<K, u32>,
}

impl<K: Eq + Hash + Clone> Backoff<K> {
    /// Delays start at `start` and double per failure up to `max`.
    pub fn new(start: Duration, max: Duration) -> Self {
        Self {
            start,
            max,
            failures: HashMap::new(),
        }
    }

    /// Counts one more failure of `key` and returns how long to wait before retrying it.
    pub fn next_delay(&mut self, key: &K) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let exponent = *failures;
        *failures = failures.saturating_add(1);
        // 2^exponent overflows long before any sane cap is reached; saturate like Go's float math.
        let factor = 2u32.checked_pow(exponent).unwrap_or(u32::MAX);
        self.start
            .checked_mul(factor)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// How many failures of `key` were counted since the last [`Backoff::forget`].
    pub fn failures(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// Resets the failure count of `key` (after a success, or when the object is gone).
    pub fn forget(&mut self, key: &K) {
        self.failures.remove(key);
        shrink_map(&mut self.failures);
    }
}

/// Below this capacity a drained table or queue keeps its memory: shrinking it would cost more
/// allocations than the few KiB it holds.
const SHRINK_FLOOR: usize = 256;

/// Whether a container of `capacity` holding `len` items should give memory back: at most a
/// quarter full and above [`SHRINK_FLOOR`]. Shrinking to twice `len` leaves room to grow before
/// the next reallocation, so an add after a shrink never reallocates at once and the cost of
/// the shrinks stays amortised as in a growable array.
///
/// Why at all: a burst (a fresh start with thousands of objects, every object queued once)
/// grows the queue and its tables to the burst's size, and neither `VecDeque` nor `HashMap`
/// ever shrinks by itself, so without this a sidecar keeps the burst's tables for its whole
/// life: about 1.6 MB for 5,000 claims and 5,000 PVs (docs/bench.md).
fn should_shrink(len: usize, capacity: usize) -> bool {
    capacity > SHRINK_FLOOR && len <= capacity / 4
}

fn shrink_map<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if should_shrink(map.len(), map.capacity()) {
        map.shrink_to(map.len().saturating_mul(2));
    }
}

fn shrink_deque<K>(queue: &mut VecDeque<K>) {
    if should_shrink(queue.len(), queue.capacity()) {
        queue.shrink_to(queue.len().saturating_mul(2));
    }
}

#[derive(Debug)]
struct State<K> {
    queue: VecDeque<K>,
    /// Items waiting in `queue` or to be re-queued after processing, with the time they were
    /// added (for `workqueue_queue_duration_seconds`).
    dirty: HashMap<K, Instant>,
    /// Items handed to a worker and not yet `done`, with the time processing started.
    processing: HashMap<K, Instant>,
    /// Delayed adds ordered by due time; the sequence number keeps equal times distinct.
    delayed: BTreeMap<(Instant, u64), K>,
    delayed_index: HashMap<K, (Instant, u64)>,
    seq: u64,
    backoff: Backoff<K>,
    shut_down: bool,
}

impl<K: Eq + Hash> State<K> {
    /// Gives back the memory of a burst once it is processed (see [`should_shrink`]).
    fn shrink_when_drained(&mut self) {
        shrink_deque(&mut self.queue);
        shrink_map(&mut self.dirty);
        shrink_map(&mut self.processing);
        shrink_map(&mut self.delayed_index);
    }
}

/// The queue; share it as `Arc<WorkQueue<K>>` between the event handlers and the workers.
#[derive(Debug)]
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    /// Wakes one waiting worker per queued item.
    ready: Notify,
    /// Wakes the delay task when an earlier due time was added or on shutdown.
    delay_changed: Notify,
    metrics: QueueMetrics,
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// A queue whose rate-limited adds back off from `start` to `max`, and the task that moves
    /// delayed items into the queue when they are due (spawn it; it ends after
    /// [`WorkQueue::shut_down`]).
    pub fn new(
        start: Duration,
        max: Duration,
        metrics: QueueMetrics,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let queue = Arc::new(Self {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashMap::new(),
                processing: HashMap::new(),
                delayed: BTreeMap::new(),
                delayed_index: HashMap::new(),
                seq: 0,
                backoff: Backoff::new(start, max),
                shut_down: false,
            }),
            ready: Notify::new(),
            delay_changed: Notify::new(),
            metrics,
        });
        let delays = Arc::clone(&queue).run_delays();
        (queue, delays)
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // Every critical section leaves the state consistent before it can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `key` now (client-go `Add`).
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        if self.add_locked(&mut state, key) {
            drop(state);
            self.ready.notify_one();
        }
    }

    /// Returns whether a worker should be woken.
    fn add_locked(&self, state: &mut State<K>, key: K) -> bool {
        if state.shut_down || state.dirty.contains_key(&key) {
            return false;
        }
        self.metrics.adds.inc();
        state.dirty.insert(key.clone(), Instant::now());
        if state.processing.contains_key(&key) {
            return false;
        }
        state.queue.push_back(key);
        self.metrics.depth.inc();
        true
    }

    /// Queues `key` after `delay` (client-go `AddAfter`); an earlier pending time wins.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let due = Instant::now() + delay;
        let mut state = self.lock();
        if state.shut_down {
            return;
        }
        if let Some(&(existing, seq)) = state.delayed_index.get(&key) {
            if existing <= due {
                return;
            }
            state.delayed.remove(&(existing, seq));
        }
        state.seq += 1;
        let slot = (due, state.seq);
        let earliest = state
            .delayed
            .keys()
            .next()
            .is_none_or(|first| slot < *first);
        state.delayed.insert(slot, key.clone());
        state.delayed_index.insert(key, slot);
        drop(state);
        if earliest {
            self.delay_changed.notify_one();
        }
    }

    /// Queues `key` after its backoff delay and counts a retry (client-go `AddRateLimited`).
    /// Returns the delay chosen.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let delay = self.lock().backoff.next_delay(&key);
        self.metrics.retries.inc();
        self.add_after(key, delay);
        delay
    }

    /// Resets the backoff of `key` (client-go `Forget`).
    pub fn forget(&self, key: &K) {
        self.lock().backoff.forget(key);
    }

    /// Failures counted for `key` since the last [`WorkQueue::forget`].
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().backoff.failures(key)
    }

    /// Waits for the next item; `None` once the queue is shut down.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.lock();
                if state.shut_down {
                    return None;
                }
                if let Some(key) = state.queue.pop_front() {
                    self.metrics.depth.dec();
                    let now = Instant::now();
                    if let Some(added) = state.dirty.remove(&key) {
                        self.metrics
                            .queue_duration
                            .observe(now.saturating_duration_since(added).as_secs_f64());
                    }
                    state.processing.insert(key.clone(), now);
                    let more = !state.queue.is_empty();
                    drop(state);
                    if more {
                        // Another item is waiting: make sure some other worker picks it up
                        // even if this wake-up consumed the only permit.
                        self.ready.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// Marks `key` as processed; if it was added meanwhile it is queued again (client-go `Done`).
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        if let Some(started) = state.processing.remove(key) {
            self.metrics
                .work_duration
                .observe(started.elapsed().as_secs_f64());
        }
        state.shrink_when_drained();
        if state.dirty.contains_key(key) && !state.shut_down {
            state.queue.push_back(key.clone());
            self.metrics.depth.inc();
            drop(state);
            self.ready.notify_one();
        }
    }

    /// Stops handing out items; waiting workers and the delay task return.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.ready.notify_waiters();
        self.delay_changed.notify_one();
    }

    /// Items queued and not yet handed out.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether nothing is queued right now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacities of the queue and its tables: (queue, dirty, processing).
    #[cfg(test)]
    fn capacities(&self) -> (usize, usize, usize) {
        let state = self.lock();
        (
            state.queue.capacity(),
            state.dirty.capacity(),
            state.processing.capacity(),
        )
    }

    /// (sum of seconds items have been processing, longest single processing time) for the
    /// `workqueue_unfinished_work_seconds` / `..._longest_running_processor_seconds` gauges.
    pub fn processing_seconds(&self) -> (f64, f64) {
        let state = self.lock();
        let now = Instant::now();
        state
            .processing
            .values()
            .fold((0.0, 0.0), |(sum, longest), started| {
                let secs = now.saturating_duration_since(*started).as_secs_f64();
                (sum + secs, f64::max(longest, secs))
            })
    }

    /// Moves delayed items into the queue when they are due, until shutdown.
    async fn run_delays(self: Arc<Self>) {
        loop {
            let changed = self.delay_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let next = {
                let mut state = self.lock();
                if state.shut_down {
                    return;
                }
                let now = Instant::now();
                let mut woke = 0usize;
                while let Some(entry) = state.delayed.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let key = entry.remove();
                    state.delayed_index.remove(&key);
                    if self.add_locked(&mut state, key) {
                        woke += 1;
                    }
                }
                let next = state.delayed.keys().next().map(|(due, _)| *due);
                drop(state);
                for _ in 0..woke {
                    self.ready.notify_one();
                }
                next
            };
            match next {
                Some(due) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due) => {}
                        () = &mut changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

#[cfg(test)]
mod tests;
