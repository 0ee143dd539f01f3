//! gRPC definitions the CSI sidecars speak: the Container Storage Interface
//! (spec **v1.12.0**, package `csi.v1`) and the kubelet plugin-registration API v1
//! (package `pluginregistration`).
//!
//! The Rust code in `src/gen/` is generated from `proto/` by protox (a pure-Rust
//! protobuf compiler) and tonic-prost-build, and **checked in**: a normal build needs
//! no `protoc`, no build script and no network, and a reviewer sees every change to
//! the wire types as a diff. `tests/bootstrap.rs` regenerates the code and fails on
//! any drift (the linkerd `spiffe-proto` pattern).
//!
//! Clients, servers (with default "unimplemented" method bodies) and message types
//! are generated for every service. Messages implement [`prost::Name`], so callers
//! can get their full protobuf name. Messages with a `csi_secret` field have a
//! hand-written `Debug` (module [`redact`]) that never prints the secret; for
//! upstream-style JSON logging of any message see [`sanitize`].
//!
//! ```
//! use proto::csi::v1::{ProbeRequest, identity_client::IdentityClient};
//! # fn _unused(_: Option<IdentityClient<tonic::transport::Channel>>) {}
//! let _request = ProbeRequest {};
//! ```

pub mod redact;
pub mod sanitize;

/// Container Storage Interface definitions.
pub mod csi {
    /// CSI spec v1.12.0, protobuf package `csi.v1`: the Identity, Controller,
    /// GroupController, SnapshotMetadata and Node services and their messages.
    pub mod v1 {
        // Generated code: lints and docs are the generator's business, not ours.
        #![allow(
            clippy::all,
            clippy::pedantic,
            missing_docs,
            unreachable_pub,
            missing_debug_implementations,
            rust_2018_idioms,
            rustdoc::all
        )]
        include!("gen/csi.v1.rs");
    }
}

/// Kubelet plugin-registration API.
pub mod pluginregistration {
    /// Plugin-registration API v1, protobuf package `pluginregistration`
    /// (gRPC paths `/pluginregistration.Registration/...`).
    pub mod v1 {
        // Generated code: lints and docs are the generator's business, not ours.
        #![allow(
            clippy::all,
            clippy::pedantic,
            missing_docs,
            unreachable_pub,
            missing_debug_implementations,
            rust_2018_idioms,
            rustdoc::all
        )]
        include!("gen/pluginregistration.rs");
    }
}

/// Encoded `FileDescriptorSet` of both APIs, including the imported
/// `google/protobuf` files and all custom options (`csi_secret`, `alpha_*`).
///
/// Feed it to gRPC server reflection or to `prost_reflect::DescriptorPool::decode`.
/// Source comments are left out.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("gen/descriptor.bin");
