#!/usr/bin/env bash
# The nightly's own steps (.github/workflows/nightly.yml, run as written by scripts/workflow_steps.py)
# on five local commits c0..c4 with a device-time slowdown planted at c2, on a GPU host:
#   night 1: HEAD is c0: choose commits, xrt bench run, xrt db ingest (c0 measured);
#   night 2: HEAD is c4: the same, then the gate (fails: c4 is slower than c0, "somewhere in c1..c4")
#            and xrt culprit, which must name c2 and explain it.
#
#   bash scripts/nightly_culprit.sh [OUT]      (xrt and its bench extra installed, as scripts/gpu_run.sh does)
#
# XRT_NIGHTLY_BENCH narrows what the bench step measures (default: VectorAdd's device series, so the
# run takes minutes; set it empty for every suite, as the nightly). XRT_PLANT_CYCLES: the plant, GPU
# cycles of torch.cuda._sleep before every vector_add call [400000, ~0.2 ms on an H100].
# Without a GPU: XRT_NIGHTLY_DEVICE_ARGS='--device cpu --quick' XRT_NIGHTLY_BENCH='^bench_host\.VectorAdd\.'
# runs the same steps on the CPU, where the plant busy-waits 0.3 ms instead (the host series sees it).
# Exit 0 when the culprit named is c2; OUT gets night-1.log, night-2.log and summary.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-${OUT:-$PWD/nightly-culprit}}
BENCH=${XRT_NIGHTLY_BENCH-'^bench_ops\.VectorAdd\.'}
DEVICE_ARGS=${XRT_NIGHTLY_DEVICE_ARGS:---all-gpus}
CYCLES=${XRT_PLANT_CYCLES:-400000}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clone=$work/repo
git clone -q "$ROOT" "$clone"
git_c() { git -C "$clone" -c user.name=nightly-culprit -c user.email=nightly-culprit@localhost "$@"; }
# The workflow calls .venv/bin/xrt (make venv): here, the xrt this host has.
mkdir -p "$clone/.venv/bin"
printf '#!/bin/sh\nexec %s -m xrt.cli "$@"\n' "$PY" >"$clone/.venv/bin/xrt"
chmod +x "$clone/.venv/bin/xrt"
c0=$(git_c rev-parse HEAD)
op=$clone/xrt/pytorch/ops/vector_add.py
for i in 1 2 3 4; do
  if [ "$i" = 2 ]; then
    cat >>"$op" <<EOF

# --- planted by scripts/nightly_culprit.sh in a throwaway clone: GPU time before every call ---
import time as _plant_time

import torch as _plant_torch

_unplanted_vector_add = vector_add


def vector_add(a, b, *, provider=None):
    if a.is_cuda:
        _plant_torch.cuda._sleep($CYCLES)
    else:  # no GPU: host time instead
        end = _plant_time.perf_counter() + 0.3e-3
        while _plant_time.perf_counter() < end:
            pass
    return _unplanted_vector_add(a, b, provider=provider)
EOF
    git_c commit -qam "c2: vector_add waits $CYCLES GPU cycles first"
  else
    echo "c$i" >"$clone/NOTES.txt"
    git_c add NOTES.txt
    git_c commit -qm "c$i: notes"
  fi
done
c2=$(git_c rev-parse HEAD~2)
c4=$(git_c rev-parse HEAD)
echo "c0 $c0"; echo "c2 $c2 (planted)"; echo "c4 $c4"
# The history of earlier nights is this run's alone (the committed results are other hosts').
rm -rf "$clone/results/asv" "$clone/results/xrt.duckdb"
steps=(--cwd "$clone" --sub "--all-gpus=$DEVICE_ARGS${BENCH:+ --bench '$BENCH'}")
git_c checkout -q --detach "$c0"
"$PY" "$ROOT/scripts/workflow_steps.py" "$ROOT/.github/workflows/nightly.yml" "${steps[@]}" \
  --summary "$OUT/summary-night-1.md" "choose commits" "xrt bench run" "xrt db ingest" 2>&1 | tee "$OUT/night-1.log"
git_c checkout -q --detach "$c4"
set +e
"$PY" "$ROOT/scripts/workflow_steps.py" "$ROOT/.github/workflows/nightly.yml" "${steps[@]}" \
  --summary "$OUT/summary.md" "choose commits" "xrt bench run" "xrt db ingest" "nothing to judge" "xrt gate --paired" \
  "xrt culprit" 2>&1 | tee "$OUT/night-2.log"
set -e
cp "$clone/results/xrt.duckdb" "$OUT/" 2>/dev/null || true
echo "== the step summary"; cat "$OUT/summary.md"
if grep -q "^culprit $c2 " "$OUT/night-2.log"; then
  echo "nightly_culprit: PASS: the nightly named c2 ($c2)"
else
  echo "nightly_culprit: FAIL: no line 'culprit $c2' in night 2's output"; exit 1
fi
