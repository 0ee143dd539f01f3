//! The crate's integration tests, one module per file of tests/, linked as one test binary:
//! with a binary per file, the build linked every dependency once for each file. Run one
//! file's tests with `cargo test --test integration <file>::`.

mod containerfile;
mod link_order;
mod manifests;
mod observed;
mod static_binary;
