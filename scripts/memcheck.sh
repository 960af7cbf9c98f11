#!/usr/bin/env bash
# Runs the integration tests that exercise the unsafe code (mmap regions, guards, batched IO
# into mapping memory, io_uring) under valgrind's memcheck. Miri cannot run them: they make
# real system calls. Needs the debug test binaries (cargo test --no-run builds them).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null 2>&1; then
  echo "memcheck: valgrind not installed, skipped"
  exit 0
fi
cargo test -p ucache --tests --no-run 2>/dev/null
bins=$(cargo test -p ucache --tests --no-run --message-format=json 2>/dev/null \
  | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 \
  | grep -E '/(bad_input|stress|file_stores|pool)-')
for b in $bins; do
  echo "memcheck: $(basename "$b")"
  # valgrind 3.19 does not know pidfd_open, so these runs take the per-range madvise path.
  log=$(mktemp)
  # The stress test of pool and in-place mappings together stamps and checks 128 MiB byte by
  # byte: hours under valgrind. The pool-only stress test covers the same unsafe code.
  skip=()
  # Likewise the pool's race of optimistic readers against frame reuse, 80,000 validated reads
  # (shuttle and the native run cover the race; the other pool tests cover the frames here).
  case "$(basename "$b")" in
    stress-*) skip=(--skip stress_pool_and_in_place) ;;
    pool-*) skip=(--skip optimistic_readers_never_validate_a_reused_frame) ;;
  esac
  if ! valgrind -q --error-exitcode=99 "$b" --test-threads=2 "${skip[@]}" >"$log" 2>&1; then
    grep -v "unhandled amd64-linux syscall\|write your own handler\|README_MISSING\|consider this a bug\|valgrind.org" "$log"
    exit 1
  fi
  rm -f "$log"
done
echo "memcheck: no errors"
