"""Where an eager GPT train step's host time goes: the step with each routed op left to torch in turn.

    OUT=. python benchmarks/eager_host_split.py

One process, one model (``xrt.pytorch.modules.gpt``, 4 blocks, bf16) per shape (d 768 and d 1024). The
variants are policies: ``torch`` (none), ``xrt`` (matmul, layernorm, softmax and attention on Triton),
``xrt`` with one op back on torch (``no-matmul``, ``no-attn``, ``no-ln``), and ``matmul-only``. For each:
the host's ms to issue a train step's forward and its backward (``time.perf_counter`` around each,
no synchronize inside: where the host is slower than the GPU this is the step's time), the median of
5 rounds of 10 steps, the variants interleaved round by round; and the GPU's busy ms a step (the
profiler's device events). What a variant saves against ``xrt`` is that op's host cost in the step.
Writes ``$OUT/eager-host-split.txt``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.model_bench import POLICIES, scope  # noqa: E402
from xrt.bench.sidebyside import device_busy_ms, model_steps  # noqa: E402
from xrt.pytorch.modules import gpt  # noqa: E402

X = POLICIES["xrt"]
VARIANTS = {"torch": None, "xrt": X, "no-matmul": {**X, "matmul": "default"}, "no-attn": {**X, "attention": "torch"},
            "no-ln": {**X, "layernorm": "torch"}, "matmul-only": {"matmul": "triton"}}
SHAPES = ((16, 512, 768, 12), (8, 1024, 1024, 16))  # (batch, sequence, width, heads)


def host_ms(model, x) -> tuple[float, float]:
    """Host ms of 10 train steps' forwards and backwards, a step (after 3 warm-up steps)."""
    for _ in range(3):
        model(x).float().pow(2).mean().backward()
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    tf = tb = 0.0
    for _ in range(10):
        t0 = time.perf_counter()
        loss = model(x).float().pow(2).mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        tf, tb = tf + t1 - t0, tb + t2 - t1
    torch.cuda.synchronize()
    return tf * 100, tb * 100  # ms a step


def main() -> int:
    if not torch.cuda.is_available():
        print("eager_host_split needs a CUDA GPU", file=sys.stderr)
        return 2
    lines = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}"]
    for b, s, d, h in SHAPES:
        torch.manual_seed(0)
        model = gpt(d, h, 4).cuda().to(torch.bfloat16)
        x = torch.randn(b, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in VARIANTS}
        for _ in range(5):
            for name, policy in VARIANTS.items():
                with scope(policy):
                    got[name].append(host_ms(model, x))
        lines.append(f"== d{d} B{b} S{s}: host ms per train step (median of 5 interleaved rounds of 10 steps), "
                     "GPU busy ms")
        for name, policy in VARIANTS.items():
            with scope(policy):
                busy = device_busy_ms(model_steps(model, x, model)["train"])
            f, bw = (statistics.median(r[i] for r in got[name]) for i in (0, 1))
            lines.append(f"  {name:12s} forward {f:5.2f}  backward {bw:5.2f}  total {f + bw:5.2f}   GPU {busy:5.2f}")
        print("\n".join(lines[-len(VARIANTS) - 1:]), flush=True)
    Path(os.environ.get("OUT", "."), "eager-host-split.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
