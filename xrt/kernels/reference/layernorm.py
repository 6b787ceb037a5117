"""The torch reference for ``layernorm``: forward with the saved statistics, and backward.

Shapes: ``x`` is ``[M, N]`` (rows flattened by the op), ``weight`` and ``bias`` ``[N]``,
``mean`` and ``rstd`` ``[M]`` in fp32.
"""

from __future__ import annotations

import torch


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float):
    """``(y, mean, rstd)``: ``y = (x - mean) * rstd * weight + bias``, statistics in fp32.

    On CUDA this is torch's own fused kernel (``aten.native_layer_norm``), the baseline to beat.
    """
    if x.is_cuda:
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], weight, bias, eps)
        return y, mean.reshape(-1).float(), rstd.reshape(-1).float()
    xf = x.float()
    mean = xf.mean(-1)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False) + eps)
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
    return y, mean, rstd


def layernorm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                  rstd: torch.Tensor):
    """``(dx, dweight, dbias)`` from the saved ``mean`` and ``rstd``, computed in fp32.

    On CUDA this is torch's own kernel (``aten.native_layer_norm_backward``), the baseline to beat.
    """
    if x.is_cuda:
        m = x.shape[0]
        return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean.reshape(m, 1),
                                                         rstd.reshape(m, 1), weight, weight, [True, True, True])
    xhat = (x.float() - mean[:, None]) * rstd[:, None]
    dyf = dy.float()
    wdy = dyf * weight.float()
    c1 = (xhat * wdy).mean(-1, keepdim=True)
    c2 = wdy.mean(-1, keepdim=True)
    dx = (wdy - (xhat * c1 + c2)) * rstd[:, None]
    dw = (dyf * xhat).sum(0)
    db = dyf.sum(0)
    return dx.to(x.dtype), dw.to(weight.dtype), db.to(weight.dtype)
