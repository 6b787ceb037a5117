"""``xrt tune``: search one kernel's tuning space for one problem on this machine.

``xrt tune space OP [--provider P] [--shape S] [--dtype D]``: the space's size before and after
pruning, and how many configs each constraint dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("tune", help="search a kernel's tuning space; the best configs feed the policy and suites",
                       description="xrt tune OP --shape S ...: search; xrt tune space OP [--shape S]: the space, "
                                   "pruned")
    t.add_argument("op", help=f"an op with a tuning space: {', '.join(tunable_ops())}; or `space`, then the op")
    t.add_argument("space_op", nargs="?", metavar="OP", help="(after `space`) the op whose space to print")
    t.add_argument("--provider", default="triton", help="triton or cuda [triton]")
    t.add_argument("--shape", help="the problem, e.g. 16384x8192 (GEMM: MxNxK)")
    t.add_argument("--dtype", default="float32", help="element type [float32]")
    t.add_argument("--strategy", default="exhaustive", help="exhaustive, random or model (Optuna TPE) [exhaustive]")
    t.add_argument("--budget-evals", "--budget", dest="budget", type=int,
                   help="configs to evaluate, the default and the journal's included [the whole pruned space]")
    t.add_argument("--budget-seconds", type=float, help="stop proposing configs after this many seconds")
    t.add_argument("--no-prune", action="store_true", help="search the whole grid, constraints off")
    t.add_argument("--top-k", type=int, default=3, help="configs kept [3]")
    t.add_argument("--jobs", type=int, default=4, help="compile-pool workers; the model's batch [4]")
    t.add_argument("--gpus", help="time on these GPUs in parallel: all or 0,1 [the default device]")
    t.add_argument("--address", metavar="HOST:PORT", help="join this Ray cluster: compile actors on its CPUs, one "
                                                          "timing actor per GPU [local processes, no Ray]")
    t.add_argument("--timeout", type=float, default=120.0, help="seconds one config may take before its "
                                                                "worker is killed [120]")
    t.add_argument("--out", type=Path, default=Path("results/tuned"), help="top-K files and journals [results/tuned]")
    t.add_argument("--retry-failed", action="store_true", help="try again the configs that failed last time")
    t.add_argument("--seed", type=int, default=0, help="seed of the random order and of the model [0]")
    t.add_argument("--json", action="store_true", help="print the outcome as JSON (with its timeline)")
    t.add_argument("-v", "--verbose", action="store_true",
                   help="print the timeline: when each step happened, in seconds since the process started")
    t.set_defaults(func=run, exit_at_once=True)  # xrt.cli: no interpreter teardown after the search


def tunable_ops() -> list[str]:
    """The ops with a tuning space (their definitions, xrt/kernels/defs), in definition order."""
    from xrt.kernels import defs

    return [d.name for d in defs.OPS.values() if d.space_keys]


def run_space(args: argparse.Namespace) -> int:
    from xrt.bench import specs
    from xrt.device import default_device
    from xrt.kernels import spaces
    from xrt.tune import search
    from xrt.tune.tuner import Problem, TuneError, device_problem

    if not args.space_op:
        raise ValueError("xrt tune space: name the op, e.g. xrt tune space matmul --shape 4096x4096x4096")
    spec = specs.get(args.space_op)
    problem = Problem(args.space_op, args.provider, args.shape or "", args.dtype)
    try:
        key = problem.space
        dev = default_device()
        full = search.grid(key)
        if args.shape:
            kept, dropped = search.pruned(key, device_problem(problem, dev))
        else:
            kept, dropped = full, {}
    except TuneError as e:
        raise ValueError(str(e)) from e
    if args.dtype not in spec.dtypes and args.shape:
        print(f"xrt tune space: note: the suites time {args.space_op} in {', '.join(spec.dtypes)} only",
              file=sys.stderr)
    out = {"space": key, "space_hash": spaces.space_hash(key), "device": dev.name, "shape": args.shape,
           "dtype": args.dtype, "parameters": spaces.space(key), "default": spaces.default(key),
           "configs": len(full), "after_pruning": len(kept), "dropped": dict(dropped)}
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    print(f"{key} (hash {out['space_hash']}) on {dev.name}"
          + (f", shape {args.shape}, {args.dtype}" if args.shape else " (no --shape: nothing pruned)"))
    for name, values in spaces.space(key).items():
        print(f"  {name}: {values}")
    print(f"configs: {len(full)} before pruning, {len(kept)} after")
    for why, n in sorted(dropped.items(), key=lambda x: -x[1]):
        print(f"  dropped {n:5d}: {why}")
    return 0


def run(args: argparse.Namespace) -> int:
    from xrt.tune.timeline import Timeline

    tl = Timeline()
    tl.mark("xrt tune started")  # Python, xrt.cli, the parser
    if args.op == "space":
        return run_space(args)
    if args.space_op:
        raise ValueError(f"xrt tune {args.op} {args.space_op}: one op (or `xrt tune space OP`)")
    if not args.shape:
        raise ValueError(f"xrt tune {args.op}: --shape is required, e.g. --shape 4096x4096")
    if args.top_k < 1:
        raise ValueError(f"--top-k {args.top_k}: keep at least 1")
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: at least 1 worker")
    if args.timeout <= 0:
        raise ValueError(f"--timeout {args.timeout}: must be positive")
    from xrt.tune.tuner import EarlyWorkers, Problem, TuneError, early_pins, tune

    problem = Problem(args.op, args.provider, args.shape, args.dtype)
    # The timing workers first (one per GPU; local runs only): their start overlaps the imports below.
    # Whatever fails from here on, the finally stops those the search did not adopt.
    early = None if args.address else EarlyWorkers(problem, early_pins(args.gpus), tl, max(args.timeout, 300.0))
    try:
        from xrt.bench import specs

        tl.mark("imports done")
        specs.get(args.op)  # a clear error naming the known ops
        out = tune(problem, budget=args.budget, top_k=args.top_k, jobs=args.jobs, gpus=args.gpus,
                   timeout=args.timeout, out_dir=args.out, retry_failed=args.retry_failed, seed=args.seed,
                   strategy=args.strategy, budget_seconds=args.budget_seconds, prune=not args.no_prune,
                   address=args.address, timeline=tl, early=early,
                   log=lambda m: print(m, file=sys.stderr, flush=True))
    except TuneError as e:
        raise ValueError(str(e)) from e
    finally:
        if early is not None:
            early.stop()
    base = out.default.get("median_s") if out.default and out.default.get("status") == "timed" else None
    tl.mark("output")
    if args.json:
        print(json.dumps({"machine": out.machine, "space": problem.space, "space_hash": out.space_hash,
                          "space_size": out.space_size, "dropped": out.dropped, "strategy": args.strategy,
                          "counts": out.counts, "tried": out.tried, "skipped": out.skipped,
                          "default": out.default, "best": out.best,
                          "file": str(out.out_file) if out.out_file else None,
                          "journal": str(out.journal), "torn_journal_lines": out.torn,
                          "timeline": tl.as_list()}, indent=1))
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
    if args.verbose:
        tl.mark("exit")
        print("timeline (s since the process started):\n" + "\n".join(tl.lines()), file=sys.stderr)
    if not out.best:
        print("xrt tune: no config ran correctly; nothing written", file=sys.stderr)
        return 1
    return 0
