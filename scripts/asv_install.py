"""asv's install step (asv.conf.json ``install_command``): the built wheel with its runtime deps.

    python scripts/asv_install.py WHEEL BUILD_DIR

Installs ``WHEEL[torch]`` (torch, Triton, nvidia-ml-py, numpy: what the suites import) into the
environment asv built, pinned by the commit's ``requirements/constraints.txt``. Which torch wheel:
``$XRT_TORCH_INDEX`` when set (a URL, given to pip as an extra index; ``default`` for pip's
configured indexes only); else, on a host with an NVIDIA GPU (``nvidia-smi -L`` lists one), pip's
default (PyPI's torch is the CUDA build), and on a host without one PyTorch's CPU index
(https://download.pytorch.org/whl/cpu: the CPU wheel, a fraction of the size).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    out = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return out.returncode == 0 and "GPU" in out.stdout


def command(wheel: str, build_dir: str) -> list[str]:
    if not wheel.endswith(".whl") or not Path(wheel).is_file():
        raise SystemExit(f"asv_install: wheel {wheel!r}: no such wheel file")
    constraints = Path(build_dir) / "requirements" / "constraints.txt"
    cmd = [sys.executable, "-m", "pip", "install", f"{wheel}[torch]"]
    if constraints.is_file():
        cmd += ["-c", str(constraints)]
    index = os.environ.get("XRT_TORCH_INDEX")
    if index is None:
        index = "default" if has_nvidia_gpu() else CPU_INDEX
    if index != "default":
        cmd += ["--extra-index-url", index]
    return cmd


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: asv_install.py WHEEL BUILD_DIR", file=sys.stderr)
        return 2
    cmd = command(*argv)
    print("asv_install:", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
