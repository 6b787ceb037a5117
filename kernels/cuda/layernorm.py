"""Launchers for ``layernorm`` forward and backward in CUDA C (``layernorm.cu``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from xrt.kernels import cuda, spaces
from xrt.kernels.cuda.softmax import check_device, kernel_name, row_plan
from xrt.kernels.cuda.square import _SUFFIX


def _check(x: torch.Tensor, weight: torch.Tensor, *others: tuple[str, torch.Tensor]) -> tuple[int, int]:
    check_device("layernorm", x)
    if x.dim() != 2:
        raise ValueError(f"layernorm kernels take x as [M, N]; got x.shape={tuple(x.shape)}")
    m, n = x.shape
    if tuple(weight.shape) != (n,):
        raise ValueError(f"x.shape[-1]={n} must equal weight.shape[0]; got weight.shape={tuple(weight.shape)}")
    for name, t in (("weight", weight), *others):
        if t.dtype != x.dtype or t.device != x.device:
            raise ValueError(f"{name} must match x: {name} is {t.dtype} on {t.device}, x is {x.dtype} on {x.device}")
    return m, n


def _ptrs(*ts: torch.Tensor) -> list[np.uintp]:
    return [np.uintp(t.data_ptr()) for t in ts]


def _aligned(*ts: torch.Tensor) -> bool:
    return all(t.data_ptr() % 16 == 0 for t in ts)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
              config: dict[str, Any] | None = None):
    """``(y, mean, rstd)`` for ``x`` ``[M, N]``, ``weight``/``bias`` ``[N]`` of x's dtype."""
    m, n = _check(x, weight, ("bias", bias))
    if tuple(bias.shape) != (n,):
        raise ValueError(f"x.shape[-1]={n} must equal bias.shape[0]; got bias.shape={tuple(bias.shape)}")
    cfg = spaces.check("layernorm.cuda", config or {})
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    y = torch.empty_like(x)
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    if m == 0 or n == 0:
        return y, mean, rstd
    version, block, items = row_plan(n, x.element_size(), cfg["block"], cfg["version"],
                                     _aligned(x, weight, bias, y))
    fn = cuda.function("layernorm", kernel_name("layernorm_fwd", version, x.dtype, items), x.device.index or 0)
    with torch.cuda.device(x.device), cuda.on_torch_stream():
        fn(*_ptrs(x, weight, bias, y, mean, rstd), np.int64(n), np.float32(eps), block=(block, 1, 1), grid=(m, 1))
    return y, mean, rstd


def layernorm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                  rstd: torch.Tensor, config: dict[str, Any] | None = None):
    """``(dx, dweight, dbias)`` from the forward's ``mean``/``rstd``; config from ``layernorm_bwd.cuda``."""
    m, n = _check(x, weight, ("dy", dy))
    if dy.shape != x.shape:
        raise ValueError(f"dy.shape={tuple(dy.shape)} must equal x.shape={tuple(x.shape)}")
    cfg = spaces.check("layernorm_bwd.cuda", config or {})
    dy, x, weight = dy.contiguous(), x.contiguous(), weight.contiguous()
    mean, rstd = mean.contiguous().float(), rstd.contiguous().float()
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight)
    db = torch.empty_like(weight)
    if m == 0 or n == 0:
        return dx, dw.zero_(), db.zero_()
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    groups = max(1, min(m, sms * int(cfg["programs_per_sm"])))
    per_block = (m + groups - 1) // groups
    dw_part = torch.empty(groups, n, dtype=torch.float32, device=x.device)
    db_part = torch.empty(groups, n, dtype=torch.float32, device=x.device)
    version, block, items = row_plan(n, x.element_size(), cfg["block"], cfg["version"],
                                     _aligned(dy, x, weight, dx), vecs_per_thread=2)
    dev = x.device.index or 0
    fn = cuda.function("layernorm", kernel_name("layernorm_bwd", version, x.dtype, items), dev)
    red = cuda.function("layernorm", f"layernorm_sum_partials_{_SUFFIX[x.dtype]}", dev)
    with torch.cuda.device(x.device), cuda.on_torch_stream():
        fn(*_ptrs(dy, x, weight, mean, rstd, dx, dw_part, db_part), np.int64(m), np.int64(n),
           np.int64(per_block), block=(block, 1, 1), grid=(groups, 1))
        red(*_ptrs(dw_part, db_part, dw, db), np.int64(groups), np.int64(n), block=(256, 1, 1),
            grid=((n + 255) // 256, 1))
    return dx, dw, db
