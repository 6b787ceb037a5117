"""The conv tests' error bound and inputs: against float64, scaled by the taps and the magnitudes."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def check_conv(y: torch.Tensor, ref: torch.Tensor, x: torch.Tensor, w_kcrs: torch.Tensor, stride: int,
               padding: int, dtype: torch.dtype, c: float = 4.0, what: str = "y") -> None:
    """``|y - ref| <= c * (eps(dtype) + eps(fp32) * sqrt(9 C)) * conv(|x|, |w|)`` (+ the bias's
    rounding): one rounding of the output plus an fp32 accumulation over the 9 C taps, the
    :mod:`gemm_checks` bound with the conv of magnitudes for |a| @ |b|. A missing tap or channel
    step is off by about that scale times sqrt(9 C); a poisoned (NaN) element fails."""
    assert y.shape == ref.shape, f"{what}: shape {tuple(y.shape)} != {tuple(ref.shape)}"
    assert y.dtype == dtype, f"{what}: dtype {y.dtype} != {dtype}"
    assert y.is_contiguous(memory_format=torch.channels_last), f"{what}: not channels_last"
    if not ref.numel():
        return
    taps = 9 * x.shape[1]
    scale = F.conv2d(x.double().abs(), w_kcrs.double().abs(), None, stride, padding) + ref.double().abs()
    tol = c * (torch.finfo(dtype).eps + torch.finfo(torch.float32).eps * math.sqrt(taps))
    bound = tol * scale + torch.finfo(torch.float32).tiny
    worst = ((y.double() - ref.double()).abs() / bound).nan_to_num(float("inf")).max()
    assert worst <= 1, f"{what}: error {worst:.3g}x the bound (tol {tol:.3g} x conv(|x|, |w|), 9C={taps})"


def bn_inputs(c: int, k: int, dtype: torch.dtype, device: str = "cpu", seed: int = 0):
    """Random ``x`` [1, C, 1, 1]-free parameters: ``weight`` [K, C, 3, 3] in ``dtype`` and fp32
    BatchNorm parameters and running statistics (never zeros, variance away from 0)."""
    g = torch.Generator().manual_seed(seed)
    weight = (torch.randn(k, c, 3, 3, generator=g) / math.sqrt(9 * c)).to(device, dtype)
    gamma = (torch.rand(k, generator=g) + 0.5).to(device)
    beta = torch.randn(k, generator=g).to(device)
    mean = (torch.randn(k, generator=g) * 0.1).to(device)
    var = (torch.rand(k, generator=g) + 0.5).to(device)
    return weight, gamma, beta, mean, var


def nhwc(n: int, c: int, h: int, w: int, dtype: torch.dtype, device: str = "cpu") -> torch.Tensor:
    return torch.randn(n, c, h, w, device=device).to(dtype).contiguous(memory_format=torch.channels_last)
