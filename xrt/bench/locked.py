"""``python -m xrt.bench.locked --index I [--uuid U] --mode base|max -- CMD...``: run CMD with clocks locked.

The lock is undone when CMD ends, when this process is interrupted or terminated, or on error.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from xrt.bench.clocks import ClockLock, ClockLockError


def main(argv: list[str] | None = None, nvml=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xrt.bench.locked")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--uuid", help="the GPU's UUID (GPU-…): NVML's numbering ignores CUDA_VISIBLE_DEVICES")
    p.add_argument("--mode", required=True)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("give the command to run after --")
    try:
        with ClockLock(a.index, a.mode, nvml=nvml, uuid=a.uuid):
            return subprocess.call(cmd)
    except ClockLockError as e:
        print(f"xrt bench: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
