#!/usr/bin/env bash
# Where ucache-pool's time goes at 16 and 2 threads on the lent 16-core machine: perf (carried
# with its libraries in .devbin) over one ucache-pool run of the lookup bench on zram.
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
bin=$PWD/.devbin/ucache
export LD_LIBRARY_PATH=$PWD/.devbin/lib
perf=$PWD/.devbin/perf
exec > >(tee "$out/profile-log.txt") 2>&1
modprobe zram 2>/dev/null
bash scripts/zram-setup.sh 6G /mnt/ucache-zram >/dev/null || exit 1
f=/mnt/ucache-zram/ucache-bench.dat
common=(bench lookup --data "${DATA:-4GiB}" --memory "${MEM:-512MiB}" --seconds "${SECS:-3}" --warmup 1 --reps 1 --store uring --file "$f")
"$bin" "${common[@]}" --threads 16 --systems raw-psync | tail -4
echo 0 > /proc/sys/kernel/kptr_restrict; echo -1 > /proc/sys/kernel/perf_event_paranoid
for t in ${PROFILE_THREADS:-16 2}; do
  "$perf" record -q -F 999 -a -g -o /tmp/p$t.data -- "$bin" "${common[@]}" --threads $t --systems ucache-pool | grep -E "^rep|ucache-pool:"
  "$perf" report -i /tmp/p$t.data --stdio --no-children --sort dso,sym -g none --percent-limit 0.3 2>/dev/null | grep -v '^$' | head -90 > "$out/flat-t$t.txt"
  "$perf" report -i /tmp/p$t.data --stdio --no-children --sort sym -g caller,0.5,callee,function,percent --percent-limit 2 2>/dev/null | grep -v '^$' | head -700 > "$out/calls-t$t.txt"
  head -40 "$out/flat-t$t.txt"
done
