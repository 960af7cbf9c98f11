#!/usr/bin/env bash
# usage: [SO=libucache_preload.so] rg-inline.sh REPS DIR -- alternates plain (cgroup 128MiB),
# the shim, and the shim with UCACHE_READAHEAD_INLINE=1: rg --mmap -j2 over DIR/tree
reps=$1 dir=$2
so=${SO:-$PWD/target/release/libucache_preload.so}
cg=/sys/fs/cgroup/memory/rgb; mkdir -p $cg; echo $((128<<20)) > $cg/memory.limit_in_bytes
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
run() { name=$1; shift; drop; /usr/bin/time -f "$name %e s, cpu %U+%S" env "$@" UCACHE_FILES="$dir/tree/*" UCACHE_MEMORY=128MiB rg --mmap --no-config -j2 -c needle $dir/tree 2>&1 >/tmp/rg-inline.$name | tail -1; }
for r in $(seq $reps); do
  drop; /usr/bin/time -f "plain %e s, cpu %U+%S" sh -c "echo \$\$ > $cg/cgroup.procs; exec rg --mmap --no-config -j2 -c needle $dir/tree" 2>&1 >/tmp/rg-inline.plain | tail -1
  run shim LD_PRELOAD=$so UCACHE_READAHEAD_INLINE=0
  run inline LD_PRELOAD=$so UCACHE_READAHEAD_INLINE=1
  for n in shim inline; do cmp -s <(sort /tmp/rg-inline.plain) <(sort /tmp/rg-inline.$n) || echo "$n: DIFFERENT OUTPUT"; done
done
