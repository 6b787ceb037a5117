"""Launcher for ``window_sum`` in CUDA C (``window_sum.cu``): checks, allocation, grid."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from xrt.kernels import checks, cuda, spaces
from xrt.kernels.cuda.square import _SUFFIX


def window_sum(x: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``[..., n]`` -> ``[..., n - 2]`` with ``window_sum_<version>_<dtype>``; config from ``window_sum.cuda``."""
    if x.device.type != "cuda":
        raise ValueError(f"CUDA C window_sum needs a CUDA tensor, got one on {x.device}")
    if x.dtype not in _SUFFIX:
        raise ValueError(f"CUDA C window_sum supports {', '.join(map(str, _SUFFIX))}; got {x.dtype}")
    n = checks.window_width(x)
    cfg = spaces.check("window_sum.cuda", config or {})
    x = x.contiguous()
    rows = x.numel() // n
    y = torch.empty(*x.shape[:-1], n - 2, dtype=x.dtype, device=x.device)
    if rows == 0:
        return y
    block, items, version = int(cfg["block"]), int(cfg["items"]), cfg["version"]
    if version == "v2" and x.data_ptr() % 16:
        version = "v1"  # v2's float4 fetch needs a 16-byte aligned base
    fn = cuda.function("window_sum", f"window_sum_{version}_{_SUFFIX[x.dtype]}", x.device.index or 0)
    with torch.cuda.device(x.device), cuda.on_torch_stream():
        if version == "v1":
            grid = (rows * (n - 2) + block - 1) // block
            fn(np.uintp(x.data_ptr()), np.uintp(y.data_ptr()), np.int64(rows), np.int64(n),
               block=(block, 1, 1), grid=(grid, 1))
        else:
            tile = block * items
            vec = 16 // x.element_size()
            shared = (tile + 2 + 2 * vec) * x.element_size()
            fn(np.uintp(x.data_ptr()), np.uintp(y.data_ptr()), np.int64(rows), np.int64(n), np.int32(items),
               block=(block, 1, 1), grid=(rows, (n - 2 + tile - 1) // tile), shared=shared)
    return y
