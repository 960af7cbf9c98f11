#!/usr/bin/env bash
# The runs behind the README's transparent-mode results (issue #3): ucache as a drop-in for
# mmap, plain loads on a transparent mapping, against mmap in a memory cgroup of the same budget,
# in the same run. Writes JSON and SVG to $OUT (default bench-out/transparent). Needs root (the
# cgroup and the zram device). Takes about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-out/transparent}
mkdir -p "$OUT"
cargo build --release -p ucache-cli
U=target/release/ucache
S=${SECONDS_PER_RUN:-5}
LOOKUP=ucache-transparent,ucache-transparent-tracked,ucache-transparent-threads,ucache-explicit,mmap,raw-psync

# Out of memory (data 8x the budget), random 4 KiB lookups: virtio (device-bound) ...
for t in 2 16; do
  $U bench lookup --data 4GiB --memory 512MiB --threads $t --seconds "$S" --reps 2 \
    --systems $LOOKUP --json "$OUT/virtio-lookup-t$t.json" --plot "$OUT/virtio-lookup-t$t.svg"
done

# ... and zram (software-bound: the kernel's fault path is the bar).
ZFILE=$(bash scripts/zram-setup.sh 6G | tail -1)
for t in 2 16; do
  $U bench lookup --data 4GiB --memory 512MiB --threads $t --seconds "$S" --reps 2 \
    --systems $LOOKUP --file "$ZFILE" \
    --json "$OUT/zram-lookup-t$t.json" --plot "$OUT/zram-lookup-t$t.svg"
done

# Sequential insertion on zram across buffer sizes (the paper's Figure 6): every access a miss
# with eviction; ucache with its sequential readahead, mmap with the kernel's.
$U bench seq --data 4GiB --memory 512MiB --threads 2 --seconds "$S" --reps 2 \
  --systems ucache-transparent,mmap --file "$ZFILE" --sweep-buffer-size 4KiB,8KiB,16KiB,32KiB,64KiB \
  --json "$OUT/zram-seq-sweep.json" --plot "$OUT/zram-seq-sweep.svg"

# Memory sweep on zram, lookups (the paper's Figure 8): from 1/16 of the data to all of it.
$U bench lookup --data 4GiB --threads 2 --seconds "$S" --reps 2 \
  --systems ucache-transparent,mmap --file "$ZFILE" --sweep-memory 256MiB,1GiB,2GiB,5GiB \
  --json "$OUT/zram-lookup-memory-sweep.json" --plot "$OUT/zram-lookup-memory-sweep.svg"

# Skewed lookups (Zipf 0.99): what access tracking buys CLOCK.
$U bench zipf --data 4GiB --memory 512MiB --threads 2 --seconds "$S" --reps 2 \
  --systems ucache-transparent,ucache-transparent-tracked,ucache-explicit,mmap --file "$ZFILE" \
  --json "$OUT/zram-zipf-t2.json" --plot "$OUT/zram-zipf-t2.svg"

# In memory: no per-access cost once cached.
$U bench lookup --data 1GiB --memory 2GiB --threads 2 --seconds "$S" --reps 2 \
  --systems array,ucache-transparent,mmap \
  --json "$OUT/memory-lookup-t2.json" --plot "$OUT/memory-lookup-t2.svg"
