"""Host cost of routing: one forward of a small model under each policy, side by side in one process.

    python benchmarks/routing_host.py [--device cpu] [--calls 2000] [--repeats 7] [--clock wall|cpu]
        [--out host.json]

The model is plain PyTorch: 4 pre-norm blocks of ``nn.LayerNorm``, ``nn.Linear`` (qkv, proj, MLP),
``F.scaled_dot_product_attention`` and GELU at tiny sizes (B1 S8 d32 fp32), so the host's time is all
there is. On the CPU every call stays torch's under every policy: the figure is what routing costs
a model it routes nothing of. The policies:

- ``none``: no policy (torch's own functions);
- ``auto``: matmul, layernorm, softmax and attention at ``auto``;
- ``triton``: the same ops named ``triton`` (on the CPU the tensors are fp32 and the ``triton``
  provider needs a GPU or Triton's interpreter, so with ``--device cpu`` and no
  ``TRITON_INTERPRET=1`` each call asks the policy and runs torch's).

Each repeat runs the policies in turns (none, auto, triton, then the reverse order) so that the
host's drift moves them alike; µs per forward is the median over repeats of each turn's mean over
``--calls`` forwards. ``--clock cpu`` times this thread's CPU time instead of the wall clock: on a
host shared with other work it leaves out the time the thread waited for a core.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OPS = ("matmul", "layernorm", "softmax", "attention")
POLICIES: dict[str, dict[str, str] | None] = {
    "none": None,
    "auto": dict.fromkeys(OPS, "auto"),
    "triton": dict.fromkeys(OPS, "triton"),
}


def model(d: int = 32, heads: int = 2, blocks: int = 4) -> Any:
    """A GPT-style stack in plain PyTorch (nothing in it names xrt)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    return nn.Sequential(*[Block() for _ in range(blocks)])


def scope(policy: dict[str, str] | None) -> Any:
    import xrt.pytorch as xp

    return xp.kernel_policy(**policy) if policy else contextlib.nullcontext()


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def turn(net: Any, x: Any, policy: dict[str, str] | None, calls: int, clock: str = "wall") -> float:
    """Mean µs per forward of ``calls`` forwards under ``policy`` (the scope entered once, outside)."""
    import torch

    now = CLOCKS[clock]
    with torch.no_grad(), scope(policy):
        net(x)  # warm-up inside the scope
        t0 = now()
        for _ in range(calls):
            net(x)
        return (now() - t0) / calls * 1e6


def measure(device: str = "cpu", calls: int = 2000, repeats: int = 7, clock: str = "wall") -> dict[str, float]:
    """Median µs per forward for each policy of :data:`POLICIES`."""
    import torch

    if device == "cpu":
        torch.set_num_threads(1)  # tiny ops: more threads only add their hand-offs to the host time
    torch.manual_seed(0)
    net = model().to(device)
    x = torch.randn(1, 8, 32, device=device)
    samples: dict[str, list[float]] = {name: [] for name in POLICIES}
    order = list(POLICIES)
    for r in range(repeats):
        for name in order if r % 2 == 0 else reversed(order):
            samples[name].append(turn(net, x, POLICIES[name], calls, clock))
    return {name: statistics.median(s) for name, s in samples.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="routing_host", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="torch device of the model (cpu, cuda)")
    ap.add_argument("--calls", type=int, default=2000, help="forwards per turn")
    ap.add_argument("--repeats", type=int, default=7, help="turns per policy")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall clock or this thread's CPU time")
    ap.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.repeats < 1:
        print(f"routing_host: --calls {args.calls} and --repeats {args.repeats} must be at least 1", file=sys.stderr)
        return 2
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"routing_host: --device {args.device} needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and args.clock == "cpu":
        print("routing_host: --clock cpu leaves out the waits for the GPU; use --clock wall with --device cuda",
              file=sys.stderr)
        return 2
    us = measure(args.device, args.calls, args.repeats, args.clock)
    base = us["none"]
    for name, v in us.items():
        print(f"{name:8s} {v:9.1f} µs per forward  {v / base:5.2f} x none")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": args.device, "clock": args.clock, "torch": torch.__version__,
                                        "us_per_forward": us}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
