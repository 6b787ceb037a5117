"""``add_layernorm`` in Triton: ``h = x + residual``, ``y = layer_norm(h)`` in one pass, and its backward.

Forward: as layernorm's (xrt/kernels/triton/layernorm.py), one program a row (several for short
rows), the row in registers: x and residual read once, h and y written once (12 bytes an element
in bf16 where the unfused pair moves 18). The statistics are taken of h rounded to its dtype, the
tensor the residual stream carries on, so y equals ``layer_norm`` of the stored h.

Backward: layernorm's row-group design (Liger-Kernel's), reading the saved h in place of x, plus
``dh``, the gradient that reaches h from the rest of the residual stream: ``dx = dresidual =
dh + layernorm_backward(dy)``, written once and returned for both inputs. It reads dy, h and dh
and writes one tensor; x and residual are not saved. dweight / dbias partials are summed by
layernorm's ``_sum_partials_kernel``.

:class:`Plan` fixes both directions' launches for one input signature (grid, warps, constexprs:
:func:`fwd_launch`, :func:`bwd_launch`, which the functions below use too) and launches through
each kernel's cached handle (``Site``): the op's eager path.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks
from xrt.kernels.triton.launch import Launcher, Site, cdiv, next_power_of_2
from xrt.kernels.triton.layernorm import (
    _dx,
    _dy_xhat,
    _normalize,
    _row_group,
    _store_partials,
    _sum,
    bwd_programs_per_sm,
    fwd_plan,
    partial_programs,
    sum_grid,
)
from xrt.kernels.triton.softmax import row_warps

MAX_N = 16384  # longest row (elements) kept in registers; the backward holds five rows' worth


@triton.jit
def _add_layernorm_fwd_kernel(
    x_ptr,  # [M, N] input, row-major, contiguous
    r_ptr,  # [M, N] residual, row-major, contiguous, x's dtype
    w_ptr,  # [N] weight
    b_ptr,  # [N] bias
    h_ptr,  # [M, N] output x + residual, row-major, contiguous, x's dtype
    y_ptr,  # [M, N] output layer_norm(h), row-major, contiguous, x's dtype
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
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + offs, h, mask=mask)
    mean, rstd, y = _normalize(h.to(tl.float32), mask, cmask, cols, w_ptr, b_ptr, N, eps)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + rows, mean, mask=rmask)
    tl.store(rstd_ptr + rows, rstd, mask=rmask)


@triton.jit
def _add_layernorm_bwd_kernel(
    dy_ptr,  # [M, N] gradient of y, row-major, contiguous, h's dtype
    dh_ptr,  # [M, N] gradient of h from the residual stream, as dy (read when HAS_DH)
    h_ptr,  # [M, N] the forward's h, row-major, contiguous
    w_ptr,  # [N] weight
    mean_ptr,  # [M] fp32 from the forward
    rstd_ptr,  # [M] fp32 from the forward
    dx_ptr,  # [M, N] output: the gradient of x and of residual, h's dtype
    dw_part_ptr,  # [G, N] fp32: this program's sum over its rows of dy * hhat
    db_part_ptr,  # [G, N] fp32 at db_part_ptr + part_off: this program's sum over its rows of dy
    part_off,  # elements from db_part_ptr to the first db partial (G * N where they share one buffer)
    M,  # rows
    N,  # row length
    rows_per_program,  # rows of each program, ceil(M / G)
    HAS_DH: tl.constexpr,  # h's own gradient is there (else zero: h unused downstream)
    BLOCK: tl.constexpr,  # next_power_of_2(N)
):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    start, end = _row_group(M, rows_per_program)
    dw_acc = tl.zeros([BLOCK], tl.float32)
    db_acc = tl.zeros([BLOCK], tl.float32)
    off = start.to(tl.int64) * N + cols
    for row in range(start, end):
        dy, hhat, rstd = _dy_xhat(h_ptr + off, dy_ptr + off, mask, mean_ptr, rstd_ptr, 0, row)
        dx = _dx(w, dy, hhat, rstd, N)
        if HAS_DH:
            dx += tl.load(dh_ptr + off, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + off, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += dy * hhat
        db_acc += dy
        off += N
    _store_partials(dw_part_ptr, db_part_ptr, part_off, cols, N, dw_acc, db_acc, mask)


_fwd = Launcher(_add_layernorm_fwd_kernel)
_bwd = Launcher(_add_layernorm_bwd_kernel)


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> tuple[int, int]:
    m, n = checks.rows_and_vectors(x, weight=weight, bias=bias)
    if n > MAX_N:
        raise ValueError(f"Triton add_layernorm keeps a row in registers: x.shape[-1]={n} must be <= {MAX_N}")
    return m, n


def fwd_launch(m: int, n: int, cfg: dict[str, Any]) -> tuple[tuple[int], dict[str, Any]]:
    """The forward's grid and launch options (``num_warps`` and the constexprs) for ``[M, N]`` rows."""
    block = next_power_of_2(n)
    rows, warps = fwd_plan(block, m, cfg["num_warps"], cfg["rows"])
    return (cdiv(m, rows),), {"num_warps": warps, "ROWS": rows, "BLOCK": block}


def bwd_launch(m: int, n: int, cfg: dict[str, Any], x: torch.Tensor) -> tuple[int, dict[str, Any]]:
    """The backward's row groups ``G`` (its grid) and launch options, ``HAS_DH`` left to the call."""
    block = next_power_of_2(n)
    g = partial_programs(x, m, bwd_programs_per_sm(n, cfg["programs_per_sm"]))
    return g, {"num_warps": row_warps(block) if cfg["num_warps"] == "auto" else cfg["num_warps"], "BLOCK": block}


def add_layernorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
                  config: dict[str, Any] | None = None):
    """``(y, h, mean, rstd)`` for ``x`` and ``residual`` ``[M, N]``, ``weight`` / ``bias`` ``[N]``:
    ``h = x + residual``, ``y = layer_norm(h)``; config from ``add_layernorm.triton``."""
    m, n = _check(x, weight, bias)
    if residual.shape != x.shape:
        raise ValueError(f"residual.shape={tuple(residual.shape)} must equal x.shape={tuple(x.shape)}")
    cfg = checks.tuning("add_layernorm.triton", config)
    x, weight, bias, y, mean, rstd = checks.layernorm_outputs(x, weight, bias)
    residual = residual.contiguous()
    h = torch.empty_like(x)
    if m == 0 or n == 0:
        return y, h, mean, rstd
    grid, meta = fwd_launch(m, n, cfg)
    _fwd(grid, x, residual, weight, bias, h, y, mean, rstd, m, n, float(eps), **meta)
    return y, h, mean, rstd


def add_layernorm_bwd(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor,
                      mean: torch.Tensor, rstd: torch.Tensor, config: dict[str, Any] | None = None):
    """``(dx, dweight, dbias)``: ``dx`` is the gradient of both ``x`` and ``residual``; ``dh`` the
    gradient of ``h`` (``None``: zero); shapes as :func:`add_layernorm`; config from
    ``add_layernorm_bwd.triton``."""
    m, n = _check(h, weight)
    for name, t in (("dy", dy), ("dh", dh)):
        if t is not None and t.shape != h.shape:
            raise ValueError(f"{name}.shape={tuple(t.shape)} must equal h.shape={tuple(h.shape)}")
    cfg = checks.tuning("add_layernorm_bwd.triton", config)
    dy, h, weight = dy.contiguous(), h.contiguous(), weight.contiguous()
    dh = dh.contiguous() if dh is not None else None
    dx = torch.empty_like(h)
    dw = torch.empty_like(weight)
    db = torch.empty_like(weight)
    if m == 0 or n == 0:
        return dx, dw.zero_(), db.zero_()
    g, meta = bwd_launch(m, n, cfg, h)
    # Two partials buffers, not one passed twice: in a torch.compile trace each written argument
    # becomes a functional copy of its own, and one buffer written through two arguments would split.
    dw_part = torch.empty(g, n, dtype=torch.float32, device=h.device)
    db_part = torch.empty(g, n, dtype=torch.float32, device=h.device)
    _bwd((g,), dy, dh if dh is not None else dy, h, weight, mean.contiguous(), rstd.contiguous(), dx, dw_part,
         db_part, 0, m, n, cdiv(m, g), HAS_DH=dh is not None, **meta)
    grid, blocks = sum_grid(n, h)
    _sum(grid, dw_part, db_part, dw, db, 0, 0, g, n, num_warps=4, **blocks)
    return dx, dw, db


class Plan:
    """The forward's and backward's launches for one ``(M, N, dtype, configs, device)``, worked out
    once (as layernorm's ``FwdPlan`` / ``BwdPlan``): an eager call then allocates its outputs and
    calls each kernel's :class:`Site`. Takes contiguous, non-empty tensors checked by its owner."""

    __slots__ = ("m", "n", "groups", "fwd", "bwd", "total")

    def __init__(self, m: int, n: int, cfg: dict[str, Any], bcfg: dict[str, Any], x: torch.Tensor) -> None:
        self.m, self.n = m, n
        grid, meta = fwd_launch(m, n, cfg)
        self.fwd = Site(_fwd, grid, 8, **meta)
        self.groups, bmeta = bwd_launch(m, n, bcfg, x)
        self.bwd = {has_dh: Site(_bwd, (self.groups,), 9, HAS_DH=has_dh, **bmeta) for has_dh in (False, True)}
        grid, blocks = sum_grid(n, x)
        self.total = Site(_sum, grid, 4, num_warps=4, **blocks)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(y, h, mean, rstd)`` as :func:`add_layernorm`."""
        y, h = torch.empty_like(x), torch.empty_like(x)
        mean = torch.empty(self.m, dtype=torch.float32, device=x.device)
        rstd = torch.empty(self.m, dtype=torch.float32, device=x.device)
        self.fwd(x, residual, weight, bias, h, y, mean, rstd, self.m, self.n, eps)
        return y, h, mean, rstd

    def backward(self, dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor,
                 mean: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(dx, dweight, dbias)`` as :func:`add_layernorm_bwd` (``dy``, ``dh`` contiguous). Three
        allocations (dx, one buffer of both partials, one of dweight and dbias): autograd runs the
        backward on its own thread, where each costs several microseconds more than on the caller's."""
        m, n, g = self.m, self.n, self.groups
        dx, part, dwdb, dw, db = checks.layernorm_bwd_buffers(h, weight, g)
        self.bwd[dh is not None](dy, dh if dh is not None else dy, h, weight, mean, rstd, dx, part, part, g * n,
                                 m, n, cdiv(m, g))
        self.total(part, part, dwdb, dwdb, g * n, n, g, n)
        return dx, dw, db
