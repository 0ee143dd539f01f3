//! A watch in its own task that hands the bench only the events it cares about, each stamped
//! with the moment it arrived (where the bench's latency clocks stop).

use std::fmt::Debug;

use futures::StreamExt as _;
use kube::Api;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One watch event or error, as `translate` receives it.
pub(crate) type Delivered<K> = Result<watcher::Event<K>, watcher::Error>;

/// Watches `api` and sends what `translate` makes of each delivery (`None`: skip it). The
/// task ends when the receiver is dropped; abort it to stop earlier.
pub(crate) fn spawn<K, M>(
    api: Api<K>,
    translate: impl Fn(Delivered<K>, Instant) -> Option<M> + Send + 'static,
) -> (mpsc::UnboundedReceiver<M>, JoinHandle<()>)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    M: Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(event) = stream.next().await {
            if let Some(message) = translate(event, Instant::now())
                && tx.send(message).is_err()
            {
                return;
            }
        }
    });
    (rx, task)
}
