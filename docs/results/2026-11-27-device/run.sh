#!/usr/bin/env bash
# Issue #19's thread scaling on the lent 16-core machine: random 4 KiB lookups over 4 GiB on
# zram (or its own disk, where zram cannot be had), a 512 MiB budget, mmap in a memory cgroup
# of the same size, every system interleaved per rep. Run from the repository root with the
# stripped release binary at .devbin/ucache; results go to $OUT (or ./device-out).
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out/j"
bin=$PWD/.devbin/ucache
exec > >(tee "$out/log.txt") 2>&1
echo "== machine"; uname -a; nproc; free -g | head -2; grep -m1 'model name' /proc/cpuinfo
cat /sys/kernel/mm/transparent_hugepage/enabled; mount | grep -E 'cgroup' | head -3
modprobe zram 2>/dev/null; modprobe io_uring 2>/dev/null
file=""
if bash scripts/zram-setup.sh 6G /mnt/ucache-zram; then file=/mnt/ucache-zram/ucache-bench.dat; dev=zram
else dev=disk; file=/var/tmp/ucache-bench.dat; df -h /var/tmp; lsblk -d -o NAME,ROTA,MODEL,SIZE | head; fi
echo "== device $dev file $file"
store=uring
for t in ${THREADS:-2 16 1 4 8}; do
  reps=${REPS:-2}; [[ -z ${REPS:-} && ( $t == 2 || $t == 16 ) ]] && reps=3
  echo "== threads $t ($dev, store $store, reps $reps)"
  timeout 240 "$bin" bench lookup --data "${DATA:-4GiB}" --memory "${MEM:-512MiB}" --threads "$t" --seconds "${SECS:-4}" --warmup 1 \
    --reps "$reps" --store "$store" --systems ucache-pool,raw-psync,mmap --file "$file" \
    --json "$out/j/$dev-lookup-t$t.json" --plot "$out/j/$dev-lookup-t$t.svg"
  rc=$?; echo "rc=$rc"
  if [[ $rc != 0 && $store == uring ]]; then store=file; echo "retrying with the file store"; fi
done
tar -C "$out" -cf "$out/results.tar" j && rm -rf "$out/j"
