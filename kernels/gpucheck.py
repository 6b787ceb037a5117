"""One GPU run that times every memory-bound op x provider beside torch, plus the copy baseline.

    python -m xrt.kernels.gpucheck --out DIR [--ops softmax,layernorm] [--budget 200] [--no-configs]

Large shapes: ``triton.testing.do_bench`` (median; it flushes L2 before each sample). Small shapes:
``do_bench_cudagraph`` (launch overhead removed); the CUDA C provider cannot be captured (pycuda
launches on the legacy stream), so its small-shape rows are plain ``do_bench`` and say so.
TB/s = bytes_moved (``xrt.bench.specs``) / time; "% copy" against ``y.copy_(x)`` of 1 GiB fp16,
measured in the same run. After the default-config table, the tuning configs of
``kernels/spaces.py`` are swept on the large bf16 shapes until the time budget runs out, and the
best config per (op, provider, shape) is reported, to pick defaults from. A failing provider
writes its error into its row and the run goes on. Writes DIR/kernels.md and DIR/kernels.json.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path
from typing import Any

OPS = ["square", "vector_add", "window_sum", "softmax", "layernorm", "layernorm_bwd"]


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


def _time(fn, graph: bool, quick: bool = False) -> float:
    """Median milliseconds."""
    from triton.testing import do_bench, do_bench_cudagraph

    if graph:
        return do_bench_cudagraph(fn, rep=20, return_mode="median")
    if quick:
        return do_bench(fn, warmup=5, rep=25, return_mode="median")
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def copy_bandwidth() -> float:
    """TB/s of ``y.copy_(x)`` over 1 GiB of fp16 (read + write counted)."""
    import torch

    bufs = [torch.randn(1 << 29, device="cuda", dtype=torch.float16)]
    bufs.append(torch.empty_like(bufs[0]))
    ms = _time(lambda: bufs[1].copy_(bufs[0]), graph=False)
    nbytes = 2 * bufs[0].numel() * bufs[0].element_size()
    bufs.clear()
    torch.cuda.empty_cache()
    return nbytes / (ms * 1e-3) / 1e12


def _err(out: Any, ref: Any) -> float:
    """Max relative error of the first output against torch's (a sanity column, not a test)."""
    a, b = _first(out).double(), _first(ref).double()
    return float(((a - b).abs() / (b.abs() + 1e-2)).max()) if b.numel() else 0.0


def measure(op: str, set_name: str, shape, dtype_name: str, provider: str, config: dict | None,
            copy_tbs: float, cache: dict, quick: bool = False) -> dict:
    import torch

    from xrt.bench import specs

    spec = specs.get(op)
    dtype = getattr(torch, dtype_name)
    row = {"op": op, "set": set_name, "shape": "x".join(map(str, shape)), "dtype": dtype_name,
           "provider": provider, "config": config, "us": None, "tbs": None, "pct_copy": None,
           "timing": "cudagraph" if set_name == "small" else "do_bench", "err_vs_torch": None, "error": None}
    try:
        key = (op, tuple(shape), dtype_name)
        if key not in cache:
            cache.clear()  # one input set alive at a time: large shapes are GiBs
            torch.cuda.empty_cache()
            args = spec.make_inputs(tuple(shape), dtype, "cuda")
            cache[key] = (args, spec.call(args, "torch", None))
        args, ref = cache[key]
        fn = (lambda: spec.call(args, provider, config))
        out = fn()
        torch.cuda.synchronize()
        row["err_vs_torch"] = _err(out, ref)
        graph = set_name == "small" and provider != "cuda"
        if set_name == "small" and provider == "cuda":
            row["timing"] = "do_bench (pycuda is not graph-capturable)"
        ms = _time(fn, graph=graph, quick=quick)
        esize = torch.empty((), dtype=dtype).element_size()
        tbs = spec.bytes_moved(tuple(shape), esize) / (ms * 1e-3) / 1e12
        row.update(us=round(ms * 1e3, 2), tbs=round(tbs, 3), pct_copy=round(100 * tbs / copy_tbs, 1))
    except Exception as e:  # noqa: BLE001  (a failing provider is a row, not the end of the run)
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        row["traceback"] = traceback.format_exc()[-2000:]
    return row


def _table(rows: list[dict], title: str) -> str:
    head = "| op | set | shape | dtype | provider | config | µs | TB/s | % copy | max rel err vs torch | note |"
    lines = [f"### {title}", "", head, "|" + "---|" * 11]
    for r in rows:
        cfg = "default" if not r["config"] else ", ".join(f"{k}={v}" for k, v in r["config"].items())
        err = "" if r["err_vs_torch"] is None else f"{r['err_vs_torch']:.2g}"
        note = r["error"] or ("" if r["timing"] in ("do_bench", "cudagraph") else r["timing"])
        lines.append(f"| {r['op']} | {r['set']} | {r['shape']} | {r['dtype']} | {r['provider']} | {cfg} | "
                     f"{r['us'] if r['us'] is not None else '-'} | {r['tbs'] if r['tbs'] is not None else '-'} | "
                     f"{r['pct_copy'] if r['pct_copy'] is not None else '-'} | {err} | {note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xrt.kernels.gpucheck", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--budget", type=float, default=210.0, help="seconds for the whole run (configs stop first)")
    p.add_argument("--no-configs", action="store_true", help="skip the tuning-config sweep")
    args = p.parse_args(argv)

    import torch

    from xrt.bench import specs
    from xrt.kernels import spaces

    if not torch.cuda.is_available():
        raise SystemExit("gpucheck needs a CUDA GPU")
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    dev = torch.cuda.get_device_name()
    copy_tbs = copy_bandwidth()
    print(f"device: {dev}; copy bandwidth (1 GiB fp16 y.copy_(x)): {copy_tbs:.3f} TB/s", flush=True)
    rows: list[dict] = []
    cache: dict = {}
    for op in ops:
        spec = specs.get(op)
        for set_name in ("large", "small"):
            dtypes = spec.dtypes if set_name == "large" else spec.dtypes[:1]
            for shape in spec.shapes[set_name]:
                for dt in dtypes:
                    for prov in spec.providers:
                        r = measure(op, set_name, shape, dt, prov, None, copy_tbs, cache)
                        rows.append(r)
                        print(_table([r], "").splitlines()[-1], flush=True)
    cache.clear()
    tuned: list[dict] = []
    best: list[dict] = []
    if not args.no_configs:
        for op in ops:
            spec = specs.get(op)
            dt = "bfloat16" if "bfloat16" in spec.dtypes else spec.dtypes[0]
            for shape in spec.shapes["large"]:
                for prov, key in spec.spaces.items():
                    cands = []
                    for cfg in spaces.configs(key):
                        if time.monotonic() - t0 > args.budget:
                            break
                        r = measure(op, "large", shape, dt, prov, cfg, copy_tbs, cache, quick=True)
                        tuned.append(r)
                        if r["tbs"] is not None:
                            cands.append(r)
                    if cands:
                        best.append(max(cands, key=lambda r: r["tbs"]))
        if time.monotonic() - t0 > args.budget:
            print(f"config sweep stopped at the {args.budget:.0f} s budget", flush=True)
    summary = (f"Copy baseline (1 GiB fp16, `y.copy_(x)`): **{copy_tbs:.3f} TB/s**. "
               f"torch {torch.__version__}; run took {time.monotonic() - t0:.0f} s.")
    md = [f"# xrt kernels on {dev}", "", summary, "",
          _table(rows, "Default configs, side by side with torch")]
    if best:
        md += ["", _table(best, "Best tuning config per (op, provider, shape), bf16")]
    text = "\n".join(md)
    (args.out / "kernels.md").write_text(text)
    (args.out / "kernels.json").write_text(json.dumps({"device": dev, "copy_tbs": copy_tbs, "rows": rows,
                                                        "configs": tuned, "best": best}, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
