"""Launcher for ``window_sum`` in CUDA C (``window_sum.cu``): checks, allocation, grid."""

from __future__ import annotations

from typing import Any

import torch

from xrt.kernels import checks, cuda
from xrt.kernels.cuda.inputs import DTYPE_SUFFIX, check_device


def window_sum(x: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``[..., n]`` -> ``[..., n - 2]`` with ``window_sum_<version>_<dtype>``; config from ``window_sum.cuda``."""
    check_device("window_sum", x)
    n = checks.window_width(x)
    cfg, (x,), y = checks.prepare("window_sum.cuda", config, x, shape=(*x.shape[:-1], n - 2))
    rows = x.numel() // n
    if rows == 0:
        return y
    block, items, version = int(cfg["block"]), int(cfg["items"]), cfg["version"]
    if version == "v2" and x.data_ptr() % 16:
        version = "v1"  # v2's float4 fetch needs a 16-byte aligned base
    kernel = f"window_sum_{version}_{DTYPE_SUFFIX[x.dtype]}"
    dev = x.device.index or 0
    if version == "v1":
        grid = (rows * (n - 2) + block - 1) // block
        cuda.launch(cuda.prepared("window_sum", kernel, dev, "PPqq"), x.device, (grid, 1), (block, 1, 1),
                    x.data_ptr(), y.data_ptr(), rows, n)
    else:
        tile = block * items
        vec = 16 // x.element_size()
        shared = (tile + 2 + 2 * vec) * x.element_size()
        cuda.launch(cuda.prepared("window_sum", kernel, dev, "PPqqi"), x.device,
                    (rows * ((n - 2 + tile - 1) // tile), 1), (block, 1, 1), x.data_ptr(), y.data_ptr(), rows, n, items,
                    shared=shared)
    return y
