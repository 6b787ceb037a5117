"""The torch reference for ``add_layernorm``: the unfused pair ``h = x + residual``, ``layer_norm(h)``.

Shapes: ``x``, ``residual``, ``h`` ``[M, N]``; ``weight`` and ``bias`` ``[N]``; ``mean`` and
``rstd`` ``[M]`` in fp32.
"""

from __future__ import annotations

import torch

from xrt.kernels.reference.layernorm import layernorm, layernorm_bwd


def add_layernorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float):
    """``(y, h, mean, rstd)``: torch's add, then layernorm's reference (torch's fused kernel on CUDA)."""
    h = x + residual
    y, mean, rstd = layernorm(h, weight, bias, eps)
    return y, h, mean, rstd


def add_layernorm_bwd(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor,
                      mean: torch.Tensor, rstd: torch.Tensor):
    """``(dx, dweight, dbias)``: layernorm's backward of ``h``, plus ``dh`` (``None``: zero)."""
    dx, dw, db = layernorm_bwd(dy, h, weight, mean, rstd)
    return (dx if dh is None else dx + dh), dw, db
