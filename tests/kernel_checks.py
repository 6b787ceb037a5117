"""Helpers of the kernel tests: relative-error checks, poisoned outputs, an interpreter fix."""

from __future__ import annotations

import contextlib

import torch

# Relative error bounds per dtype, against float64 (a few roundings of the dtype).
RTOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def check(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, scale: torch.Tensor | float | None = None,
          what: str = "output") -> None:
    """``|y - ref| <= rtol * (|ref| or scale) + tiny``; NaN (an unwritten poisoned element) fails."""
    assert y.shape == ref.shape, f"{what}: shape {tuple(y.shape)} != {tuple(ref.shape)}"
    if not ref.numel():
        return
    err = (y.double() - ref.double()).abs()
    mag = ref.double().abs() if scale is None else torch.as_tensor(scale, dtype=torch.float64)
    bound = RTOL[dtype] * mag + torch.finfo(dtype).tiny
    worst = (err / bound).nan_to_num(float("inf")).max()
    assert worst <= 1, f"{what}: error {worst:.3g}x the bound (rtol {RTOL[dtype]})"


def within_twice_their_error(names, got, theirs, exact, floor: float = 1e-4) -> None:
    """Each of ``got`` at most 2x the worst error of ``theirs`` (the reference at the same precision,
    SDPA say) against ``exact`` (float64), plus ``floor`` (flash-attention's test bound). Shapes
    must match; NaN (an unwritten poisoned element) fails."""
    for name, g, t, r in zip(names, got, theirs, exact, strict=True):
        assert g.shape == r.shape, f"{name}: shape {tuple(g.shape)} != {tuple(r.shape)}"
        err = (g.double() - r).abs().max().nan_to_num(float("inf")).item()
        err_theirs = (t.double() - r).abs().max().item()
        assert err <= 2 * err_theirs + floor, f"{name}: error {err:.3g} > 2 x theirs {err_theirs:.3g} + {floor}"


@contextlib.contextmanager
def poisoned_outputs():
    """Within the block, float tensors from torch.empty / empty_like start as NaN."""
    empty, empty_like = torch.empty, torch.empty_like

    def fill(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t

    torch.empty = lambda *a, **k: fill(empty(*a, **k))
    torch.empty_like = lambda *a, **k: fill(empty_like(*a, **k))
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


# The interpreter fix now lives with the Triton kernels (applied whenever TRITON_INTERPRET=1).
from xrt.kernels.triton import fix_interpreter_scalars  # noqa: E402,F401
