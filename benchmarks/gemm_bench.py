"""xrt's GEMM kernels side by side with torch (cuBLAS) on one CUDA GPU, in one run.

    python benchmarks/gemm_bench.py --out gemm.json [--md gemm.md] [--quick]

Every time is :func:`xrt.bench.timer.measure`'s median device time (L2 flushed before each sample,
warm-up, adaptive sample count; docs/timing.md); TFLOP/s = 2 M N K (x B) / time. Inputs are
``randn`` (never zeros: predictable data draws less power and runs faster). Each xrt output is
checked against torch's before it is timed (``err``: max |y - ref| / max |ref|); a config that
fails to compile or run is a row with its error, never a crash.

Groups and their targets (the ratio is xrt's best config of the group's sweep over the baseline;
the default config's ratio is in the table too):

* Triton bf16 ``matmul`` vs ``torch.matmul`` at 4096^3 and 8192^3: >= 0.9x; 8192x8192x512,
  4097x4096x4096 and M = 16 (16x8192x8192): >= 0.8x; and >= 1.0x on at least one shape;
* Triton bf16 ``bmm`` vs ``torch.bmm``, B = 64 at 512^3 and B = 8 at 2048^3: >= 0.9x;
* CUDA C fp32 SIMT (each version at the default tiles, v4 with a few more) vs ``torch.matmul``
  fp32 with ``torch.backends.cuda.matmul.allow_tf32 = False``: v4 >= 0.7x; v1-v3 untargeted.

The sweep is a handful of configs per group (:data:`TRITON_SWEEP`, :data:`CUDA_SWEEP`), bounded so
the whole script takes a few minutes on an H100; ``--quick`` times the defaults only.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.bench.sidebyside import cells, config_label, fmt, parse_args, run_row, save  # noqa: E402

MATMUL_SHAPES = [  # (M, N, K, target ratio)
    (4096, 4096, 4096, 0.9), (8192, 8192, 8192, 0.9), (8192, 8192, 512, 0.8), (4097, 4096, 4096, 0.8),
    (16, 8192, 8192, 0.8)]
BMM_SHAPES = [(64, 512, 512, 512, 0.9), (8, 2048, 2048, 2048, 0.9)]  # (B, M, N, K, target)
SIMT_SHAPE = (4096, 4096, 4096)
SIMT_TARGET = 0.7

_T = {"GROUP_M": 8}
TRITON_SWEEP = [  # beside the default (persistent_tma 128x256x64, 3 stages, 8 warps)
    {**_T, "kernel": "tiled", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 3, "num_warps": 8},
    {**_T, "kernel": "persistent_tma", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 4,
     "num_warps": 8},
    {**_T, "kernel": "persistent_tma", "BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 3,
     "num_warps": 8},
    {**_T, "kernel": "tiled", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 4, "num_warps": 4},
    {**_T, "kernel": "tiled", "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "num_stages": 4, "num_warps": 4},
    {"GROUP_M": 1, "kernel": "persistent_tma", "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "num_stages": 4,
     "num_warps": 4},
]
CUDA_VERSIONS = [{"version": v} for v in ("v1", "v2", "v3", "v4")]
CUDA_SWEEP = [{"version": "v4", "BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 4},
              {"version": "v4", "BM": 128, "BN": 128, "BK": 16, "TM": 4, "TN": 8},
              {"version": "v4", "BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 4}]


def bench_group(group: str, shape: str, flops: float, baseline: Callable[[], Any], impls: list[tuple[str, Any]],
                target: float | None, max_time: float, tol: float) -> list[dict]:
    """The baseline row, one row per impl, and a summary row (best impl vs the baseline)."""
    base = run_row(group, shape, "torch", baseline, None, max_time, tol, flops)
    ref = baseline()
    rows = [base]
    for label, fn in impls:
        rows.append(run_row(group, shape, label, fn, ref, max_time * 0.6, tol, flops))
    for r in rows[1:]:
        r["ratio"] = (r["tflops"] / base["tflops"]) if r.get("tflops") and base.get("tflops") else None
    ok = [r for r in rows[1:] if r.get("ratio")]
    best = max(ok, key=lambda r: r["ratio"]) if ok else None
    default = next((r for r in rows[1:] if r["impl"].endswith("default")), None)
    rows.append({"group": group, "shape": shape, "impl": "best: " + (best["impl"] if best else "none"),
                 "flops": flops, "tflops": best["tflops"] if best else None,
                 "ratio": best["ratio"] if best else None,
                 "default_ratio": default.get("ratio") if default else None, "target": target,
                 "met": (best is not None and best["ratio"] >= target) if target is not None else None,
                 "summary": True})
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args("gemm_bench", __doc__, argv)
    if args is None:
        return 2
    import torch
    import triton

    from xrt.kernels.cuda import matmul as cu
    from xrt.kernels.cuda import missing as cuda_missing
    from xrt.kernels.triton import matmul as tr

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    sweep = [] if args.quick else TRITON_SWEEP
    rows: list[dict] = []

    for m, n, k, target in MATMUL_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        impls = [(f"triton {config_label(c)}", (lambda c=c, a=a, b=b: tr.matmul(a, b, c))) for c in [None, *sweep]]
        rows += bench_group("matmul bf16", f"{m}x{n}x{k}", 2.0 * m * n * k, lambda a=a, b=b: torch.matmul(a, b),
                            impls, target, 0.4, 2e-2)
        del a, b
    for bsz, m, n, k, target in BMM_SHAPES:
        a = torch.randn(bsz, m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(bsz, k, n, device="cuda", dtype=torch.bfloat16)
        impls = [(f"triton {config_label(c)}", (lambda c=c, a=a, b=b: tr.bmm(a, b, c))) for c in [None, *sweep[:3]]]
        rows += bench_group("bmm bf16", f"{bsz}x{m}x{n}x{k}", 2.0 * bsz * m * n * k,
                            lambda a=a, b=b: torch.bmm(a, b), impls, target, 0.4, 2e-2)
        del a, b

    why = cuda_missing()
    m, n, k = SIMT_SHAPE
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    if why is None:
        cfgs = CUDA_VERSIONS + ([] if args.quick else CUDA_SWEEP)
        impls = [(f"cuda {config_label(c)}" + (" default" if c == {"version": "v4"} else ""),
                  (lambda c=c: cu.matmul(a, b, c))) for c in cfgs]
    else:
        impls = []
        rows.append({"group": "matmul fp32 SIMT", "shape": f"{m}x{n}x{k}", "impl": "cuda", "error": why})
    rows += bench_group("matmul fp32 SIMT", f"{m}x{n}x{k}", 2.0 * m * n * k, lambda: torch.matmul(a, b), impls,
                        SIMT_TARGET, 0.6, 1e-4)

    summaries = [r for r in rows if r.get("summary")]
    bf16 = [r for r in summaries if r["group"] == "matmul bf16" and r.get("ratio")]
    any_win = any(r["ratio"] >= 1.0 for r in bf16)
    out = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "cuda": torch.version.cuda, "python": platform.python_version(), "allow_tf32": False,
        "rows": rows, "bf16_at_least_1x_somewhere": any_win,
    }
    save(out, table(rows, out), args.out, args.md)
    return 0


def table(rows: list[dict], meta: dict) -> str:
    lines = [f"GEMM on {meta['device']} (torch {meta['torch']}, triton {meta['triton']}, CUDA {meta['cuda']}); "
             "device time from xrt.bench.timer.measure (median, L2 flushed); TFLOP/s = 2MNK/t. "
             "fp32 rows: allow_tf32=False.", "",
             "| group | shape | impl | ms | TFLOP/s | ratio to torch | target | met | err / error |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        met, ratio, note = cells(r)
        lines.append(f"| {r['group']} | {r['shape']} | {r['impl']} | {fmt(r.get('ms'), '.4f')} | "
                     f"{fmt(r.get('tflops'), '.1f')} | {ratio} | {fmt(r.get('target'), '.2f')} | {met} | {note} |")
    lines.append("")
    lines.append(f"Triton bf16 >= 1.0x torch on at least one shape: "
                 f"{'met' if meta['bf16_at_least_1x_somewhere'] else 'not met'}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
