"""Does a CUDA C (pycuda) launch return before the GPU runs it? Queue launches behind a long spin.

    python scripts/pycuda_async.py

Holds the GPU with torch.cuda._sleep (about 20 ms), then times on the host 10 launches of each
provider's vector_add; an asynchronous launch returns in microseconds, a blocking one waits for
the spin. Prints µs a launch for torch, triton and cuda, with and without the spin ahead.

Then the suite's question (the single-process suite timed CUDA C vector_add at 4096 at 71 µs where a
process of its own timed 3.9 µs): xrt's timer on the cuda provider in this fresh process, then again
after other providers were measured the way the suite measures them (CUDA-graph mode included).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import torch

    import xrt.pytorch as xp

    x = torch.randn(65536, device="cuda")
    rate = torch.cuda.get_device_properties(0).clock_rate * 1e3  # Hz (kHz reported)
    for p in ("torch", "triton", "cuda"):
        for _ in range(5):
            xp.ops.vector_add(x, x, provider=p)
        torch.cuda.synchronize()
        for spin in (False, True):
            if spin:
                torch.cuda._sleep(int(0.02 * rate))
            t0 = time.perf_counter()
            for _ in range(10):
                xp.ops.vector_add(x, x, provider=p)
            dt = (time.perf_counter() - t0) / 10 * 1e6
            torch.cuda.synchronize()
            print(f"{p:7s} spin ahead={spin!s:5s} host µs a launch: {dt:9.1f}", flush=True)

    from xrt.bench import timer

    def cuda_c(label: str) -> None:
        for n in (4096, 65536, 16777216):
            a = torch.randn(n, device="cuda")
            m = timer.measure(lambda a=a: xp.ops.vector_add(a, a, provider="cuda"), "cuda", max_samples=100)
            print(f"timer cuda vector_add {n:>9d} {label}: median {m.median_s * 1e6:8.2f} µs, "
                  f"noise {m.rel_noise * 100:6.2f} %, n {m.n}, enqueue {m.calls_per_sample}", flush=True)

    cuda_c("fresh process")
    for p in ("torch", "triton"):
        for n in (4096, 65536):
            a = torch.randn(n, device="cuda")
            timer.measure(lambda a=a, p=p: xp.ops.vector_add(a, a, provider=p), "cuda", graph=True, max_samples=50)
    cuda_c("after graph-mode measures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
