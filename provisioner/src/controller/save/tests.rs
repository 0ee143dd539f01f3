use super::*;

#[test]
fn a_save_counts_until_its_grace_ends() {
    let saved = SavedLately::default();
    let t0 = Instant::now();
    saved.insert("pv-1", t0);

    for (after, want) in [
        (Duration::ZERO, true),
        (Duration::from_secs(59), true),
        (SAVED_GRACE, false),
        (SAVED_GRACE * 2, false),
    ] {
        assert_eq!(saved.contains("pv-1", t0 + after), want, "after {after:?}");
    }
    assert!(!saved.contains("pv-2", t0));
}

#[test]
fn a_save_no_longer_counts_once_the_informer_shows_the_volume() {
    let saved = SavedLately::default();
    let t0 = Instant::now();
    saved.insert("pv-1", t0);
    saved.insert("pv-2", t0);

    saved.shown("pv-1");
    saved.shown("pv-3"); // never saved here: nothing to drop

    assert!(!saved.contains("pv-1", t0));
    assert!(saved.contains("pv-2", t0));
}

#[test]
fn saves_past_their_grace_are_forgotten_at_the_next_save() {
    let saved = SavedLately::default();
    let t0 = Instant::now();
    saved.insert("old", t0);
    saved.insert("new", t0 + SAVED_GRACE);

    assert_eq!(saved.0.lock().unwrap().len(), 1);
    assert!(saved.contains("new", t0 + SAVED_GRACE));
}

/// A burst grows the table to hold every PV saved before the informer shows them; the table
/// is given back as they are shown instead of being kept at its largest.
#[test]
fn the_table_shrinks_as_the_informer_catches_up() {
    let saved = SavedLately::default();
    let t0 = Instant::now();
    let names: Vec<String> = (0..5000).map(|i| format!("pvc-{i:05}")).collect();
    for name in &names {
        saved.insert(name, t0);
    }
    let grown = saved.capacity();
    assert!(grown >= 5000, "{grown}");

    for name in &names[..4000] {
        saved.shown(name);
    }
    let partly = saved.capacity();
    assert!(partly < grown / 2, "{partly} of {grown}");
    assert!(names[4000..].iter().all(|name| saved.contains(name, t0)));

    for name in &names[4000..] {
        saved.shown(name);
    }
    assert_eq!(saved.capacity(), 0);
}
