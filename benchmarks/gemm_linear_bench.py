"""xrt's Triton GEMM on a transformer linear's three GEMMs, side by side with torch (cuBLAS).

    python benchmarks/gemm_linear_bench.py --out linear.json [--md linear.md] [--quick] [--device cpu]

A linear of in_features K and out_features N over T = batch x seq rows (x [T, K], W [N, K],
g [T, N]) runs three GEMMs, each in its own operand layout (xrt/kernels/triton/matmul.py):

* ``nt``, the forward ``x @ W.T``: M x N x K = T x N x K;
* ``nn``, the input gradient ``g @ W``: T x K x N;
* ``tn``, the weight gradient ``g.T @ x``: N x K x T.

Both sides get the same views (``W.T`` and ``g.T`` are never copied). Shapes: T in
``spaces.LINEAR_ROWS`` (8192, 16384) x (K, N) in ``spaces.LINEAR_FEATURES``; for each GEMM the
default config (the layout table's, ``spaces.GEMM_LAYOUT_DEFAULTS``) and the few of
:data:`SWEEP` (and of :data:`SPLIT_SWEEP` where C is narrow). Target: the best config >= 0.95x
torch in every (layout, shape).

Every time is :func:`xrt.bench.timer.measure`'s median device time (L2 flushed before each sample);
TFLOP/s = 2 M N K / time. Inputs are ``randn`` in bf16. Each xrt output is checked against
torch's before it is timed; a config that fails to compile or run is a row with its error. The
JSON's ``table`` holds each (layout, M, N, K fine bucket)'s winner in ``GEMM_LAYOUT_DEFAULTS``'
form (``spaces.gemm_bucket_fine``; a power-of-two dimension's fine bucket is its coarse one).

``--device cpu`` runs under Triton's interpreter (``TRITON_INTERPRET=1``) on tiny shapes in fp32:
a smoke run of the script, its timings meaningless. ``--quick``: the default config only.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.bench.sidebyside import cells, config_label, fmt, run_row, save  # noqa: E402
from xrt.kernels import spaces  # noqa: E402

TARGET = 0.95
_TMA = {"kernel": "persistent_tma", "GROUP_M": 8, "BLOCK_M": 128, "BLOCK_K": 64}
SWEEP = [  # beside the default; bounded so that the whole run takes about 4 minutes on an H100
    {**_TMA, "BLOCK_N": 256, "num_warps": 8, "num_stages": 3},
    {**_TMA, "BLOCK_N": 256, "num_warps": 8, "num_stages": 3, "EPILOGUE_SUBTILE": True},
    {**_TMA, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4},
    {**_TMA, "BLOCK_N": 128, "num_warps": 4, "num_stages": 4},
    {**_TMA, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4, "warp_specialize": True},
    # the narrow weight gradients (N x K x T with N, K <= 4096): three waves of small tiles rather
    # than one and a half of 128 x 128 on 132 SMs
    {**_TMA, "BLOCK_N": 64, "num_warps": 4, "num_stages": 5},
]
# Split K, each config only where the tuner would search it (spaces.split_k_why: C has fewer tiles
# than two waves of SMs, the weight gradients of the narrower linears): elsewhere a split only adds
# the partials' traffic.
SPLIT_SWEEP = [
    {**_TMA, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4, "SPLIT_K": 2},
    {**_TMA, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4, "SPLIT_K": 4},
    {**_TMA, "BLOCK_N": 256, "num_warps": 8, "num_stages": 3, "SPLIT_K": 2},
    {**_TMA, "BLOCK_N": 64, "num_warps": 4, "num_stages": 5, "SPLIT_K": 2},
]
# --narrow: the GEMMs still under the target at the last full run (T, K, N, layouts), and a wider
# sweep on them: 64-row tiles (more programs for a narrow C), BLOCK_K 128, deeper pipelines, split K
# with 4 warps, 128 x 256 split in four.
NARROW = ((8192, 1024, 3072, ("tn",)), (8192, 1024, 1024, ("nt", "nn", "tn")), (16384, 1024, 3072, ("tn",)),
          (16384, 1024, 1024, ("tn",)))
NARROW_SWEEP = [
    *({**_TMA, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": s}
      for bm, bn, bk, w, s in ((64, 128, 64, 4, 4), (64, 128, 64, 4, 5), (64, 256, 64, 4, 4), (64, 256, 64, 8, 4),
                               (64, 128, 128, 4, 3), (128, 128, 128, 8, 3), (128, 256, 128, 8, 2),
                               (128, 128, 64, 8, 5), (256, 128, 64, 8, 3), (128, 64, 64, 4, 5))),
    *({**_TMA, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": s, "SPLIT_K": sk}
      for bm, bn, bk, w, s, sk in ((64, 128, 64, 4, 4, 2), (128, 128, 64, 8, 5, 2), (128, 128, 128, 8, 3, 2),
                                   (128, 256, 64, 8, 3, 4), (64, 256, 64, 4, 4, 2), (128, 128, 64, 4, 4, 2))),
    {**_TMA, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4, "SPLIT_K": 2, "GROUP_M": 1},
]
# --tiled: the tiled kernel (what runs where TMA cannot: before Hopper, unaligned views, a compiled
# GEMM under matmul.TRACED_TMA_MIN_WORK) on the models' narrower linears (T, K, N), with tiled
# configs around the TMA default's tile.
TILED = ((8192, 768, 2304, ("nt", "nn", "tn")), (8192, 768, 768, ("nt", "nn", "tn")),
         (8192, 768, 3072, ("nt", "nn", "tn")), (8192, 3072, 768, ("nt", "nn", "tn")),
         (8192, 1024, 1024, ("nt", "nn", "tn")))
_TILED = {"kernel": "tiled", "GROUP_M": 8}
TILED_SWEEP = [{**_TILED, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": s}
               for bm, bn, bk, w, s in ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 256, 32, 8, 4),
                                        (256, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4),
                                        (128, 128, 32, 4, 5), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                                        (128, 128, 128, 8, 3))]
# --device cpu: tiny shapes (T, (K, N) pairs) the interpreter runs in a few seconds
CPU_ROWS = (32,)
CPU_FEATURES = ((16, 48), (48, 16))


def parse(argv: list[str] | None) -> argparse.Namespace | None:
    ap = argparse.ArgumentParser(prog="gemm_linear_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the rows")
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    ap.add_argument("--quick", action="store_true", help="default configs only (no sweep)")
    ap.add_argument("--narrow", action="store_true",
                    help="only the GEMMs under the target (NARROW), with the wider NARROW_SWEEP")
    ap.add_argument("--features", help="K:N pairs (in, out features), comma-separated, at T 8192, in place "
                    "of spaces.LINEAR_FEATURES; with --wide, the sweep of --narrow too")
    ap.add_argument("--wide", action="store_true", help="with --features: SWEEP, SPLIT_SWEEP and NARROW_SWEEP")
    ap.add_argument("--tiled", action="store_true",
                    help="the tiled kernel on the GEMMs of TILED, with TILED_SWEEP")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: tiny shapes under Triton's interpreter (a smoke run)")
    args = ap.parse_args(argv)
    if args.features and not re.fullmatch(r"[1-9]\d*:[1-9]\d*(,[1-9]\d*:[1-9]\d*)*", args.features):
        print(f"gemm_linear_bench: --features {args.features!r}: expected K:N pairs such as 768:2304,768:768",
              file=sys.stderr)
        return None
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gemm_linear_bench needs a CUDA GPU (or --device cpu for a smoke run)", file=sys.stderr)
        return None
    if args.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        print("gemm_linear_bench --device cpu needs TRITON_INTERPRET=1 in the environment", file=sys.stderr)
        return None
    return args


def operands(lay: str, x: Any, w: Any, g: Any) -> tuple[Any, Any]:
    """The two views a layout's GEMM multiplies (``spaces.linear_gemms``' order)."""
    return {"nt": (x, w.T), "nn": (g, w), "tn": (g.T, x)}[lay]


def best_of(rows: list[dict], base: dict, lay: str, m: int, n: int, k: int) -> dict:
    """The summary row of one GEMM: its best config against torch, and the default's ratio."""
    for r in rows:
        r["ratio"] = (base["ms"] / r["ms"]) if r.get("ms") and base.get("ms") else None
    ok = [r for r in rows if r.get("ratio")]
    best = max(ok, key=lambda r: r["ratio"]) if ok else None
    default = next((r for r in rows if r["impl"] == "triton default"), None)
    return {"group": lay, "shape": f"{m}x{n}x{k}", "impl": "best: " + (best["impl"] if best else "none"),
            "config": best.get("config") if best else None, "flops": 2.0 * m * n * k,
            "tflops": best["tflops"] if best else None, "ratio": best["ratio"] if best else None,
            "default_ratio": default.get("ratio") if default else None, "target": TARGET,
            "met": best is not None and best["ratio"] >= TARGET, "summary": True,
            "key": [lay, spaces.gemm_bucket_fine(m), spaces.gemm_bucket_fine(n), spaces.gemm_bucket_fine(k)]}


def bench_gemm(lay: str, a: Any, b: Any, configs: list[dict | None], device: str, rule: dict) -> list[dict]:
    """torch's row, one row per config (each labelled with the config it ran), the summary row."""
    import torch

    from xrt.kernels.triton import matmul as tr

    m, k = a.shape
    n = b.shape[1]
    shape, flops = f"{m}x{n}x{k}", 2.0 * m * n * k
    tol = 2e-2 if a.dtype == torch.bfloat16 else 1e-4
    base = run_row(lay, shape, "torch", lambda: torch.matmul(a, b), None, rule["base"], tol, flops, device,
                   **rule["timer"])
    ref = torch.matmul(a, b)
    rows, seen = [], set()
    for cfg in configs:
        full = dict(tr.default_config(a, b, cfg))  # what the launch runs: the table's entry for None
        key = tuple(sorted(full.items()))
        if key in seen:
            continue  # a sweep config that is the default: timed once, as the default
        seen.add(key)
        label = "triton default" if cfg is None else f"triton {config_label(cfg)}"
        row = run_row(lay, shape, label, lambda c=cfg: tr.matmul(a, b, c), ref, rule["impl"], tol, flops, device,
                      **rule["timer"])
        row["config"] = full
        if full["warp_specialize"] and (a.device, tuple(full.items())) in tr._WS_BROKEN:
            row["impl"] += " (warp specialization did not compile: the plain loop ran)"
        rows.append(row)
    return [base, *rows, best_of(rows, base, lay, m, n, k)]


def bucket_winners(rows: list[dict]) -> dict[tuple, dict]:
    """Each fine bucket's winner, keyed as ``GEMM_LAYOUT_DEFAULTS`` is: the config with the least
    time summed over the bucket's GEMMs, among the configs timed on every one of them (two linears
    can share a bucket: 768 -> 2304 and 768 -> 3072); its lowest ratio to torch and that shape."""
    import json

    def key_of(r: dict) -> tuple:
        return (r["group"], *(spaces.gemm_bucket_fine(int(x)) for x in r["shape"].split("x")))

    shapes: dict[tuple, set] = {}
    for r in rows:
        if r.get("summary"):
            shapes.setdefault(key_of(r), set()).add(r["shape"])
    times: dict[tuple, dict[str, dict[str, dict]]] = {}
    for r in rows:
        if r.get("summary") or not r.get("ms") or not r.get("config"):
            continue
        key = key_of(r)
        times.setdefault(key, {}).setdefault(json.dumps(r["config"], sort_keys=True), {})[r["shape"]] = r
    table = {}
    for key, per in times.items():
        full = {c: got for c, got in per.items() if set(got) == shapes.get(key)}
        if not full:
            continue
        best = min(full.values(), key=lambda got: sum(r["ms"] for r in got.values()))
        low = min(best.values(), key=lambda r: r["ratio"] or 0.0)
        table[key] = {"key": list(key), "config": low["config"], "ratio": low["ratio"], "shape": low["shape"]}
    return table


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args is None:
        return 2
    import torch
    import triton

    torch.manual_seed(0)
    cpu = args.device == "cpu"
    dtype = torch.float32 if cpu else torch.bfloat16
    rows_t, features = (CPU_ROWS, CPU_FEATURES) if cpu else (spaces.LINEAR_ROWS, spaces.LINEAR_FEATURES)
    configs: list[dict | None] = [None] + ([] if args.quick else SWEEP)
    rule = ({"base": 0.05, "impl": 0.05, "timer": {"min_samples": 2, "warmup_time": 0.0, "min_time": 0.0}} if cpu
            else {"base": 0.3, "impl": 0.15, "timer": {}})
    sms = 132 if cpu else torch.cuda.get_device_properties(0).multi_processor_count
    gemms = [(t, k, n, ("nt", "nn", "tn")) for t in rows_t for k, n in features]
    if args.narrow and not cpu:
        gemms, configs = list(NARROW), [None, *NARROW_SWEEP]
    if args.features and not cpu:
        pairs = [tuple(int(v) for v in p.split(":")) for p in args.features.split(",")]
        gemms = [(spaces.LINEAR_ROWS[0], k, n, ("nt", "nn", "tn")) for k, n in pairs]
        if args.wide:
            configs = [None, *SWEEP, *NARROW_SWEEP]
    if args.tiled and not cpu:
        gemms, configs = list(TILED), [None, *TILED_SWEEP]
    rows: list[dict] = []
    for t, k, n, layouts in gemms:
        x = torch.randn(t, k, device=args.device).to(dtype)
        w = torch.randn(n, k, device=args.device).to(dtype) / k ** 0.5
        g = torch.randn(t, n, device=args.device).to(dtype)
        for lay, gm, gn, gk in spaces.linear_gemms(t, k, n):
            if lay not in layouts:
                continue
            a, b = operands(lay, x, w, g)
            split = [] if args.quick or args.narrow or args.tiled else [
                c for c in SPLIT_SWEEP if spaces.split_k_why(c, gm, gn, gk, sms) is None]
            rows += bench_gemm(lay, a, b, configs + split, args.device, rule)
        del x, w, g
    summaries = [r for r in rows if r.get("summary")]
    table = bucket_winners(rows)
    out = {
        "device": torch.cuda.get_device_name() if not cpu else f"cpu (Triton interpreter), {platform.machine()}",
        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "dtype": str(dtype).removeprefix("torch."), "rows": rows,
        "met": sum(bool(r["met"]) for r in summaries), "gemms": len(summaries),
        "default_met": sum((r.get("default_ratio") or 0) >= TARGET for r in summaries),
        "table": list(table.values()),
    }
    save(out, markdown(rows, out), args.out, args.md)
    return 0


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"Linear GEMMs on {meta['device']} ({meta['dtype']}; torch {meta['torch']}, triton {meta['triton']}, "
             f"CUDA {meta['cuda']}); device time from xrt.bench.timer.measure (median, L2 flushed); "
             "TFLOP/s = 2MNK/t; ratio = torch time / xrt time.", "",
             "| layout | M x N x K | impl | ms | TFLOP/s | ratio to torch | target | met | err / error |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        met, ratio, note = cells(r)
        lines.append(f"| {r['group']} | {r['shape']} | {r['impl']} | {fmt(r.get('ms'), '.4f')} | "
                     f"{fmt(r.get('tflops'), '.1f')} | {ratio} | {fmt(r.get('target'), '.2f')} | {met} | {note} |")
    lines += ["", f"Best config >= {TARGET}x torch: {meta['met']} of {meta['gemms']} GEMMs; "
              f"the default config: {meta['default_met']}.", "",
              "Winners by (layout, M, N, K fine bucket: spaces.gemm_bucket_fine), "
              "the form of spaces.GEMM_LAYOUT_DEFAULTS "
              "(a bucket's lowest-ratio shape shown):", "",
              "| key | shape | ratio | config |", "| --- | --- | ---: | --- |"]
    for e in meta["table"]:
        lines.append(f"| {tuple(e['key'])} | {e['shape']} | {fmt(e['ratio'], '.3f')} | {config_label(e['config'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
