#!/usr/bin/env bash
# Where a tuning search's fixed start-up goes (the part that one GPU more does not shorten):
# the parent's imports and profile up to its first evaluation, and one timing worker's start.
#   OUT=dir bash scripts/tune_startup.sh
set -u
OUT=${OUT:-/tmp/tune-startup}; mkdir -p "$OUT"
args=(matmul --provider triton --shape 4096x4096x4096 --dtype bfloat16 --budget-evals 1 --jobs 1 --timeout 60)
t0=$(date +%s.%N)
python3 -X importtime -m cProfile -o "$OUT/parent.prof" -m xrt.cli tune "${args[@]}" --out "$OUT/p1" \
  >/dev/null 2>"$OUT/parent.importtime"
echo "parent, one evaluation: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
python3 - "$OUT/parent.prof" <<'PY'
import pstats, sys
pstats.Stats(sys.argv[1]).sort_stats("cumulative").print_stats(25)
PY
grep -E "\| (torch|triton|xrt[a-z._]*)$" "$OUT/parent.importtime" | sort -t'|' -k2 -n | tail -8
for mode in time build; do
  t0=$(date +%s.%N)
  echo "" | python3 -m xrt.tune.worker --op matmul --provider triton --shape 4096x4096x4096 --dtype bfloat16 \
    --mode $mode >/dev/null 2>"$OUT/worker-$mode.log"
  echo "worker --mode $mode, start to ready and exit: $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
done
python3 -X importtime -c "import torch, torch.cuda; torch.zeros(1, device='cuda'); import xrt.bench.specs" 2>&1 \
  | sort -t'|' -k2 -n | tail -4
