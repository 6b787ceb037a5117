"""xrt's chunked ``linear_cross_entropy`` side by side with torch's ``F.cross_entropy(F.linear(h, w), t)``.

    python benchmarks/flce_bench.py [--out flce.json] [--md flce.md] [--quick] [--device cuda|cpu]

Each row is one loss's forward and backward (the gradients of ``h`` and ``w``, by
``torch.autograd.grad``), bf16 on CUDA, one token in 16 ignored (``ignore_index=-100``):

* ``ms``: :func:`xrt.bench.timer.measure`'s median device time (L2 flushed before each sample);
* ``peak MiB``: ``torch.cuda.max_memory_allocated`` during one call, less what was allocated before
  it (the inputs), so the column is what the loss itself needs: torch's logits, its log-softmax and
  their gradients against one chunk's logits; both sides hold the returned gradients;
* ``err``: the loss's and both gradients' largest error relative to torch's (max |x - ref| / max |ref|).

The ratios are xrt over torch (lower is better). Targets (H100, bf16): peak memory at most 0.7x
torch's, time close to torch's. Beside the default (``linear_cross_entropy.triton``'s ``auto``
chunk), the full run sweeps the chunk size through the launcher.

``--device cpu`` runs the same rows on tiny shapes in float32 with the Triton kernel in its CPU
interpreter (``TRITON_INTERPRET=1``, set here): a check that the script runs, with no memory column.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (N tokens, d, V)
SHAPES = [(8192, 1024, 32768), (8192, 2048, 50304), (8192, 2048, 128256), (8192, 4096, 128256)]
QUICK = {"cuda": [(8192, 1024, 32768)], "cpu": [(24, 16, 200)]}
CPU_SHAPES = [(24, 16, 200), (70, 16, 600)]
CHUNKS = [1024, 2048, 4096]  # the full run's sweep, beside "auto"
MEMORY_TARGET = 0.7


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="flce_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="JSON file for the rows")
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    ap.add_argument("--quick", action="store_true", help="one shape, the default config only")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (bf16, the measurement) or cpu (float32, Triton's interpreter: a smoke run)")
    return ap.parse_args(argv)


def inputs(shape: tuple[int, int, int], dtype: Any, device: str) -> tuple:
    import torch

    n, d, v = shape
    g = torch.Generator(device="cpu").manual_seed(n * 31 + v)
    h = torch.randn(n, d, generator=g).to(device=device, dtype=dtype).requires_grad_()
    w = (torch.randn(v, d, generator=g) / d ** 0.5).to(device=device, dtype=dtype).requires_grad_()
    t = torch.randint(0, v, (n,), generator=g).to(device)
    t[::16] = -100
    return h, w, t


def calls(h: Any, w: Any, t: Any, sweep: list[int]) -> list[tuple[str, Any]]:
    """(label, fn) pairs: torch first, then xrt's op, then the launcher at each swept chunk size."""
    import torch
    import torch.nn.functional as F

    import xrt.pytorch as xp
    from xrt.kernels.triton.linear_cross_entropy import linear_cross_entropy as launcher

    def torch_fn():
        loss = F.cross_entropy(F.linear(h, w), t)
        return (loss, *torch.autograd.grad(loss, (h, w)))

    def xrt_fn():
        loss = xp.ops.linear_cross_entropy(h, w, t, provider="triton")
        return (loss, *torch.autograd.grad(loss, (h, w)))

    def chunked(c: int):
        return lambda: launcher(h.detach(), w.detach(), t, -100, 0.0, True, chunk=c)

    return [("torch", torch_fn), ("xrt default", xrt_fn), *((f"xrt chunk={c}", chunked(c)) for c in sweep)]


def rel_err(got: tuple, ref: tuple) -> float:
    """The largest of the outputs' max |x - ref| / max |ref|."""
    worst = 0.0
    for a, b in zip(got, ref):
        a, b = a.detach().float(), b.detach().float()
        worst = max(worst, float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)))
    return worst


def peak_mib(fn: Any, device: str) -> float | None:
    """MiB allocated at the peak of one call beyond what was allocated before it (CUDA only)."""
    if device != "cuda":
        return None
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak / 2**20


def timed_ms(fn: Any, device: str) -> float:
    from xrt.bench import timer

    if device == "cuda":
        return timer.measure(fn, "cuda", flush_l2=True, max_time=2.0).median_s * 1e3
    start = time.perf_counter()  # the interpreter: one call, a smoke number
    fn()
    return (time.perf_counter() - start) * 1e3


def bench_shape(shape: tuple[int, int, int], device: str, sweep: list[int]) -> list[dict]:
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    h, w, t = inputs(shape, dtype, device)
    n, d, v = shape
    label = f"N{n} d{d} V{v}"
    rows: list[dict] = []
    ref = None
    for impl, fn in calls(h, w, t, [c for c in sweep if c < n]):
        row: dict[str, Any] = {"shape": label, "impl": impl, "dtype": str(dtype).removeprefix("torch.")}
        try:
            out = fn()
            ref = out if ref is None else ref
            row["err"] = rel_err(out, ref)
            del out
            row["peak_mib"] = peak_mib(fn, device)
            row["ms"] = timed_ms(fn, device)
        except Exception as e:  # out of memory at a large shape: a row, not the end of the run
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        rows.append(row)
    base = rows[0]
    for r in rows[1:]:
        r["ms_ratio"] = r["ms"] / base["ms"] if r.get("ms") and base.get("ms") else None
        r["mem_ratio"] = (r["peak_mib"] / base["peak_mib"]
                          if r.get("peak_mib") is not None and base.get("peak_mib") else None)
        r["mem_met"] = r["mem_ratio"] <= MEMORY_TARGET if r["mem_ratio"] is not None else None
    return rows


def cell(v: Any, spec: str) -> str:
    return "" if v is None else format(v, spec)


def table(rows: list[dict], device: str) -> str:
    lines = [f"linear_cross_entropy forward + backward on {device} (ratios: xrt / torch; memory target "
             f"<= {MEMORY_TARGET}x)", "",
             "| shape | impl | ms | ms ratio | peak MiB | memory ratio | met | err |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        met = {True: "**met**", False: "not met", None: ""}[r.get("mem_met")]
        lines.append(f"| {r['shape']} | {r['impl']} | {cell(r.get('ms'), '.3f')} | {cell(r.get('ms_ratio'), '.3f')} | "
                     f"{cell(r.get('peak_mib'), '.0f')} | {cell(r.get('mem_ratio'), '.3f')} | {met} | "
                     f"{r.get('error') or cell(r.get('err'), '.2g')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("flce_bench needs a CUDA GPU (or --device cpu)", file=sys.stderr)
        return 2
    shapes = QUICK[args.device] if args.quick else (SHAPES if args.device == "cuda" else CPU_SHAPES)
    sweep = [] if args.quick else (CHUNKS if args.device == "cuda" else [16, 64])
    rows = [r for s in shapes for r in bench_shape(s, args.device, sweep)]
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    md = table(rows, gpu)
    print(md)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": gpu, "torch": torch.__version__, "rows": rows}, indent=1) + "\n")
    if args.md:
        args.md.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
