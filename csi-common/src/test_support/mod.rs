//! Helpers for tests of code built on this crate, behind the `test-support` feature (enable it
//! in `[dev-dependencies]`, never in `[dependencies]`). This crate's own unit tests use them too.

pub mod logs;
