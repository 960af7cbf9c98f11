#!/bin/bash
set -x
cd /work/wt-kv
R=docs/results/2026-11-26-kv-ycsb
B=./target/release/ucache-kv
uptime > $R/load.txt
$B bench --dir /tmp/kvy --keys 400000 --reps 2 --seconds 3 --warmup 1 \
   --memory-in 536870912 --memory-out 12582912 \
   --workloads ycsb-a,ycsb-b,ycsb-c,ycsb-e,ycsb-f,ycsb-e-uniform,ycsb-f-uniform \
   --durability nosync --json $R/ycsb-nosync.json --svg $R/ycsb-nosync.svg > $R/ycsb-nosync-table.md 2> $R/ycsb-nosync-stderr.txt
uptime >> $R/load.txt
$B tpcc --dir /tmp/kvtpcc --warehouses 1 --reps 2 --seconds 3 --warmup 1 \
   --memory-in 1073741824 --memory-out 33554432 --durability nosync,sync --check \
   --json $R/tpcc.json > $R/tpcc-table.md 2> $R/tpcc-stderr.txt
uptime >> $R/load.txt
$B bench --dir /tmp/kvy --keys 400000 --reps 2 --seconds 3 --warmup 1 \
   --memory-in 536870912 --memory-out 12582912 \
   --workloads ycsb-a,ycsb-b,ycsb-e,ycsb-f \
   --durability sync --json $R/ycsb-sync.json --svg $R/ycsb-sync.svg > $R/ycsb-sync-table.md 2> $R/ycsb-sync-stderr.txt
uptime >> $R/load.txt
# TPC-C again, with the cgroup slack raised to 32 MiB (--slack, the new default): run 1 above
# (8 MiB slack, files tpcc-run1-slack8*) lost its out-of-memory cells to the cgroup's OOM kill.
$B tpcc --dir /tmp/kvtpcc --warehouses 1 --reps 2 --seconds 3 --warmup 1 \
   --memory-in 1073741824 --memory-out 33554432 --durability nosync,sync --check \
   --json $R/tpcc.json > $R/tpcc-table.md 2> $R/tpcc-stderr.txt
