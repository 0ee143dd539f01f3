//! Regenerates `src/gen/` from `proto/` and fails if the checked-in files drifted.
//!
//! The generated Rust code and the encoded descriptor set are committed so a normal
//! build needs neither `protoc` nor a build script (the linkerd `spiffe-proto`
//! pattern). This test is the only place that runs the generator: protox parses
//! the `.proto` files in pure Rust and tonic-prost-build writes the code.
//!
//! After editing a `.proto` file, run
//! `PROTO_BOOTSTRAP=write cargo test -p proto --test bootstrap` to refresh `src/gen/`,
//! then review and commit the result.

// Test-only helpers: a failed step should abort the test with its message.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use prost::Message as _;

/// The `.proto` files we compile, relative to `proto/`.
const PROTO_FILES: [&str; 2] = ["csi/v1/csi.proto", "pluginregistration/v1/api.proto"];

/// Field option that marks a CSI secret (`csi.v1.csi_secret`).
const SECRET_EXTENSION: &str = "csi.v1.csi_secret";

fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn compiler(source_info: bool) -> protox::Compiler {
    let mut compiler =
        protox::Compiler::new([crate_root().join("proto")]).expect("proto include dir exists");
    compiler
        .include_imports(true)
        .include_source_info(source_info);
    compiler
        .open_files(PROTO_FILES)
        .expect("proto files compile");
    compiler
}

/// Full names (with a leading dot, as prost-build wants them) of every message that
/// has a field carrying `[(csi_secret) = true]`. Those get no derived `Debug`; the
/// crate's `redact` module supplies one that hides the secret.
fn secret_bearing_messages(compiler: &protox::Compiler) -> Vec<String> {
    let pool = compiler.descriptor_pool();
    let secret = pool
        .get_extension_by_name(SECRET_EXTENSION)
        .expect("csi_secret extension is declared");
    let mut names: Vec<String> = pool
        .all_messages()
        .filter(|message| {
            message.fields().any(|field| {
                let options = field.options();
                options.has_extension(&secret)
                    && options.get_extension(&secret).as_bool() == Some(true)
            })
        })
        .map(|message| format!(".{}", message.full_name()))
        .collect();
    names.sort();
    names
}

/// Writes everything that belongs in `src/gen/` into `out`.
fn generate(out: &Path) {
    let with_comments = compiler(true);
    let skip_debug = secret_bearing_messages(&with_comments);
    assert!(
        !skip_debug.is_empty(),
        "the CSI spec has secret fields; finding none means the option lookup broke"
    );

    // prost-build needs the imported google/protobuf files to resolve types; it maps
    // them to prost-types (its default extern path) instead of generating them.
    let fds = with_comments.file_descriptor_set();

    let mut config = tonic_prost_build::Config::new();
    config.enable_type_names();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(true)
        // Servers get default "unimplemented" bodies so mock drivers only write what they use.
        .generate_default_stubs(true)
        .skip_debug(&skip_debug)
        .out_dir(out)
        .compile_fds_with_config(fds, config)
        .expect("code generation succeeds");

    // The descriptor set keeps the imports (extensions on google.protobuf.*Options need
    // descriptor.proto) and the custom options, but no source info: it is for reflection.
    let without_comments = compiler(false);
    let encoded = without_comments.encode_file_descriptor_set();
    // Round-trip through prost-types only to prove the bytes are a valid set.
    prost_types::FileDescriptorSet::decode(encoded.as_slice()).expect("valid descriptor set");
    fs::write(out.join("descriptor.bin"), encoded).expect("write descriptor.bin");
}

fn read_dir(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .expect("readable dir")
        .map(|entry| {
            let entry = entry.expect("dir entry");
            let name = entry.file_name().into_string().expect("utf-8 file name");
            let bytes = fs::read(entry.path()).expect("readable file");
            (name, bytes)
        })
        .collect()
}

#[test]
fn generated_code_matches_the_proto_files() {
    let tmp = tempfile::tempdir().expect("temp dir");
    generate(tmp.path());
    let fresh = read_dir(tmp.path());

    let checked_in_dir = crate_root().join("src").join("gen");
    if std::env::var_os("PROTO_BOOTSTRAP").is_some_and(|v| v == "write") {
        fs::create_dir_all(&checked_in_dir).expect("create src/gen");
        for (name, bytes) in &fresh {
            fs::write(checked_in_dir.join(name), bytes).expect("write generated file");
        }
    }

    let checked_in = read_dir(&checked_in_dir);
    let fresh_names: Vec<_> = fresh.keys().collect();
    let checked_in_names: Vec<_> = checked_in.keys().collect();
    assert_eq!(
        fresh_names, checked_in_names,
        "src/gen/ holds a different set of files than the generator writes; \
         run `PROTO_BOOTSTRAP=write cargo test -p proto --test bootstrap`"
    );
    for (name, bytes) in &fresh {
        assert!(
            checked_in[name] == *bytes,
            "src/gen/{name} drifted from the .proto files; \
             run `PROTO_BOOTSTRAP=write cargo test -p proto --test bootstrap`"
        );
    }
}

#[test]
fn every_secret_bearing_message_is_found_by_the_generator() {
    // Guards the skip_debug list: these are the request messages the CSI spec marks
    // with csi_secret. If the lookup silently found fewer, secrets could reach logs.
    let found = secret_bearing_messages(&compiler(false));
    for expected in [
        ".csi.v1.CreateVolumeRequest",
        ".csi.v1.NodeStageVolumeRequest",
        ".csi.v1.NodeExpandVolumeRequest",
        ".csi.v1.GetMetadataDeltaRequest",
    ] {
        assert!(
            found.iter().any(|name| name == expected),
            "{expected} missing from {found:?}"
        );
    }
    assert!(
        found.iter().all(|name| name.ends_with("Request")),
        "only requests carry secrets in CSI v1.12.0: {found:?}"
    );
}
