"""``square`` in Triton: a flat elementwise kernel (the seed lecture's row-wise version, flattened).

Flattening lets one program handle ``BLOCK_SIZE`` contiguous elements whatever the shape, so the
loads and stores are fully coalesced and the grid is ``cdiv(n, BLOCK_SIZE)``.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks
from xrt.kernels.triton.launch import Launcher, cdiv, flat_block


@triton.jit
def _square_kernel(
    x_ptr,  # [n] input, contiguous, any float dtype
    y_ptr,  # [n] output, contiguous, same dtype as x
    n,  # number of elements
    BLOCK_SIZE: tl.constexpr,
):
    offs, mask = flat_block(n, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * x, mask=mask)


_launch = Launcher(_square_kernel)


def square(x: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``x * x`` for a tensor of any shape; ``config`` from the ``square.triton`` tuning space."""
    cfg, (x,), y = checks.prepare("square.triton", config, x)
    n = x.numel()
    if n == 0:
        return y
    grid = (cdiv(n, cfg["BLOCK_SIZE"]),)
    _launch(grid, x, y, n, BLOCK_SIZE=cfg["BLOCK_SIZE"], num_warps=cfg["num_warps"])
    return y
