"""Host µs per call of each layer under a public op, to see which layer the time goes to.

    python scripts/host_layers.py [--calls 3000] [--out FILE.json]

For layernorm [64, 1024] bf16 on a CUDA GPU (the shape of benchmarks/host_cost.py), per provider:
the public op's forward, the provider's function (tuned-config lookup + launcher), the launcher
with a checked config, the cached kernel launch alone; the same for the backward; and, to
separate autograd's own cost from ours, ``torch.autograd.grad`` through an ``autograd.Function``
that does no work, and through ``F.layer_norm``. Then a cProfile of forward + backward.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call(fn, calls: int, repeats: int = 5) -> float:
    import torch

    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best.append((time.perf_counter() - t0) / calls * 1e6)
    best.sort()
    return best[len(best) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    import xrt.pytorch as xp
    from xrt.kernels import checks

    if not torch.cuda.is_available():
        print("host_layers.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = "cuda"
    x = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    dy = torch.randn_like(x)
    rows: dict[str, float] = {}

    def row(name, fn):
        rows[name] = per_call(fn, args.calls)
        print(f"{name:70s} {rows[name]:8.2f} us", flush=True)

    row("x * x", lambda: x * x)
    row("torch.empty_like(x)", lambda: torch.empty_like(x))
    row("torch.empty(64, dtype=float32, device=x.device)",
        lambda: torch.empty(64, dtype=torch.float32, device=x.device))
    row("x.view(64, 1024)", lambda: x.view(64, 1024))
    row("F.layer_norm", lambda: F.layer_norm(x, (1024,), w, b, 1e-5))
    row("F.layer_norm fwd+bwd", lambda: torch.autograd.grad(F.layer_norm(xg, (1024,), wg, bg, 1e-5), (xg, wg, bg), dy))

    class Nothing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b_, c):
            return torch.empty_like(a)

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    row("autograd.Function doing nothing, fwd+bwd", lambda: torch.autograd.grad(Nothing.apply(xg, wg, bg), (xg,), dy))
    gx0, gw0, gb0 = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
    y0, st0 = torch.empty_like(x), torch.empty(2, 64, device=dev)

    class Three(torch.autograd.Function):  # LayerNorm's autograd shape: 3 saved, 3 grads, no work
        @staticmethod
        def forward(ctx, a, b_, c, plan, eps):
            ctx.plan = plan
            ctx.save_for_backward(a, b_, st0)
            return y0

        @staticmethod
        def backward(ctx, g):
            if torch.is_grad_enabled():
                raise RuntimeError
            a, b_, s = ctx.saved_tensors
            return gx0, gw0, gb0, None, None

    row("autograd.Function, 3 saved, 3 grads, no work: fwd+bwd (autograd.grad)",
        lambda: torch.autograd.grad(Three.apply(xg, wg, bg, None, 1e-5), (xg, wg, bg), dy))
    row("the same, forward only", lambda: Three.apply(xg, wg, bg, None, 1e-5))

    class ThreeAlloc(Three):  # ... and the backward allocates what ours does (dx, partials, dw+db)
        @staticmethod
        def backward(ctx, g):
            a, b_, s = ctx.saved_tensors
            dx = torch.empty_like(a)
            torch.empty((2, 64, 1024), dtype=torch.float32, device=a.device)
            dw, db = torch.empty((2, 1024), dtype=b_.dtype, device=b_.device).unbind(0)
            return dx, dw, db, None, None

    row("autograd.Function, 3 saved, backward allocates as ours: fwd+bwd",
        lambda: torch.autograd.grad(ThreeAlloc.apply(xg, wg, bg, None, 1e-5), (xg, wg, bg), dy))
    row("F.layer_norm forward only, training", lambda: F.layer_norm(xg, (1024,), wg, bg, 1e-5))
    row("F.layer_norm fwd + y.backward(dy)", lambda: F.layer_norm(xg, (1024,), wg, bg, 1e-5).backward(dy))
    for p in ("triton", "cuda"):
        mod = __import__(f"xrt.kernels.{p}.layernorm", fromlist=["layernorm"])
        cfg = checks.tuning(f"layernorm.{p}", None)
        bcfg = checks.tuning(f"layernorm_bwd.{p}", None)
        _, mean, rstd = mod.layernorm(x, w, b, 1e-5, cfg)
        row(f"[{p}] public op forward", lambda p=p: xp.ops.fused_layernorm(x, 1024, w, b, 1e-5, provider=p))
        prov = xp.ops.providers("layernorm")[p]
        row(f"[{p}] provider fn forward (tuned lookup + launcher)", lambda prov=prov: prov.fn(x, w, b, 1e-5))
        row(f"[{p}] launcher forward, checked config", lambda mod=mod, cfg=cfg: mod.layernorm(x, w, b, 1e-5, cfg))
        bprov = xp.ops.providers("layernorm_bwd")[p]
        row(f"[{p}] provider fn backward", lambda bprov=bprov, mean=mean, rstd=rstd: bprov.fn(dy, x, w, mean, rstd))
        row(f"[{p}] launcher backward, checked config",
            lambda mod=mod, bcfg=bcfg, mean=mean, rstd=rstd: mod.layernorm_bwd(dy, x, w, mean, rstd, bcfg))
        row(f"[{p}] public op fwd+bwd", lambda p=p: torch.autograd.grad(
            xp.ops.fused_layernorm(xg, 1024, wg, bg, 1e-5, provider=p), (xg, wg, bg), dy))
    with torch.autograd.set_multithreading_enabled(False):  # the backward on this thread (diagnosis)
        row("F.layer_norm fwd+bwd, autograd multithreading off",
            lambda: torch.autograd.grad(F.layer_norm(xg, (1024,), wg, bg, 1e-5), (xg, wg, bg), dy))
        for p in ("triton", "cuda"):
            row(f"[{p}] public op fwd+bwd, autograd multithreading off", lambda p=p: torch.autograd.grad(
                xp.ops.fused_layernorm(xg, 1024, wg, bg, 1e-5, provider=p), (xg, wg, bg), dy))
    if "triton" in xp.ops.providers("layernorm"):
        from xrt.kernels.triton import layernorm as triton_layernorm

        y = torch.empty_like(x)
        mean = torch.empty(64, device=dev)
        rstd = torch.empty(64, device=dev)
        rows_, warps = triton_layernorm.fwd_plan(1024, 64, "auto", "auto")
        row("[triton] Launcher call alone (forward kernel)",
            lambda: triton_layernorm._fwd((64 // rows_,), x, w, b, y, mean, rstd, 0, 64, 1024, 1e-5, STATS=True,
                                          ROWS=rows_, BLOCK=1024, num_warps=warps))
        plan = triton_layernorm.FwdPlan(64, 1024, checks.tuning("layernorm.triton", None))
        stats = torch.empty(2, 64, device=dev)
        row("[triton] FwdPlan call alone (a Site)", lambda: plan(x, w, b, y, stats, 1e-5, True))
        bplan = triton_layernorm.BwdPlan(64, 1024, checks.tuning("layernorm_bwd.triton", None), x)
        row("[triton] BwdPlan call alone (3 buffers, 2 Sites)", lambda: bplan(dy, x, w, stats))
    prof = {}
    for p in ("triton", "cuda"):
        def fwd(p=p):
            return xp.ops.fused_layernorm(xg, 1024, wg, bg, 1e-5, provider=p)
        row(f"[{p}] public op forward, training (autograd records it)", fwd)
    for p in ("triton", "cuda"):
        def call(p=p):
            return torch.autograd.grad(xp.ops.fused_layernorm(xg, 1024, wg, bg, 1e-5, provider=p), (xg, wg, bg), dy)
        for _ in range(100):
            call()
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(2000):
            call()
        torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
        prof[p] = s.getvalue()
        print(f"--- cProfile [{p}] fwd+bwd, 2000 calls, by own time\n{prof[p]}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows_us": rows, "cprofile": prof}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
