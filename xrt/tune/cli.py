"""``xrt tune``: search one kernel's tuning space for one problem on this machine."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("tune", help="search a kernel's tuning space; the best configs feed the policy and suites")
    t.add_argument("op", help="an op with a benchmark spec: square, vector_add, window_sum, softmax, layernorm, "
                              "layernorm_bwd")
    t.add_argument("--provider", default="triton", help="triton or cuda [triton]")
    t.add_argument("--shape", required=True, help="the problem, e.g. 16384x8192")
    t.add_argument("--dtype", default="float32", help="element type [float32]")
    t.add_argument("--budget", type=int, help="configs to try, the default included [the whole space]")
    t.add_argument("--top-k", type=int, default=3, help="configs kept [3]")
    t.add_argument("--jobs", type=int, default=4, help="compile-pool workers [4]")
    t.add_argument("--gpus", help="time on these GPUs in parallel: all or 0,1 [the default device]")
    t.add_argument("--timeout", type=float, default=120.0, help="seconds one config may take before its "
                                                                "worker is killed [120]")
    t.add_argument("--out", type=Path, default=Path("results/tuned"), help="top-K files and journals [results/tuned]")
    t.add_argument("--retry-failed", action="store_true", help="try again the configs that failed last time")
    t.add_argument("--seed", type=int, default=0, help="seed of the sample when --budget < the space")
    t.add_argument("--json", action="store_true", help="print the outcome as JSON")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from xrt.bench import specs
    from xrt.tune.tuner import Problem, TuneError, tune

    if args.top_k < 1:
        raise ValueError(f"--top-k {args.top_k}: keep at least 1")
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: at least 1 worker")
    if args.timeout <= 0:
        raise ValueError(f"--timeout {args.timeout}: must be positive")
    specs.get(args.op)  # a clear error naming the known ops
    problem = Problem(args.op, args.provider, args.shape, args.dtype)
    try:
        out = tune(problem, budget=args.budget, top_k=args.top_k, jobs=args.jobs, gpus=args.gpus,
                   timeout=args.timeout, out_dir=args.out, retry_failed=args.retry_failed, seed=args.seed,
                   log=lambda m: print(m, file=sys.stderr, flush=True))
    except TuneError as e:
        raise ValueError(str(e)) from e
    base = out.default.get("median_s") if out.default and out.default.get("status") == "timed" else None
    if args.json:
        print(json.dumps({"machine": out.machine, "space": problem.space, "counts": out.counts,
                          "default": out.default, "best": out.best, "file": str(out.out_file) if out.out_file else None,
                          "journal": str(out.journal), "torn_journal_lines": out.torn}, indent=1))
    else:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(out.counts.items()))
        print(f"{problem.op}[{problem.provider}] {problem.dtype} {problem.shape} on {out.machine}: {counts}")
        print(f"{'rank':>4}  {'median':>12}  {'vs default':>10}  config")
        if base:
            print(f"{'def':>4}  {base * 1e6:10.2f}us  {1.0:10.3f}  {out.default['key']}")
        for i, r in enumerate(out.best, 1):
            vs = f"{base / r['median_s']:10.3f}" if base else f"{'-':>10}"
            print(f"{i:>4}  {r['median_s'] * 1e6:10.2f}us  {vs}  {r['key']}")
        if out.out_file:
            print(f"top {len(out.best)} -> {out.out_file} "
                  f"(asv suites time them; XRT_TUNED={out.out_file} feeds the ops)")
    if not out.best:
        print("xrt tune: no config ran correctly; nothing written", file=sys.stderr)
        return 1
    return 0
