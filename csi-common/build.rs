//! Stamps the commit the sidecars are built from into `csi_common::version`.
//!
//! It only reads: `git rev-parse` names the commit checked out around this crate, and cargo is
//! told to run this again when that changes (a new commit, a checkout). Without `git` or a
//! `.git` (an image built from a source tarball) the revision is left empty and the version is
//! the workspace version alone. No network, no files written.

use std::path::PathBuf;
use std::process::Command;

/// The name of the variable `csi_common::version` reads.
const REVISION_ENV: &str = "CSI_SIDECARS_GIT_REVISION";

fn main() {
    let revision = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    println!("cargo:rustc-env={REVISION_ENV}={revision}");
    if revision.is_empty() {
        return;
    }
    // HEAD itself (a checkout), the branch it points at (a commit) and the packed refs (a
    // branch that was packed). `--git-path` also finds them inside a git worktree. Only files
    // that exist: cargo reruns a build script at every build while a watched path is missing.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            let path = PathBuf::from(path);
            let path = if path.is_absolute() {
                path
            } else {
                manifest_dir().join(path)
            };
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
}

/// The trimmed output of a successful `git` command run in this crate's directory.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(manifest_dir())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}
