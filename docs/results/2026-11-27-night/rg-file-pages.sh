#!/usr/bin/env bash
# usage: BRANCH_SO=... [MAIN_SO=...] rg-file-pages.sh REPS DIR -- alternates plain (cgroup
# 128MiB), main's shim with UCACHE_READAHEAD_INLINE=1, and the proto-file-pages shim with
# file pages, with and without inline readahead: rg --mmap -j2 over DIR/tree
reps=$1 dir=$2
M=${MAIN_SO:-$PWD/target/release/libucache_preload.so}
B=${BRANCH_SO:?the proto-file-pages build, with UCACHE_INLINE_PREFETCH (see README)}
cg=/sys/fs/cgroup/memory/rgb; mkdir -p $cg; echo $((128<<20)) > $cg/memory.limit_in_bytes
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
run() { name=$1; shift; drop; /usr/bin/time -f "$name %e s, cpu %U+%S" env "$@" UCACHE_FILES="$dir/tree/*" UCACHE_MEMORY=128MiB rg --mmap --no-config -j2 -c needle $dir/tree 2>&1 >/tmp/rg-file-pages.$name | tail -1; cmp -s <(sort /tmp/rg-file-pages.plain) <(sort /tmp/rg-file-pages.$name) || echo "$name: DIFFERENT OUTPUT"; }
for r in $(seq $reps); do
  drop; /usr/bin/time -f "plain %e s, cpu %U+%S" sh -c "echo \$\$ > $cg/cgroup.procs; exec rg --mmap --no-config -j2 -c needle $dir/tree" 2>&1 >/tmp/rg-file-pages.plain | tail -1
  run inline LD_PRELOAD=$M UCACHE_READAHEAD_INLINE=1
  run fp+inline LD_PRELOAD=$B UCACHE_FILE_PAGES=1 UCACHE_INLINE_PREFETCH=1
  run fp LD_PRELOAD=$B UCACHE_FILE_PAGES=1
done
