#!/usr/bin/env bash
# ucache over S3 against raw-get (the same ranged GETs, no cache) on a SeaweedFS server started
# here (scripts/s3-server.sh) and stopped on exit. Extra arguments go to `ucache bench`.
#
#   scripts/bench-s3.sh                                   # lookup, misses, depth 32
#   scripts/bench-s3.sh --sweep-prefetch-depth 1,4,16,32,64
#   scripts/bench-s3.sh seq                               # (first argument: lookup|seq)
#   MEMORY=512MiB scripts/bench-s3.sh                     # all hits
#
# DATA, MEMORY and BUFFER (defaults 256MiB, 16MiB, 64KiB) set the sizes: 256 MiB under a
# 16 MiB budget makes about 94% of lookups miss, so the default measures the miss path.
# Results go to docs/results/s3/ unless --json is given.
set -euo pipefail
cd "$(dirname "$0")/.."

workload=lookup
if [ "${1:-}" = lookup ] || [ "${1:-}" = seq ]; then
  workload=$1
  shift
fi

bash scripts/s3-server.sh install
dir=$(mktemp -d "${TMPDIR:-/tmp}/ucache-s3-bench.XXXXXX")
cleanup() {
  bash scripts/s3-server.sh stop "$dir" || true
  rm -rf "$dir"
}
trap cleanup EXIT
endpoint=$(bash scripts/s3-server.sh start "$dir")
# shellcheck disable=SC1091
. "$dir/env"

cargo build --release -p ucache-cli
mkdir -p docs/results/s3
stamp=$(date -u +%Y%m%dT%H%M%SZ)
json=()
case " $* " in
*" --json "*) ;;
*) json=(--json "docs/results/s3/$workload-$stamp.json") ;;
esac
data=${DATA:-256MiB}
./target/release/ucache bench "$workload" \
  --store "s3://ucache-bench/data-$data" --endpoint "$endpoint" \
  --data "$data" --memory "${MEMORY:-16MiB}" --buffer-size "${BUFFER:-64KiB}" \
  --systems ucache-explicit,ucache-prefetch,raw-get \
  "${json[@]}" "$@"
