//! placeholder

pub mod apiserver;
pub mod kcm;
pub mod kubelet;
