//! Property test of csi-attacher's command line (issue 14, hostile flags): any line of its own flags
//! in Go's spellings with good, wrong, empty, overflowing or control-character values, unknown
//! flags and positional arguments is a usage error (exit 2), `--help` (0), or flags whose
//! configuration runs or fails with the sidecar's exit codes; nothing panics. Seeded: every run
//! draws the same lines.

use attacher::args::{Args, Config};

testbed_support::flag_property!(
    "csi-attacher",
    Args,
    |line| csi_common::flags::parse::<Args, _, _>(line),
    |args| Config::try_from(args)
        .map(drop)
        .map_err(|err| err.exit_code()),
    &[1, 2],
);
