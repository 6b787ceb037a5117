"""What expandable segments do to reserved memory on a fragmenting workload.

The workload allocates buffers that grow a little every step (as a growing sequence length or
batch does). With fixed-size segments, freed blocks of the old sizes cannot serve the new ones,
so the caching allocator reserves more and more; expandable segments grow one range in place.

asv runs each benchmark in its own process, so the allocator mode is set before any allocation.
``python -m benchmarks.bench_allocator`` prints both modes side by side (each in a fresh process).
"""

from __future__ import annotations

import json
import subprocess
import sys

MIB = 2**20


def fragmenting_workload(steps: int = 40, base_mib: int = 64) -> dict[str, int]:
    """Run the workload on the current CUDA device; peak allocated and reserved bytes.

    Every step allocates a pair of buffers a little larger than the last step's (a growing
    sequence length), then frees the last step's. With fixed-size segments no freed block is
    big enough for the next, larger request, so each step maps a new segment and the cache keeps
    the old ones; expandable segments merge the freed neighbours and grow the range in place.
    """
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    prev = None
    for step in range(steps):
        size = (base_mib + step) * MIB
        cur = (torch.empty(size, dtype=torch.uint8, device="cuda"),
               torch.empty(size // 2, dtype=torch.uint8, device="cuda"))
        cur[0].fill_(1)  # touch the memory, as real activations would
        prev = cur
    del prev, cur
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    out = {"peak_allocated": stats["allocated_bytes.all.peak"], "peak_reserved": stats["reserved_bytes.all.peak"]}
    torch.cuda.empty_cache()
    return out


class AllocatorFragmentation:
    params = [False, True]
    param_names = ["expandable_segments"]
    unit = "MiB"

    def setup(self, expandable: bool) -> None:
        from xrt import device_env

        if device_env.requested_kind() in ("cpu", "xpu"):
            # the CPU target of `xrt bench run`: skip before importing torch (1.5-3 s a process there)
            raise NotImplementedError(f"needs a CUDA device ({device_env.DEVICE}={device_env.requested()})")
        import torch

        if not torch.cuda.is_available():
            raise NotImplementedError("needs a CUDA device")  # asv records a skip
        import xrt.pytorch as xp

        xp.set_allocator(expandable)

    def track_peak_reserved(self, expandable: bool) -> float:
        return fragmenting_workload()["peak_reserved"] / MIB

    def track_peak_allocated(self, expandable: bool) -> float:
        return fragmenting_workload()["peak_allocated"] / MIB


def _one(expandable: bool) -> dict[str, int]:
    import xrt.pytorch as xp

    xp.set_allocator(expandable)
    return fragmenting_workload()


def main() -> None:
    rows = []
    for expandable in (False, True):
        code = f"import json, benchmarks.bench_allocator as b; print(json.dumps(b._one({expandable})))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        rows.append((expandable, json.loads(out.stdout.strip().splitlines()[-1])))
    print("| expandable_segments | peak allocated (MiB) | peak reserved (MiB) | reserved / allocated |")
    print("| --- | ---: | ---: | ---: |")
    for expandable, r in rows:
        print(f"| {expandable} | {r['peak_allocated'] / MIB:.0f} | {r['peak_reserved'] / MIB:.0f} | "
              f"{r['peak_reserved'] / r['peak_allocated']:.2f} |")


if __name__ == "__main__":
    main()
