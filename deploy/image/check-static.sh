#!/usr/bin/env bash
# Builds every sidecar static in the dev profile (build-static.sh), then runs the checks that
# need a static binary (testbed/deploy-check/tests/static_binary.rs: no dynamic loader, `--help`
# and a real `/healthz` probe inside an empty root directory). They are `#[ignore]`d in the
# plain test run because the static build compiles every dependency again for the target
# triple; .ci/run leaves them to this script.
#
#   deploy/image/check-static.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

deploy/image/build-static.sh target/static-bin dev
cargo test --locked -p testbed-deploy-check --test integration -- static_binary:: --include-ignored
