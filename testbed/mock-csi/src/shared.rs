//! State shared by the test's handle and every server generation: configuration, volume table,
//! faults, readiness and the call record, behind one mutex that is never held across an await.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tonic::Code;

use super::config::MockDriverConfig;
use super::fault::{FaultTable, Plan};
use super::method::Method;
use super::record::CallLog;
use super::state::VolumeTable;

/// Everything the RPC handlers read or change.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: MockDriverConfig,
    pub(crate) volumes: VolumeTable,
    pub(crate) faults: FaultTable,
    pub(crate) calls: CallLog,
    /// `ProbeResponse.ready`.
    pub(crate) ready: Option<bool>,
    /// The volumes (CreateVolume's name, DeleteVolume's id) with a call being carried out.
    pub(crate) busy: std::collections::HashSet<String>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// Bumped whenever a call arrives or finishes, so waiters re-check the record.
    calls_changed: watch::Sender<u64>,
}

/// What `begin` tells the handler.
pub(crate) struct Begun {
    pub(crate) seq: u64,
    pub(crate) plan: Plan,
    pub(crate) log_calls: bool,
}

impl Shared {
    pub(crate) fn new(mut config: MockDriverConfig) -> Self {
        let mut faults = FaultTable::default();
        for fault in std::mem::take(&mut config.faults) {
            faults.inject(fault);
        }
        let ready = config.probe_ready;
        Shared {
            inner: Mutex::new(Inner {
                config,
                volumes: VolumeTable::default(),
                faults,
                calls: CallLog::default(),
                ready,
                busy: std::collections::HashSet::new(),
            }),
            calls_changed: watch::Sender::new(0),
        }
    }

    /// Locks the state. A handler that panicked while holding the lock leaves consistent data
    /// behind (every mutation is a single assignment or push), so poisoning is ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an arriving call and asks the faults what to do with it.
    pub(crate) fn begin(&self, method: Method, request: Vec<u8>) -> Begun {
        let begun = {
            let mut inner = self.lock();
            Begun {
                seq: inner.calls.begin(method, request),
                plan: inner.faults.on_call(method),
                log_calls: inner.config.log_calls,
            }
        };
        self.calls_changed.send_modify(|n| *n += 1);
        begun
    }

    /// Records the answer to call `seq` (`garbled`: OK with nonsense in it).
    pub(crate) fn finish(&self, seq: u64, code: Code, message: &str, garbled: bool) {
        self.lock().calls.finish(seq, code, message, garbled);
        self.calls_changed.send_modify(|n| *n += 1);
    }

    /// Records that the caller of call `seq` was still waiting for its answer.
    pub(crate) fn delivered(&self, seq: u64) {
        self.lock().calls.delivered(seq);
    }

    pub(crate) fn subscribe_calls(&self) -> watch::Receiver<u64> {
        self.calls_changed.subscribe()
    }
}
