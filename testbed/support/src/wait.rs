//! Waiting for a positive signal in tests: poll a check until it produces a value.
//!
//! Tests wait for something to happen (an object, an event, a metric, a log line), never sleep
//! and then assert that nothing happened. Every binary and controller test polls through this
//! one function.

use std::time::Duration;

use tokio::time::Instant;

/// How often [`eventually`] runs its check.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Runs `check` every 20 ms until it returns `Some`, and returns that value.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let mut calls = 0;
/// let third = testbed_support::wait::eventually("the third call", Duration::from_secs(5), async || {
///     calls += 1;
///     (calls == 3).then_some(calls)
/// })
/// .await;
/// assert_eq!(third, 3);
/// # }
/// ```
///
/// # Panics
/// When `timeout` passes first, naming `what` (a test helper: the failing test reports it).
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    within(timeout, check)
        .await
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// As [`eventually`], but `None` when `timeout` passes first: for a test that goes on to its
/// next case and reports every case that timed out at the end, rather than stopping at the
/// first.
pub async fn within<T>(timeout: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
