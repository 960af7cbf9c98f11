#!/usr/bin/env bash
# usage: guard-vs-shim.sh REPS DIR -- alternates, per rep: the rg-shaped program guard.c plain
# (kernel mmap in a 128 MiB cgroup v1), through the shim (128 MiB, inline readahead), and in
# its guarded-file mode with 256 KiB and 1 MiB windows (128 MiB budget, no cgroup); then rg
# itself plain and through the shim, for scale. DIR/tree is bench-preload.sh's rg tree.
set -e
reps=$1 dir=$2
here=$(cd "$(dirname "$0")" && pwd)
S=${SHIM_SO:-$PWD/target/release/libucache_preload.so}
cc -O2 -pthread -o /tmp/guard-prog "$here/guard.c"
find "$dir/tree" -type f | sort > /tmp/guard-list.txt
cg=/sys/fs/cgroup/memory/guard; mkdir -p $cg; echo $((128<<20)) > $cg/memory.limit_in_bytes
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
t() { name=$1; shift; drop; /usr/bin/time -f "$name %e s, cpu %U+%S" "$@" 2>&1 >/tmp/guard-out.$name | tail -1; }
for r in $(seq "$reps"); do
  echo "rep $r"
  t prog-plain sh -c "echo \$\$ > $cg/cgroup.procs; exec /tmp/guard-prog plain /tmp/guard-list.txt 2 0 0"
  t prog-shim env LD_PRELOAD=$S UCACHE_FILES="$dir/tree/*" UCACHE_MEMORY=128MiB UCACHE_READAHEAD_INLINE=1 /tmp/guard-prog plain /tmp/guard-list.txt 2 0 0
  t prog-guard-256k /tmp/guard-prog guard /tmp/guard-list.txt 2 $((128<<20)) $((256<<10))
  t prog-guard-1m /tmp/guard-prog guard /tmp/guard-list.txt 2 $((128<<20)) $((1<<20))
  t prog-guard-256k-b8m /tmp/guard-prog guard /tmp/guard-list.txt 2 $((8<<20)) $((256<<10))
  t rg-plain sh -c "echo \$\$ > $cg/cgroup.procs; exec rg --mmap --no-config -j2 -c needle $dir/tree"
  t rg-shim env LD_PRELOAD=$S UCACHE_FILES="$dir/tree/*" UCACHE_MEMORY=128MiB UCACHE_READAHEAD_INLINE=1 rg --mmap --no-config -j2 -c needle "$dir/tree"
  for n in prog-shim prog-guard-256k prog-guard-1m prog-guard-256k-b8m; do
    cmp -s <(head -c 12 /tmp/guard-out.prog-plain) <(head -c 12 /tmp/guard-out.$n) || echo "$n: DIFFERENT COUNT"
  done
done
