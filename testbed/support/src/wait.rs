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
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
