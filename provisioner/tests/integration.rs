//! The crate's integration tests, one module per file of tests/, linked as one test binary:
//! with a binary per file, the build linked every dependency once for each file. Run one
//! file's tests with `cargo test --test integration <file>::`.

mod support;

mod binary;
mod capacity;
mod data_sources;
mod driver_garbage;
mod flags;
mod hostile_objects;
mod migration;
mod node_deployment;
mod volume_attributes_class;
