"""``layernorm`` in Triton: forward (saving mean and rstd) and backward (dx, dweight, dbias).

Forward: one program per row (several for short rows), the whole row in registers: x read
once, y written once, statistics in fp32 (two passes over the registers, not E[x^2] - E[x]^2).
Backward, after Liger-Kernel's: ``G`` programs (a few per SM) each take a contiguous run of rows,
write dx row by row and accumulate their rows' ``dy * xhat`` and ``dy`` in registers; a second
kernel sums the ``[G, N]`` fp32 partials into dweight and dbias.

Long rows (``N > TILED_FROM``, or ``path="tiled"``): a whole row of x, dy, w and the two
accumulators no longer fits in registers (N = 32768 spilled, 3x slower than torch), so the
backward is split by columns. Pass 1 (one program a row, a loop over the row in chunks): the two
row sums ``c1 = mean(xhat * w * dy)`` and ``c2 = mean(w * dy)`` in fp32, into ``[M]`` buffers.
Pass 2 (a grid of ``G`` row groups x ``N / TILE_N`` column tiles): each program walks its rows
over one column tile, writes dx and keeps that tile's dweight / dbias partials in registers.
x and dy are read twice (10 bytes an element in bf16 against 6), but nothing spills.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks
from xrt.kernels.triton.launch import Launcher, Site, cdiv, next_power_of_2
from xrt.kernels.triton.softmax import row_warps, rows_per_program

MAX_N = 65536  # longest row (elements) kept in registers (forward)
TILED_FROM = 8192  # backward: rows longer than this take the column-tiled two-pass path
TILE_N = 1024  # backward, tiled path: columns per program of pass 2
SUM_BLOCK = 4096  # backward, tiled path: elements per step of pass 1 (the row sums)


def fwd_plan(block: int, m: int, num_warps: Any, rows: Any) -> tuple[int, int]:
    """``(rows per program, warps)`` of the forward.

    ``auto``: short rows share a program (as softmax); a row of 16384 takes two rows a program and
    32 warps (about 32 elements a thread and 64 KiB in flight a program; one row a program left a
    single 512-thread program per SM, 2.1-2.4 TB/s on the H100); 8192 takes 8 warps (measured
    2.78 TB/s against 2.45 with 16).
    """
    if rows == "auto":
        r = 2 if block == 16384 else rows_per_program(block, m)
    else:
        r = int(rows)
    r = max(1, min(r, next_power_of_2(checks.size_hint(m))))  # a SymInt: no guard
    if num_warps != "auto":
        return r, int(num_warps)
    elems = block * r
    if block == 8192 and r == 1:
        return r, 8
    return r, row_warps(elems)


def bwd_programs_per_sm(n: int, programs_per_sm: Any) -> int:
    """``auto``: 2 programs an SM for rows up to 4096, else 1 (H100: 185 against 229 us at
    16384x4096; 184 against 205 us at 8192x8192, bf16)."""
    if programs_per_sm != "auto":
        return int(programs_per_sm)
    return 2 if n <= 4096 else 1


@triton.jit
def _normalize(x, mask, cmask, cols, w_ptr, b_ptr, N, eps):
    """``(mean, rstd, y)`` of fp32 rows ``x`` [ROWS, BLOCK] (``mask`` the valid elements, ``cmask``
    the valid columns): ``y = (x - mean) * rstd * weight + bias``. ``eps`` is taken as fp32: Inductor
    passes a Python float as fp64, which would carry the rows' arithmetic into fp64."""
    mean = tl.sum(x, 1) / N
    d = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, 1) / N + tl.cast(eps, tl.float32))
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    return mean, rstd, d * rstd[:, None] * w[None, :] + b[None, :]


@triton.jit
def _dx(w, dy, xhat, rstd, N):
    """A row's input gradient from ``w * dy``'s two row means (fp32)."""
    wdy = w * dy
    c1 = tl.sum(xhat * wdy, 0) / N
    c2 = tl.sum(wdy, 0) / N
    return (wdy - (xhat * c1 + c2)) * rstd


@triton.jit
def _layernorm_fwd_kernel(
    x_ptr,  # [M, N] input, row-major, contiguous
    w_ptr,  # [N] weight
    b_ptr,  # [N] bias
    y_ptr,  # [M, N] output, row-major, contiguous, x's dtype
    mean_ptr,  # [M] fp32, saved for the backward
    rstd_ptr,  # [M] fp32 at rstd_ptr + rstd_off, saved for the backward (one [2, M] buffer: rstd_off = M)
    rstd_off,  # elements from rstd_ptr to the first rstd
    M,  # rows
    N,  # row length
    eps,
    STATS: tl.constexpr,  # store mean and rstd (training); inference needs neither
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
    mean, rstd, y = _normalize(x, mask, cmask, cols, w_ptr, b_ptr, N, eps)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STATS:
        tl.store(mean_ptr + rows, mean, mask=rmask)
        tl.store(rstd_ptr + rstd_off + rows, rstd, mask=rmask)


@triton.jit
def _row_group(M, rows_per_program):
    """(start, end): the rows ``[start, end)`` of a backward program's row group. (The weight is
    loaded by the kernels themselves: torch.compile's analysis of which tensors a kernel writes
    takes every pointer passed to a helper whose results address a store as written.)"""
    start = tl.program_id(0) * rows_per_program
    end = tl.minimum(start + rows_per_program, M)
    return start, end


@triton.jit
def _dy_xhat(x_ptrs, dy_ptrs, mask, mean_ptr, rstd_ptr, rstd_off, row):
    """(dy, xhat, rstd) of row ``row`` in fp32 at ``x_ptrs`` / ``dy_ptrs`` (xhat zero where masked)."""
    x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptrs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + rstd_off + row)
    return dy, tl.where(mask, (x - mean) * rstd, 0.0), rstd


@triton.jit
def _store_partials(dw_part_ptr, db_part_ptr, part_off, cols, N, dw_acc, db_acc, mask):
    """A row group's dweight and dbias partials (``dy * xhat`` and ``dy`` summed over its rows), row
    ``program_id(0)`` of the ``[G, N]`` buffers."""
    pid = tl.program_id(0)
    tl.store(dw_part_ptr + pid.to(tl.int64) * N + cols, dw_acc, mask=mask)
    tl.store(db_part_ptr + part_off + pid.to(tl.int64) * N + cols, db_acc, mask=mask)


@triton.jit
def _layernorm_bwd_kernel(
    dy_ptr,  # [M, N] upstream gradient, row-major, contiguous, x's dtype
    x_ptr,  # [M, N] forward input, row-major, contiguous
    w_ptr,  # [N] weight
    mean_ptr,  # [M] fp32 from the forward
    rstd_ptr,  # [M] fp32 from the forward, at rstd_ptr + rstd_off
    dx_ptr,  # [M, N] output, row-major, contiguous, x's dtype
    dw_part_ptr,  # [G, N] fp32: this program's sum over its rows of dy * xhat
    db_part_ptr,  # [G, N] fp32 at db_part_ptr + part_off: this program's sum over its rows of dy
    rstd_off,  # elements from rstd_ptr to the first rstd (M where mean and rstd share a buffer)
    part_off,  # elements from db_part_ptr to the first db partial (G * N where they share one)
    M,  # rows
    N,  # row length
    rows_per_program,  # rows of each program, ceil(M / G)
    BLOCK: tl.constexpr,  # next_power_of_2(N)
):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    start, end = _row_group(M, rows_per_program)
    dw_acc = tl.zeros([BLOCK], tl.float32)
    db_acc = tl.zeros([BLOCK], tl.float32)
    off = start.to(tl.int64) * N + cols  # advanced row by row, in 64 bits
    for row in range(start, end):
        dy, xhat, rstd = _dy_xhat(x_ptr + off, dy_ptr + off, mask, mean_ptr, rstd_ptr, rstd_off, row)
        dx = _dx(w, dy, xhat, rstd, N)
        tl.store(dx_ptr + off, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += dy * xhat
        db_acc += dy
        off += N
    _store_partials(dw_part_ptr, db_part_ptr, part_off, cols, N, dw_acc, db_acc, mask)


@triton.jit
def _layernorm_bwd_rowsum_kernel(
    dy_ptr,  # [M, N] upstream gradient, row-major, contiguous
    x_ptr,  # [M, N] forward input, row-major, contiguous
    w_ptr,  # [N] weight
    mean_ptr,  # [M] fp32 from the forward
    rstd_ptr,  # [M] fp32 from the forward, at rstd_ptr + rstd_off
    c1_ptr,  # [M] fp32 output: mean over the row of xhat * w * dy
    c2_ptr,  # [M] fp32 output: mean over the row of w * dy
    rstd_off,  # elements from rstd_ptr to the first rstd
    N,  # row length
    BLOCK: tl.constexpr,  # elements per step
):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * N  # scalar 64-bit row bases, 32-bit column offsets
    dy_row = dy_ptr + row.to(tl.int64) * N
    cols = tl.arange(0, BLOCK)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + rstd_off + row)
    a = tl.zeros([BLOCK], tl.float32)
    c = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        idx = start + cols
        mask = idx < N
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + idx, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        wdy = w * dy
        a += tl.where(mask, (x - mean) * rstd, 0.0) * wdy
        c += wdy
    tl.store(c1_ptr + row, tl.sum(a, 0) / N)
    tl.store(c2_ptr + row, tl.sum(c, 0) / N)


@triton.jit
def _layernorm_bwd_tiled_kernel(
    dy_ptr,  # [M, N] upstream gradient, row-major, contiguous
    x_ptr,  # [M, N] forward input, row-major, contiguous
    w_ptr,  # [N] weight
    mean_ptr,  # [M] fp32 from the forward
    rstd_ptr,  # [M] fp32 from the forward, at rstd_ptr + rstd_off
    c1_ptr,  # [M] fp32 from _layernorm_bwd_rowsum_kernel
    c2_ptr,  # [M] fp32 from _layernorm_bwd_rowsum_kernel
    dx_ptr,  # [M, N] output, row-major, contiguous, x's dtype
    dw_part_ptr,  # [G, N] fp32: row group program_id(0)'s sum of dy * xhat, its tile's columns
    db_part_ptr,  # [G, N] fp32 at db_part_ptr + part_off: likewise of dy
    rstd_off,  # elements from rstd_ptr to the first rstd
    part_off,  # elements from db_part_ptr to the first db partial
    M,  # rows
    N,  # row length
    rows_per_program,  # rows of each row group, ceil(M / G)
    TILE: tl.constexpr,  # columns per program
):
    cols = tl.program_id(1) * TILE + tl.arange(0, TILE)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    start, end = _row_group(M, rows_per_program)
    dw_acc = tl.zeros([TILE], tl.float32)
    db_acc = tl.zeros([TILE], tl.float32)
    # Scalar 64-bit row pointers advanced row by row, 32-bit column offsets: per-element 64-bit
    # addresses cost 112 registers a thread at TILE 1024 / 4 warps (sm_90), and occupancy.
    x_row = x_ptr + start.to(tl.int64) * N
    dy_row = dy_ptr + start.to(tl.int64) * N
    dx_row = dx_ptr + start.to(tl.int64) * N
    for row in range(start, end):
        dy, xhat, rstd = _dy_xhat(x_row + cols, dy_row + cols, mask, mean_ptr, rstd_ptr, rstd_off, row)
        c1 = tl.load(c1_ptr + row)
        c2 = tl.load(c2_ptr + row)
        dx = (w * dy - (xhat * c1 + c2)) * rstd
        tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += dy * xhat
        db_acc += dy
        x_row += N
        dy_row += N
        dx_row += N
    _store_partials(dw_part_ptr, db_part_ptr, part_off, cols, N, dw_acc, db_acc, mask)


@triton.jit
def _sum_partials_kernel(
    dw_part_ptr,  # [G, N] fp32 partials, row-major
    db_part_ptr,  # [G, N] fp32 partials, row-major, at db_part_ptr + part_off
    dw_ptr,  # [N] output, weight's dtype
    db_ptr,  # [N] output, weight's dtype, at db_ptr + db_off (one [2, N] buffer: db_off = N)
    part_off,  # elements from db_part_ptr to the first partial
    db_off,  # elements from db_ptr to dbias
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
        db += tl.sum(tl.load(db_part_ptr + part_off + offs, mask=mask, other=0.0), 0)
    tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=cmask)
    tl.store(db_ptr + db_off + cols, db.to(db_ptr.dtype.element_ty), mask=cmask)


_fwd = Launcher(_layernorm_fwd_kernel)
_bwd = Launcher(_layernorm_bwd_kernel)
_rowsum = Launcher(_layernorm_bwd_rowsum_kernel)
_tiled = Launcher(_layernorm_bwd_tiled_kernel)
_sum = Launcher(_sum_partials_kernel)
# _sum_partials_kernel: columns a program, partial rows a step. Narrow and tall: at the models' rows
# (N 768-2048, G = 2 x 132 partials on the H200) 8 x 512 gave 44-59 us for the whole backward against
# 63-76 with 128 x 32 (too few programs: N / 128 of them, each walking G in steps of 32).
SUM_BLOCK_N = 8
SUM_BLOCK_G = 512
# Triton's interpreter (CPU tensors) pays per program, not per step: there N / 8 programs cost 15x
# the wide blocks' time at N 1024, in every CPU test and bench of a layernorm backward.
INTERPRETER_SUM_BLOCKS = (128, 32)


def sum_grid(n: int, t: torch.Tensor) -> tuple[tuple[int], dict[str, int]]:
    """The grid and block constants of ``_sum_partials_kernel`` over rows of ``n`` for tensors like ``t``."""
    bn, bg = (SUM_BLOCK_N, SUM_BLOCK_G) if t.device.type != "cpu" else INTERPRETER_SUM_BLOCKS
    return (cdiv(n, bn),), {"BLOCK_G": bg, "BLOCK_N": bn}


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> tuple[int, int]:
    m, n = checks.rows_and_vectors(x, weight=weight, bias=bias)
    if n > MAX_N:
        raise ValueError(f"Triton layernorm keeps a row in registers: x.shape[-1]={n} must be <= {MAX_N}")
    return m, n


class FwdPlan:
    """The forward's launch for one ``(M, N, dtype, config)``: grid, warps and constexprs worked out
    once. ``plan(x, w, b, y, stats, eps, save)`` launches on contiguous tensors; ``stats`` is one
    fp32 ``[2, M]`` buffer (mean, then rstd), written only when ``save``."""

    __slots__ = ("m", "n", "sites")

    def __init__(self, m: int, n: int, cfg: dict[str, Any]) -> None:
        block = next_power_of_2(n)
        rows, warps = fwd_plan(block, m, cfg["num_warps"], cfg["rows"])
        self.m, self.n = m, n
        self.sites = {save: Site(_fwd, (cdiv(m, rows),), 6, num_warps=warps, STATS=save, ROWS=rows, BLOCK=block)
                      for save in (False, True)}

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor, stats: torch.Tensor,
                 eps: float, save: bool) -> None:
        self.sites[save](x, w, b, y, stats, stats, self.m, self.m, self.n, eps)

    def native(self) -> list[tuple[Site, tuple]]:
        """The training forward's launches with their arguments as templates (slot names of
        ``xrt.pytorch.ops.native``, ``(slot, byte offset)``, constants, ``"eps"``): what
        :meth:`__call__` passes when ``save``."""
        return [(self.sites[True], ("x", "w", "b", "y", "stats", "stats", self.m, self.m, self.n, "eps"))]


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
              config: dict[str, Any] | None = None):
    """``(y, mean, rstd)`` for ``x`` ``[M, N]``, ``weight``/``bias`` ``[N]``; config from ``layernorm.triton``."""
    m, n = _check(x, weight, bias)
    cfg = checks.tuning("layernorm.triton", config)
    x, weight, bias, y, mean, rstd = checks.layernorm_outputs(x, weight, bias)
    if m == 0 or n == 0:
        return y, mean, rstd
    block = next_power_of_2(n)
    rows, warps = fwd_plan(block, m, cfg["num_warps"], cfg["rows"])
    _fwd((cdiv(m, rows),), x, weight, bias, y, mean, rstd, 0, m, n, float(eps),
         STATS=True, ROWS=rows, BLOCK=block, num_warps=warps)
    return y, mean, rstd


def layernorm_infer(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
                    config: dict[str, Any] | None = None) -> torch.Tensor:
    """``y`` alone for ``x`` ``[M, N]``: the forward without its statistics, for a call that no
    autograd records (torch.compile's inference twin). The statistics' pointers are ``x``'s, never
    written (``STATS=False``), so nothing else is allocated. Not ``y``'s: where PyTorch cannot tell
    which pointers a kernel writes (no GPU driver) it clones each written argument and copies them
    back in turn, and a never-written alias of ``y`` would overwrite it; a copy of ``x`` back onto
    itself changes nothing."""
    m, n = _check(x, weight, bias)
    cfg = checks.tuning("layernorm.triton", config)
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    y = torch.empty_like(x)
    if m == 0 or n == 0:
        return y
    block = next_power_of_2(n)
    rows, warps = fwd_plan(block, m, cfg["num_warps"], cfg["rows"])
    _fwd((cdiv(m, rows),), x, weight, bias, y, x, x, 0, m, n, float(eps),
         STATS=False, ROWS=rows, BLOCK=block, num_warps=warps)
    return y


def partial_programs(x: torch.Tensor, m: int, programs_per_sm: int) -> int:
    """How many programs (blocks) share the rows of the backward: a few per SM, at most one a row."""
    sms = _sm_count(x.device) if x.is_cuda else 2
    return max(1, min(m, sms * programs_per_sm))


_SMS: dict[Any, int] = {}


def _sm_count(device: torch.device) -> int:
    """Multiprocessors of a CUDA device (cached: read on every backward otherwise)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def _tiled_path(n: int, cfg: dict[str, Any], tile: int | None, sum_block: int | None) -> bool:
    return (tile is not None or sum_block is not None or cfg["path"] == "tiled"
            or (cfg["path"] == "auto" and n > TILED_FROM))


def layernorm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                  rstd: torch.Tensor, config: dict[str, Any] | None = None, *, tile: int | None = None,
                  sum_block: int | None = None):
    """``(dx, dweight, dbias)``; shapes as :func:`layernorm`; config from ``layernorm_bwd.triton``.

    ``path``: ``rows`` keeps a row in registers, ``tiled`` takes the column-tiled two-pass path,
    ``auto`` the tiled one for ``N > TILED_FROM``. ``tile`` / ``sum_block`` force the tiled path
    with that many columns a program (pass 2) / elements a step (pass 1): tests of long rows.
    """
    m, n = _check(x, weight)
    if dy.shape != x.shape:
        raise ValueError(f"dy.shape={tuple(dy.shape)} must equal x.shape={tuple(x.shape)}")
    cfg = checks.tuning("layernorm_bwd.triton", config)
    dy, x, weight = dy.contiguous(), x.contiguous(), weight.contiguous()
    mean, rstd = mean.contiguous(), rstd.contiguous()
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight)
    db = torch.empty_like(weight)
    if m == 0 or n == 0:
        return dx, dw.zero_(), db.zero_()
    block = next_power_of_2(n)
    g = partial_programs(x, m, bwd_programs_per_sm(n, cfg["programs_per_sm"]))
    dw_part = torch.empty(g, n, dtype=torch.float32, device=x.device)
    db_part = torch.empty(g, n, dtype=torch.float32, device=x.device)
    if _tiled_path(n, cfg, tile, sum_block):
        tile_n = min(tile or TILE_N, block)
        step = min(sum_block or SUM_BLOCK, block)
        c1 = torch.empty(m, dtype=torch.float32, device=x.device)
        c2 = torch.empty(m, dtype=torch.float32, device=x.device)
        auto = cfg["num_warps"] == "auto"
        _rowsum((m,), dy, x, weight, mean, rstd, c1, c2, 0, n, BLOCK=step,
                num_warps=row_warps(step) if auto else cfg["num_warps"])
        _tiled((g, cdiv(n, tile_n)), dy, x, weight, mean, rstd, c1, c2, dx, dw_part, db_part, 0, 0, m, n,
               cdiv(m, g), TILE=tile_n, num_warps=4 if auto else cfg["num_warps"])
    else:
        warps = row_warps(block) if cfg["num_warps"] == "auto" else cfg["num_warps"]
        _bwd((g,), dy, x, weight, mean, rstd, dx, dw_part, db_part, 0, 0, m, n, cdiv(m, g),
             BLOCK=block, num_warps=warps)
    grid, blocks = sum_grid(n, x)
    _sum(grid, dw_part, db_part, dw, db, 0, 0, g, n, num_warps=4, **blocks)
    return dx, dw, db


class BwdPlan:
    """The backward's launches for one ``(M, N, dtype, config, device)``, as :class:`FwdPlan`:
    ``plan(dy, x, w, stats)`` -> ``(dx, dweight, dbias)`` from the forward's ``[2, M]`` stats, with
    one allocation for the partials and one for dweight and dbias. Rows longer than ``TILED_FROM``
    (where the kernels, not the host, take the time) go through :func:`layernorm_bwd`."""

    __slots__ = ("m", "n", "groups", "cfg", "rows", "total")

    def __init__(self, m: int, n: int, cfg: dict[str, Any], x: torch.Tensor) -> None:
        self.m, self.n, self.cfg = m, n, cfg
        self.groups = g = partial_programs(x, m, bwd_programs_per_sm(n, cfg["programs_per_sm"]))
        self.rows = self.total = None
        if not _tiled_path(n, cfg, None, None):
            block = next_power_of_2(n)
            warps = row_warps(block) if cfg["num_warps"] == "auto" else cfg["num_warps"]
            self.rows = Site(_bwd, (g,), 8, num_warps=warps, BLOCK=block)
            grid, blocks = sum_grid(n, x)
            self.total = Site(_sum, grid, 4, num_warps=4, **blocks)

    def buffers(self, x: torch.Tensor, w: torch.Tensor) -> tuple | None:
        """What a call writes: ``(dx, partials, dweight+dbias, dweight, dbias)`` (``None`` for the
        tiled path, which allocates its own). Allocated by the caller ahead of time if it likes."""
        return None if self.rows is None else checks.layernorm_bwd_buffers(x, w, self.groups)

    def __call__(self, dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stats: torch.Tensor,
                 buffers: tuple | None = None):
        m, n, g = self.m, self.n, self.groups
        if self.rows is None:
            mean, rstd = stats.unbind(0)
            return layernorm_bwd(dy, x, w, mean, rstd, self.cfg)
        dx, part, dwdb, dw, db = buffers or self.buffers(x, w)
        self.rows(dy, x, w, stats, stats, dx, part, part, m, g * n, m, n, cdiv(m, g))
        self.total(part, part, dwdb, dwdb, g * n, n, g, n)
        return dx, dw, db

    def native(self) -> list[tuple[Site, tuple]] | None:
        """The launches of :meth:`__call__` with their arguments as templates (see
        :meth:`FwdPlan.native`), ``None`` on the tiled path."""
        if self.rows is None:
            return None
        m, n, g = self.m, self.n, self.groups
        return [(self.rows, ("dy", "x", "w", "stats", "stats", "dx", "part", "part", m, g * n, m, n, cdiv(m, g))),
                (self.total, ("part", "part", "dwdb", "dwdb", g * n, n, g, n))]
