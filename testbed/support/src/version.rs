//! What the sidecars' `--version` must print, worked out independently of the build script that
//! stamps it: `v<workspace version>`, plus `+<first 12 hex digits of the checked-out commit>`
//! when `git` can name the commit of this source tree (a fresh clone, as CI builds), nothing
//! more without it (an image build from a tarball).

use std::path::Path;
use std::process::Command;

/// The version string a binary built from the source tree at `source_dir` reports, for a
/// workspace version of `crate_version`.
pub fn expected(source_dir: &Path, crate_version: &str) -> String {
    let revision = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(source_dir)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    match revision {
        Some(full) if full.len() >= 12 => format!("v{crate_version}+{}", &full[..12]),
        _ => format!("v{crate_version}"),
    }
}
