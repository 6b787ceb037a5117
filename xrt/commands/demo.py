"""``xrt demo``: the main job on this machine's default device (the CPU when there is no GPU).

It grows with the pipeline: each stage runs when its layer is built, and says what it did.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job on this machine's default device, end to end")
    p.add_argument("--no-serve", action="store_true", help="do not start the dashboard at the end")
    p.set_defaults(func=run)


def _say(msg: str) -> None:
    print(f"[xrt demo] {msg}", flush=True)


def stage_device():
    from xrt.device import default_device

    dev = default_device()
    _say(f"device: {dev.summary()}")
    return dev


def stage_square(dev) -> None:
    """Every provider of ``square`` that runs here: correct against float64, and a quick timing."""
    import torch

    import xrt.pytorch as xp

    n = 1 << 20 if dev.kind == "cpu" else 1 << 26
    x = torch.randn(n, device=dev.torch_device)
    ref = x.double() ** 2
    _say(f"square on {n:,} float32 elements, each provider that runs here:")
    print(f"  {'provider':9} {'max rel err':>12} {'median':>12} {'GB/s':>8}")
    for name, prov in xp.ops.providers("square").items():
        why = prov.missing(x)
        if why is not None:
            print(f"  {name:9} skipped: {why}")
            continue
        if name == "triton" and dev.kind == "cpu":
            x_small = x[:4096]  # the Triton interpreter is slow: check it on a slice, time nothing
            err = ((xp.ops.square(x_small, provider=name).double() - ref[:4096]).abs() / ref[:4096]).max()
            print(f"  {name:9} {err.item():12.2e} {'(interpreter: not timed)':>21}")
            continue
        y = xp.ops.square(x, provider=name)
        err = ((y.double() - ref).abs() / ref.clamp_min(1e-30)).max().item()
        times = []
        for _ in range(10):
            if dev.kind == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            xp.ops.square(x, provider=name)
            if dev.kind == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        print(f"  {name:9} {err:12.2e} {med * 1e6:10.1f}us {2 * x.numel() * 4 / med / 1e9:8.1f}")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("TRITON_INTERPRET", "1" if not _has_gpu() else "0")
    dev = stage_device()
    stage_square(dev)
    _say("done.")
    return 0


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(run(argparse.Namespace(no_serve=True)))
