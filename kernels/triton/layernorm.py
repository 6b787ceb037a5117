"""``layernorm`` in Triton: forward (saving mean and rstd) and backward (dx, dweight, dbias).

Forward: one program per row (several for short rows), the whole row in registers: x read
once, y written once, statistics in fp32 (two passes over the registers, not E[x^2] - E[x]^2).
Backward, after Liger-Kernel's: ``G`` programs (a few per SM) each take a contiguous run of rows,
write dx row by row and accumulate their rows' ``dy * xhat`` and ``dy`` in registers; a second
kernel sums the ``[G, N]`` fp32 partials into dweight and dbias.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import spaces
from xrt.kernels.triton.softmax import row_warps, rows_per_program

MAX_N = 65536  # longest row (elements) kept in registers


@triton.jit
def _layernorm_fwd_kernel(
    x_ptr,  # [M, N] input, row-major, contiguous
    w_ptr,  # [N] weight
    b_ptr,  # [N] bias
    y_ptr,  # [M, N] output, row-major, contiguous, x's dtype
    mean_ptr,  # [M] fp32, saved for the backward
    rstd_ptr,  # [M] fp32, saved for the backward
    M,  # rows
    N,  # row length
    eps,
    ROWS: tl.constexpr,  # rows per program
    BLOCK: tl.constexpr,  # next_power_of_2(N)
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    cmask = cols < N
    rmask = rows < M
    mask = rmask[:, None] & cmask[None, :]
    offs = rows[:, None].to(tl.int64) * N + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, 1) / N
    d = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, 1) / N + eps)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    y = d * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + rows, mean, mask=rmask)
    tl.store(rstd_ptr + rows, rstd, mask=rmask)


@triton.jit
def _layernorm_bwd_kernel(
    dy_ptr,  # [M, N] upstream gradient, row-major, contiguous, x's dtype
    x_ptr,  # [M, N] forward input, row-major, contiguous
    w_ptr,  # [N] weight
    mean_ptr,  # [M] fp32 from the forward
    rstd_ptr,  # [M] fp32 from the forward
    dx_ptr,  # [M, N] output, row-major, contiguous, x's dtype
    dw_part_ptr,  # [G, N] fp32: this program's sum over its rows of dy * xhat
    db_part_ptr,  # [G, N] fp32: this program's sum over its rows of dy
    M,  # rows
    N,  # row length
    rows_per_program,  # rows of each program, ceil(M / G)
    BLOCK: tl.constexpr,  # next_power_of_2(N)
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK], tl.float32)
    db_acc = tl.zeros([BLOCK], tl.float32)
    start = pid * rows_per_program
    end = tl.minimum(start + rows_per_program, M)
    off = start.to(tl.int64) * N + cols  # advanced row by row, in 64 bits
    for row in range(start, end):
        x = tl.load(x_ptr + off, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + off, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = w * dy
        c1 = tl.sum(xhat * wdy, 0) / N
        c2 = tl.sum(wdy, 0) / N
        dx = (wdy - (xhat * c1 + c2)) * rstd
        tl.store(dx_ptr + off, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += dy * xhat
        db_acc += dy
        off += N
    tl.store(dw_part_ptr + pid.to(tl.int64) * N + cols, dw_acc, mask=mask)
    tl.store(db_part_ptr + pid.to(tl.int64) * N + cols, db_acc, mask=mask)


@triton.jit
def _sum_partials_kernel(
    dw_part_ptr,  # [G, N] fp32 partials, row-major
    db_part_ptr,  # [G, N] fp32 partials, row-major
    dw_ptr,  # [N] output, weight's dtype
    db_ptr,  # [N] output, weight's dtype
    G,  # partial rows
    N,  # row length
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    dw = tl.zeros([BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_N], tl.float32)
    for g0 in range(0, G, BLOCK_G):
        g = g0 + tl.arange(0, BLOCK_G)
        mask = (g[:, None] < G) & cmask[None, :]
        offs = g[:, None].to(tl.int64) * N + cols[None, :]
        dw += tl.sum(tl.load(dw_part_ptr + offs, mask=mask, other=0.0), 0)
        db += tl.sum(tl.load(db_part_ptr + offs, mask=mask, other=0.0), 0)
    tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=cmask)
    tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=cmask)


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> tuple[int, int]:
    if x.dim() != 2:
        raise ValueError(f"layernorm kernels take x as [M, N]; got x.shape={tuple(x.shape)}")
    m, n = x.shape
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (n,):
            raise ValueError(f"x.shape[-1]={n} must equal {name}.shape[0]; got {name}.shape={tuple(t.shape)}")
    if n > MAX_N:
        raise ValueError(f"Triton layernorm keeps a row in registers: x.shape[-1]={n} must be <= {MAX_N}")
    return m, n


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
              config: dict[str, Any] | None = None):
    """``(y, mean, rstd)`` for ``x`` ``[M, N]``, ``weight``/``bias`` ``[N]``; config from ``layernorm.triton``."""
    m, n = _check(x, weight, bias)
    cfg = spaces.check("layernorm.triton", config or {})
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    y = torch.empty_like(x)
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    if m == 0 or n == 0:
        return y, mean, rstd
    block = triton.next_power_of_2(n)
    rows = rows_per_program(block, m)
    warps = row_warps(block * rows) if cfg["num_warps"] == "auto" else cfg["num_warps"]
    _layernorm_fwd_kernel[(triton.cdiv(m, rows),)](x, weight, bias, y, mean, rstd, m, n, eps,
                                                    ROWS=rows, BLOCK=block, num_warps=warps)
    return y, mean, rstd


def partial_programs(x: torch.Tensor, m: int, programs_per_sm: int) -> int:
    """How many programs (blocks) share the rows of the backward: a few per SM, at most one a row."""
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.device.type == "cuda" else 2
    return max(1, min(m, sms * programs_per_sm))


def layernorm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                  rstd: torch.Tensor, config: dict[str, Any] | None = None):
    """``(dx, dweight, dbias)``; shapes as :func:`layernorm`; config from ``layernorm_bwd.triton``."""
    m, n = _check(x, weight)
    if dy.shape != x.shape:
        raise ValueError(f"dy.shape={tuple(dy.shape)} must equal x.shape={tuple(x.shape)}")
    cfg = spaces.check("layernorm_bwd.triton", config or {})
    dy, x, weight = dy.contiguous(), x.contiguous(), weight.contiguous()
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight)
    db = torch.empty_like(weight)
    if m == 0 or n == 0:
        return dx, dw.zero_(), db.zero_()
    g = partial_programs(x, m, cfg["programs_per_sm"])
    dw_part = torch.empty(g, n, dtype=torch.float32, device=x.device)
    db_part = torch.empty(g, n, dtype=torch.float32, device=x.device)
    block = triton.next_power_of_2(n)
    warps = row_warps(block) if cfg["num_warps"] == "auto" else cfg["num_warps"]
    _layernorm_bwd_kernel[(g,)](dy, x, weight, mean, rstd, dx, dw_part, db_part, m, n,
                                triton.cdiv(m, g), BLOCK=block, num_warps=warps)
    block_n = 128
    _sum_partials_kernel[(triton.cdiv(n, block_n),)](dw_part, db_part, dw, db, g, n,
                                                     BLOCK_G=32, BLOCK_N=block_n, num_warps=4)
    return dx, dw, db
