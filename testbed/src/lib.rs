//! placeholder

pub mod apiserver;
pub mod kcm;
