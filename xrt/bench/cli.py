"""``xrt bench`` (run the suites per commit / measure one config) and ``xrt diag``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="run the asv suites (per commit, per GPU); time one config")
    bsub = b.add_subparsers(dest="bench_command", metavar="ACTION")
    r = bsub.add_parser("run", help="asv run -E existing for each commit, each GPU its own machine")
    r.add_argument("--commits", default="HEAD", help="A..B (first-parent), HASH[,HASH...] or a rev [HEAD]")
    r.add_argument("--repo", type=Path, default=Path("."), help="the git checkout of xpuruntime [.]")
    r.add_argument("--results", type=Path, default=None, help="asv results dir [REPO/results/asv]")
    r.add_argument("--all-gpus", action="store_true", help="one process per GPU, in parallel")
    r.add_argument("--device", help="cuda:N, xpu:N or cpu [the default device]")
    r.add_argument("--quick", action="store_true", help="the CI profile: tiny shapes (implied on the CPU)")
    r.add_argument("--bench", help="asv --bench regex")
    r.add_argument("--skip-existing", action="store_true", help="skip commits already measured on the machine(s)")
    r.add_argument("--changed-only", action="store_true",
                   help="per commit, run only the ops whose sources changed since the last commit measured on the "
                        "machine; the others are recorded as carried forward (xrt/bench/sources.py)")
    r.add_argument("--processes", type=_processes, default=None, metavar="N",
                   help="measure the host and compiled series in N processes, each kept as a run of its own "
                        "(device series: the first only) [3 on the full profile, 1 on the quick one]")
    r.add_argument("--lock-clocks", choices=["base", "max"],
                   help="lock GPU clocks for the run (root; restored on exit). Never on shared hosts.")
    r.set_defaults(func=run_bench)
    m = bsub.add_parser("measure", help="time one op configuration with the adaptive timer")
    m.add_argument("op", help="the op to time (square, vector_add, softmax, layernorm, ...)")
    m.add_argument("--shape", required=True, help="e.g. 4096x4096")
    m.add_argument("--dtype", default="float32", help="element type [float32]")
    m.add_argument("--provider", default="torch", help="torch, triton or cuda [torch]")
    m.add_argument("--config", default="default", help="k=v,k=v from the op's tuning space")
    m.add_argument("--graph", action="store_true", help="CUDA-graph mode (launch-bound kernels)")
    m.add_argument("--target-noise", type=float, default=0.005,
                   help="stop when the median's relative error is below this [0.005]")
    m.add_argument("--json", action="store_true", help="print the measurement as JSON")
    m.set_defaults(func=run_measure)
    b.set_defaults(func=lambda a: (b.print_help(sys.stderr), 2)[1])

    d = sub.add_parser("diag", help="the 'tuned it and it got slower?' checklist for an op")
    d.add_argument("op", help="the op to check (square, vector_add, softmax, layernorm, ...)")
    d.add_argument("--shape", help="problem shape, e.g. 4096x4096 [the op's first large shape]")
    d.add_argument("--dtype", default="float32", help="element type [float32]")
    d.add_argument("--provider", default="auto", help="torch, triton, cuda or auto (the policy's choice) [auto]")
    d.add_argument("--config", default="default", help="k=v,k=v tuning config to check")
    d.add_argument("--warmup", type=int, default=0, help="pre-compile: run N calls before checking")
    d.add_argument("--profile", type=Path, help="write a torch.profiler trace here (TensorBoard/Chrome)")
    d.set_defaults(func=run_diag)


def _processes(text: str) -> int:
    """``--processes``: a whole number >= 1 (argparse names the option and the value otherwise)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 or more")
    return n


def run_bench(args: argparse.Namespace) -> int:
    from xrt.bench import runner

    repo = args.repo
    if not (repo / ".git").exists():
        raise ValueError(f"--repo {repo}: not a git checkout")
    commits = runner.resolve_commits(repo, args.commits)
    results = args.results or repo / "results" / "asv"
    print(f"xrt bench: {len(commits)} commit(s) -> {results}", file=sys.stderr)
    summary = runner.run(repo, commits, results, all_gpus=args.all_gpus, device=args.device, quick=args.quick,
                         bench=args.bench, lock_clocks=args.lock_clocks, skip_existing=args.skip_existing,
                         changed_only=args.changed_only, processes=args.processes,
                         log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(summary, indent=1))
    bad = [c for c in summary["commits"]
           if any(v["status"].startswith(("asv exit", "refused")) for v in c.get("machines", {}).values())]
    return 1 if bad else 0


def run_measure(args: argparse.Namespace) -> int:
    import torch

    from xrt.bench import specs, suite, timer
    from xrt.device import default_device

    spec = specs.get(args.op)
    dev = default_device()
    shape = suite.parse_shape(args.shape)
    if not hasattr(torch, args.dtype) or not isinstance(getattr(torch, args.dtype), torch.dtype):
        raise ValueError(f"--dtype {args.dtype!r} is not a torch dtype")
    inputs = spec.make_inputs(shape, getattr(torch, args.dtype), dev.torch_device)
    cfg = suite.parse_config(args.config)
    spec.runnable(inputs, args.provider)
    fn = lambda: spec.call(inputs, args.provider, cfg)  # noqa: E731
    m = timer.measure(fn, dev.torch_device, graph=args.graph, target_noise=args.target_noise)
    h = timer.measure_host(fn, dev.torch_device)
    s = m.summary()
    s["gbps"] = spec.bytes_moved(shape, inputs[0].element_size()) / m.median_s / 1e9
    s["host"] = {"median_s": h.median_s, "n": h.n, "calls_per_sample": h.calls_per_sample, "wall_s": h.wall_s}
    if args.json:
        print(json.dumps(s))
    else:
        print(f"{args.op} {args.shape} {args.dtype} {args.provider} {args.config}: median {m.median_s * 1e6:.2f} us, "
              f"{s['gbps']:.1f} GB/s, noise {m.rel_noise:.3%} over {m.n} samples ({m.stopped_by}), "
              f"throttled {m.throttled_share:.0%}, wall {m.wall_s:.2f} s; host {h.median_s * 1e6:.2f} us a call "
              f"({h.n} samples of {h.calls_per_sample} back-to-back calls)")
    return 0


def run_diag(args: argparse.Namespace) -> int:
    from xrt.bench.diag import diagnose, render

    checks = diagnose(args.op, shape=args.shape, dtype=args.dtype, provider=args.provider, config=args.config,
                      warmup=args.warmup, profile_dir=args.profile)
    print(render(checks))
    return 0
