#!/usr/bin/env bash
# The runs behind the README's results table. Each writes JSON and an SVG to $OUT (default
# bench-out/). Needs root for the memory cgroup and the zram device. Takes about 14 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
cargo build --release -p ucache-cli
U=target/release/ucache
S=${SECONDS_PER_RUN:-5}
ALL=ucache-explicit,ucache-prefetch,ucache-optimistic,mmap,pread,raw-psync,raw-psync-fresh,raw-uring,raw-uring-fresh

# Out of memory on the virtio disk (device-bound): data 8x the budget.
for t in 2 16; do
  $U bench lookup --data 4GiB --memory 512MiB --threads $t --seconds "$S" --reps 2 --store uring \
    --systems $ALL --json "$OUT/virtio-lookup-t$t.json" --plot "$OUT/virtio-lookup-t$t.svg"
done

# Out of memory on zram (software-bound, the regime of fast NVMe SSDs).
if ZFILE=$(bash scripts/zram-setup.sh 6G | tail -1) && [ -n "$ZFILE" ]; then
  for t in 2 16; do
    $U bench lookup --data 4GiB --memory 512MiB --threads $t --seconds "$S" --reps 2 --store uring \
      --systems $ALL --file "$ZFILE" --json "$OUT/zram-lookup-t$t.json" --plot "$OUT/zram-lookup-t$t.svg"
  done
fi

# In memory: everything fits in the budget.
$U bench lookup --data 1GiB --memory 2GiB --threads 2 --seconds "$S" --reps 2 \
  --systems ucache-explicit,ucache-optimistic,array,mmap \
  --json "$OUT/memory-lookup-t2.json" --plot "$OUT/memory-lookup-t2.svg"
