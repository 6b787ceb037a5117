"""``window_sum`` in Triton: ``y[r, i] = x[r, i] + x[r, i+1] + x[r, i+2]``, ``i < n - 2``.

A 1-D grid of rows x column blocks (program ``p``: row ``p // blocks``, column block ``p % blocks``):
axis 0's limit is 2**31 - 1, where axis 1's is 65535, which one row of 2**28 elements (262144
column blocks) passed and failed at launch ("invalid argument") in the H100 suite. Each
program loads its ``BLOCK_SIZE`` outputs' inputs three times, shifted by 0, 1 and 2: the second
and third loads hit L1, so HBM sees x read once. (The CUDA C version makes that reuse explicit
with a shared-memory segment.) Sums in fp32.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks
from xrt.kernels.triton.launch import Launcher, cdiv


@triton.jit
def _window_sum_kernel(
    x_ptr,  # [rows, n] input, row-major, contiguous
    y_ptr,  # [rows, n - 2] output, row-major, contiguous, x's dtype
    n,  # row length of x (>= 3)
    BLOCK_SIZE: tl.constexpr,
):
    m = n - 2
    blocks = tl.cdiv(m, BLOCK_SIZE)
    pid = tl.program_id(0)
    col = (pid % blocks) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    row = (pid // blocks).to(tl.int64)
    mask = col < m
    xr = x_ptr + row * n + col
    acc = tl.load(xr, mask=mask).to(tl.float32)
    acc += tl.load(xr + 1, mask=mask).to(tl.float32)
    acc += tl.load(xr + 2, mask=mask).to(tl.float32)
    tl.store(y_ptr + row * m + col, acc.to(y_ptr.dtype.element_ty), mask=mask)


_launch = Launcher(_window_sum_kernel)


def window_sum(x: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """The 3-wide window sum over the last dim: ``[..., n]`` -> ``[..., n - 2]``."""
    n = checks.window_width(x)
    cfg, (x,), y = checks.prepare("window_sum.triton", config, x, shape=(*x.shape[:-1], n - 2))
    rows = x.numel() // n
    if rows == 0:
        return y
    grid = (rows * cdiv(n - 2, cfg["BLOCK_SIZE"]),)
    _launch(grid, x, y, n, BLOCK_SIZE=cfg["BLOCK_SIZE"], num_warps=cfg["num_warps"])
    return y
