//! Property tests (issue 14, hostile input) of the pure functions csi-provisioner feeds user
//! objects to: secret-reference templates, StorageClass parameters, topology requirements and
//! PV node affinity, the claim and volume decisions, clone and snapshot sources, capacity
//! tracking and node deployment. Each property states an
//! invariant from the CSI spec or upstream's behaviour (spec provisioner.md §3, §4.1, §4.3,
//! §4.4, §5) and must hold for arbitrary input, hostile strings included; no input may panic.
//!
//! Seeded ([`config`]), so a run is deterministic and CI sees the same cases every time.
//! Executions per run: the `cases` of each `proptest!` block times its properties; the totals
//! are in docs/reliability.md "Hostile input".

mod capacity;
mod decide;
mod node;
mod params;
mod snapshot;
mod source;
mod templates;
mod topology;

use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// The seed of every property block: a fixed seed makes the cases the same on every run.
const SEED: u64 = 14;

/// `cases` seeded cases; no failure file is written into the source tree (a failure prints its
/// minimal case, and the fixed seed finds it again).
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(SEED),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Strings a user could put in an object, and worse: any unicode, control characters, and
/// shapes close to what the code looks for.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9.-]{0,12}",
        "[A-Za-z0-9$@{}()'\\[\\]./_ -]{0,16}",
        "[\\x00-\\x1f\u{202e}\u{fffd}é-]{0,8}",
    ]
}

/// A claim's storage request: the sizes the properties compare with, absent, or hostile.
fn size() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(Some("1Gi".to_owned())),
        3 => Just(Some("2Gi".to_owned())),
        2 => Just(Some("1073741824".to_owned())),
        1 => Just(None),
        1 => hostile().prop_map(Some),
    ]
}

/// A `volumeMode`: absent (Filesystem), either mode, or hostile.
fn mode() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        2 => Just(Some("Filesystem".to_owned())),
        2 => Just(Some("Block".to_owned())),
        1 => hostile().prop_map(Some),
    ]
}
