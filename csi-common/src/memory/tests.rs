use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::*;

const MIB: u64 = 1024 * 1024;

/// Readings of the anonymous RSS, one per check, and whether each check trims.
#[test]
fn a_trim_follows_growth_over_the_lowest_reading_since_the_last_trim() {
    let cases: &[(&str, &[(u64, bool)])] = &[
        (
            "steady",
            &[(10 * MIB, false), (10 * MIB, false), (10 * MIB, false)],
        ),
        (
            "growth below the threshold",
            &[(10 * MIB, false), (10 * MIB + GROWTH - 1, false)],
        ),
        (
            "growth of exactly the threshold",
            &[(10 * MIB, false), (10 * MIB + GROWTH, true)],
        ),
        (
            "growth measured from the lowest reading",
            &[(12 * MIB, false), (10 * MIB, false), (11 * MIB, true)],
        ),
        (
            "small steps add up",
            &[
                (10 * MIB, false),
                (10 * MIB + GROWTH / 2, false),
                (10 * MIB + GROWTH, true),
            ],
        ),
        (
            "a fall never trims",
            &[(30 * MIB, false), (10 * MIB, false)],
        ),
        (
            "the sixth check trims whatever the readings",
            &[
                (10 * MIB, false),
                (10 * MIB, false),
                (10 * MIB, false),
                (10 * MIB - MIB / 2, false),
                (10 * MIB, false),
                (10 * MIB, true),
            ],
        ),
    ];
    assert_trims(cases);
}

/// Feeds each case's readings, one per check, to a fresh [`Floor`], hands it each trim's
/// reading back as the loop does, and checks whether each check trims.
fn assert_trims(cases: &[(&str, &[(u64, bool)])]) {
    for (name, readings) in cases {
        let mut floor = Floor::new();
        for (i, (rss, want)) in readings.iter().enumerate() {
            let trim = floor.observe(*rss);
            assert_eq!(trim, *want, "{name}: reading {i} ({rss})");
            if trim {
                floor.trimmed(Some(*rss));
            }
        }
    }
}

/// Memory freed without growth (idle connections closed) shows in no reading: a trim comes at
/// the latest at every `LATEST_CHECKS`th check, counted again from each trim, whatever its cause.
#[test]
fn without_growth_every_sixth_check_trims_counted_from_the_last_trim() {
    let mut floor = Floor::new();
    let trims: Vec<bool> = (0..12).map(|_| floor.observe(10 * MIB)).collect();
    // No trim was handed back, so the count runs on: every check from the sixth trims.
    assert_eq!(trims.iter().position(|t| *t), Some(5), "{trims:?}");

    let mut floor = Floor::new();
    let mut trims = Vec::new();
    for _ in 0..5 {
        trims.push(floor.observe(10 * MIB));
    }
    floor.trimmed(Some(10 * MIB));
    for _ in 0..6 {
        trims.push(floor.observe(10 * MIB));
    }
    // The trim after the fifth check restarts the count: the next comes six checks later.
    assert_eq!(
        trims,
        [
            false, false, false, false, false, false, false, false, false, false, true
        ]
    );
}

/// After a trim, growth counts from what the trim left, so memory that is live (a cache that
/// filled) is trimmed for once (and once more at the check after, see below), not at every
/// check.
#[test]
fn after_a_trim_growth_counts_from_what_it_left() {
    let mut floor = Floor::new();
    assert!(!floor.observe(10 * MIB));
    assert!(floor.observe(20 * MIB));
    floor.trimmed(Some(19 * MIB));
    assert!(floor.observe(19 * MIB), "the check after growth");
    floor.trimmed(Some(19 * MIB));
    assert!(!floor.observe(20 * MIB - 1));
    assert!(floor.observe(20 * MIB));
    floor.trimmed(Some(20 * MIB));
    assert!(floor.observe(20 * MIB), "the check after growth");
    // An unreadable RSS after the trim: the next reading is the floor.
    floor.trimmed(None);
    assert!(!floor.observe(25 * MIB));
    assert!(floor.observe(26 * MIB));
}

#[test]
fn rss_anon_is_read_from_proc_status() {
    let status = "Name:\tcsi-provisioner\nVmRSS:\t   25344 kB\nRssAnon:\t   16688 kB\nRssFile:\t    9564 kB\n";
    assert_eq!(parse_rss_anon(status), Some(16_688 * 1024));
    assert_eq!(parse_rss_anon("VmRSS:\t1 kB\n"), None);
    assert_eq!(parse_rss_anon("RssAnon:\tmany kB\n"), None);
}

/// A burst grows the RSS until its end; what its last work frees shows in no reading, so the
/// first check without growth trims once more, and only that one.
#[test]
fn the_check_after_growth_trims_once_more() {
    let cases: &[(&str, &[(u64, bool)])] = &[
        (
            "growth, then flat",
            &[
                (10 * MIB, false),
                (12 * MIB, true),
                (12 * MIB, true),
                (12 * MIB, false),
                (12 * MIB, false),
            ],
        ),
        (
            "growth at two checks in a row, then a fall",
            &[
                (10 * MIB, false),
                (12 * MIB, true),
                (14 * MIB, true),
                (11 * MIB, true),
                (11 * MIB, false),
            ],
        ),
        (
            "growth below the threshold is no growth",
            &[
                (10 * MIB, false),
                (10 * MIB + GROWTH - 1, false),
                (10 * MIB + GROWTH - 1, false),
            ],
        ),
    ];
    assert_trims(cases);
}

/// The loop reads every period, trims on growth and at the check after it, and reads again
/// after each trim.
#[tokio::test(start_paused = true)]
async fn the_loop_trims_on_growth_and_after_it_and_reads_again_after_a_trim() {
    // One reading per check, plus the reading after each trim.
    let readings = Arc::new(Mutex::new(VecDeque::from([
        10 * MIB, // check 1: the floor
        10 * MIB, // check 2
        14 * MIB, // check 3: grown, trim
        11 * MIB, // after the trim
        11 * MIB, // check 4: the check after growth, trim
        10 * MIB, // after the trim
        10 * MIB, // check 5
        12 * MIB, // check 6: grown over 10 MiB, trim
        12 * MIB, // after the trim
    ])));
    let trims = Arc::new(Mutex::new(Vec::new()));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let mut done_tx = Some(done_tx);
    let read = {
        let readings = Arc::clone(&readings);
        move || {
            let next = readings.lock().unwrap().pop_front();
            if next.is_none()
                && let Some(tx) = done_tx.take()
            {
                let _ = tx.send(tokio::time::Instant::now());
            }
            next
        }
    };
    let trim = {
        let trims = Arc::clone(&trims);
        let readings = Arc::clone(&readings);
        move || {
            // Which reading comes next tells when the trim ran.
            trims.lock().unwrap().push(readings.lock().unwrap().len());
            true
        }
    };
    let start = tokio::time::Instant::now();
    let task = tokio::spawn(run(Duration::from_secs(5), read, trim));
    let ended = done_rx.await.unwrap();
    task.abort();
    // Trims after check 3 (six readings left), check 4 (four left) and check 6 (one left).
    assert_eq!(*trims.lock().unwrap(), [6, 4, 1]);
    // Seven checks, the first at once: the readings ran out at the seventh, 30 s in.
    assert_eq!(ended - start, Duration::from_secs(30));
}

/// The trim itself: memory freed below a block still in use stays resident until the trim
/// gives it back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn a_trim_gives_back_heap_pages_that_free_kept() {
    // 64 MiB in 4 KiB blocks, far below glibc's mmap threshold: they come from this thread's
    // arena, and each is written, so resident.
    let blocks: Vec<Vec<u8>> = (0..16_384_u32)
        .map(|i| vec![u8::try_from(i % 251).unwrap() | 1; 4096])
        .collect();
    // Allocated after them: the heap's top stays in use, so free() alone cannot shrink it.
    let pin = vec![1_u8; 4096];
    drop(blocks);
    let freed = anonymous_rss().unwrap();
    assert!(trim(), "malloc_trim reported nothing released");
    let after = anonymous_rss().unwrap();
    assert!(
        after + 32 * MIB <= freed,
        "anonymous RSS {} KiB after the trim, {} KiB before",
        after / 1024,
        freed / 1024
    );
    drop(pin);
}
