//! Checks of what `deploy/` ships, as pure functions over rendered manifests, ELF files and
//! PromQL text; the tests in `tests/` feed them `kubectl kustomize` output, the workspace's
//! binaries, the requests the in-memory API server recorded and scraped `/metrics`.
//!
//! - [`render`]: `kubectl kustomize` of a directory, as JSON objects;
//! - [`workload`]: the containers of a Deployment / DaemonSet and the hardening rules;
//! - [`rbac`]: the rules a Role / ClusterRole grants, as (group, resource, verb) triples;
//! - [`promql`]: the metric names a PromQL expression reads;
//! - [`elf`]: whether an executable needs a dynamic loader.

pub mod elf;
pub mod promql;
pub mod rbac;
pub mod render;
pub mod workload;

/// The workspace's root directory (deploy/ lives there).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
