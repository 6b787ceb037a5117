"""Host cost of routing: one forward of a small model under each policy, side by side in one process.

    python benchmarks/routing_host.py [--device cpu] [--calls 2000] [--repeats 7] [--clock wall|cpu]
        [--out host.json]
    python benchmarks/routing_host.py --per-call [--device cpu] [--calls 2000] [--repeats 15]
    python benchmarks/routing_host.py --profile F.linear [--policy auto] [--calls 20000]

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

``--per-call`` times each routed torch function alone (:func:`calls`, tiny fp32 inputs, no grad)
with ``timeit``: µs per call under each policy, the median of ``--repeats`` runs of ``--calls``
calls, the policies in turns as above, and each routed figure minus the plain call's. The
``uncached`` variants decide every call afresh (:func:`uncached`), as routing did before it kept
its decisions: the before and after of that change, side by side in one process. On the CPU
``auto`` takes a GPU's path (:func:`as_on_a_gpu`: the wrappers installed, the call measured and
looked up in a table that names torch), so the figure is what a routed call that ``auto`` leaves to
torch costs on a GPU. ``--profile NAME`` runs cProfile over ``--calls`` calls of one of them.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
import timeit
from collections.abc import Callable
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


def as_on_a_gpu() -> None:
    """On the CPU, make ``auto`` take the path of a GPU whose table names torch for every shape: the
    wrappers install (``auto.routes``), each call is measured (``routing.auto_device``) and looked up
    in a memo keyed as :func:`xrt.pytorch.auto.pick`'s. Triton's interpreter is turned off so that
    ``triton`` cannot run a CPU tensor: each call asks the policy and stays torch's."""
    from xrt.pytorch import auto, routing

    os.environ.pop("TRITON_INTERPRET", None)
    memo: dict[tuple, str] = {}

    def pick(op: str, x: Any, shape: Any, train: bool | None = None) -> str:
        key = (op, 0, x.dtype, tuple(shape), train)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = auto.TORCH
        return hit

    routing.auto_device = lambda t: True
    auto.routes = lambda ops: True
    auto.pick = pick


def calls(device: str = "cpu") -> dict[str, Callable[[], Any]]:
    """Each routed torch function on tiny fp32 inputs, looked up at call time (as a model does)."""
    import torch
    from torch.nn import functional as F

    torch.manual_seed(0)
    x, w, b = (torch.randn(*s, device=device) for s in ((8, 16), (16, 16), (16,)))
    a3, b3 = torch.randn(2, 8, 16, device=device), torch.randn(2, 16, 8, device=device)
    q = torch.randn(1, 2, 8, 16, device=device)
    return {
        "F.linear": lambda: F.linear(x, w, b),
        "torch.matmul": lambda: torch.matmul(x, w),
        "a @ b": lambda: x @ w,
        "torch.bmm": lambda: torch.bmm(a3, b3),
        "F.layer_norm": lambda: F.layer_norm(x, (16,), w[0], b),
        "F.softmax": lambda: F.softmax(x, dim=-1),
        "Tensor.softmax": lambda: x.softmax(-1),
        "F.sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
    }


@contextlib.contextmanager
def uncached() -> Any:
    """Routed calls decided afresh each time, as before decisions were memoized: every rule's key
    answers ``None`` (the path of a call form the keys do not know). Enter it before the policy:
    the wrappers take their rules when they are installed."""
    from xrt.pytorch import routing

    saved = dict(routing.RULES)
    for handler, rule in saved.items():
        routing.RULES[handler] = rule._replace(key=lambda args, kwargs: None)
    try:
        yield
    finally:
        routing.RULES.update(saved)


# --per-call's columns: (policy, decided afresh each call?)
VARIANTS = {"none": ("none", False), "auto": ("auto", False), "auto uncached": ("auto", True),
            "triton": ("triton", False), "triton uncached": ("triton", True)}


def per_call(device: str = "cpu", number: int = 2000, repeats: int = 15,
             clock: str = "cpu") -> dict[str, dict[str, dict[str, float]]]:
    """µs per call of each of :func:`calls` under each of :data:`VARIANTS`, and each variant's excess
    over ``none``: ``{"us": {variant: {call: median}}, "excess": {variant: {call: median}},
    "us_min": {variant: {call: the fastest round}}}`` (the fastest round: what a host shared with
    other work lets through least disturbed).

    Each call is timed in rounds: in a round every variant times ``number`` calls, in turns (the
    order reversed every other round), and a variant's excess is the median over rounds of its figure
    minus ``none``'s of the same round, so that the host's drift moves both sides alike."""
    import torch

    if device == "cpu":
        torch.set_num_threads(1)
        as_on_a_gpu()
    fns = calls(device)
    order = list(VARIANTS)
    us: dict[str, dict[str, list[float]]] = {v: {c: [] for c in fns} for v in VARIANTS}
    with torch.no_grad():
        for c, fn in fns.items():
            for r in range(repeats):
                for name in order if r % 2 == 0 else reversed(order):
                    policy, afresh = VARIANTS[name]
                    with uncached() if afresh else contextlib.nullcontext(), scope(POLICIES[policy]):
                        fn()
                        us[name][c].append(timeit.Timer(fn, timer=CLOCKS[clock]).timeit(number) / number * 1e6)
    return {"us": {v: {c: statistics.median(x) for c, x in s.items()} for v, s in us.items()},
            "excess": {v: {c: statistics.median(a - b for a, b in zip(x, us["none"][c])) for c, x in s.items()}
                       for v, s in us.items() if v != "none"},
            "us_min": {v: {c: min(x) for c, x in s.items()} for v, s in us.items()}}


def profile(call: str, policy: str, device: str = "cpu", number: int = 20000, top: int = 20) -> str:
    """cProfile of ``number`` calls of ``call`` under ``policy``: the top functions by own time."""
    import torch

    if device == "cpu":
        torch.set_num_threads(1)
        as_on_a_gpu()
    fn = calls(device)[call]
    with torch.no_grad(), scope(POLICIES[policy]):
        fn()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(number):
            fn()
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="routing_host", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="torch device of the model (cpu, cuda)")
    ap.add_argument("--calls", type=int, help="forwards per turn, or calls per sample with --per-call "
                    "(2000; --profile 20000)")
    ap.add_argument("--repeats", type=int, help="turns per policy (7), rounds per call with --per-call (15)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall clock or this thread's CPU time")
    ap.add_argument("--out", type=Path, help="also write the figures here as JSON")
    ap.add_argument("--per-call", action="store_true", help="each routed torch function alone, per policy")
    ap.add_argument("--profile", metavar="CALL", help="cProfile one routed call (a name of --per-call's rows)")
    ap.add_argument("--policy", choices=sorted(POLICIES), default="auto", help="--profile's policy")
    args = ap.parse_args(argv)
    if args.repeats is None:
        args.repeats = 15 if args.per_call else 7
    if args.calls is None:
        args.calls = 20000 if args.profile else 2000
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
    if args.profile is not None:
        names = list(calls("cpu"))
        if args.profile not in names:
            print(f"routing_host: --profile {args.profile!r} is not one of {', '.join(names)}", file=sys.stderr)
            return 2
        print(profile(args.profile, args.policy, args.device, args.calls))
        return 0
    if args.per_call:
        table = per_call(args.device, args.calls, args.repeats, args.clock)
        names = list(table["excess"])
        print(f"µs per call ({args.clock} clock): each variant's median, and (its median excess over none)")
        print(f"{'call':16s}{'none':>7s}" + "".join(f"{v:>18s}" for v in names))
        for c, base in table["us"]["none"].items():
            print(f"{c:16s}{base:7.2f}" + "".join(
                f"{table['us'][v][c]:8.2f} ({table['excess'][v][c]:+6.2f})" for v in names))
        print("the fastest round of each, and (its excess over none's fastest)")
        for c, base in table["us_min"]["none"].items():
            print(f"{c:16s}{base:7.2f}" + "".join(
                f"{table['us_min'][v][c]:8.2f} ({table['us_min'][v][c] - base:+6.2f})" for v in names))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"device": args.device, "clock": args.clock, "torch": torch.__version__,
                                            "us_per_call": table["us"],
                                            "excess_over_none_us": table["excess"],
                                            "us_per_call_fastest_round": table["us_min"]}, indent=1) + "\n")
        return 0
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
