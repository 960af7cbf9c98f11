#!/usr/bin/env bash
# usage: rgbench3.sh REPS SO  -- alternates plain (cgroup 128MiB), shim, shim with UCACHE_FILE_PAGES=1: rg --mmap on zram
reps=$1 so=$2
dir=${RGDIR:-/mnt/ucache-zram/rg}
cg=/sys/fs/cgroup/memory/rgb; mkdir -p $cg; echo $((128<<20)) > $cg/memory.limit_in_bytes
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
for r in $(seq $reps); do
  drop; /usr/bin/time -f "plain      %e s, cpu %U+%S" sh -c "echo \$\$ > $cg/cgroup.procs; exec rg --mmap --no-config -j2 -c needle $dir/tree" 2>&1 >/dev/null | tail -1
  drop; /usr/bin/time -f "shim       %e s, cpu %U+%S" env LD_PRELOAD=$so UCACHE_FILES="$dir/tree/*" UCACHE_MEMORY=128MiB rg --mmap --no-config -j2 -c needle $dir/tree 2>&1 >/dev/null | tail -1
  drop; /usr/bin/time -f "shim+files %e s, cpu %U+%S" env LD_PRELOAD=$so UCACHE_FILE_PAGES=1 UCACHE_FILES="$dir/tree/*" UCACHE_MEMORY=128MiB rg --mmap --no-config -j2 -c needle $dir/tree 2>&1 >/dev/null | tail -1
done
