//! The backlog metrics (not upstream; issue #706 asks to see queued, not yet finished work):
//! how many of this driver's VolumeAttachments wait for an attach or a detach, and since when
//! the oldest waits. Computed from the cache at scrape time, so it counts every waiting
//! VolumeAttachment whether it is queued, being synced or backing off after a failure.
//!
//! * `csi_attacher_pending_operations{operation="attach"|"detach"}` (gauge)
//! * `csi_attacher_oldest_pending_operation_seconds{operation="attach"|"detach"}` (gauge): since
//!   the VolumeAttachment was created (attach) or marked for deletion (detach); 0 when none wait.

use csi_common::informer::Store;
use k8s_openapi::jiff::Timestamp;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};

use crate::cached::VolumeAttachment;
use crate::decide::{self, VaAction};

/// The collector; register it in the sidecar's registry.
#[derive(Clone)]
pub(crate) struct Backlog {
    store: Store<VolumeAttachment>,
    driver: String,
    finalizer: String,
    pending: GaugeVec,
    oldest: GaugeVec,
}

impl std::fmt::Debug for Backlog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backlog").finish_non_exhaustive()
    }
}

impl Backlog {
    /// Reads `store` at every scrape.
    pub(crate) fn new(store: Store<VolumeAttachment>, driver: &str) -> prometheus::Result<Self> {
        Ok(Self {
            store,
            driver: driver.to_owned(),
            finalizer: crate::names::finalizer(driver),
            pending: GaugeVec::new(
                Opts::new(
                    "csi_attacher_pending_operations",
                    "VolumeAttachments of this driver waiting for an attach or a detach",
                ),
                &["operation"],
            )?,
            oldest: GaugeVec::new(
                Opts::new(
                    "csi_attacher_oldest_pending_operation_seconds",
                    "Seconds the longest-waiting VolumeAttachment has waited for its attach or detach",
                ),
                &["operation"],
            )?,
        })
    }
}

/// Per operation: how many wait, and the oldest wait in seconds.
pub(crate) fn tally<'a>(
    attachments: impl Iterator<Item = &'a VolumeAttachment>,
    driver: &str,
    finalizer: &str,
    now: Timestamp,
) -> [(u64, f64); 2] {
    let mut out = [(0, 0.0); 2];
    for va in attachments {
        let (slot, since) = match decide::va_action(va, driver, finalizer, false) {
            VaAction::Attach => (0, va.metadata.creation_timestamp.as_ref()),
            VaAction::Detach => (1, va.metadata.deletion_timestamp.as_ref()),
            VaAction::NotOurs | VaAction::UpToDate => continue,
        };
        let waited = since.map_or(0.0, |t| now.duration_since(t.0).as_secs_f64().max(0.0));
        out[slot].0 += 1;
        out[slot].1 = f64::max(out[slot].1, waited);
    }
    out
}

impl Collector for Backlog {
    fn desc(&self) -> Vec<&Desc> {
        self.pending
            .desc()
            .into_iter()
            .chain(self.oldest.desc())
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let state = self.store.state();
        let counts = tally(
            state.iter().map(AsRef::as_ref),
            &self.driver,
            &self.finalizer,
            Timestamp::now(),
        );
        for (operation, (count, oldest)) in ["attach", "detach"].into_iter().zip(counts) {
            #[allow(
                clippy::cast_precision_loss,
                reason = "a count of objects fits a gauge"
            )]
            self.pending
                .with_label_values(&[operation])
                .set(count as f64);
            self.oldest.with_label_values(&[operation]).set(oldest);
        }
        self.pending
            .collect()
            .into_iter()
            .chain(self.oldest.collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::storage::v1::VolumeAttachmentStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::cached::VolumeAttachmentSpec;

    fn va(attacher: &str, created: i64, deleted: Option<i64>, attached: bool) -> VolumeAttachment {
        VolumeAttachment {
            metadata: ObjectMeta {
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                deletion_timestamp: deleted.map(|s| Time(Timestamp::from_second(s).unwrap())),
                finalizers: Some(vec!["external-attacher/d".into()]),
                ..Default::default()
            },
            spec: VolumeAttachmentSpec {
                attacher: attacher.into(),
                ..Default::default()
            },
            status: Some(VolumeAttachmentStatus {
                attached,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn waiting_attachments_are_counted_per_operation_with_the_oldest_wait() {
        let all: Vec<VolumeAttachment> = [
            ("d", 100, None, false),
            ("d", 40, None, false),
            ("d", 10, None, true),
            ("d", 10, Some(90), true),
            ("other", 0, None, false),
        ]
        .into_iter()
        .map(|(attacher, created, deleted, attached)| va(attacher, created, deleted, attached))
        .collect();
        let now = Timestamp::from_second(100).unwrap();
        assert_eq!(
            tally(all.iter(), "d", "external-attacher/d", now),
            [(2, 60.0), (1, 10.0)]
        );
        assert_eq!(
            tally(std::iter::empty(), "d", "external-attacher/d", now),
            [(0, 0.0), (0, 0.0)]
        );
    }
}
