#!/usr/bin/env bash
# The crash-and-restart soak (crates/ucache/tests/soak/mod.rs) for as long as asked, on the
# buffered, O_DIRECT and io_uring file stores and the S3 chunked store, all four at once, in a
# release build. Prints each store's totals: cycles run, kills, faults injected, bytes
# verified. The S3 store runs against UCACHE_S3_ENDPOINT if set, else against a SeaweedFS
# started here (scripts/s3-server.sh) and stopped on exit.
#
#   scripts/soak.sh --minutes 3
#
# UCACHE_SOAK_SEED fixes the parent's choices (the child's threads still race). Without a
# server (none given, none can be installed) the S3 store is skipped, and the run says so.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=3
while [ $# -gt 0 ]; do
  case "$1" in
  --minutes) minutes=$2; shift 2 ;;
  --minutes=*) minutes=${1#--minutes=}; shift ;;
  *) echo "usage: $0 [--minutes N]" >&2; exit 2 ;;
  esac
done
seconds=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60); if (s < 1) s = 1; print s }')

s3dir=""
logs=$(mktemp -d "${TMPDIR:-/tmp}/ucache-soak.XXXXXX")
cleanup() {
  if [ -n "$s3dir" ]; then
    bash scripts/s3-server.sh stop "$s3dir" || true
    rm -rf "$s3dir"
  fi
  rm -rf "$logs"
}
trap cleanup EXIT
if [ -z "${UCACHE_S3_ENDPOINT:-}" ]; then
  if bash scripts/s3-server.sh install; then
    s3dir=$(mktemp -d "${TMPDIR:-/tmp}/ucache-s3.XXXXXX")
    bash scripts/s3-server.sh start "$s3dir" >/dev/null
    # shellcheck disable=SC1091
    . "$s3dir/env"
  else
    echo "soak: no S3 server could be installed; the S3 chunked store is skipped" >&2
  fi
fi

# Build first, so the minutes go to the soak.
cargo test --release -p ucache --test crash_soak --no-run
cargo test --release -p ucache-object --test crash_soak --no-run

echo "soak: ${seconds} s per store, 4 stores at once"
export UCACHE_SOAK_SECONDS=$seconds
status=0
cargo test --release -p ucache --test crash_soak -- --nocapture --test-threads=3 \
  >"$logs/files.log" 2>&1 &
files=$!
cargo test --release -p ucache-object --test crash_soak -- --nocapture >"$logs/s3.log" 2>&1 &
s3=$!
wait "$files" || status=1
wait "$s3" || status=1

grep -h "^soak-summary" "$logs"/*.log | awk '
  {
    for (i = 2; i <= NF; i++) {
      split($i, kv, "=")
      v[kv[1]] = kv[2]
    }
    printf "%-11s cycles %6d  kills %6d  faults injected %9d  msync ok %8d  acknowledged facts %9d  bytes verified %14d\n",
      v["store"], v["cycles"], v["kills"], v["faults"], v["msync_ok"], v["acked_facts"], v["bytes_verified"]
    c += v["cycles"]; k += v["kills"]; f += v["faults"]; o += v["msync_ok"]; a += v["acked_facts"]; b += v["bytes_verified"]
  }
  END {
    printf "%-11s cycles %6d  kills %6d  faults injected %9d  msync ok %8d  acknowledged facts %9d  bytes verified %14d\n",
      "total", c, k, f, o, a, b
  }'
grep -h "^skipping\|kills_by" "$logs"/*.log | sed 's/.*store=\([a-z0-9_]*\).*kills_by=/kills by point, \1: /' || true
if [ "$status" -ne 0 ]; then
  echo "soak: FAILED; the logs:" >&2
  grep -h -B2 -A30 "panicked\|FAILED" "$logs"/*.log >&2 || true
  exit 1
fi
echo "soak: every acknowledged record survived every kill"
