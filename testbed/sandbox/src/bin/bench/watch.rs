//! A watch in its own task that hands the bench only the events it cares about, each stamped
//! with the moment it arrived (where the bench's latency clocks stop).

use std::collections::HashMap;
use std::fmt::Debug;
use std::time::Duration;

use anyhow::bail;
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

/// What the first deliveries of a bench watch say: [`wait_started`] waits for `Ready`.
pub(crate) enum Initial {
    /// The initial list is done.
    Ready,
    /// The watch failed.
    Failed(String),
    /// Anything else (an object of the initial list).
    Other,
}

/// Waits until the watch behind `rx` has delivered its initial list and its watch request has
/// reached the API server (`watches()` passed `watches_before`), so neither lands in a phase's
/// request counts. `what` names the watched kind in errors.
pub(crate) async fn wait_started<M>(
    rx: &mut mpsc::UnboundedReceiver<M>,
    what: &str,
    watches: impl Fn() -> usize,
    watches_before: usize,
    initial: impl Fn(&M) -> Initial,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(message)) => match initial(&message) {
                Initial::Ready => break,
                Initial::Failed(e) => bail!("the {what} watch failed: {e}"),
                Initial::Other => {}
            },
            Ok(None) | Err(_) => bail!("the {what} watch did not start within 30 s"),
        }
    }
    while watches() <= watches_before {
        if Instant::now() >= deadline {
            bail!("the {what} watch request did not arrive within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Reads `rx` until `pick` has named `wanted` different objects (each with the moment it was
/// seen done), or until the deadline.
pub(crate) async fn collect<M>(
    rx: &mut mpsc::UnboundedReceiver<M>,
    wanted: usize,
    deadline: Instant,
    mut pick: impl FnMut(M) -> Option<(String, Instant)>,
) -> anyhow::Result<HashMap<String, Instant>> {
    let mut done: HashMap<String, Instant> = HashMap::new();
    while done.len() < wanted {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(message)) => {
                if let Some((name, at)) = pick(message) {
                    done.entry(name).or_insert(at);
                }
            }
            Ok(None) => bail!("the watch ended"),
            Err(_) => break,
        }
    }
    Ok(done)
}
