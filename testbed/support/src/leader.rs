//! Leader-election flags for tests that run two replicas of a sidecar: a Lease in `default`
//! with timings short enough that a standby takes over within seconds of the leader's death
//! (the shared `--leader-election-*` flags of every sidecar, csi-lib-utils `standardflags`).

/// `--leader-election` with a 3s Lease renewed every second in namespace `default`.
pub const FAST_LEADER_ELECTION: [&str; 5] = [
    "--leader-election",
    "--leader-election-namespace=default",
    "--leader-election-lease-duration=3s",
    "--leader-election-renew-deadline=2s",
    "--leader-election-retry-period=1s",
];
