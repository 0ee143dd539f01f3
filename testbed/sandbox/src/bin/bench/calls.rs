//! Sending one API call per object "at once", the way a controller-manager burst arrives, and
//! noting when each returned (where the bench's latency clocks start).

use std::collections::HashMap;
use std::future::Future;

use futures::{StreamExt as _, TryStreamExt as _};
use tokio::time::Instant;

/// How many API requests the bench itself keeps in flight: enough that the objects arrive "at
/// once" for the sidecar, few enough not to starve it of CPU on a small machine.
const CLIENT_CONCURRENCY: usize = 32;

/// Runs `call(i)` for `i` in `1..=count`, [`CLIENT_CONCURRENCY`] at a time. Each call returns
/// the name of its object; the map gives the moment each returned.
pub(crate) async fn at_once<F, Fut>(
    count: usize,
    call: F,
) -> anyhow::Result<HashMap<String, Instant>>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<String>>,
{
    futures::stream::iter(1..=count)
        .map(|i| {
            let call = call(i);
            async move { Ok((call.await?, Instant::now())) }
        })
        .buffer_unordered(CLIENT_CONCURRENCY)
        .try_collect()
        .await
}
