//! Property tests (issue 14, hostile input) of the pure functions csi-provisioner feeds user
//! objects to: secret-reference templates, StorageClass parameters, topology requirements and
//! PV node affinity, the claim and volume decisions, and clone sources. Each property states an
//! invariant from the CSI spec or upstream's behaviour (spec provisioner.md §3, §4.1, §4.3,
//! §4.4, §5) and must hold for arbitrary input, hostile strings included; no input may panic.
//!
//! Seeded ([`config`]), so a run is deterministic and CI sees the same cases every time.
//! Executions per run: the `cases` of each `proptest!` block times its properties; the totals
//! are in docs/reliability.md "Hostile input".

mod decide;
mod params;
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
