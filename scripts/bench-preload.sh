#!/usr/bin/env bash
# Times unmodified programs plain and through the LD_PRELOAD shim (crates/ucache-preload) on
# data at least 4x the memory budget. Plain runs go in a cgroup v1 memory cgroup
# (/sys/fs/cgroup/memory) limited to the same budget; shim runs get UCACHE_MEMORY=budget.
# Page cache is dropped before every run. Needs root, sqlite3, lmdb-utils, ripgrep, python3.
#
#   bash scripts/bench-preload.sh [--data 256MiB] [--memory 64MiB] [--dir /tmp/x] [--reps 3]
#        [--policies clock,s3fifo] [--workloads sqlite-scan,sqlite-mix] [--slack 16MiB]
#        [--name results] [--out docs/results/DATE-preload]
#
# --dir picks the device: the default is under /var/tmp (the virtio disk here); point it at a
# zram-backed file system (scripts/zram-setup.sh) for the zram figures. --policies runs the
# shim once per policy in every rep (the default: ucache's default, clock + readahead);
# --policy P is --policies P. A policy may carry shim settings after '@', each run with it:
# `--policies default,default@UCACHE_READAHEAD_INLINE=1` compares the two readaheads
# (`default` is ucache's default policy). --workloads picks some of: sqlite-scan sqlite-lookups sqlite-mix
# lmdb-dump rg-mmap (default: all). --slack S runs plain and shim alike in a memory cgroup of
# budget + S (the shim's UCACHE_MEMORY stays the budget): without it the shim runs have no
# cgroup, and the shim reads the file with pread, through a page cache that is then unbounded
# and serves its re-reads from memory; with it both get the same memory, the shim's overhead
# (its heap, the program's) and page cache included. Writes <name>.json and
# <name>.md under docs/results/<date>-preload/ and prints the table. Ratios are plain seconds /
# shim seconds (medians): above 1 the shim is faster. Every run's output is compared with the
# first plain run's. Each run's CPU time (user + system, of the whole process tree: the
# shim's IO threads included) is reported beside its wall time: on a machine shared with
# other work the wall time swings with the neighbours' load, the CPU time much less.
# UCACHE_PRELOAD_SO=path benchmarks that build of the shim instead of building this tree's
# (to compare two builds, run the script once with each).
#
# sqlite-mix is the workload where the policy matters: one sqlite3 process runs 3 rounds of
# point lookups on a hot set of rows (one row on each of budget/16 KiB pages scattered over
# the table, each looked up about 3 times a round) and then a full scan of the table. A
# scan-resistant policy keeps the hot pages through the scans; CLOCK and LRU let each scan
# flush them.
set -euo pipefail
cd "$(dirname "$0")/.."

data=256MiB memory=64MiB dir="" reps=3 policies="" workloads="" slack="" name=results out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --policy|--policies) policies=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --slack) slack=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bytes() { python3 -c "
import re,sys; m=re.fullmatch(r'(\d+)\s*([KMGT]?)(i?B)?', sys.argv[1], re.I)
print(int(m.group(1)) << {'':0,'K':10,'M':20,'G':30,'T':40}[m.group(2).upper()])" "$1"; }
data_b=$(bytes "$data") mem_b=$(bytes "$memory")
slack_b=0
[ -z "$slack" ] || slack_b=$(bytes "$slack")
if [ "$data_b" -lt $((4 * mem_b)) ]; then
  echo "data ($data) must be at least 4x the budget ($memory)" >&2; exit 2
fi
for p in sqlite3 mdb_load mdb_dump rg python3; do
  command -v "$p" >/dev/null || { echo "$p missing (apt-get install -y sqlite3 lmdb-utils ripgrep)" >&2; exit 1; }
done

if [ -n "${UCACHE_PRELOAD_SO:-}" ]; then
  so=$UCACHE_PRELOAD_SO
else
  cargo build --release -p ucache-preload >/dev/null
  so=$PWD/target/release/libucache_preload.so
fi
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/ucache-bench-preload.XXXXXX)
mkdir -p "$dir"
[ -n "$out" ] || out=docs/results/$(date +%Y-%m-%d)-preload
mkdir -p "$out"

cg=/sys/fs/cgroup/memory/ucache-bench-preload
mkdir -p "$cg"
echo $((mem_b + slack_b)) > "$cg/memory.limit_in_bytes"
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
# sqlite-mix: budget/16KiB hot rows (a quarter of the budget in 4 KiB pages), scattered by a
# multiplicative hash; each round looks each up 3 times in a fixed order, then scans.
hot=$((mem_b / 16384)) mix=""
for r in 1 2 3; do
  mix+=" WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < $((3 * hot)))
    SELECT count(*), sum(instr(v, zeroblob(1))) FROM c
    JOIN t ON t.k = (((x * 7919 + $r * 104729) % $hot) * 2654435761) % $rows + 1;
    SELECT count(*), sum(instr(v, char(65))) FROM t;"
done
# The workloads: name, glob of the files the shim caches, command.
names=(sqlite-scan sqlite-lookups sqlite-mix lmdb-dump rg-mmap)
globs=("$dir/bench.db" "$dir/bench.db" "$dir/bench.db" "$dir/lmdb/*" "$dir/tree/*")
cmds=(
  "sqlite3 $dir/bench.db 'PRAGMA mmap_size=$((data_b * 2)); SELECT sum(length(v)) FROM t;'"
  "sqlite3 $dir/bench.db 'PRAGMA mmap_size=$((data_b * 2)); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < $lookups) SELECT sum(length(v)) FROM c JOIN t ON t.k = (c.x * 2654435761) % $rows + 1; SELECT sum(length(v)) FROM t;'"
  "sqlite3 $dir/bench.db 'PRAGMA mmap_size=$((data_b * 2)); $mix'"
  "mdb_dump $dir/lmdb | md5sum"
  "rg --mmap --no-config -j2 -c needle $dir/tree | sort | md5sum"
)

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
# Prints "wall cpu": seconds since $1, and the user + system seconds /usr/bin/time wrote.
took() {
  python3 -c "import sys; u, s = open(sys.argv[3]).read().split()[-2:]
print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f} {float(u) + float(s):.2f}')" "$1" "$(now)" "$dir/time"
}
run_plain() { # in the memory cgroup
  drop
  local t0; t0=$(now)
  /usr/bin/time -f "%U %S" -o "$dir/time" \
    sh -c "echo \$\$ > $cg/cgroup.procs; exec sh -c \"\$0\"" "$1" > "$dir/out.plain"
  took "$t0"
}
run_shim() { # command, glob, variant (POLICY[@VAR=VALUE...]); in the cgroup with --slack
  drop
  local t0 join="" pol=${3%%@*} extra=(); t0=$(now)
  [ "$pol" != default ] || pol=""
  [[ "$3" != *@* ]] || IFS=@ read -r -a extra <<< "${3#*@}"
  [ -z "$slack" ] || join="echo \$\$ > $cg/cgroup.procs; "
  /usr/bin/time -f "%U %S" -o "$dir/time" \
    env LD_PRELOAD="$so" UCACHE_FILES="$2" UCACHE_MEMORY="$memory" ${pol:+UCACHE_POLICY=$pol} \
    "${extra[@]}" UCACHE_STATS=1 sh -c "${join}exec sh -c \"\$0\"" "$1" > "$dir/out.shim" \
    2> "$dir/err.shim"
  took "$t0"
}

IFS=, read -r -a pols <<< "${policies:-}"
[ ${#pols[@]} -gt 0 ] || pols=("")
if [ -n "$slack" ]; then cgdesc="plain and shim runs in a cgroup of budget + $slack"
else cgdesc="plain runs in a cgroup of the budget, shim runs without one"; fi
json="$out/$name.json"
md="$out/$name.md"
{
  echo "# ucache-preload benchmark, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "data $data, budget $memory, dir $dir ($(df --output=source "$dir" | tail -1), read_ahead_kb $(cat /sys/block/"$(basename "$(df --output=source "$dir" | tail -1)")"/queue/read_ahead_kb 2>/dev/null || echo '?')), reps $reps, $cgdesc"
  echo "Command: \`bash scripts/bench-preload.sh --data $data --memory $memory --dir $dir --reps $reps${policies:+ --policies $policies}${workloads:+ --workloads $workloads}${slack:+ --slack $slack} --name $name --out $out\`${UCACHE_PRELOAD_SO:+ (UCACHE_PRELOAD_SO=$UCACHE_PRELOAD_SO)}${UCACHE_DIRECT:+ (UCACHE_DIRECT=$UCACHE_DIRECT)}"
  echo
  echo "| workload | policy | plain s | shim s | plain/shim | plain CPU s | shim CPU s | CPU plain/shim | same output | shim misses, MiB read, installs (last rep) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} > "$md"
echo "[" > "$json"
first=1
for i in "${!names[@]}"; do
  name_=${names[$i]} glob=${globs[$i]} cmd=${cmds[$i]}
  [ -z "$workloads" ] || [[ ",$workloads," == *",$name_,"* ]] || continue
  pl=() plc=() same=yes
  declare -A sh=() shc=() st=()
  for rep in $(seq "$reps"); do
    # Plain and each policy, interleaved; every output is compared with the first plain one.
    read -r w c < <(run_plain "$cmd")
    pl+=("$w") plc+=("$c")
    [ "$rep" = 1 ] && cp "$dir/out.plain" "$dir/out.ref"
    cmp -s "$dir/out.ref" "$dir/out.plain" || same="no (plain runs differ)"
    for p in "${pols[@]}"; do
      read -r w c < <(run_shim "$cmd" "$glob" "$p")
      sh[${p:-default}]+="$w " shc[${p:-default}]+="$c "
      cmp -s "$dir/out.ref" "$dir/out.shim" || same=no
      grep -q "ucache-preload: stats: mappings [1-9]" "$dir/err.shim" || same="$same (shim mapped nothing!)"
      st[${p:-default}]=$(grep -o 'misses: [0-9]*\|bytes_read: [0-9]*\|installs: [0-9]*' "$dir/err.shim" | awk '{v[NR]=$2} END {printf "%d, %.0f, %d", v[1], v[2]/1048576, v[3]}')
    done
  done
  for p in "${pols[@]}"; do
    read -r -a shv <<< "${sh[${p:-default}]}"
    read -r -a shcv <<< "${shc[${p:-default}]}"
    read -r pmed smed ratio pcmed scmed cratio < <(python3 -c "
import statistics,sys
m=lambda a: statistics.median(float(x) for x in a.split())
p, s, pc, sc = (m(a) for a in sys.argv[1:5])
print(f'{p:.3f} {s:.3f} {p/s:.3f} {pc:.2f} {sc:.2f} {pc/sc:.3f}')" "${pl[*]}" "${shv[*]}" "${plc[*]}" "${shcv[*]}")
    echo "| $name_ | ${p:-default} | ${pl[*]} (median $pmed) | ${shv[*]} (median $smed) | $ratio | ${plc[*]} (median $pcmed) | ${shcv[*]} (median $scmed) | $cratio | $same | ${st[${p:-default}]} |" >> "$md"
    [ $first = 1 ] || echo "," >> "$json"
    first=0
    printf '{"workload":"%s","policy":"%s","data":"%s","memory":"%s","dir":"%s","slack":"%s","plain_s":[%s],"shim_s":[%s],"ratio":%s,"plain_cpu_s":[%s],"shim_cpu_s":[%s],"cpu_ratio":%s,"same_output":"%s","shim_misses_mib_read_installs":"%s"}\n' \
      "$name_" "${p:-default}" "$data" "$memory" "$dir" "$slack" "$(IFS=,; echo "${pl[*]}")" "$(IFS=,; echo "${shv[*]}")" "$ratio" "$(IFS=,; echo "${plc[*]}")" "$(IFS=,; echo "${shcv[*]}")" "$cratio" "$same" "${st[${p:-default}]}" >> "$json"
  done
  unset sh shc st
  tail -1 "$dir/err.shim" | cut -c1-300 >&2
done
echo "]" >> "$json"
cat "$md"
