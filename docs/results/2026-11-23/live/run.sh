#!/bin/sh
# The measurements of README.md, in the order they were taken. Run from the repository root
# after `cargo build --release`. Each run is one rep of 3 s (+1 s warm-up) per row.
set -e
B=target/release/ucache
D=docs/results/2026-11-23/live
C="--threads 2 --seconds 3 --warmup 1 --reps 1"
YCSB="--data 1GiB --memory 128MiB --file /var/tmp/ucache-live-1GiB.dat --systems ucache-explicit --policies clock,lfu,s3fifo,lhd,w-tinylfu"
for m in a b c; do
  $B bench ycsb-$m $C $YCSB --json $D/ycsb-$m.json
done
$B bench getscan $C --data 1GiB --memory 128MiB --file /var/tmp/ucache-live-1GiB.dat \
  --systems ucache-explicit,mmap --policies clock,get-scan --json $D/getscan.json
$B bench search $C --data 256MiB --memory 176MiB --file /var/tmp/ucache-live-256MiB.dat \
  --systems ucache-explicit,mmap --policies clock,lru,mru --json $D/search.json
$B bench tenants $C --data 1GiB --memory 128MiB --file /var/tmp/ucache-live-1GiB.dat \
  --systems ucache-explicit --policies clock,lfu,mru,lfu+mru --tenant-weights 1,1 \
  --json $D/tenants-1-1.json
$B bench tenants $C --data 1GiB --memory 128MiB --file /var/tmp/ucache-live-1GiB.dat \
  --systems ucache-explicit --policies clock,lfu+mru --tenant-weights 4,1 \
  --json $D/tenants-4-1.json
# search again with 128 KiB buffers, the kernel's default readahead window: one ucache miss
# then loads as much as one mmap readahead does.
$B bench search $C --data 256MiB --memory 176MiB --file /var/tmp/ucache-live-256MiB.dat \
  --buffer-size 128KiB --systems ucache-explicit,mmap --policies clock,lru,mru \
  --json $D/search-128k.json
