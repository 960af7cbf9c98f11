#!/usr/bin/env bash
# Runs the unit tests of the lock-free structures that make no system calls under Miri, which
# checks every memory access for undefined behaviour and every atomic access for data races
# (with weak-memory emulation): the buffer state word and its waiters, CLOCK and its resident
# set, the global policy, the lock-free readahead detector and the other prefetchers, the
# statistics, the record of what a thread holds, the containment of a panicking store, and the
# ordering of an exclusive holder's stores against optimistic readers.
# Code that maps memory or does IO is beyond Miri; scripts/memcheck.sh runs it under valgrind
# instead.
# Installs the pinned nightly with miri if it is missing (pinned, so that a new nightly cannot
# turn CI red).
set -euo pipefail
cd "$(dirname "$0")/.."
toolchain=${MIRI_TOOLCHAIN:-nightly-2026-05-20}
if ! cargo +"$toolchain" miri --version >/dev/null 2>&1; then
  rustup toolchain install "$toolchain" --profile minimal --component miri,rust-src
fi
cargo +"$toolchain" miri test -p ucache --lib -- state:: policy::resident policy::clock policy::global \
  policy::prefetch stats:: held:: store::contained guard::
