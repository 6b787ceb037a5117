"""The torch reference for the fused 3x3 convolution + BatchNorm + ReLU (cuDNN's conv, then
BatchNorm and ReLU: three kernels on a GPU), and the BatchNorm folding the fused kernels take."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def conv_bn_relu(x: torch.Tensor, weight: torch.Tensor, bn_weight: torch.Tensor, bn_bias: torch.Tensor,
                 running_mean: torch.Tensor | None, running_var: torch.Tensor | None, eps: float, stride: int,
                 padding: int, training: bool = False, momentum: float = 0.1) -> torch.Tensor:
    """``relu(batch_norm(conv2d(x, weight)))``, unfused: ``nn.Conv2d(bias=False)`` +
    ``nn.BatchNorm2d`` + ``nn.ReLU``; in training, batch statistics, and the running ones updated."""
    z = F.conv2d(x, weight, None, stride, padding)
    return F.relu(F.batch_norm(z, running_mean, running_var, bn_weight, bn_bias, training, momentum, eps))


def fold_bn(weight: torch.Tensor, bn_weight: torch.Tensor, bn_bias: torch.Tensor, mean: torch.Tensor,
            var: torch.Tensor, eps: float, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BatchNorm folded into the conv: ``(w', b')`` with ``conv(x, w') + b' == bn(conv(x, w))``.

    ``w'`` is [3, 3, C, K] (RSCK, what the kernels read: a K-row of the implicit GEMM is contiguous)
    in ``dtype`` (default ``weight``'s: an fp32 weight folds once for an fp16 input under AMP), ``b'``
    fp32 [K]; the arithmetic is fp32 (or float64 for float64 input).
    """
    acc = torch.float64 if weight.dtype == torch.float64 else torch.float32
    scale = bn_weight.to(acc) * torch.rsqrt(var.to(acc) + eps)
    w = (weight.to(acc) * scale[:, None, None, None]).permute(2, 3, 1, 0).contiguous().to(dtype or weight.dtype)
    b = bn_bias.to(acc) - mean.to(acc) * scale
    return w, b.to(torch.float32) if acc == torch.float32 else b


def conv_bias_relu(x: torch.Tensor, w_rsck: torch.Tensor, bias: torch.Tensor | None, stride: int, padding: int,
                   relu: bool = True) -> torch.Tensor:
    """What the fused kernels compute: ``conv2d(x, w) + bias``, then ReLU when ``relu``, for the
    RSCK weight of :func:`fold_bn`; channels_last output in x's dtype (fp32 bias added in fp32)."""
    z = F.conv2d(x, w_rsck.permute(3, 2, 0, 1), None, stride, padding)
    if bias is not None:
        z = (z.to(torch.promote_types(z.dtype, bias.dtype)) + bias[:, None, None]).to(x.dtype)
    z = F.relu(z) if relu else z
    n, k, ho, wo = z.shape
    y = torch.empty((n, ho, wo, k), dtype=x.dtype, device=x.device).permute(0, 3, 1, 2)  # the kernels' strides
    return y.copy_(z)
