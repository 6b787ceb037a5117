"""The torch reference for ``linear_gelu``: ``F.linear`` then ``F.gelu``, unfused (cuBLAS on a GPU).

Shapes: ``x`` [M, K], ``weight`` [N, K], ``bias`` [N] or None, ``y`` and the pre-activation ``z`` [M, N].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, approximate: str, save: bool):
    """``(y, z)``: ``z = F.linear(x, weight, bias)``, ``y = F.gelu(z, approximate)`` (z empty unless ``save``)."""
    z = F.linear(x, weight, bias)
    y = F.gelu(z, approximate=approximate)
    return y, z if save else z.new_empty((0,))


def linear_gelu_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor, approximate: str):
    """``(dx, dweight, dbias)`` from the saved pre-activation: GELU's backward, then two GEMMs."""
    dz = torch.ops.aten.gelu_backward(dy, z, approximate=approximate)
    return dz @ weight, dz.mT @ x, dz.sum(0, dtype=torch.float32).to(dz.dtype)
