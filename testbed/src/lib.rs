//! placeholder

pub mod apiserver;
