"""``softmax`` over the last dim in Triton.

Fused: one program per row (several rows per program for short rows), the whole row in
registers, so x is read once and y written once; max and sum in fp32. Rows longer than
``MAX_FUSED`` elements do not fit in registers: they take the looped kernel, which reads x twice
(an online max/sum pass, then the normalising pass).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks
from xrt.kernels.triton.launch import Launcher, cdiv, next_power_of_2

MAX_FUSED = 32768  # longest row (elements) kept in registers
LOOP_BLOCK = 4096  # elements per step of the looped kernel


def row_warps(block: int) -> int:
    """Warps for a program holding ``block`` elements of a row: about 16-32 elements a thread."""
    if block >= 32768:
        return 32
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4


def rows_per_program(block: int, rows: int) -> int:
    """Short rows share a program, up to 4096 elements each (powers of two, for tl.arange)."""
    return max(1, min(4096 // block, next_power_of_2(checks.size_hint(rows))))  # a SymInt: no guard


@triton.jit
def _softmax_kernel(
    x_ptr,  # [M, N] input, row-major, contiguous
    y_ptr,  # [M, N] output, row-major, contiguous, x's dtype
    M,  # rows
    N,  # row length
    ROWS: tl.constexpr,  # rows per program
    BLOCK: tl.constexpr,  # next_power_of_2(N)
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    offs = rows[:, None].to(tl.int64) * N + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, 1)
    e = tl.exp2((x - m[:, None]) * 1.4426950408889634)
    y = e / tl.sum(e, 1)[:, None]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_loop_kernel(
    x_ptr,  # [M, N] input, row-major, contiguous
    y_ptr,  # [M, N] output, row-major, contiguous, x's dtype
    N,  # row length
    BLOCK: tl.constexpr,  # elements per step
):
    base = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):  # online max and sum, one lane per column residue
        x = tl.load(x_ptr + base + start + cols, mask=start + cols < N, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        live = m_new > -float("inf")  # a lane that has seen only padding stays (-inf, 0)
        s = tl.where(live, s * tl.exp2((m - m_new) * 1.4426950408889634)
                     + tl.exp2((x - m_new) * 1.4426950408889634), 0.0)
        m = m_new
    row_max = tl.max(m, 0)
    row_sum = tl.sum(s * tl.exp2((m - row_max) * 1.4426950408889634), 0)
    for start in range(0, N, BLOCK):
        mask = start + cols < N
        x = tl.load(x_ptr + base + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp2((x - row_max) * 1.4426950408889634) / row_sum
        tl.store(y_ptr + base + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


_fused = Launcher(_softmax_kernel)
_looped = Launcher(_softmax_loop_kernel)


def softmax(x: torch.Tensor, config: dict[str, Any] | None = None, *, loop_block: int | None = None,
            ) -> torch.Tensor:
    """Softmax over the last dim of ``x`` (any shape); ``config`` from ``softmax.triton``.

    ``loop_block`` forces the looped (two-read) kernel with that step, for tests of long rows.
    """
    cfg, (x,), y = checks.prepare("softmax.triton", config, x)
    if x.numel() == 0:
        return y
    n = x.shape[-1]
    m = x.numel() // n
    block = next_power_of_2(n)
    if loop_block is None and block <= MAX_FUSED:
        rows = rows_per_program(block, m)
        warps = row_warps(block * rows) if cfg["num_warps"] == "auto" else cfg["num_warps"]
        _fused((cdiv(m, rows),), x, y, m, n, ROWS=rows, BLOCK=block, num_warps=warps)
    else:
        step = loop_block or LOOP_BLOCK
        warps = row_warps(step) if cfg["num_warps"] == "auto" else cfg["num_warps"]
        _looped((m,), x, y, n, BLOCK=step, num_warps=warps)
    return y
