//! Test support every crate's tests share: [`wait::eventually`] (the one way tests wait for a
//! positive signal), a raw HTTP/1.1 client and the version string a sidecar must print.

pub mod http_client;
pub mod version;
pub mod wait;
