"""Does a CUDA C (pycuda) launch return before the GPU runs it? Queue launches behind a long spin.

    python scripts/pycuda_async.py

Holds the GPU with torch.cuda._sleep (about 20 ms), then times on the host 10 launches of each
provider's vector_add; an asynchronous launch returns in microseconds, a blocking one waits for
the spin. Prints µs a launch for torch, triton and cuda, with and without the spin ahead.
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
