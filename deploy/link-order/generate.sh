#!/usr/bin/env bash
# Writes PACKAGE/link-order.ld: the functions a controller sidecar runs, the hottest first, as
# valgrind's callgrind counts them while `bench` drives the sidecar (with leader election on, as
# deployed) against the in-memory API server and the mock CSI driver, as a linker script
# (script.awk). build.rs beside this script hands it to the linker in release builds
# (docs/bench.md, "The code that runs, laid out together").
#
#   deploy/link-order/generate.sh provisioner|attacher|resizer
#
# Needs valgrind. Profiles the image's binary: deploy/image/build-static.sh (the same packages,
# flags and target, so the same features and the same inlining), in target/link-order with the
# symbol table kept (strip = "debuginfo") for callgrind to read the names from. Those names
# differ from the shipped, stripped build's only in the crates' disambiguators, which script.awk
# turns into wildcards; the C library's functions are named as the static build links them. Run
# it again after large changes; a stale file only leaves the newer functions out of the gathered
# part.
set -euo pipefail
cd "$(dirname "$0")/../.."

package=${1:-}
case $package in
    provisioner)
        binary=csi-provisioner
        bench_args=(--cached 2000 --claims 1000 --kube-api-qps 5000 --kube-api-burst 10000) ;;
    attacher)
        binary=csi-attacher
        bench_args=(--sidecar attacher --cached 1000 --attachments 200) ;;
    resizer)
        binary=csi-resizer
        bench_args=(--sidecar resizer --cached 1000 --pods 1000 --expansions 100) ;;
    *)
        echo "usage: $0 provisioner|attacher|resizer" >&2
        exit 2 ;;
esac

# A profile of another build names other functions: `cargo build --workspace` turns on
# csi-common's `test-support`, which changes what LLVM inlines, and the dynamic build calls the C
# library's functions by other names (clock_gettime through the vDSO) and runs none of its
# start-up (docs/bench.md). bench and the mock driver run outside the profile, built apart.
target_dir=$PWD/target/link-order
CARGO_TARGET_DIR=$target_dir CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    deploy/image/build-static.sh "$target_dir/static-bin" release
cargo build --release --target-dir "$target_dir" \
    -p testbed-sandbox --bin bench -p testbed-mock-csi --bin mock-csi-driver

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
ln -s "$target_dir/release/bench" "$target_dir/release/mock-csi-driver" "$work/bin/"
# bench starts the sidecar from --bin-dir: this wrapper runs the real one under callgrind.
cat > "$work/bin/$binary" <<WRAPPER
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file=$work/callgrind.%p --demangle=no \\
    --compress-strings=no --dump-instr=no $target_dir/static-bin/$binary "\$@" --leader-election
WRAPPER
chmod +x "$work/bin/$binary"

if ! "$work/bin/bench" --bin-dir "$work/bin" --work-dir "$work/run" --settle-secs 3 \
    --timeout-secs 900 --report "$work/report.md" "${bench_args[@]}" > "$work/bench.out" 2>&1; then
    cat "$work/report.md" >&2 || tail -50 "$work/bench.out" >&2
    exit 1
fi
# The C functions by archive member, for script.awk: libc.a, libm's archives (libm.a names them
# in a GNU ld script) and libgcc.a (`__floattidf`, which converting a u128 to f64 calls).
libc_archive=$(cc -print-file-name=libc.a)
libm=$(cc -print-file-name=libm.a)
if [ "$(head -c 7 "$libm")" = '!<arch>' ]; then
    libm_archives=$libm
else
    libm_archives=$(grep -o '/[^ )]*\.a' "$libm" || true)
fi
for archive in $libc_archive $libm_archives "$(cc -print-libgcc-file-name)"; do
    nm -A --defined-only "$archive" 2>/dev/null | awk -v archive="${archive##*/}" \
        '$2 ~ /^[TtWi]$/ { n = split($1, path, ":"); print $3, archive ":" path[n - 1] }'
done > "$work/libc-members"
awk -f deploy/link-order/hottest.awk "$work"/callgrind.* | sort -k1,1nr -k2,2 | cut -d' ' -f2- \
    | awk -v members="$work/libc-members" -f deploy/link-order/script.awk > "$package/link-order.ld"
echo "$package/link-order.ld: $(grep -c '^    \*(' "$package/link-order.ld") functions"
