"""Launcher for ``square`` in CUDA C (``square.cu``): checks, allocation, grid."""

from __future__ import annotations

from typing import Any

import torch

from xrt.kernels import checks, cuda
from xrt.kernels.cuda.inputs import DTYPE_SUFFIX, check_device


def square(x: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``x * x`` with ``square_<version>_<dtype>``; ``config`` from the ``square.cuda`` space."""
    check_device("square", x)
    cfg, (x,), y = checks.prepare("square.cuda", config, x)
    n = x.numel()
    if n == 0:
        return y
    block = int(cfg["block"])
    version = cfg["version"]
    if version == "v2" and (x.data_ptr() % 16 or y.data_ptr() % 16):
        version = "v1"  # v2's float4 accesses need 16-byte alignment
    fn = cuda.prepared("square", f"square_{version}_{DTYPE_SUFFIX[x.dtype]}", x.device.index or 0, "PPq")
    if version == "v1":
        grid = (n + block - 1) // block
    else:
        vec = 16 // x.element_size()
        # Enough blocks to fill the GPU several times over; the grid-stride loop covers the rest.
        sms = cuda.sm_count(x.device)
        grid = max(1, min((n // vec + block - 1) // block, sms * 32))
    cuda.launch(fn, x.device, (grid, 1), (block, 1, 1), x.data_ptr(), y.data_ptr(), n)
    return y
