"""Launcher for ``vector_add`` in CUDA C (``vector_add.cu``): checks, allocation, grid."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from xrt.kernels import checks, cuda, spaces
from xrt.kernels.cuda.square import _SUFFIX


def vector_add(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``a + b`` with ``vector_add_<version>_<dtype>``; ``config`` from the ``vector_add.cuda`` space."""
    checks.same("vector_add", a, b)
    if a.device.type != "cuda":
        raise ValueError(f"CUDA C vector_add needs CUDA tensors, got them on {a.device}")
    if a.dtype not in _SUFFIX:
        raise ValueError(f"CUDA C vector_add supports {', '.join(map(str, _SUFFIX))}; got {a.dtype}")
    cfg = spaces.check("vector_add.cuda", config or {})
    a, b = a.contiguous(), b.contiguous()
    y = torch.empty_like(a)
    n = a.numel()
    if n == 0:
        return y
    block, version = int(cfg["block"]), cfg["version"]
    if version == "v2" and any(t.data_ptr() % 16 for t in (a, b, y)):
        version = "v1"  # v2's float4 accesses need 16-byte alignment
    fn = cuda.function("vector_add", f"vector_add_{version}_{_SUFFIX[a.dtype]}", a.device.index or 0)
    if version == "v1":
        grid = (n + block - 1) // block
    else:
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        grid = max(1, min((n // (16 // a.element_size()) + block - 1) // block, sms * 32))
    with torch.cuda.device(a.device), cuda.on_torch_stream():
        fn(np.uintp(a.data_ptr()), np.uintp(b.data_ptr()), np.uintp(y.data_ptr()), np.int64(n),
           block=(block, 1, 1), grid=(grid, 1))
    return y
