#!/usr/bin/env bash
# Before/after the core refactor (issue 19 item 6): the same `ucache bench` run by two
# binaries, alternated (B A, A B, B A, ...), so that the host's load drifts over both alike.
# Usage: alternate.sh BEFORE AFTER OUTDIR PAIRS -- BENCH ARGS...
set -euo pipefail
before=$1 after=$2 out=$3 pairs=$4
shift 5
mkdir -p "$out"
for k in $(seq 1 "$pairs"); do
  if [ $((k % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    bin=$before; [ "$which" = after ] && bin=$after
    "$bin" bench "$@" --reps 1 --json "$out/$which-$k.json" --plot "$out/$which-$k.svg" \
      > "$out/$which-$k.log" 2>&1
    python3 - "$out/$which-$k.json" "$which" "$k" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], " ".join(
    f"{r['system']}={r['ops_per_sec']/1e3:.0f}k({r['vs_mmap'] or 0:.2f}x)" for r in d["results"]))
PY
  done
done
