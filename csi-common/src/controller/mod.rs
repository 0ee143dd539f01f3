//! The controller runtime every controller sidecar shares: named [`WorkQueue`]s, the workers that
//! drain them, and the [`Outcome`] a sync returns.
//!
//! Rust counterpart of the `processNextWorkItem` loop every upstream controller writes by hand
//! around client-go's workqueue (external-attacher `csi_handler`, external-resizer
//! `controller`, sig-storage-lib-external-provisioner `ProvisionController`). A sidecar writes
//! only its sync functions: one per queue, taking a key and returning what should happen to it
//! next ([`Outcome`], the decision value kube-runtime calls `Action`). [`Workers`] does the rest:
//!
//! * [`Workers::queue`] makes a queue with its `workqueue_*` series (label `name`) and the
//!   in-progress gauges, and runs the task that re-adds delayed items when they are due;
//! * [`Workers::spawn`] starts `count` workers on a queue (`--worker-threads`); each takes a
//!   key, runs the sync, [applies](Outcome::apply) the outcome and marks the key done, so one key
//!   is never synced by two workers at once;
//! * [`Workers::run_until`] returns when `stop` resolves, after every queue is shut down and
//!   every worker has finished the item in hand, or with an error as soon as a worker panics.
//!
//! ```
//! use std::time::Duration;
//!
//! use csi_common::controller::{Outcome, Workers};
//! use csi_common::workqueue::metrics::WorkQueueMetrics;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let registry = prometheus::Registry::new();
//! let mut workers = Workers::new(WorkQueueMetrics::register(&registry).unwrap());
//! let attachments = workers.queue::<String>(
//!     "csi-attacher-va",
//!     Duration::from_secs(1), // --retry-interval-start
//!     Duration::from_mins(5), // --retry-interval-max
//! );
//! // Informer event handlers add keys; here one by hand.
//! attachments.add("csi-0123".to_owned());
//!
//! let (synced, mut seen) = tokio::sync::mpsc::unbounded_channel();
//! let context = std::sync::Arc::new(synced); // what every sync needs: clients, caches, ...
//! workers.spawn(&attachments, 10, &context, |synced, name: String| async move {
//!     // Decide, make the CSI call, write the object; then say what comes next.
//!     synced.send(name).unwrap();
//!     Outcome::Done
//! });
//! assert_eq!(seen.recv().await.as_deref(), Some("csi-0123"));
//!
//! // SIGTERM, a lost driver connection or lost leadership: workers finish the item in hand.
//! workers.run_until(async {}).await.unwrap();
//! # }
//! ```

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::{JoinError, JoinSet};

use crate::workqueue::WorkQueue;
use crate::workqueue::metrics::{ProcessingProbe, WorkQueueMetrics};

/// What should happen to a key after its sync (kube-runtime `Action`, client-go's
/// `Forget`/`AddRateLimited`/`AddAfter`/`Add`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done, or waiting for the object to change: the key's backoff is forgotten and it comes
    /// back only when an event handler adds it again.
    Done,
    /// Failed: retry after the key's exponential backoff (start × 2^failures, capped at max),
    /// counted in `workqueue_retries_total`.
    Retry,
    /// Retry after exactly this long (for example a window in which the driver said the
    /// request is infeasible); the backoff is neither reset nor advanced.
    RetryAfter(Duration),
    /// Sync again as soon as a worker is free (a step that needs another pass, such as a
    /// finalizer just added); the backoff is neither reset nor advanced.
    Requeue,
}

impl Outcome {
    /// Applies this outcome to `key`, which a worker took from `queue` and has just synced.
    /// The caller still marks the key [done](WorkQueue::done); a re-add made here waits until
    /// then, so the key is never synced twice at once.
    pub fn apply<K>(self, queue: &WorkQueue<K>, key: &K)
    where
        K: Clone + Eq + Hash + Send + Sync + Debug + 'static,
    {
        match self {
            Self::Done => queue.forget(key),
            Self::Retry => {
                let delay = queue.add_rate_limited(key.clone());
                tracing::debug!(item = ?key, ?delay, "retrying after a failure");
            }
            Self::RetryAfter(delay) => queue.add_after(key.clone(), delay),
            Self::Requeue => queue.add(key.clone()),
        }
    }
}

/// One worker of `queue`: until the queue shuts down, takes the next key, runs `sync` on it,
/// [applies](Outcome::apply) the outcome and marks the key done.
///
/// [`Workers::spawn`] runs `count` of these; call it directly only to drive a queue by hand.
pub async fn worker<K, F, Fut>(queue: Arc<WorkQueue<K>>, sync: F)
where
    K: Clone + Eq + Hash + Send + Sync + Debug + 'static,
    F: Fn(K) -> Fut,
    Fut: Future<Output = Outcome>,
{
    while let Some(key) = queue.get().await {
        // Boxed, so a worker waiting for a key holds a few hundred bytes rather than the whole
        // state of a sync (its CSI call, API requests and Events inline: 4.6 KB per volume
        // worker and 14.6 KB per claim worker in csi-provisioner, which runs 100 of each by
        // default; docs/bench.md, "Memory per cached object").
        let outcome = Box::pin(sync(key.clone())).await;
        outcome.apply(&queue, &key);
        queue.done(&key);
    }
}

/// A controller worker stopped by itself.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A worker task panicked; the process cannot go on with fewer workers than configured.
    #[error("a controller worker stopped unexpectedly")]
    Worker(#[source] JoinError),
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A queue of any key type, as far as shutting it down goes.
trait ShutDown: Send + Sync {
    fn shut_down(&self);
}

impl<K> ShutDown for WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn shut_down(&self) {
        WorkQueue::shut_down(self);
    }
}

/// The work queues of one controller process and the workers that drain them.
pub struct Workers {
    metrics: WorkQueueMetrics,
    queues: Vec<Arc<dyn ShutDown>>,
    /// One task per queue that moves delayed items into it when they are due.
    delays: JoinSet<()>,
    tasks: JoinSet<()>,
}

impl Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("queues", &self.queues.len())
            .field("workers", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl Workers {
    /// No queues yet; every queue made by [`Workers::queue`] reports into `metrics`.
    pub fn new(metrics: WorkQueueMetrics) -> Self {
        Self {
            metrics,
            queues: Vec::new(),
            delays: JoinSet::new(),
            tasks: JoinSet::new(),
        }
    }

    /// A new queue named `name` (the `name` label of its `workqueue_*` series, upstream's queue
    /// name) whose failed keys back off from `start` to `max`. Must be called inside a tokio
    /// runtime: its delay task starts at once.
    pub fn queue<K>(&mut self, name: &str, start: Duration, max: Duration) -> Arc<WorkQueue<K>>
    where
        K: Clone + Eq + Hash + Send + Sync + 'static,
    {
        let (queue, delays) = WorkQueue::new(start, max, self.metrics.queue(name));
        self.delays.spawn(delays);
        self.metrics
            .observe_processing(name, processing_probe(&queue));
        self.queues.push(Arc::clone(&queue) as Arc<dyn ShutDown>);
        queue
    }

    /// Starts `count` workers that sync the keys of `queue` with `sync` (see [`worker`]), each
    /// call with a clone of `context` (the controller's shared state) and of the key.
    pub fn spawn<S, K, F, Fut>(
        &mut self,
        queue: &Arc<WorkQueue<K>>,
        count: usize,
        context: &Arc<S>,
        sync: F,
    ) where
        S: Send + Sync + 'static,
        K: Clone + Eq + Hash + Send + Sync + Debug + 'static,
        F: Fn(Arc<S>, K) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        for _ in 0..count {
            let context = Arc::clone(context);
            let sync = sync.clone();
            self.tasks.spawn(worker(Arc::clone(queue), move |key| {
                sync(Arc::clone(&context), key)
            }));
        }
    }

    /// Runs until `stop` resolves or a worker panics, then [shuts down](Workers::shut_down).
    ///
    /// # Errors
    /// [`Error::Worker`] when a worker panicked (the others still finish their item first).
    pub async fn run_until(mut self, stop: impl Future<Output = ()>) -> Result<()> {
        let mut stop = std::pin::pin!(stop);
        let result = loop {
            tokio::select! {
                () = &mut stop => break Ok(()),
                Some(joined) = self.tasks.join_next() => {
                    if let Err(err) = joined {
                        break Err(Error::Worker(err));
                    }
                }
            }
        };
        self.shut_down().await;
        result
    }

    /// Shuts every queue down and waits for the workers: each finishes the item in hand (its
    /// CSI call is bounded by the sidecar's `--timeout`) and returns. A worker that panics
    /// meanwhile is logged.
    pub async fn shut_down(mut self) {
        for queue in &self.queues {
            queue.shut_down();
        }
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(err) = joined
                && err.is_panic()
            {
                tracing::error!(error = %err, "worker panicked");
            }
        }
        self.delays.shutdown().await;
    }
}

/// `queue`'s in-progress times at scrape time, for as long as the queue exists.
fn processing_probe<K>(queue: &Arc<WorkQueue<K>>) -> ProcessingProbe
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    let queue = Arc::downgrade(queue);
    Arc::new(move || {
        queue
            .upgrade()
            .map_or((0.0, 0.0), |q| q.processing_seconds())
    })
}

#[cfg(test)]
mod tests;
