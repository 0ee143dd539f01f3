//! Test support every crate's tests share: [`wait::eventually`] (the one way tests wait for a
//! positive signal), a raw HTTP/1.1 client, the version string a sidecar must print, and
//! [`process`], the one way tests and the sandbox run a binary as a child process; and
//! [`argv`], hostile command lines for the sidecars' flag property tests.

pub mod argv;
pub mod http_client;
pub mod leader;
pub mod process;
pub mod version;
pub mod wait;
