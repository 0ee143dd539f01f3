//! Build script of the controller sidecars (`build = "../deploy/link-order/build.rs"` in their
//! Cargo.toml): in a release build for Linux, hands the linker the package's `link-order.ld`,
//! which lays out first, together, the functions the sidecar runs.
//!
//! Why: the kernel maps a binary's code around each page fault (fault-around, 64 KiB), so the
//! few functions that run, scattered among the many that never do, keep nearly the whole text
//! resident: 6.3 of the 7.2 MiB of csi-provisioner's code, of which 2.5 MiB ever ran in a
//! bench. Gathered, the code that runs fills fewer pages (docs/bench.md, "The code that runs,
//! laid out together"). A function the script names but the build lacks (renamed, or inlined
//! since the file was made) matches nothing, so a stale file costs memory, never correctness.
//! `deploy/link-order/generate.sh` makes the file.

use std::env;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=link-order.ld");
    println!("cargo:rerun-if-env-changed=CSI_LINK_ORDER");
    let var = |key: &str| env::var(key).unwrap_or_default();
    let script = Path::new(&var("CARGO_MANIFEST_DIR")).join("link-order.ld");
    // ELF linkers (LLD, GNU ld) read an `INSERT` linker script; CSI_LINK_ORDER=off keeps the
    // default layout, for a linker that does not.
    let elf = var("CARGO_CFG_TARGET_OS") == "linux";
    let wanted = var("PROFILE") == "release" && var("CSI_LINK_ORDER") != "off";
    if wanted && elf && script.is_file() {
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}
