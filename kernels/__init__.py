"""xpuruntime's kernels, shipped inside the package as ``xrt.kernels``.

One op, one file per provider: ``reference/<op>.py`` (torch), ``triton/<op>.py``,
``cuda/<op>.cu`` with its launcher ``cuda/<op>.py``. Tuning spaces: :mod:`xrt.kernels.spaces`.
"""

from __future__ import annotations

from importlib import resources


def source(relpath: str) -> str:
    """The text of a kernel source file, e.g. ``source("cuda/square.cu")``; works from a wheel."""
    node = resources.files(__name__).joinpath(relpath)
    if not node.is_file():
        raise FileNotFoundError(f"no kernel source {relpath!r} in {__name__}")
    return node.read_text()


def cuda_sources() -> list[str]:
    """Names of the CUDA C sources shipped, e.g. ``["square.cu"]``."""
    return sorted(p.name for p in resources.files(__name__).joinpath("cuda").iterdir() if p.name.endswith(".cu"))
