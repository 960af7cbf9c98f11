#!/bin/bash
# ab.sh ROUNDS: out-of-memory (12 MiB) YCSB C and uniform lookups, 2 threads, 3 s after 1 s of
# warmup: the pool before (main at a87cf79, format-1 data), the pool after (this branch) and
# LMDB, interleaved within each round. Each worker in a fresh v1 memory cgroup of budget +
# 8 MiB, its data files dropped from the page cache first; perf counts block requests.
NEW=/work/wt-kv2/target/release/ucache-kv; OLD=/tmp/kv-base/target/release/ucache-kv
mem=12582912
one() { # label bin system dir workload
  local cg=/sys/fs/cgroup/memory/kvab-$$; mkdir $cg; echo $((mem + (8<<20))) > $cg/memory.limit_in_bytes
  for f in $4/data $4/wal $4/data.mdb; do [ -f $f ] && python3 -c "import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" $f; done
  local out=$(perf stat -x, -e block:block_rq_issue -- $2 worker --system $3 --dir $4 --keys 400000 --memory $mem --workload $5 --seconds 3 --warmup 1 --cgroup $cg 2>&1)
  rmdir $cg
  local ops=$(echo "$out" | grep -o 'ops_per_sec":[0-9.]*' | cut -d: -f2)
  local cpu=$(echo "$out" | grep -o 'cpu_us_per_op":[0-9.]*' | cut -d: -f2)
  local blk=$(echo "$out" | grep block_rq_issue | cut -d, -f1)
  echo "$r $5 $1 $ops $cpu $blk"
}
echo "round workload system ops_per_sec cpu_us_per_op block_requests_in_4s"
for r in $(seq 1 $1); do
  for w in ycsb-c lookup; do
    one pool-before $OLD kv-ucache-pool /tmp/kvl/kv-ucache-pool-400000 $w
    one pool-after $NEW kv-ucache-pool /tmp/kvl3/kv-ucache-pool-400000 $w
    one lmdb $NEW lmdb /tmp/kvl3/lmdb-400000 $w
  done
done
