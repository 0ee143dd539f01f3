//! Storage capacity tracking (`--enable-capacity`, spec provisioner.md §6.1): one
//! CSIStorageCapacity object per (topology segment, StorageClass of this driver) in the
//! provisioner's namespace, holding what GetCapacity reports for that pair.
//!
//! Rust counterpart of external-provisioner `pkg/capacity`, central mode and node deployment
//! (spec §6.2: only this node's NodeGetInfo segment, `managed-by=external-provisioner-<node>`).
//! The pieces:
//!
//! * [`settings`]: the capacity flags and the `NAMESPACE` / `POD_NAME` environment, checked
//!   before anything starts (exit 2 on a bad value).
//! * `decide`: pure decisions, table-tested: topology segments from CSINodes and Node
//!   labels (or this node's), the `managed-by` value, the wanted (segment, class) keys, what to write for one key, which objects are
//!   obsolete, when to poll a key next.
//! * `owner`: start-up, against the API: the version probe (storage.k8s.io/v1, else
//!   v1beta1 as on Kubernetes 1.21-1.23) and the owner reference walk (Pod → ReplicaSet →
//!   Deployment, ...).
//! * `version`: the probed version (`CapacityVersion`, passed down to the controller) and
//!   the object type that reads and writes either (v1's fields, the version in the URL).
//! * `controller`: the executor: the `csitopology` and `csistoragecapacity` queues,
//!   GetCapacity calls and object writes; `caches`: its informers and event handlers.
//! * `metrics`: the three `csistoragecapacities_*` gauges.
//!
//! Beyond upstream, a key whose capacity did not change is polled less and less often
//! (doubling up to `decide::MAX_POLL_FACTOR` (8) × `--capacity-poll-interval`, with jitter),
//! while provisioning or deleting a volume in its segment polls it at once; objects are
//! written only when a value differs from the cached object (provisioner/README.md).

mod caches;
pub(crate) mod controller;
pub(crate) mod csi;
pub(crate) mod decide;
pub(crate) mod metrics;
pub(crate) mod owner;
pub mod settings;
pub(crate) mod version;

pub use owner::StartError;
pub use settings::{CapacitySettings, EnvironmentError, SettingsError};
