#!/usr/bin/env bash
# Plain, the shim before kept markers (BASE_SO) and after (NEW_SO), interleaved in every rep
# (the order rotates each rep), on the data bench-preload.sh makes: the same commands, cgroup,
# budget and cache drops as scripts/bench-preload.sh, sqlite-scan and rg-mmap only. Prints one
# line per run: rep workload variant wall_s cpu_s [shim: misses marker_hits bytes_read].
#   DIR=/var/tmp/scan-vda BASE_SO=... NEW_SO=... REPS=5 bash three-way-markers.sh
#   DIR=/var/tmp/scan-vda SHIMS="a=/tmp/a.so b=/tmp/b.so c=/tmp/c.so" REPS=5 bash three-way-markers.sh
set -euo pipefail
dir=${DIR:?} reps=${REPS:-5} memory=128MiB mem_b=$((128 << 20)) data_b=$((512 << 20))
mkdir -p "$dir"
cg=/sys/fs/cgroup/memory/ucache-three-way
mkdir -p "$cg"; echo $mem_b > "$cg/memory.limit_in_bytes"
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
rows=$((data_b / 1100))
if [ ! -f "$dir/bench.db" ]; then
  sqlite3 "$dir/bench.db" "PRAGMA page_size=4096; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB);
    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < $rows)
    INSERT INTO t SELECT x, randomblob(1000) FROM c;"
fi
if [ ! -d "$dir/tree" ]; then
  python3 - "$dir/tree" "$data_b" <<'PY'
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
PY
fi
names=(sqlite-scan rg-mmap)
globs=("$dir/bench.db" "$dir/tree/*")
cmds=(
  "sqlite3 $dir/bench.db 'PRAGMA mmap_size=$((data_b * 2)); SELECT sum(length(v)) FROM t;'"
  "rg --mmap --no-config -j2 -c needle $dir/tree | sort | md5sum"
)
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
one() { # variant workload-index
  local cmd=${cmds[$2]} t0 t1 so=""
  case $1 in plain) ;; *) so=${SO[$1]} ;; esac
  drop; t0=$(date +%s.%N)
  if [ -z "$so" ]; then
    /usr/bin/time -f "%U %S" -o "$dir/time" sh -c "echo \$\$ > $cg/cgroup.procs; exec sh -c \"\$0\"" "$cmd" > "$dir/out.$1" 2> "$dir/err.$1"
  else
    /usr/bin/time -f "%U %S" -o "$dir/time" env LD_PRELOAD="$so" UCACHE_FILES="${globs[$2]}" UCACHE_MEMORY=$memory UCACHE_STATS=1 sh -c "$cmd" > "$dir/out.$1" 2> "$dir/err.$1"
  fi
  t1=$(date +%s.%N)
  read -r u s < <(tail -1 "$dir/time")
  st=$(grep -o 'misses: [0-9]*\|marker_hits: [0-9]*\|bytes_read: [0-9]*' "$dir/err.$1" | awk '{printf "%s=%s ", $1, $2}' || true)
  same=same; cmp -s "$dir/out.ref${2}" "$dir/out.$1" || same=DIFFERENT
  echo "$rep ${names[$2]} $1 $(python3 -c "print(f'{$t1-$t0:.3f} {$u+$s:.2f}')") $same $st"
}
for w in 0 1; do sh -c "${cmds[$w]}" > "$dir/out.ref$w"; done
# SHIMS="name=path ..." names the builds to compare (default: base=$BASE_SO new=$NEW_SO).
declare -A SO=()
vs=(plain)
for kv in ${SHIMS:-base=${BASE_SO:-} new=${NEW_SO:-}}; do SO[${kv%%=*}]=${kv#*=}; vs+=("${kv%%=*}"); done
for rep in $(seq "$reps"); do
  for w in 0 1; do
    # The order rotates each rep.
    for k in "${!vs[@]}"; do one "${vs[$(( (k + rep - 1) % ${#vs[@]} ))]}" "$w"; done
  done
done
