"""Launcher for ``softmax`` in CUDA C (``softmax.cu``), and the row-kernel plan layernorm shares."""

from __future__ import annotations

import math
from typing import Any

import torch

from xrt.kernels import checks, cuda
from xrt.kernels.cuda.inputs import DTYPE_SUFFIX, check_device

ITEMS = (1, 2, 4, 8)  # the 16-byte vectors per thread that the v2 kernels are instantiated for


def _pow2(v: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, v))))


def row_plan(n: int, esize: int, block: int | str, version: str, aligned: bool,
             vecs_per_thread: int = 4) -> tuple[str, int, int]:
    """``(version, threads per block, items)`` for a block-per-row kernel over rows of ``n``.

    v2 needs ``n`` a multiple of the vector width, 16-byte aligned rows and a row that fits in
    ``block * 8`` vectors; otherwise the launch falls back to v1 (items 0). ``"auto"`` threads:
    about ``vecs_per_thread`` vectors a thread (v2) or 8 elements a thread (v1), 32 to 1024.
    """
    vec = 16 // esize
    if version == "v2" and n % vec == 0 and aligned:
        nvec = n // vec
        b = min(1024, max(32, _pow2(math.ceil(nvec / vecs_per_thread)))) if block == "auto" else int(block)
        items = next((i for i in ITEMS if i * b >= nvec), None)
        if items is not None:
            return "v2", b, items
    b = min(1024, max(32, _pow2(math.ceil(n / 8)))) if block == "auto" else int(block)
    return "v1", b, 0


def kernel_name(op: str, version: str, dtype: torch.dtype, items: int) -> str:
    return f"{op}_{version}_{DTYPE_SUFFIX[dtype]}" + (f"_{items}" if version == "v2" else "")



def softmax(x: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """Softmax over the last dim with ``softmax_<version>_<dtype>[_<items>]``; config from ``softmax.cuda``."""
    check_device("softmax", x)
    cfg, (x,), y = checks.prepare("softmax.cuda", config, x)
    if x.numel() == 0:
        return y
    n = x.shape[-1]
    rows = x.numel() // n
    aligned = (x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0)
    # "auto" block: two vectors a thread (H100, bf16: the best block of the sweep at 4096, 8192
    # and 16384; four a thread took 100 us against 95 at 16384).
    version, block, items = row_plan(n, x.element_size(), cfg["block"], cfg["version"], aligned,
                                     vecs_per_thread=2)
    fn = cuda.prepared("softmax", kernel_name("softmax", version, x.dtype, items), x.device.index or 0, "PPq")
    cuda.launch(fn, x.device, (rows, 1), (block, 1, 1), x.data_ptr(), y.data_ptr(), n)
    return y
