//! The fake cluster the controller sidecars run against: an in-memory Kubernetes API server
//! ([`apiserver`], real HTTP) and a kube-controller-manager stand-in ([`kcm`]) that binds,
//! protects and attaches like the real one.

pub mod apiserver;
pub mod kcm;
