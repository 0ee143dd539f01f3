//! Fault injection for reliability tests: fail the next N requests matching a verb and
//! resource with a chosen HTTP status, carry them out and lose their answers, carry them out
//! and hold their answers back, add latency to every request, end every open watch (as an
//! apiserver restart does) and compact the history (so resumed watches get 410 Expired).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::store::Store;

#[derive(Debug, Clone)]
struct FailRule {
    verb: String,
    resource: String,
    code: u16,
    /// Matching requests to let through before failing any.
    passed: usize,
    remaining: usize,
}

/// Requests to carry out whose answer is then lost.
#[derive(Debug, Clone)]
struct LoseRule {
    verb: String,
    resource: String,
    remaining: usize,
}

/// Requests to carry out whose answer waits until its [`HeldAnswers`] is released.
#[derive(Debug, Clone)]
struct HoldRule {
    verb: String,
    resource: String,
    remaining: usize,
    released: tokio::sync::watch::Receiver<bool>,
}

#[derive(Debug, Default)]
struct FaultState {
    rules: Vec<FailRule>,
    lost: Vec<LoseRule>,
    held: Vec<HoldRule>,
    latency: Duration,
}

/// The answers held back by [`Faults::hold_answers`]: they go out when this is released or
/// dropped.
#[derive(Debug)]
pub struct HeldAnswers {
    release: tokio::sync::watch::Sender<bool>,
}

impl HeldAnswers {
    /// Lets the held answers (and those of matching requests still to come) go out.
    pub fn release(&self) {
        self.release.send_replace(true);
    }
}

impl Drop for HeldAnswers {
    fn drop(&mut self) {
        self.release();
    }
}

/// Waits until `released` says so (or its [`HeldAnswers`] is gone).
pub(crate) async fn wait_released(mut released: tokio::sync::watch::Receiver<bool>) {
    // An error means the sender was dropped, which released it.
    let _ = released.wait_for(|released| *released).await;
}

/// The fault-injection handle of an [`super::ApiServer`].
#[derive(Debug)]
pub struct Faults {
    state: Mutex<FaultState>,
    store: Arc<Store>,
}

fn matches(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

impl Faults {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        Self {
            state: Mutex::new(FaultState::default()),
            store,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Fail the next `count` requests whose Kubernetes verb (`get`, `list`, `watch`, `create`,
    /// `update`, `patch`, `delete`, `deletecollection`, or `*`) and resource (`plural`,
    /// `plural/status`, or `*`) match with HTTP `status_code` and a `Status` body.
    pub fn fail(&self, verb: &str, resource: &str, status_code: u16, count: usize) {
        self.fail_after(verb, resource, 0, status_code, count);
    }

    /// As [`Faults::fail`], after letting the next `passed` matching requests through: the
    /// second of two writes of one object in one sync (a finishing write after a first one)
    /// can be refused alone. While it lets requests through, the rule stands before any later
    /// one that matches them too.
    pub fn fail_after(
        &self,
        verb: &str,
        resource: &str,
        passed: usize,
        status_code: u16,
        count: usize,
    ) {
        self.state().rules.push(FailRule {
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            code: status_code,
            passed,
            remaining: count,
        });
    }

    /// Carry out the next `count` requests whose verb and resource match (as in
    /// [`Faults::fail`]), then cut their answers off after the headers: the client reads an
    /// incomplete message and does not learn that its write is stored. kube-apiserver commits
    /// a write to etcd before it answers, so a connection that breaks in between (a restart,
    /// a network cut) leaves the same uncertainty.
    pub fn lose_answers(&self, verb: &str, resource: &str, count: usize) {
        self.state().lost.push(LoseRule {
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            remaining: count,
        });
    }

    /// Hold back the answers of the next `count` requests whose verb and resource match (as in
    /// [`Faults::fail`]) and that succeed, until the returned handle is released or dropped
    /// (a rejected write has no watch event to race its answer). kube-apiserver sends a write's watch events from its watch cache apart
    /// from the writer's answer, so other clients (and the writer's own informers) can see a
    /// write, and act on it, before the writer reads that it succeeded: a deletion of the
    /// object it just created can reach the writer's watch before the create's answer does.
    pub fn hold_answers(&self, verb: &str, resource: &str, count: usize) -> HeldAnswers {
        let (release, released) = tokio::sync::watch::channel(false);
        self.state().held.push(HoldRule {
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            remaining: count,
            released,
        });
        HeldAnswers { release }
    }

    /// Delay every request by `latency` (watch streams: before they open).
    pub fn add_latency(&self, latency: Duration) {
        self.state().latency = latency;
    }

    /// Remove every failure rule and the latency.
    pub fn clear(&self) {
        *self.state() = FaultState::default();
    }

    /// End every open watch stream now, as an apiserver restart does (clients re-watch from
    /// their last resourceVersion).
    pub fn drop_watches(&self) {
        self.store.drop_watches();
    }

    /// Forget the event history: watches and exact lists at older resourceVersions answer
    /// 410 Expired, forcing clients to re-list.
    pub fn compact(&self) {
        self.store.compact();
    }

    pub(crate) fn latency(&self) -> Duration {
        self.state().latency
    }

    /// Whether this request's answer is to be lost, consuming one use of the first matching
    /// [`Faults::lose_answers`] rule.
    pub(crate) fn lose_answer(&self, verb: &str, resource: &str) -> bool {
        let mut state = self.state();
        let Some(rule) = state
            .lost
            .iter_mut()
            .find(|r| r.remaining > 0 && matches(&r.verb, verb) && matches(&r.resource, resource))
        else {
            return false;
        };
        rule.remaining -= 1;
        state.lost.retain(|r| r.remaining > 0);
        true
    }

    /// What this request's answer waits for, consuming one use of the first matching
    /// [`Faults::hold_answers`] rule.
    pub(crate) fn hold_answer(
        &self,
        verb: &str,
        resource: &str,
    ) -> Option<tokio::sync::watch::Receiver<bool>> {
        let mut state = self.state();
        let rule = state.held.iter_mut().find(|r| {
            r.remaining > 0 && matches(&r.verb, verb) && matches(&r.resource, resource)
        })?;
        rule.remaining -= 1;
        let released = rule.released.clone();
        state.held.retain(|r| r.remaining > 0);
        Some(released)
    }

    /// The status to fail this request with, consuming one use of the first matching rule.
    pub(crate) fn check(&self, verb: &str, resource: &str) -> Option<u16> {
        let mut state = self.state();
        let rule = state.rules.iter_mut().find(|r| {
            r.remaining > 0 && matches(&r.verb, verb) && matches(&r.resource, resource)
        })?;
        if rule.passed > 0 {
            rule.passed -= 1;
            return None;
        }
        rule.remaining -= 1;
        let code = rule.code;
        state.rules.retain(|r| r.remaining > 0);
        Some(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_fails_exactly_count_matching_requests() {
        let faults = Faults::new(Arc::new(Store::new(10)));
        faults.fail("update", "leases", 500, 2);
        assert_eq!(faults.check("get", "leases"), None);
        assert_eq!(faults.check("update", "leases"), Some(500));
        assert_eq!(faults.check("update", "pods"), None);
        assert_eq!(faults.check("update", "leases"), Some(500));
        assert_eq!(faults.check("update", "leases"), None);
        faults.fail("*", "*", 429, 1);
        assert_eq!(faults.check("list", "pods/status"), Some(429));
    }

    #[test]
    fn a_rule_can_let_the_first_matching_requests_through() {
        let faults = Faults::new(Arc::new(Store::new(10)));
        faults.fail_after("patch", "pods/status", 1, 500, 1);
        assert_eq!(faults.check("patch", "pods"), None, "not matching");
        assert_eq!(faults.check("patch", "pods/status"), None, "let through");
        assert_eq!(faults.check("patch", "pods/status"), Some(500));
        assert_eq!(faults.check("patch", "pods/status"), None, "used up");
    }

    #[tokio::test]
    async fn a_held_answer_waits_for_its_release_or_the_handles_drop() {
        let faults = Faults::new(Arc::new(Store::new(10)));
        let held = faults.hold_answers("create", "pods", 1);
        assert!(faults.hold_answer("update", "pods").is_none());
        let released = faults.hold_answer("create", "pods").unwrap();
        assert!(faults.hold_answer("create", "pods").is_none(), "one use");
        assert!(!*released.borrow(), "held until released");
        held.release();
        wait_released(released).await;

        let dropped = faults.hold_answers("*", "*", 1);
        let released = faults.hold_answer("delete", "leases").unwrap();
        drop(dropped);
        wait_released(released).await;
    }
}
