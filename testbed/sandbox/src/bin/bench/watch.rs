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
use testbed_cluster::apiserver::ApiServer;
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

/// What a bench watch started by [`start`] hands over.
pub(crate) enum Seen<E> {
    /// The initial list is done.
    Ready,
    /// An event the bench cares about.
    Saw(E),
    /// The watch failed (it re-lists by itself).
    Error(String),
}

/// Starts a watch on `api` (whose requests the API server counts as `resource`), handing over
/// what `translate` makes of each delivered object event, and waits until its initial list is
/// done and its watch request has reached `server`, so neither lands in a phase's request
/// counts.
pub(crate) async fn start<K, E>(
    server: &ApiServer,
    resource: &str,
    api: Api<K>,
    translate: impl Fn(watcher::Event<K>, Instant) -> Option<E> + Send + 'static,
) -> anyhow::Result<(mpsc::UnboundedReceiver<Seen<E>>, JoinHandle<()>)>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    E: Send + 'static,
{
    let what = std::any::type_name::<K>()
        .rsplit("::")
        .next()
        .unwrap_or("object");
    let watches = || server.requests().get("watch", resource);
    let watches_before = watches();
    let (mut rx, task) = spawn(api, move |event, now| match event {
        Ok(watcher::Event::InitDone) => Some(Seen::Ready),
        Ok(event) => translate(event, now).map(Seen::Saw),
        Err(err) => {
            tracing::warn!(error = %err, "{what} watch error");
            Some(Seen::Error(err.to_string()))
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Seen::Ready)) => break,
            Ok(Some(Seen::Error(e))) => bail!("the {what} watch failed: {e}"),
            Ok(Some(Seen::Saw(_))) => {}
            Ok(None) | Err(_) => bail!("the {what} watch did not start within 30 s"),
        }
    }
    while watches() <= watches_before {
        if Instant::now() >= deadline {
            bail!("the {what} watch request did not arrive within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((rx, task))
}

/// Reads `rx` until `pick` has named `wanted` different objects (each with the moment it was
/// seen done), or until the deadline.
pub(crate) async fn collect<E>(
    rx: &mut mpsc::UnboundedReceiver<Seen<E>>,
    wanted: usize,
    deadline: Instant,
    mut pick: impl FnMut(E) -> Option<(String, Instant)>,
) -> anyhow::Result<HashMap<String, Instant>> {
    let mut done: HashMap<String, Instant> = HashMap::new();
    while done.len() < wanted {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Seen::Saw(event))) => {
                if let Some((name, at)) = pick(event) {
                    done.entry(name).or_insert(at);
                }
            }
            Ok(Some(Seen::Ready | Seen::Error(_))) => {}
            Ok(None) => bail!("the watch ended"),
            Err(_) => break,
        }
    }
    Ok(done)
}
