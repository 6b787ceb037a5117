#!/usr/bin/env bash
# One call on a lent GPU host (no network; torch, triton and pytest already there): install the
# carried wheels (.whl/: asv, duckdb, pycuda, gitpython, ...) and xrt itself into the host's Python,
# then run the named steps, writing full logs under $OUT.
#
#   bash scripts/gpu_run.sh tests host gate gpucheck
#
# tests    : the runtime's GPU tests (dispatch, policy, ops, kernels, timer, gpucheck)
# host     : benchmarks/host_cost.py, host cost per call side by side with torch (docs/runtime.md)
# gate     : a planted 50 µs of Python per call must fail xrt gate (tests/test_host_gate.py)
# layers   : scripts/host_layers.py, host µs per layer under layernorm (where the time goes)
# gpucheck : python -m xrt.bench.gpucheck, device time of every op beside torch
# gemm     : the GEMM family's GPU tests, then benchmarks/gemm_bench.py (Triton bf16 and CUDA C fp32
#            against cuBLAS, with a small config sweep; gemm-<gpu>.json / gemm-<gpu>.md)
# linear   : the GEMM family's Triton GPU tests, then benchmarks/gemm_linear_bench.py (a transformer
#            linear's forward x @ W.T, dX = g @ W and dW = g.T @ x beside cuBLAS, a few configs each,
#            the winners per (layout, shape); linear-<gpu>.json / linear-<gpu>.md)
# conv     : the fused conv3x3 + BatchNorm + ReLU GPU tests (kernels, op, CNN modules), then
#            benchmarks/conv_bench.py (xrt vs torch cuDNN conv + BN + ReLU, both strides, a config sweep,
#            and the CNN macro-benchmark; conv-<gpu>.json / conv-<gpu>.md), then xrt diag conv_bn_relu
# attnbwd  : the attention GPU tests, the defaults through the op at S 4096, 1024, 16384 (--defaults), the backward sweep (--bwd-sweep)
# model    : the routing tests, then benchmarks/model_bench.py: an unmodified GPT-style model on torch and
#            on xrt's kernels through the policy (xrt, auto), train and inference steps (model-<gpu>.json / .md)
# routehost: the routing tests, then benchmarks/routing_host.py on the GPU: each routed function's host
#            µs per call under no policy, auto (the GPU's table) and triton, with each call decided
#            afresh beside the kept decisions (--per-call; routehost-<gpu>.json), and a small model's
#            forward per policy (routehost-forward-<gpu>.json)
# fusion   : the fused ops' GPU tests (add_layernorm, linear_gelu, xp.fuse), then benchmarks/fusion_bench.py:
#            torch vs the fused ops and a GPT before and after xp.fuse, bf16 (fusion-<gpu>.json / .md)
# fusionsweep: benchmarks/fusion_bench.py --sweep: torch vs the fused ops with e2e, device and host time
#            each (which of the GPU or the host is slow), and add_layernorm's kernels over a grid of
#            configs around the defaults (fusion-sweep-<gpu>.json / .md)
# attn     : the attention GPU tests, then benchmarks/attention_bench.py (xrt Triton vs SDPA, fwd and bwd),
#            then benchmarks/attention_layout_ab.py (a model's q, k, v views: TMA vs pointer kernels, beside SDPA)
# suite    : xrt bench run, full profile, this commit, twice (cold then warm Triton cache), timed: seconds
#            per combination and the CV of medians across the runs (scripts/suite_report.py; $OUT/suite/);
#            then the same for the device series of the six memory-bound ops and the allocator alone
#            (the 220 combinations issue #15 counted; $OUT/suite220/)
# compiled : xrt bench run of square, softmax and layernorm's three series (device, host, host under
#            torch.compile), full profile; $OUT/compiled-results.tgz
# modelsuite: xrt bench run of the model suites alone (bench_ops.Gpt*, bench_ops.Cnn*: the GPT-style
#            train and inference steps, eager and compiled, torch and xrt, as written and through
#            xp.fuse; the CNN's), full profile, this
#            commit: the eager steps, then the compiled ones, each in its own results folder, both within
#            MODELSUITE_TIMEOUT s (480); each ingested into a scratch database to print ms and tokens/s
#            (images/s) per series ($OUT/modelsuite.txt); $OUT/modelsuite-results.tgz for results/gpu/
# autotable: the device series of the routed ops (matmul, bmm, layernorm and its backward, softmax,
#            attention and its backward; full profile, this commit), the asv results in one archive
#            ($OUT/autotable-results.tgz: unpack into results/asv, then run xrt kernels auto-table there
#            for the tables to commit), and $OUT/auto/: the table of this run's results alone, a preview
# compilehost: tests/test_compile_triton.py (Inductor launches xrt's Triton kernels itself; reduce-overhead
#            captures them), then benchmarks/compiled_host.py: host µs per call inside torch.compile, xrt
#            vs torch (compiled_host-<gpu>.json / .md)
# tune     : the exhaustive Triton bf16 GEMM space at 4096x4096x4096 (pruned against this GPU's limits;
#            `xrt tune space` prints its size first), every evaluation in the journal under
#            $OUT/tuned/journal/, top-K in $OUT/tuned/matmul.json; stops proposing after 330 s.
#            Then, on any machine: python -m xrt.tune.simulate <that journal> (model vs random)
# tunescale: scripts/tune_scale.py: the same exhaustive GEMM search on one GPU and on every GPU of the
#            host in turns, after one run that fills the compile cache (the 2-GPU H200; $OUT/tunescale/)
# tunestart: scripts/tune_startup.sh: the tuner's fixed start-up (the parent's imports and profile, a
#            worker's start)
# tunegpu  : tests/test_tune_gpu.py: configs that fault on the device (illegal address, a kernel that
#            never ends, a wrong result) and a kill -9 of the tuner mid-run, then the same command
# pycuda   : scripts/pycuda_async.py, whether CUDA C launches queue behind the timer's spin, and its
#            device time in a fresh process and after graph-mode measures
# culprit  : scripts/nightly_culprit.sh: the nightly's own steps, two nights, on five local commits with a
#            device-time slowdown planted at c2; xrt culprit must name c2 and explain it ($OUT/culprit/)
# explain  : scripts/explain_demo.py: two regressions planted in a throwaway clone (a defensive copy in the
#            Triton square launcher; square's CUDA C default v2 -> v1), benched, ingested, gated and
#            explained by xrt explain (Nsight Compute, profiler, compiled code, settings); $OUT/explain/
# protocol : scripts/gate_protocol.py in paired mode (two rounds, no history, the default suites of the
#            device): the A/A and the three plants, each verdict checked ($OUT/gate-protocol-paired.*).
#            One bench run takes 45-65 s on the H100: two rounds of the base and two heads (6 runs) fit
#            one 600 s call, three heads (8 runs) did not. PROTOCOL_HEADS=aa,tuning, then host,compiled
# protocolprocs: the same in history mode, 3 processes a commit (PROTOCOL_HEADS, default compiled:
#            the compiled-only plant; $OUT/gate-protocol-procs.*)
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile .whl/*.whl >"$OUT/pip.log" 2>&1 \
  && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$OUT/pip.log" 2>&1 \
  || { tail -20 "$OUT/pip.log"; exit 1; }
# The device's git history can stop before this tree (it holds the commits of the session's start).
# scripts/gpu_send.sh bundles the newer commits of main into .gpu/main.bundle (ignored: carry it
# with .whl): fetched here, the device checks out the very commits, and results keep their hashes.
if [ -f .gpu/main.bundle ]; then
  # into a ref that is never checked out (a second gpu_run.sh in one call fetches again)
  git fetch -q .gpu/main.bundle "+main:refs/gpu/sent" 2>"$OUT/bundle.log" || { cat "$OUT/bundle.log"; exit 1; }
  idx=$(mktemp -u)
  sent=$(GIT_INDEX_FILE=$idx git add -A . >/dev/null 2>&1; GIT_INDEX_FILE=$idx git write-tree)
  rm -f "$idx"
  if [ "$sent" = "$(git rev-parse 'refs/gpu/sent^{tree}')" ]; then
    git checkout -q -f --detach refs/gpu/sent && echo "checked out $(git rev-parse --short HEAD) from the bundle (the sent tree is main)"
  else
    echo "the sent tree is not the bundled main (uncommitted changes?): snapshot below"
  fi
fi
# Otherwise the history stops before this tree (a copy of the working tree travels, not every
# commit): tests that clone the repository must see this tree, so snapshot it in a throwaway commit.
if [ -n "$(git status --porcelain --untracked-files=normal 2>/dev/null)" ]; then
  git -c user.name=gpu-run -c user.email=gpu-run@localhost add -A . >/dev/null 2>&1
  git -c user.name=gpu-run -c user.email=gpu-run@localhost commit -qm "gpu_run.sh: snapshot of the tree that was sent" \
    >/dev/null 2>&1 && echo "snapshot commit $(git rev-parse --short HEAD) of the sent tree"
fi
git branch -f main HEAD >/dev/null 2>&1 || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks_event_reasons.active --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
# The GPU's model in output names (NVIDIA H100 80GB HBM3 -> h100, NVIDIA H200 -> h200).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed -E 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
GPU=${GPU:-gpu}
rc=0
for step in "$@"; do
  start=$(date +%s)
  case $step in
    tests)
      python3 -m pytest -q -p no:cacheprovider tests/test_dispatch.py tests/test_policy.py tests/test_runtime.py \
        tests/test_square.py tests/test_kernels_elementwise.py tests/test_kernels_softmax.py \
        tests/test_kernels_layernorm.py tests/test_layernorm_plan.py tests/test_native_layernorm.py tests/test_kernels_cuda_c.py tests/test_bench_timer.py \
        tests/test_bench_gpucheck.py 2>&1 | tee "$OUT/tests.log" | tail -15 ;;
    host)
      python3 benchmarks/host_cost.py --device cuda --out "$OUT/host_cost-${GPU}.json" --md "$OUT/host_cost-${GPU}.md" \
        2>&1 | tee "$OUT/host.log" | tail -45 ;;
    gate)
      XRT_TEST_PLANT_US=50 python3 -m pytest -q -p no:cacheprovider -rA tests/test_host_gate.py 2>&1 \
        | tee "$OUT/gate.log" | tail -30 ;;
    layers)
      python3 scripts/host_layers.py --out "$OUT/host_layers.json" 2>&1 | tee "$OUT/host_layers.log" | tail -120 ;;
    gpucheck)
      python3 -m xrt.bench.gpucheck --out "$OUT/gpucheck" 2>&1 | tee "$OUT/gpucheck.log" | tail -30 ;;
    gemm)
      python3 -m pytest -q -p no:cacheprovider tests/test_kernels_matmul.py tests/test_ops_matmul.py \
        tests/test_kernels_cuda_c.py 2>&1 | tee "$OUT/gemm-tests.log" | tail -15
      t=${PIPESTATUS[0]}
      python3 benchmarks/gemm_bench.py --out "$OUT/gemm-${GPU}.json" --md "$OUT/gemm-${GPU}.md" \
        2>"$OUT/gemm-bench.err" | tee "$OUT/gemm-bench.log" | tail -45
      [ "${PIPESTATUS[0]}" -ne 0 ] && t=1
      (exit $t) ;;
    linear)
      python3 -m pytest -q -p no:cacheprovider tests/test_kernels_matmul.py tests/test_ops_matmul.py \
        2>&1 | tee "$OUT/linear-tests.log" | tail -15
      t=${PIPESTATUS[0]}
      python3 benchmarks/gemm_linear_bench.py --out "$OUT/linear-${GPU}.json" --md "$OUT/linear-${GPU}.md" \
        2>"$OUT/linear-bench.err" | tee "$OUT/linear-bench.log" | tail -60
      [ "${PIPESTATUS[0]}" -ne 0 ] && t=1
      (exit $t) ;;
    conv)
      python3 -m pytest -q -p no:cacheprovider tests/test_kernels_conv.py tests/test_ops_conv.py \
        tests/test_modules_cnn.py 2>&1 | tee "$OUT/conv-tests.log" | tail -15
      t=${PIPESTATUS[0]}
      python3 benchmarks/conv_bench.py --out "$OUT/conv-${GPU}.json" --md "$OUT/conv-${GPU}.md" \
        2>"$OUT/conv-bench.err" | tee "$OUT/conv-bench.log" | tail -60
      [ "${PIPESTATUS[0]}" -ne 0 ] && t=1
      for s in 64x64x56x56x64x1 64x64x56x56x128x2; do
        XRT_KERNEL_STATS=1 python3 -m xrt.cli diag conv_bn_relu --shape $s --dtype float16 --provider triton \
          --warmup 2 2>&1 | tee -a "$OUT/conv-diag.log" | tail -14
      done
      (exit $t) ;;
    attnbwd)
      python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py 2>&1 | tee "$OUT/attn_tests.log" | tail -8
      s=${PIPESTATUS[0]}
      python3 benchmarks/attention_bench.py --defaults --out "$OUT/attention-defaults-${GPU}.json" \
        --md "$OUT/attention-defaults-${GPU}.md" 2>&1 | tail -24
      [ "${PIPESTATUS[0]}" -ne 0 ] && s=1
      python3 benchmarks/attention_bench.py --bwd-sweep --out "$OUT/attention-bwd-${GPU}.json" \
        --md "$OUT/attention-bwd-${GPU}.md" 2>&1 | tee "$OUT/attn_bwd.log" | tail -80
      [ "${PIPESTATUS[0]}" -ne 0 ] && s=1
      (exit "$s") ;;
    attn)
      python3 -m pytest -q -p no:cacheprovider tests/test_kernels_attention.py 2>&1 | tee "$OUT/attn_tests.log" | tail -15
      s=${PIPESTATUS[0]}
      python3 benchmarks/attention_bench.py --out "$OUT/attention-${GPU}.json" --md "$OUT/attention-${GPU}.md" \
        2>&1 | tee "$OUT/attn_bench.log" | tail -60
      [ "${PIPESTATUS[0]}" -ne 0 ] && s=1
      python3 benchmarks/attention_layout_ab.py --out "$OUT/attention-layout-${GPU}.json" \
        --md "$OUT/attention-layout-${GPU}.md" 2>&1 | tee "$OUT/attn_layout.log" | tail -15
      [ "${PIPESTATUS[0]}" -ne 0 ] && s=1
      (exit "$s") ;;
    fusion)
      python3 -m pytest -q -p no:cacheprovider tests/test_kernels_fused.py tests/test_fuse.py 2>&1 \
        | tee "$OUT/fusion_tests.log" | tail -15
      s=${PIPESTATUS[0]}
      python3 benchmarks/fusion_bench.py --out "$OUT/fusion-${GPU}.json" --md "$OUT/fusion-${GPU}.md" \
        2>&1 | tee "$OUT/fusion_bench.log" | tail -30
      [ "${PIPESTATUS[0]}" -ne 0 ] && s=1
      (exit "$s") ;;
    fusionsweep)
      python3 benchmarks/fusion_bench.py --sweep --out "$OUT/fusion-sweep-${GPU}.json" --md "$OUT/fusion-sweep-${GPU}.md" \
        2>&1 | tee "$OUT/fusion_sweep.log" | tail -60 ;;
    model)
      python3 -m pytest -q -p no:cacheprovider tests/test_routing.py 2>&1 | tee "$OUT/model_tests.log" | tail -5
      s=${PIPESTATUS[0]}
      python3 benchmarks/model_bench.py --out "$OUT/model-${GPU}.json" --md "$OUT/model-${GPU}.md" \
        2>&1 | tee "$OUT/model_bench.log" | tail -20
      [ "${PIPESTATUS[0]}" -ne 0 ] && s=1
      (exit "$s") ;;
    routehost)
      python3 -m pytest -q -p no:cacheprovider tests/test_routing.py tests/test_routing_decisions.py 2>&1 \
        | tee "$OUT/routehost_tests.log" | tail -5
      s=${PIPESTATUS[0]}
      python3 benchmarks/routing_host.py --per-call --device cuda --clock wall --out "$OUT/routehost-${GPU}.json" \
        2>&1 | tee "$OUT/routehost.log" | tail -12
      [ "${PIPESTATUS[0]}" -ne 0 ] && s=1
      python3 benchmarks/routing_host.py --device cuda --clock wall --out "$OUT/routehost-forward-${GPU}.json" \
        2>&1 | tee -a "$OUT/routehost.log" | tail -4
      [ "${PIPESTATUS[0]}" -ne 0 ] && s=1
      (exit "$s") ;;
    suite)
      rm -rf "$OUT/suite"
      python3 scripts/suite_report.py run --out "$OUT/suite" --device cuda:0 2>&1 | tee "$OUT/suite.log" | tail -30
      rm -rf "$OUT/suite/triton-cache"
      # One file: the device hands back few files and shallow folders (asv results: one a commit).
      tar -czf "$OUT/suite-results.tgz" -C "$OUT/suite" cold warm 2>/dev/null && rm -rf "$OUT/suite/cold" "$OUT/suite/warm"
      rm -rf "$OUT/suite220"
      python3 scripts/suite_report.py run --out "$OUT/suite220" --device cuda:0 \
        --bench 'bench_ops\.(Square|VectorAdd|WindowSum|Softmax|Layernorm|LayernormBwd)\.time_op|bench_allocator' \
        2>&1 | tee "$OUT/suite220.log" | tail -12
      rm -rf "$OUT/suite220/triton-cache"
      tar -czf "$OUT/suite220-results.tgz" -C "$OUT/suite220" cold warm 2>/dev/null && rm -rf "$OUT/suite220/cold" "$OUT/suite220/warm" ;;
    compiled)
      # the three series of square, softmax and layernorm (full profile, this commit): device, host and
      # host under torch.compile side by side (asv result files in one archive)
      python3 -m xrt.cli bench run --commits HEAD --results "$OUT/compiled" --device cuda:0 \
        --bench '^bench_(ops|host|compiled)\.(Square|Softmax|Layernorm)\.' 2>&1 | tee "$OUT/compiled.log" | tail -20
      t=${PIPESTATUS[0]}
      tar -czf "$OUT/compiled-results.tgz" -C "$OUT" compiled 2>/dev/null && rm -rf "$OUT/compiled"
      (exit $t) ;;
    modelsuite)
      # Device series only: ms per step; each case records the tokens (images) a step processes. Two
      # runs, each its own results folder (a second run at a commit would replace the first's file):
      # the eager steps first, kept even if the compiled ones (one torch.compile per model, shape and
      # provider) overrun; MODELSUITE_TIMEOUT s (480) for both.
      rm -rf "$OUT/modelsuite"; t=0
      end=$(( $(date +%s) + ${MODELSUITE_TIMEOUT:-480} ))
      for part in eager compiled; do
        re='^bench_ops\.(Gpt(Infer|Train)(Fused)?|CnnInfer|CnnTrain)\.'
        [ "$part" = compiled ] && re='^bench_ops\.Gpt(Infer|Train)(Fused)?Compiled\.'
        left=$(( end - $(date +%s) ))
        [ "$left" -lt 60 ] && { echo "modelsuite: $left s left, the $part steps not run"; t=1; break; }
        timeout -k 20 "$left" python3 -m xrt.cli bench run --commits HEAD --results "$OUT/modelsuite/$part" \
          --device cuda:0 --bench "$re" 2>&1 | tee -a "$OUT/modelsuite.log" | tail -8
        s=${PIPESTATUS[0]}; [ "$s" -ne 0 ] && t=$s
        # what the lead reads: ms and tokens/s (images/s) per series, from a scratch database
        db=$(mktemp -d)/$part.duckdb
        python3 -m xrt.cli db ingest "$OUT/modelsuite/$part" --db "$db" --no-judge >>"$OUT/modelsuite.log" 2>&1 \
          && python3 -m xrt.cli db query --db "$db" "SELECT benchmark, param_key, status, round(value * 1e3, 3) AS ms,
               round(items / value) AS per_s, item_unit FROM results ORDER BY benchmark, param_key" \
          | tee -a "$OUT/modelsuite.txt"
      done
      tar -czf "$OUT/modelsuite-results.tgz" -C "$OUT" modelsuite 2>/dev/null && rm -rf "$OUT/modelsuite"
      (exit $t) ;;
    autotable)
      python3 -m xrt.cli bench run --commits HEAD --results "$OUT/autotable" --device cuda:0 \
        --bench '^bench_ops\.(Attention|AttentionBwd|Bmm|Layernorm|LayernormBwd|Matmul|Softmax)\.time_op' 2>&1 \
        | tee "$OUT/autotable.log" | tail -8
      t=${PIPESTATUS[0]}
      [ "$t" -eq 0 ] && python3 -m xrt.cli kernels auto-table --results "$OUT/autotable" --out "$OUT/auto" 2>&1 \
        | tee -a "$OUT/autotable.log" | tail -3
      # the device hands back few files and shallow folders: the asv results as one archive
      tar -czf "$OUT/autotable-results.tgz" -C "$OUT" autotable 2>/dev/null && rm -rf "$OUT/autotable"
      (exit $t) ;;
    compilehost)
      python3 -m pytest -q -p no:cacheprovider -rs tests/test_compile_triton.py 2>&1 | tee "$OUT/compile-tests.log" | tail -15
      t=${PIPESTATUS[0]}
      python3 benchmarks/compiled_host.py --device cuda --out "$OUT/compiled_host-${GPU}.json" \
        --md "$OUT/compiled_host-${GPU}.md" 2>"$OUT/compiled_host.err" | tee "$OUT/compiled_host.log" | tail -25
      [ "${PIPESTATUS[0]}" -ne 0 ] && t=1
      (exit $t) ;;
    tune)
      python3 -m xrt.cli tune space matmul --shape 4096x4096x4096 --dtype bfloat16 2>&1 | tee "$OUT/tune-space.txt"
      python3 -m xrt.cli tune matmul --provider triton --shape 4096x4096x4096 --dtype bfloat16 --strategy exhaustive \
        --jobs "$(( $(nproc) > 2 ? $(nproc) - 2 : 1 ))" --timeout 60 --budget-seconds 330 --top-k 5 --out "$OUT/tuned" \
        --json >"$OUT/tune.json" 2>"$OUT/tune.log"
      t=$?
      tail -25 "$OUT/tune.log"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['counts'], d['best'][:1])" \
        "$OUT/tune.json" 2>/dev/null
      # the workers' logs: one file (the device hands back few files)
      tar -czf "$OUT/tune-worker-logs.tgz" -C "$OUT/tuned" journal --wildcards '*.log' 2>/dev/null \
        && find "$OUT/tuned/journal" -name '*.log' -delete
      (exit $t) ;;
    tunescale)
      # the runs' journals and logs are many files: one archive comes back (the device returns few)
      ts=$(mktemp -d); python3 scripts/tune_scale.py --out "$ts" --pairs "${TUNE_PAIRS:-2}" 2>&1 | tail -30
      cp "$ts"/tune-scale.md "$ts"/tune-scale.json "$OUT"/ 2>/dev/null
      tar -czf "$OUT/tunescale-runs.tgz" -C "$ts" . 2>/dev/null ;;
    tunestart)
      OUT="$OUT/tunestart" bash scripts/tune_startup.sh 2>&1 | tail -60
      tar -czf "$OUT/tunestart.tgz" -C "$OUT" tunestart && rm -rf "$OUT/tunestart" ;;
    tunegpu)
      python3 -m pytest -q -s -p no:cacheprovider tests/test_tune_gpu.py 2>&1 | tee "$OUT/tunegpu.log" | tail -30 ;;
    pycuda)
      python3 scripts/pycuda_async.py 2>&1 | tee "$OUT/pycuda.log" | tail -20 ;;
    culprit)
      bash scripts/nightly_culprit.sh "$OUT/culprit" 2>&1 | tee "$OUT/culprit.log" | tail -60 ;;
    explain)
      python3 scripts/explain_demo.py --out "$OUT/explain" 2>&1 | tee "$OUT/explain.log" | tail -80 ;;
    protocol)
      python3 scripts/gate_protocol.py --heads "${PROTOCOL_HEADS:-aa,tuning,host,compiled}" --rounds 2 --history 0 \
        --modes paired --json "$OUT/gate-protocol-paired.json" --md "$OUT/gate-protocol-paired.md" 2>&1 \
        | tee "$OUT/protocol.log" | tail -60 ;;
    protocolprocs)
      python3 scripts/gate_protocol.py --heads "${PROTOCOL_HEADS:-compiled}" --processes 3 --rounds 1 --history 0 \
        --json "$OUT/gate-protocol-procs.json" --md "$OUT/gate-protocol-procs.md" 2>&1 \
        | tee "$OUT/protocol-procs.log" | tail -60 ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
  s=${PIPESTATUS[0]}; [ "$s" -ne 0 ] && rc=$s
  echo "== $step: exit $s in $(( $(date +%s) - start )) s"
done
exit $rc
