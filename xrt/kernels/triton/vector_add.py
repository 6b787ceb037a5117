"""``vector_add`` in Triton: the flat elementwise kernel of ``square`` with a second input."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks
from xrt.kernels.triton.launch import Launcher, cdiv, flat_block


@triton.jit
def _vector_add_kernel(
    a_ptr,  # [n] first input, contiguous
    b_ptr,  # [n] second input, contiguous, a's dtype
    y_ptr,  # [n] output, contiguous, a's dtype
    n,  # number of elements
    BLOCK_SIZE: tl.constexpr,
):
    offs, mask = flat_block(n, BLOCK_SIZE)
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, a + b, mask=mask)


_launch = Launcher(_vector_add_kernel)


def vector_add(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``a + b`` for two tensors of one shape and dtype; ``config`` from ``vector_add.triton``."""
    checks.same("vector_add", a, b)
    cfg, (a, b), y = checks.prepare("vector_add.triton", config, a, b)
    n = a.numel()
    if n == 0:
        return y
    grid = (cdiv(n, cfg["BLOCK_SIZE"]),)
    _launch(grid, a, b, y, n, BLOCK_SIZE=cfg["BLOCK_SIZE"], num_warps=cfg["num_warps"])
    return y
