#!/usr/bin/env bash
# Every test of the project: unit, integration, doc tests, and the shuttle model check of the
# buffer protocol (a separate build, since it swaps the state word's atomics for shuttle's).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets
cargo test --workspace --doc
cargo test -p ucache --features shuttle --test model
