#!/usr/bin/env bash
# Times unmodified programs plain and through the LD_PRELOAD shim (crates/ucache-preload) on
# data at least 4x the memory budget. Plain runs go in a cgroup v1 memory cgroup
# (/sys/fs/cgroup/memory) limited to the same budget; shim runs get UCACHE_MEMORY=budget.
# Page cache is dropped before every run. Needs root, sqlite3, lmdb-utils, ripgrep, python3.
#
#   bash scripts/bench-preload.sh [--data 256MiB] [--memory 64MiB] [--dir /tmp/x] [--reps 3]
#                                 [--policy s3fifo]
#
# --dir picks the device: the default is under /var/tmp (the virtio disk here); point it at a
# zram-backed file system for the zram figures. Writes results.json and results.md under
# docs/results/<date>-preload/ and prints the table. Ratios are plain seconds / shim seconds:
# above 1 the shim is faster.
set -euo pipefail
cd "$(dirname "$0")/.."

data=256MiB memory=64MiB dir="" reps=3 policy=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bytes() { python3 -c "
import re,sys; m=re.fullmatch(r'(\d+)\s*([KMGT]?)(i?B)?', sys.argv[1], re.I)
print(int(m.group(1)) << {'':0,'K':10,'M':20,'G':30,'T':40}[m.group(2).upper()])" "$1"; }
data_b=$(bytes "$data") mem_b=$(bytes "$memory")
if [ "$data_b" -lt $((4 * mem_b)) ]; then
  echo "data ($data) must be at least 4x the budget ($memory)" >&2; exit 2
fi
for p in sqlite3 mdb_load mdb_dump rg python3; do
  command -v "$p" >/dev/null || { echo "$p missing (apt-get install -y sqlite3 lmdb-utils ripgrep)" >&2; exit 1; }
done

cargo build --release -p ucache-preload >/dev/null
so=$PWD/target/release/libucache_preload.so
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/ucache-bench-preload.XXXXXX)
mkdir -p "$dir"
out=docs/results/$(date +%Y-%m-%d)-preload
mkdir -p "$out"

cg=/sys/fs/cgroup/memory/ucache-bench-preload
mkdir -p "$cg"
echo "$mem_b" > "$cg/memory.limit_in_bytes"
cleanup() { rmdir "$cg" 2>/dev/null || true; }
trap cleanup EXIT

echo "generating $data of data under $dir" >&2
# SQLite: one table of rows of about 1 KiB.
rows=$((data_b / 1100))
if [ ! -f "$dir/bench.db" ]; then
  sqlite3 "$dir/bench.db" "PRAGMA page_size=4096; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);
    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < $rows)
    INSERT INTO t SELECT x, randomblob(1000) FROM c;"
fi
# LMDB: entries of about 1 KiB.
if [ ! -f "$dir/lmdb/data.mdb" ]; then
  mkdir -p "$dir/lmdb"
  python3 - "$rows" "$((data_b * 3))" > "$dir/lmdb.txt" <<'EOF'
import sys, random
n, mapsize = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(1)
w = sys.stdout.write
w(f"VERSION=3\nformat=bytevalue\ntype=btree\nmapsize={mapsize}\nHEADER=END\n")
for i in range(n):
    w(" " + ("key%010d" % i).encode().hex() + "\n " + r.randbytes(1000).hex() + "\n")
w("DATA=END\n")
EOF
  mdb_load -f "$dir/lmdb.txt" "$dir/lmdb"
  rm -f "$dir/lmdb.txt"
fi
# ripgrep: a tree of text files of 1-8 MiB.
if [ ! -d "$dir/tree" ]; then
  python3 - "$dir/tree" "$data_b" <<'EOF'
import os, sys, random
root, total = sys.argv[1], int(sys.argv[2])
r = random.Random(2)
words = [''.join(r.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(r.randint(3, 9))) for _ in range(5000)]
words[17] = 'needle'
done, i = 0, 0
while done < total:
    d = os.path.join(root, 'd%02d' % (i % 16)); os.makedirs(d, exist_ok=True)
    size = r.randint(1, 8) << 20
    lines = []
    n = 0
    while n < size:
        l = ' '.join(r.choice(words) for _ in range(12)) + '\n'
        lines.append(l); n += len(l)
    with open(os.path.join(d, 'f%04d.txt' % i), 'w') as f: f.write(''.join(lines))
    done += n; i += 1
EOF
fi

lookups=$((rows / 20))
# The workloads: name, glob of the files the shim caches, command.
names=(sqlite-scan sqlite-lookups lmdb-dump rg-mmap)
globs=("$dir/bench.db" "$dir/bench.db" "$dir/lmdb/*" "$dir/tree/*")
cmds=(
  "sqlite3 $dir/bench.db 'PRAGMA mmap_size=$((data_b * 2)); SELECT sum(length(v)) FROM t;'"
  "sqlite3 $dir/bench.db 'PRAGMA mmap_size=$((data_b * 2)); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < $lookups) SELECT sum(length(v)) FROM c JOIN t ON t.k = (c.x * 2654435761) % $rows + 1; SELECT sum(length(v)) FROM t;'"
  "mdb_dump $dir/lmdb | md5sum"
  "rg --mmap --no-config -j2 -c needle $dir/tree | sort | md5sum"
)

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
run_plain() { # in the memory cgroup
  drop
  local t0; t0=$(now)
  sh -c "echo \$\$ > $cg/cgroup.procs; exec sh -c \"\$0\"" "$1" > "$dir/out.plain"
  python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$t0" "$(now)"
}
run_shim() {
  drop
  local t0; t0=$(now)
  env LD_PRELOAD="$so" UCACHE_FILES="$2" UCACHE_MEMORY="$memory" ${policy:+UCACHE_POLICY=$policy} \
    UCACHE_STATS=1 sh -c "$1" > "$dir/out.shim" 2> "$dir/err.shim"
  python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$t0" "$(now)"
}

json="$out/results.json"
md="$out/results.md"
{
  echo "# ucache-preload benchmark, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "data $data, budget $memory, dir $dir ($(df --output=source "$dir" | tail -1)), reps $reps, policy ${policy:-clock (default)}"
  echo "Command: \`bash scripts/bench-preload.sh --data $data --memory $memory --reps $reps${policy:+ --policy $policy}\`"
  echo
  echo "| workload | plain s (cgroup) | shim s | plain/shim | same output |"
  echo "|---|---|---|---|---|"
} > "$md"
echo "[" > "$json"
first=1
for i in "${!names[@]}"; do
  name=${names[$i]} glob=${globs[$i]} cmd=${cmds[$i]}
  pl=() sh=() same=yes
  for _ in $(seq "$reps"); do
    pl+=("$(run_plain "$cmd")")
    sh+=("$(run_shim "$cmd" "$glob")")
    cmp -s "$dir/out.plain" "$dir/out.shim" || same=no
  done
  grep -q "ucache-preload: stats: mappings [1-9]" "$dir/err.shim" || same="$same (shim mapped nothing!)"
  read -r pmed smed ratio < <(python3 -c "
import statistics,sys
p=[float(x) for x in sys.argv[1].split()]; s=[float(x) for x in sys.argv[2].split()]
print(f'{statistics.median(p):.3f} {statistics.median(s):.3f} {statistics.median(p)/statistics.median(s):.3f}')" "${pl[*]}" "${sh[*]}")
  echo "| $name | ${pl[*]} (median $pmed) | ${sh[*]} (median $smed) | $ratio | $same |" >> "$md"
  [ $first = 1 ] || echo "," >> "$json"
  first=0
  printf '{"workload":"%s","data":"%s","memory":"%s","plain_s":[%s],"shim_s":[%s],"ratio":%s,"same_output":"%s"}\n' \
    "$name" "$data" "$memory" "$(IFS=,; echo "${pl[*]}")" "$(IFS=,; echo "${sh[*]}")" "$ratio" "$same" >> "$json"
  tail -1 "$dir/err.shim" | cut -c1-300 >&2
done
echo "]" >> "$json"
cat "$md"
