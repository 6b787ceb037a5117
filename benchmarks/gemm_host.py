"""Host time per call of the GEMM path and of routed calls, beside torch's (CUDA only).

    python benchmarks/gemm_host.py

Each line is the best of 7 batches of 20 back-to-back calls without a device wait (the launch
queue never fills), in µs: torch's ``x @ W.T``; xrt's Triton GEMM launcher (``run`` with a config),
the public op, its custom op; a routed ``F.linear`` forward under autograd and its backward; a routed
``nn.LayerNorm``, each beside torch's. Shapes: x [8192, 1024], W [3072, 1024], g [8192, 3072], bf16.
Then the layers of a routed linear without autograd, top to bottom (the Triton ``linear``, the op's
``linear`` on [8, 1024, 1024], routed ``F.linear`` and ``nn.Linear`` with a bias), and causal SDPA
[8, 16, 1024, 64] routed and not, with and without autograd (docs/runtime.md: the launch plans).
results/gpu/host-gemm-h100.md holds a run before and after the GEMM's kept launch plans.
"""

import contextlib
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import xrt.pytorch as xp  # noqa: E402
from xrt.kernels.triton import matmul as tm  # noqa: E402

M, K, N = 8192, 1024, 3072


def host(fn, n: int = 20, reps: int = 7) -> float:
    """The best of ``reps`` batches of ``n`` calls, µs a call (host time: no wait for the device)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
        torch.cuda.synchronize()
    return best * 1e6


def main() -> int:
    if not torch.cuda.is_available():
        print("gemm_host: needs a CUDA GPU", file=sys.stderr)
        return 2
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    cfg = tm.default_config(x, w.T, None)
    a3, b3 = x.unsqueeze(0), w.T.unsqueeze(0)
    c3 = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)

    def show(name: str, fn, **kw) -> None:
        print(f"{name:42s} {host(fn, **kw):8.1f} us/call", flush=True)

    show("torch x@W.T", lambda: x @ w.T)
    show("run(cfg) TMA", lambda: tm.run(a3, b3, cfg, c=c3))
    show("xp.ops.matmul triton", lambda: xp.ops.matmul(x, w.T, provider="triton"))
    with torch.no_grad():
        show("custom op xrt::matmul triton", lambda: torch.ops.xrt.matmul(g, w, "triton"))
        show("custom op xrt::matmul torch", lambda: torch.ops.xrt.matmul(g, w, "torch"))
    for pol, name in ((None, "torch"), ("triton", "routed triton")):
        with xp.kernel_policy(matmul=pol) if pol else contextlib.nullcontext():
            show(f"F.linear fwd (grad) {name}", lambda: F.linear(xg, wg))
            y = F.linear(xg, wg)

            def bwd(y=y) -> None:
                y.backward(g, retain_graph=True)
                xg.grad = wg.grad = None

            show(f"linear backward {name}", bwd, n=10)
    ln = torch.nn.LayerNorm(K).cuda().to(torch.bfloat16)
    for pol, name in ((None, "torch"), ("triton", "routed triton")):
        with xp.kernel_policy(layernorm=pol) if pol else contextlib.nullcontext():
            y = ln(xg)

            def lbwd(y=y) -> None:
                y.backward(x, retain_graph=True)
                xg.grad = ln.weight.grad = ln.bias.grad = None

            show(f"layernorm fwd {name}", lambda: ln(xg))
            show(f"layernorm backward {name}", lbwd, n=10)
    om = importlib.import_module("xrt.pytorch.ops.matmul")  # (xp.ops.matmul is the function)
    x3, b = x.view(8, 1024, K), torch.randn(N, device="cuda", dtype=torch.bfloat16)
    lin = torch.nn.Linear(K, N, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        show("F.linear nograd torch", lambda: F.linear(x3, w, b))
        show("nn.Linear nograd torch", lambda: lin(x3))
        show("triton linear(cfg) nograd", lambda: tm.linear(x, w, b, cfg))
        show("op's linear nograd", lambda: om.linear(x3, w, b, "triton"))
        with xp.kernel_policy(matmul="triton"):
            show("F.linear nograd routed triton", lambda: F.linear(x3, w, b))
            show("nn.Linear nograd routed triton", lambda: lin(x3))
    qg = q.detach().requires_grad_()
    for pol, name in ((None, "torch"), ("triton", "routed triton")):
        with xp.kernel_policy(attention=pol) if pol else contextlib.nullcontext():
            with torch.no_grad():
                show(f"sdpa causal nograd {name}", lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))
            show(f"sdpa causal fwd (grad) {name}", lambda: F.scaled_dot_product_attention(qg, q, q, is_causal=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
