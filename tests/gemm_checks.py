"""The GEMM tests' error bound: against float64, scaled by K and by the operands' magnitudes."""

from __future__ import annotations

import math

import torch


def check_gemm(y: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, c: float = 4.0,
               what: str = "C") -> None:
    """``|y - a@b| <= c * (eps(dtype) + eps(fp32) * sqrt(K)) * (|a| @ |b|)`` elementwise, the
    reference in float64 from the same (already rounded) operands: one rounding of the output plus
    an fp32 accumulation over K. A wrong or missing K tile is off by about ``|a||b| sqrt(K)``, far
    outside; an unwritten poisoned (NaN) element fails."""
    ref = a.double() @ b.double()
    assert y.shape == ref.shape, f"{what}: shape {tuple(y.shape)} != {tuple(ref.shape)}"
    assert y.dtype == dtype, f"{what}: dtype {y.dtype} != {dtype}"
    if not ref.numel():
        return
    k = a.shape[-1]
    scale = a.double().abs() @ b.double().abs()
    tol = c * (torch.finfo(dtype).eps + torch.finfo(torch.float32).eps * math.sqrt(max(k, 1)))
    bound = tol * scale + torch.finfo(torch.float32).tiny
    worst = ((y.double() - ref).abs() / bound).nan_to_num(float("inf")).max()
    assert worst <= 1, f"{what}: error {worst:.3g}x the bound (tol {tol:.3g} x |a|@|b|, K={k})"


def operands(m: int, n: int, k: int, dtype: torch.dtype, device: str, batch: int | None = None,
             transpose: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ``a`` [(B,) M, K] and ``b`` [(B,) K, N]; ``transpose``: column-major views of them."""
    lead = () if batch is None else (batch,)
    if transpose:
        a = torch.randn(*lead, k, m, device=device).to(dtype).mT
        b = torch.randn(*lead, n, k, device=device).to(dtype).mT
    else:
        a = torch.randn(*lead, m, k, device=device).to(dtype)
        b = torch.randn(*lead, k, n, device=device).to(dtype)
    return a, b
