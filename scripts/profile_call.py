"""Where the host time of one public op call goes: cProfile over N back-to-back calls (no sync inside).

    python scripts/profile_call.py layernorm triton --calls 3000 [--backward] [--tuned results/tuned]

Prints the µs per call of the whole loop, then the top functions by own time and by cumulative
time (per call). For the GPU host; on the CPU only the torch provider (and Triton under
TRITON_INTERPRET=1, which profiles the interpreter) make sense.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("op", choices=["square", "softmax", "layernorm"])
    ap.add_argument("provider")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--backward", action="store_true", help="layernorm forward + backward")
    ap.add_argument("--tuned", help="set XRT_TUNED to this before the calls")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    if args.tuned:
        os.environ["XRT_TUNED"] = args.tuned
    import torch

    import xrt.pytorch as xp

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if args.op == "square":
        x = torch.randn(4096, device=dev)

        def call():
            return xp.ops.square(x, provider=args.provider)
    elif args.op == "softmax":
        x = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16)

        def call():
            return xp.ops.softmax(x, -1, provider=args.provider)
    else:
        x = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16, requires_grad=args.backward)
        w = torch.randn(1024, device=dev, dtype=torch.bfloat16, requires_grad=args.backward)
        b = torch.randn(1024, device=dev, dtype=torch.bfloat16, requires_grad=args.backward)
        dy = torch.randn_like(x)

        def call():
            y = xp.ops.fused_layernorm(x, 1024, w, b, provider=args.provider)
            return torch.autograd.grad(y, (x, w, b), dy) if args.backward else y
    for _ in range(50):
        call()
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.calls):
        call()
    plain = (time.perf_counter() - t0) / args.calls * 1e6
    if dev == "cuda":
        torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        call()
    prof.disable()
    if dev == "cuda":
        torch.cuda.synchronize()
    label = f"{args.op}[{args.provider}]{' fwd+bwd' if args.backward else ''}{' XRT_TUNED' if args.tuned else ''}"
    print(f"== {label}: {plain:.1f} µs per call without the profiler ({args.calls} calls)")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(args.top)
        lines = [ln for ln in s.getvalue().splitlines() if ln.strip()]
        start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
        print(f"-- by {key} (times are totals over {args.calls} calls)")
        print("\n".join(lines[start:start + args.top + 1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
