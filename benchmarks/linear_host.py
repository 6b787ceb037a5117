"""Host cost of a routed linear's train step: the native op against the Python path and torch.

    OUT=. python benchmarks/linear_host.py

One process. Per shape (small ones, so the host is what is timed): ``F.linear(x, W, b).backward(dy)``
under ``xp.kernel_policy(matmul="triton")`` through the native op (``xrt_native::linear``), the same
with the native op turned away (the Python path, ``autograd.Function``), and torch's own with no
policy; then the forward alone under ``torch.no_grad()`` (inference), torch's and the routed one
(the kept GEMM plan's Python path: the native op is for training; at dc4b43c, which sent inference
through it too, it cost more, ``results/gpu/linear-host-h200-dc4b43c.txt``). Each
variant runs 200 steps between two synchronizes, 7 rounds, the variants interleaved round by round;
the median µs a step. Writes ``$OUT/linear-host.txt``.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import xrt.pytorch as xp  # noqa: E402
from xrt.pytorch.ops import native  # noqa: E402

SHAPES = ((256, 768, 2304), (256, 768, 768), (2048, 1024, 4096))  # (M, K, N)
VARIANTS = ("torch", "python", "native")
ops = importlib.import_module("xrt.pytorch.ops.matmul")


def step_us(variant: str, x, w, b, dy, steps: int = 200) -> float:
    """µs a train step of one linear under ``variant`` (after 5 warm-up steps); ``dy`` None: the
    forward alone, under ``torch.no_grad()``."""
    routed = ops._native_linear
    if variant == "python":
        ops._native_linear = lambda *args: None
    scope = xp.kernel_policy(matmul="triton") if variant != "torch" else None
    try:
        if scope:
            scope.__enter__()
        if dy is None:
            with torch.no_grad():
                return _timed(lambda: F.linear(x, w, b), steps)
        return _timed(lambda: F.linear(x, w, b).backward(dy), steps)
    finally:
        if scope:
            scope.__exit__(None, None, None)
        ops._native_linear = routed


def _timed(step, steps: int) -> float:
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps * 1e6


def main() -> int:
    if not torch.cuda.is_available():
        print("linear_host needs a CUDA GPU", file=sys.stderr)
        return 2
    if not native.load():
        print(f"linear_host: the native op is unavailable: {native.why()}", file=sys.stderr)
        return 2
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, µs a train step "
             f"(F.linear forward + backward; inference: the forward under no_grad), median of 7 rounds of 200"]
    for m, k, n in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        for what, grad in (("train", dy), ("inference", None)):
            got: dict[str, list[float]] = {v: [] for v in (VARIANTS if grad is not None else VARIANTS[:2])}
            for _ in range(7):
                for v in got:
                    got[v].append(step_us(v, x, w, b, grad))
            with xp.kernel_policy(matmul="triton"):
                node = F.linear(x, w, b).grad_fn.name()
            times = ", ".join(f"{v} {statistics.median(t):.1f}" for v, t in got.items())
            lines.append(f"M{m} K{k} N{n} {what}: {times}" + (f" (routed node: {node})" if grad is not None else ""))
            print(lines[-1], flush=True)
    Path(os.environ.get("OUT", "."), "linear-host.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
