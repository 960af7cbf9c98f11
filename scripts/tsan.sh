#!/usr/bin/env bash
# Runs the explicit-mode tests of the core under ThreadSanitizer, which reports every pair of
# accesses that no happens-before edge orders: the state word's protocol, the evictor, the IO
# threads, write-back and the io_uring store, with real threads and real IO.
#
# Left out: the transparent-mode tests. TSan cannot see the ordering the kernel provides there
# (write protection and the fault that waits on the state word), records a faulting store
# before the handler has ordered it, and installs a SIGBUS handler of its own. Their stress
# tests verify every byte instead, and the model (tests/model.rs) interleaves write-protect
# faults with pins and evictions. Suites that run each case in both modes (sync_failure,
# hostile_policies) run their explicit half here: UCACHE_TSAN=1 makes
# `common::transparent_modes()` explicit only. Tried with their transparent half too
# (2026-11-26): TSan reports the plain store of a test thread against the write-back's read
# of the same bytes on the IO thread, the pair the write protection orders.
#
# Needs the pinned nightly with rust-src (scripts/miri.sh installs the same one), since TSan
# needs std rebuilt with it (-Zbuild-std).
set -euo pipefail
cd "$(dirname "$0")/.."
toolchain=${MIRI_TOOLCHAIN:-nightly-2026-05-20}
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1 \
  || ! rustup component list --toolchain "$toolchain" --installed | grep -q rust-src; then
  rustup toolchain install "$toolchain" --profile minimal --component miri,rust-src
fi
target=$(rustup run "$toolchain" rustc -vV | sed -n 's/^host: //p')
# Its own target directory: every crate is built with the sanitizer.
export CARGO_TARGET_DIR=${TSAN_TARGET_DIR:-target/tsan}
export RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread"
# A backtrace takes seconds to print in a TSan build, long enough to trip the tests' hang
# watchdogs; allocator_may_return_null lets the test of an allocation too large to be had see
# the failure it expects instead of TSan aborting.
export RUST_BACKTRACE=0 UCACHE_TSAN=1
export TSAN_OPTIONS="halt_on_error=1 abort_on_error=1 report_signal_unsafe=0 allocator_may_return_null=1 suppressions=$PWD/scripts/tsan.suppressions"
tests=()
for t in bad_input budget_edges durability evictor file_stores handler_threads memory_store \
  hostile_policies landing misbehaving_stores msync policy_edge_cases policy_library policy_live \
  policy_safety prefetch protocol_edges scan_bypass stats_shards stress sync_failure weights; do
  tests+=(--test "$t")
done
cargo +"$toolchain" test -Zbuild-std --target "$target" -p ucache --lib "${tests[@]}"
