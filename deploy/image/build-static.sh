#!/usr/bin/env bash
# Builds the sidecar binaries exactly as the Containerfile does: fully static (glibc's libc.a
# linked in, `-C target-feature=+crt-static`), release profile, for x86_64-unknown-linux-gnu,
# then checks that none of them needs a dynamic loader. The Containerfile runs this script, so
# the image and a local build cannot drift apart.
#
#   deploy/image/build-static.sh [OUT_DIR] [PROFILE]
#
# OUT_DIR (default target/static-bin) receives csi-provisioner, csi-attacher, csi-resizer,
# csi-node-driver-registrar and livenessprobe. PROFILE is `release` (default, what the images
# ship) or `dev` (a quick static build for checks). CARGO_TARGET_DIR is honoured
# (deploy/link-order/generate.sh builds the same binaries with their symbol table kept).
#
# Why glibc and not musl: the musl target is not installed on the build machines this project
# uses; glibc links statically as long as nothing calls NSS. The sidecars reach the API server by
# the IP address in KUBERNETES_SERVICE_HOST (in-cluster) or the server URL of a kubeconfig; a
# kubeconfig or --master that names a *host name* needs getaddrinfo, which a static glibc cannot
# serve in a `scratch` image (no libnss_*.so): use an IP address there (docs/install.md).
set -euo pipefail
cd "$(dirname "$0")/../.."

out_dir=${1:-target/static-bin}
profile=${2:-release}
target=x86_64-unknown-linux-gnu
binaries=(csi-provisioner csi-attacher csi-resizer csi-node-driver-registrar livenessprobe)
packages=(provisioner attacher resizer registrar livenessprobe)

export CARGO_INCREMENTAL=0
# v0 symbol names, as .cargo/config.toml sets them (RUSTFLAGS replace its rustflags): the link
# order files match them (deploy/link-order).
export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C symbol-mangling-version=v0"
package_args=()
for p in "${packages[@]}"; do package_args+=(-p "$p"); done
cargo build --locked --profile "$profile" --target "$target" --bins "${package_args[@]}"

case $profile in
    dev) profile_dir=debug ;;
    *) profile_dir=$profile ;;
esac
mkdir -p "$out_dir"
for b in "${binaries[@]}"; do
    cp "${CARGO_TARGET_DIR:-target}/$target/$profile_dir/$b" "$out_dir/$b"
    # A static binary has no PT_INTERP program header (no dynamic loader) and no NEEDED entry.
    if readelf --program-headers --wide "$out_dir/$b" | grep -q INTERP; then
        echo "$b: has a dynamic loader (PT_INTERP); not static" >&2
        exit 1
    fi
    if readelf --dynamic --wide "$out_dir/$b" | grep -q NEEDED; then
        echo "$b: needs shared libraries:" >&2
        readelf --dynamic --wide "$out_dir/$b" | grep NEEDED >&2
        exit 1
    fi
done
ls -l "${binaries[@]/#/$out_dir/}"
