"""Launcher for ``vector_add`` in CUDA C (``vector_add.cu``): checks, allocation, grid."""

from __future__ import annotations

from typing import Any

import torch

from xrt.kernels import checks, cuda
from xrt.kernels.cuda.inputs import DTYPE_SUFFIX, check_device


def vector_add(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``a + b`` with ``vector_add_<version>_<dtype>``; ``config`` from the ``vector_add.cuda`` space."""
    checks.same("vector_add", a, b)
    check_device("vector_add", a, b)
    cfg, (a, b), y = checks.prepare("vector_add.cuda", config, a, b)
    n = a.numel()
    if n == 0:
        return y
    block, version = int(cfg["block"]), cfg["version"]
    if version == "v2" and any(t.data_ptr() % 16 for t in (a, b, y)):
        version = "v1"  # v2's float4 accesses need 16-byte alignment
    fn = cuda.prepared("vector_add", f"vector_add_{version}_{DTYPE_SUFFIX[a.dtype]}", a.device.index or 0, "PPPq")
    if version == "v1":
        grid = (n + block - 1) // block
    else:
        sms = cuda.sm_count(a.device)
        grid = max(1, min((n // (16 // a.element_size()) + block - 1) // block, sms * 32))
    cuda.launch(fn, a.device, (grid, 1), (block, 1, 1), a.data_ptr(), b.data_ptr(), y.data_ptr(), n)
    return y
