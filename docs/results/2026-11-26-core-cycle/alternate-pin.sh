#!/usr/bin/env bash
# The `pin` criterion bench (crates/ucache/benches/pin.rs) of two builds, alternated (B A, A B,
# ...); prints each benchmark's median estimate per run.
# Usage: alternate-pin.sh BEFORE AFTER OUTDIR PAIRS
set -euo pipefail
before=$1 after=$2 out=$3 pairs=$4
mkdir -p "$out"
for k in $(seq 1 "$pairs"); do
  if [ $((k % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    bin=$before; [ "$which" = after ] && bin=$after
    (cd "$out" && CRITERION_HOME="$out/criterion-$which" "$bin" --bench --warm-up-time 1 \
      --measurement-time 2 --noplot > "$out/$which-$k.log" 2>&1)
    echo "$which $k $(awk '/time:/ && !/change:/ && !/%/ {n = ($1 == "time:") ? name : $1; printf "%s=%s%s ", n, $(NF-3), $(NF-2)}
      !/time:/ && NF == 1 {name = $1}' "$out/$which-$k.log")"
  done
done
