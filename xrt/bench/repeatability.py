"""How repeatable is the timer? The same kernels measured in N separate processes.

    python -m xrt.bench.repeatability --processes 10 --out DIR

Each process measures every kernel below with :func:`xrt.bench.timer.measure` and with
``triton.testing.do_bench`` (``do_bench_cudagraph`` for the graph-mode kernel), in the same
process, and reports medians. The parent collects them and prints, side by side, the coefficient
of variation of the medians across processes, and the wall time each measurement took.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

# (name, op, shape, dtype, provider, graph): a >=20 us bandwidth-bound kernel, a ~50 us one,
# and a ~5 us launch-bound one timed in CUDA-graph mode.
KERNELS = [
    ("square fp32 16M (large)", "square", (1 << 24,), "float32", "triton", False),
    ("square bf16 64M (large)", "square", (1 << 26,), "bfloat16", "cuda", False),
    ("square fp32 256K (graph)", "square", (1 << 18,), "float32", "triton", True),
    ("square fp32 1M (graph)", "square", (1 << 20,), "float32", "triton", True),
]


def child() -> None:
    import torch
    import triton.testing as tt

    from xrt.bench import specs, timer

    out = []
    for name, op, shape, dtype, provider, graph in KERNELS:
        spec = specs.get(op)
        args = spec.make_inputs(shape, getattr(torch, dtype), "cuda")
        fn = functools.partial(spec.call, args, provider, None)
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        m = timer.measure(fn, "cuda", graph=graph)
        xrt_wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        if graph:
            db = tt.do_bench_cudagraph(fn, return_mode="median") * 1e-3
        else:
            db = tt.do_bench(fn, return_mode="median") * 1e-3
        db_wall = time.perf_counter() - t0
        out.append({"name": name, "xrt_median_s": m.median_s, "xrt_wall_s": xrt_wall, "xrt_n": m.n,
                    "xrt_stopped_by": m.stopped_by, "throttled_share": m.throttled_share,
                    "median_sm_mhz": m.median_sm_mhz, "do_bench_median_s": db, "do_bench_wall_s": db_wall,
                    "bytes": spec.bytes_moved(shape, args[0].element_size())})
    print(json.dumps(out))


def cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else 0.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--processes", type=int, default=10)
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        child()
        return
    runs = []
    for i in range(a.processes):
        r = subprocess.run([sys.executable, "-m", "xrt.bench.repeatability", "--child"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.exit(f"process {i} failed:\n{r.stderr[-3000:]}")
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"process {i + 1}/{a.processes} done", file=sys.stderr, flush=True)
    lines = ["| kernel | xrt median (us) | xrt CV of medians | do_bench median (us) | do_bench CV of medians | "
             "xrt wall per config (s, median) | do_bench wall (s, median) | xrt samples (median) | throttled |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k, (name, *_rest) in enumerate(KERNELS):
        rows = [run[k] for run in runs]
        xm = [r["xrt_median_s"] for r in rows]
        dm = [r["do_bench_median_s"] for r in rows]
        lines.append(
            f"| {name} | {statistics.median(xm) * 1e6:.2f} | {cv(xm):.2%} | {statistics.median(dm) * 1e6:.2f} | "
            f"{cv(dm):.2%} | {statistics.median(r['xrt_wall_s'] for r in rows):.3f} | "
            f"{statistics.median(r['do_bench_wall_s'] for r in rows):.3f} | "
            f"{statistics.median(r['xrt_n'] for r in rows):.0f} | "
            f"{max(r['throttled_share'] for r in rows):.0%} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "repeatability.md").write_text(table + "\n")
        (a.out / "repeatability.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
