"""The fused transformer ops against the torch code they replace, side by side in one run.

    python benchmarks/fusion_bench.py --out fusion.json [--md fusion.md] [--quick] [--device cpu]
    python benchmarks/fusion_bench.py --sweep --out sweep.json [--md sweep.md]   # benchmarks/fusion_sweep.py

Rows (bf16 on a GPU; fp32 through Triton's interpreter with ``--device cpu``, a smoke run only):

- ``add_layernorm`` at (tokens, d): ``torch`` is ``h = x + r; F.layer_norm(h)``, ``xrt`` the fused
  kernel; forward, and forward + backward through both outputs (``train``);
- ``linear_gelu`` at (tokens, 4d, d), GELU's tanh approximation: ``torch`` is
  ``F.gelu(F.linear(x, W, b))``, ``xrt_gemm`` xrt's GEMM unfused (``xp.ops.matmul`` then torch's bias
  and GELU: what the epilogue saves), ``xrt`` the fused op;
- ``gpt``: a plain pre-norm GPT (4 blocks of nn.Linear / nn.LayerNorm / nn.GELU, SDPA) at (batch,
  sequence, d): ``torch`` as written, ``xrt`` after ``xp.fuse(model)`` under
  ``kernel_policy(add_layernorm="triton", linear_gelu="triton")``; a train step and a no_grad forward.

GPT shapes: 8192 tokens (B 8 x S 1024), d 1024 and 2048, MLP 4d. Times: ``triton.testing.do_bench``
medians (ms) on a GPU, wall-clock medians on the CPU; ``/ torch`` is the ratio to the torch row of
the same group and shape, measured in this process. ``err``: the largest difference to torch's
output relative to its largest magnitude.

``--sweep`` writes other rows (benchmarks/fusion_sweep.py): torch and the fused ops with their
end-to-end, device and host time each (is the GPU or the host the slow part?), add_layernorm's
kernels at a small grid of configs around the defaults, and linear_gelu's forward kernel at a few
GEMM tiles beside the GEMM with its bias alone (what the GELU epilogue costs), to pick defaults from.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.bench.sidebyside import commit_of, error_line, model_steps  # noqa: E402

TOKENS = (8, 1024)  # batch x sequence: 8192 tokens
WIDTHS = (1024, 2048)
QUICK = {"tokens": (2, 16), "widths": (64,)}  # --device cpu: what the interpreter gets through in seconds
APPROX = "tanh"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="fusion_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the rows")
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    ap.add_argument("--quick", action="store_true", help="the first width only (GPU); tiny shapes on the CPU")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: Triton's interpreter, fp32")
    ap.add_argument("--sweep", action="store_true",
                    help="e2e / device / host time of the ops, and add_layernorm's config grid (fusion_sweep.py)")
    return ap.parse_args(argv)


def _timer(device: str, quick: bool):
    if device == "cuda":
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, warmup=25, rep=50 if quick else 200)

    def wall(fn) -> float:
        fn()
        samples = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t) * 1e3)
        return statistics.median(samples)

    return wall


def _err(y: Any, ref: Any) -> float:
    return ((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1e-30)).item()


def _row(rows: list[dict], group: str, shape: str, variant: str, run: Any) -> None:
    emit(rows, {"group": group, "shape": shape, "variant": variant}, run)


def emit(rows: list[dict], head: dict[str, Any], run: Any) -> None:
    """``head`` with what ``run()`` returns, appended to ``rows`` and printed as one JSON line."""
    row = dict(head)
    try:
        row.update(run())
    except Exception as e:  # a variant that fails is a row, not the end of the run
        row["error"] = error_line(e, 200)
    rows.append(row)
    print(json.dumps(row), flush=True)


def add_layernorm_rows(rows: list[dict], m: int, d: int, dt: Any, dev: str, timed: Any) -> None:
    import torch
    import torch.nn.functional as F

    import xrt.pytorch as xp

    x, r = (torch.randn(m, d, device=dev, dtype=dt, requires_grad=True) for _ in range(2))
    w = (torch.rand(d, device=dev) + 0.5).to(dt).requires_grad_()
    b = torch.randn(d, device=dev, dtype=dt, requires_grad=True)
    dy, dh = torch.randn(m, d, device=dev, dtype=dt), torch.randn(m, d, device=dev, dtype=dt)

    def torch_fn():
        h = x + r
        return F.layer_norm(h, (d,), w, b), h

    def xrt_fn():
        return xp.ops.add_layernorm(x, r, d, w, b, provider="triton")

    with torch.no_grad():
        ref = torch_fn()[0]
    for name, fn in (("torch", torch_fn), ("xrt", xrt_fn)):
        def train(fn=fn):
            y, h = fn()
            torch.autograd.backward([y, h], [dy, dh])
            for t in (x, r, w, b):
                t.grad = None

        def run(fn=fn, train=train):
            with torch.no_grad():
                out = {"err": _err(fn()[0], ref), "fwd_ms": timed(lambda: fn())}
            return {**out, "train_ms": timed(train)}

        _row(rows, "add_layernorm", f"{m}x{d}", name, run)


def linear_gelu_rows(rows: list[dict], m: int, d: int, dt: Any, dev: str, timed: Any) -> None:
    import torch
    import torch.nn.functional as F

    import xrt.pytorch as xp

    n = 4 * d
    x = torch.randn(m, d, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(n, d, device=dev) * d ** -0.5).to(dt).requires_grad_()
    b = torch.randn(n, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(m, n, device=dev, dtype=dt)
    variants = {
        "torch": lambda: F.gelu(F.linear(x, w, b), approximate=APPROX),
        "xrt_gemm": lambda: F.gelu(xp.ops.matmul(x, w.T, provider="triton") + b, approximate=APPROX),
        "xrt": lambda: xp.ops.linear_gelu(x, w, b, APPROX, provider="triton"),
    }
    with torch.no_grad():
        ref = variants["torch"]()
    for name, fn in variants.items():
        def train(fn=fn):
            fn().backward(dy)
            for t in (x, w, b):
                t.grad = None

        def run(fn=fn, train=train):
            with torch.no_grad():
                out = {"err": _err(fn(), ref), "fwd_ms": timed(fn)}
            return {**out, "train_ms": timed(train)}

        _row(rows, "linear_gelu", f"{m}x{n}x{d}", name, run)


def gpt(d: int, heads: int, blocks: int) -> Any:
    """A plain pre-norm GPT: nothing in it names xrt."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = Attention()
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate=APPROX), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(a.transpose(1, 2).reshape(b, s, d))

    return nn.Sequential(*[Block() for _ in range(blocks)])


def gpt_rows(rows: list[dict], bsz: int, s: int, d: int, dt: Any, dev: str, timed: Any) -> None:
    import copy

    import torch

    import xrt.pytorch as xp

    torch.manual_seed(0)
    plain = gpt(d, max(1, d // 64), 4).to(dev, dt)
    fused = copy.deepcopy(plain)
    found = xp.fuse(fused)
    x = torch.randn(bsz, s, d, device=dev, dtype=dt, requires_grad=True)
    with torch.no_grad():
        ref = plain(x)
    policy = {"add_layernorm": "triton", "linear_gelu": "triton"}
    for name, model in (("torch", plain), ("xrt", fused)):
        def run(model=model, name=name):
            with xp.kernel_policy(**policy) if name == "xrt" else xp.kernel_policy():
                step = model_steps(model, x, model)
                with torch.no_grad():
                    err = _err(model(x), ref)
                return {"err": err, "fwd_ms": timed(step["infer"]), "train_ms": timed(step["train"]),
                        "fused": len(found) if name == "xrt" else 0}

        _row(rows, "gpt", f"B{bsz} S{s} d{d} x4", name, run)


def ratios(rows: list[dict]) -> None:
    base = {(r["group"], r["shape"]): r for r in rows if r["variant"] == "torch"}
    for r in rows:
        t = base.get((r["group"], r["shape"]), {})
        for k in ("fwd", "train"):
            if r.get(f"{k}_ms") and t.get(f"{k}_ms"):
                r[f"{k}_vs_torch"] = r[f"{k}_ms"] / t[f"{k}_ms"]


def markdown(rows: list[dict], meta: dict) -> str:
    out = [f"Fused ops, {meta['dtype']}, {meta['device']}, torch {meta['torch']}, commit {meta['commit']}, "
           f"{meta['date']}", "",
           "| op | shape | variant | forward ms | / torch | fwd + bwd ms | / torch | max rel err |",
           "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        head = f"| {r['group']} | {r['shape']} | {r['variant']} |"
        if "error" in r:
            out.append(f"{head} error: {r['error']} | | | | |")
            continue
        out.append(f"{head} {r['fwd_ms']:.3f} | {r.get('fwd_vs_torch', 1):.2f} | {r['train_ms']:.3f} | "
                   f"{r.get('train_vs_torch', 1):.2f} | {r['err']:.1e} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: its kernels then run on the CPU
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("fusion_bench needs a CUDA GPU (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    cpu = args.device == "cpu"
    dt = torch.float32 if cpu else torch.bfloat16  # the interpreter has no bfloat16
    (bsz, s), widths = (QUICK["tokens"], QUICK["widths"]) if cpu else (TOKENS, WIDTHS[:1] if args.quick else WIDTHS)
    meta = {"device": "CPU (Triton interpreter)" if cpu else torch.cuda.get_device_name(), "dtype": str(dt),
            "torch": torch.__version__, "host": platform.node(), "commit": commit_of(ROOT),
            "date": time.strftime("%Y-%m-%d")}
    rows: list[dict] = []
    extra: dict[str, Any] = {}
    if args.sweep:
        from benchmarks import fusion_sweep as sw

        t = sw.Timers(args.device)
        for d in widths:
            sw.op_rows(rows, bsz * s, d, dt, args.device, t, emit)
            sw.add_layernorm_sweep(rows, bsz * s, d, dt, args.device, t, emit,
                                   sw.QUICK_GRID if cpu or args.quick else (sw.FWD_GRID, sw.BWD_GRID))
            sw.linear_gelu_sweep(rows, bsz * s, d, dt, args.device, t, emit,
                                 sw.LG_QUICK_GRID if cpu or args.quick else sw.LG_GRID)
        extra["best"] = sw.best(rows)
        md = sw.markdown(rows, extra["best"], meta)
    else:
        timed = _timer(args.device, args.quick)
        for d in widths:
            add_layernorm_rows(rows, bsz * s, d, dt, args.device, timed)
            linear_gelu_rows(rows, bsz * s, d, dt, args.device, timed)
            gpt_rows(rows, bsz, s, d, dt, args.device, timed)
        ratios(rows)
        md = markdown(rows, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows, **extra}, indent=1) + "\n")
    print(md)
    if args.md:
        args.md.write_text(md)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
