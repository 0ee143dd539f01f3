//! The crate's integration tests, one module per file of tests/, linked as one test binary:
//! with a binary per file, the build linked every dependency once for each file. Run one
//! file's tests with `cargo test --test integration <file>::`.

mod apiserver_support;

mod apiserver_crds;
mod apiserver_http;
mod apiserver_kube;
mod apiserver_kubectl;
mod apiserver_patch;
mod apiserver_restart;
mod apiserver_watch;
mod events_writer;
mod kcm;
mod sidecar_informer;
