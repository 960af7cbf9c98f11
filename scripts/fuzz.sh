#!/usr/bin/env bash
# Fuzzes with cargo-fuzz (libFuzzer + AddressSanitizer, debug assertions on): builds every
# target of fuzz/ and runs each for a bounded time, starting from its corpus in
# fuzz/corpus/<target>/ (kept in the repository; new inputs go to a scratch directory, so a
# run changes nothing here). A crash, panic, leak, timeout or out-of-memory is a failing test:
# the script exits non-zero and names the input libFuzzer saved under fuzz/artifacts/<target>/.
# Prints the executions each target ran (libFuzzer's final stats).
#
#   scripts/fuzz.sh [--seconds N] [TARGET...]    N seconds per target (default 15)
#
# Uses the pinned nightly of scripts/miri.sh (installed if missing) and cargo-fuzz (installed
# with `cargo install --locked` if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=15
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seconds=*) seconds=${1#--seconds=}; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  targets=(traces manifest cli_parsers api_model)
fi

toolchain=${FUZZ_TOOLCHAIN:-${MIRI_TOOLCHAIN:-nightly-2026-05-20}}
if ! cargo +"$toolchain" --version >/dev/null 2>&1; then
  rustup toolchain install "$toolchain" --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

# One build of every target (they share their dependencies); the runs below reuse it.
cargo +"$toolchain" fuzz build --debug-assertions

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ucache-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
failed=()
summary=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t" "$scratch/$t"
  log="$scratch/$t.log"
  echo "== fuzz $t: ${seconds}s"
  rc=0
  cargo +"$toolchain" fuzz run --debug-assertions "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    echo "== fuzz $t: FAILED (exit $rc) after ${execs:-?} executions; input saved under fuzz/artifacts/$t/"
    failed+=("$t")
  fi
  summary+=("$(printf '%-12s %10s executions in %ss' "$t" "${execs:-?}" "$seconds")")
done
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]}" >&2
  exit 1
fi
