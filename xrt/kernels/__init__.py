"""xpuruntime's kernels, shipped inside the package as ``xrt.kernels``.

One op, one file per provider: ``reference/<op>.py`` (torch), ``triton/<op>.py``,
``cuda/<op>.cu`` with its launcher ``cuda/<op>.py``. Tuning spaces: :mod:`xrt.kernels.spaces`.
Each op's definition (providers, spaces, bench shapes, dump entry points): ``defs/<op>.py``
(:mod:`xrt.kernels.defs`), which the layers above list their ops from.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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


_INCLUDE = re.compile(r'#include "([^"]+)"\s*')


def cuda_source(name: str) -> str:
    """The text nvcc compiles for ``cuda/<name>`` (``"softmax.cu"``): the source with each line
    ``#include "x.cuh"`` replaced by the text of ``cuda/x.cuh`` (recursively), between ``#line``
    marks so that diagnostics name the header's and the source's own lines.

    Everything that compiles a CUDA C source (the launchers through pycuda, ``xrt kernels dump``, the
    tests) compiles this text, not the file: the headers are found alike from a checkout, an editable
    install and a wheel, with no include path, and a cache keyed on the text (pycuda's) changes when a
    header does.
    """
    return _expand(name, lambda n: source(f"cuda/{n}"), ())


def _expand(name: str, read: Callable[[str], str], within: tuple[str, ...]) -> str:
    if name in within:
        raise ValueError(f"CUDA C include cycle: {' -> '.join((*within, name))}")
    out = []
    for num, line in enumerate(read(name).splitlines(keepends=True), 1):
        m = _INCLUDE.fullmatch(line)
        if m is None:
            out.append(line)
            continue
        text = _expand(m[1], read, (*within, name))
        out += [f'#line 1 "{m[1]}"\n', text if text.endswith("\n") else text + "\n", f'#line {num + 1} "{name}"\n']
    return "".join(out)
