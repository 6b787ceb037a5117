"""Launchers for ``layernorm`` forward and backward in CUDA C (``layernorm.cu``)."""

from __future__ import annotations

from typing import Any

import torch

from xrt.kernels import checks, cuda
from xrt.kernels.cuda.inputs import DTYPE_SUFFIX, check_device
from xrt.kernels.cuda.softmax import kernel_name, row_plan


def _check(x: torch.Tensor, weight: torch.Tensor, *others: tuple[str, torch.Tensor]) -> tuple[int, int]:
    check_device("layernorm", x)
    m, n = checks.rows_and_vectors(x, weight=weight)
    for name, t in (("weight", weight), *others):
        if t.dtype != x.dtype or t.device != x.device:
            raise ValueError(f"{name} must match x: {name} is {t.dtype} on {t.device}, x is {x.dtype} on {x.device}")
    return m, n


def _ptrs(*ts: torch.Tensor) -> list[int]:
    return [t.data_ptr() for t in ts]


def _aligned(*ts: torch.Tensor) -> bool:
    return all(t.data_ptr() % 16 == 0 for t in ts)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
              config: dict[str, Any] | None = None):
    """``(y, mean, rstd)`` for ``x`` ``[M, N]``, ``weight``/``bias`` ``[N]`` of x's dtype."""
    m, n = _check(x, weight, ("bias", bias))
    checks.rows_and_vectors(x, bias=bias)
    cfg = checks.tuning("layernorm.cuda", config)
    x, weight, bias, y, mean, rstd = checks.layernorm_outputs(x, weight, bias)
    if m == 0 or n == 0:
        return y, mean, rstd
    version, block, items = row_plan(n, x.element_size(), cfg["block"], cfg["version"],
                                     _aligned(x, weight, bias, y))
    fn = cuda.prepared("layernorm", kernel_name("layernorm_fwd", version, x.dtype, items), x.device.index or 0,
                       "PPPPPPqf")
    cuda.launch(fn, x.device, (m, 1), (block, 1, 1), *_ptrs(x, weight, bias, y, mean, rstd), n, float(eps))
    return y, mean, rstd


class FwdPlan:
    """The forward's launch for one ``(M, N, dtype, config, device)`` of 16-byte aligned tensors:
    ``plan(x, w, b, y, stats, eps)`` on contiguous tensors, ``stats`` one fp32 ``[2, M]`` buffer
    (mean, then rstd). Version, block and kernel are chosen once."""

    __slots__ = ("m", "n", "site")

    def __init__(self, m: int, n: int, cfg: dict[str, Any], x: torch.Tensor) -> None:
        version, block, items = row_plan(n, x.element_size(), cfg["block"], cfg["version"], True)
        fn = cuda.prepared("layernorm", kernel_name("layernorm_fwd", version, x.dtype, items), x.device.index or 0,
                           "PPPPPPqf")
        self.m, self.n = m, n
        self.site = cuda.Site(fn, x.device, (m, 1), (block, 1, 1))

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor, stats: torch.Tensor,
                 eps: float) -> bool:
        """Launch and say so, or ``False`` (nothing launched) for a tensor not 16-byte aligned."""
        px, pw, pb, py, ps = x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), stats.data_ptr()
        if (px | pw | pb | py) & 15:
            return False
        self.site(px, pw, pb, py, ps, ps + 4 * self.m, self.n, eps)
        return True

    def native(self) -> list[tuple[cuda.Site, tuple]]:
        """The launch with its arguments as templates (slot names of ``xrt.pytorch.ops.native``,
        ``(slot, byte offset)``, constants, ``"eps"``): what :meth:`__call__` passes."""
        return [(self.site, ("x", "w", "b", "y", "stats", ("stats", 4 * self.m), self.n, "eps"))]


def layernorm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                  rstd: torch.Tensor, config: dict[str, Any] | None = None):
    """``(dx, dweight, dbias)`` from the forward's ``mean``/``rstd``; config from ``layernorm_bwd.cuda``."""
    m, n = _check(x, weight, ("dy", dy))
    if dy.shape != x.shape:
        raise ValueError(f"dy.shape={tuple(dy.shape)} must equal x.shape={tuple(x.shape)}")
    cfg = checks.tuning("layernorm_bwd.cuda", config)
    dy, x, weight = dy.contiguous(), x.contiguous(), weight.contiguous()
    mean, rstd = mean.contiguous().float(), rstd.contiguous().float()
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight)
    db = torch.empty_like(weight)
    if m == 0 or n == 0:
        return dx, dw.zero_(), db.zero_()
    sms = cuda.sm_count(x.device)
    pps = 2 if (cfg["programs_per_sm"] == "auto" and n <= 4096) else (
        1 if cfg["programs_per_sm"] == "auto" else int(cfg["programs_per_sm"]))
    groups = max(1, min(m, sms * pps))
    per_block = (m + groups - 1) // groups
    dw_part = torch.empty(groups, n, dtype=torch.float32, device=x.device)
    db_part = torch.empty(groups, n, dtype=torch.float32, device=x.device)
    aligned = _aligned(dy, x, weight, dx)
    version, block, items = bwd_plan(n, x.element_size(), cfg["block"], cfg["version"], aligned)
    dev = x.device.index or 0
    red = cuda.prepared("layernorm", f"layernorm_sum_partials_{DTYPE_SUFFIX[x.dtype]}", dev, "PPPPqq")
    if version == "v3":
        vec = items > 0  # 16-byte vectors (n % VEC == 0, aligned rows)
        width = 16 // x.element_size() if vec else 1
        c1 = torch.empty(m, dtype=torch.float32, device=x.device)
        c2 = torch.empty(m, dtype=torch.float32, device=x.device)
        suffix = DTYPE_SUFFIX[x.dtype]
        rowsum = cuda.prepared("layernorm", f"layernorm_bwd_rowsum_{'v2' if vec else 'v1'}_{suffix}", dev, "PPPPPPPq")
        tiled = cuda.prepared("layernorm", f"layernorm_bwd_v3{'_vec' if vec else ''}_{suffix}", dev, "PPPPPPPPPPqqq")
        cuda.launch(rowsum, x.device, (m, 1), (ROWSUM_BLOCK, 1, 1), *_ptrs(dy, x, weight, mean, rstd, c1, c2), n)
        cols_per_block = block * width
        cuda.launch(tiled, x.device, (groups, (n + cols_per_block - 1) // cols_per_block), (block, 1, 1),
                    *_ptrs(dy, x, weight, mean, rstd, c1, c2, dx, dw_part, db_part), m, n, per_block)
    else:
        fn = cuda.prepared("layernorm", kernel_name("layernorm_bwd", version, x.dtype, items), dev, "PPPPPPPPqqq")
        cuda.launch(fn, x.device, (groups, 1), (block, 1, 1), *_ptrs(dy, x, weight, mean, rstd, dx, dw_part, db_part),
                    m, n, per_block)
    cuda.launch(red, x.device, ((n + 255) // 256, 1), (256, 1, 1), *_ptrs(dw_part, db_part, dw, db), groups, n)
    return dx, dw, db


class BwdPlan:
    """The backward's launches for one ``(M, N, dtype, config, device)``, as :class:`FwdPlan`:
    ``plan(dy, x, w, stats)`` -> ``(dx, dweight, dbias)`` with one allocation for the partials and
    one for dweight and dbias, or ``None`` (nothing launched) where the tensors are not 16-byte
    aligned or the row takes the tiled v3 path (long rows, where the kernels take the time)."""

    __slots__ = ("m", "n", "groups", "kernel", "total", "esize")

    def __init__(self, m: int, n: int, cfg: dict[str, Any], x: torch.Tensor) -> None:
        pps = 2 if (cfg["programs_per_sm"] == "auto" and n <= 4096) else (
            1 if cfg["programs_per_sm"] == "auto" else int(cfg["programs_per_sm"]))
        self.m, self.n, self.esize = m, n, x.element_size()
        self.groups = groups = max(1, min(m, cuda.sm_count(x.device) * pps))
        version, block, items = bwd_plan(n, x.element_size(), cfg["block"], cfg["version"], True)
        self.kernel = self.total = None
        if version != "v3":
            dev = x.device.index or 0
            fn = cuda.prepared("layernorm", kernel_name("layernorm_bwd", version, x.dtype, items), dev, "PPPPPPPPqqq")
            red = cuda.prepared("layernorm", f"layernorm_sum_partials_{DTYPE_SUFFIX[x.dtype]}", dev, "PPPPqq")
            self.kernel = cuda.Site(fn, x.device, (groups, 1), (block, 1, 1))
            self.total = cuda.Site(red, x.device, ((n + 255) // 256, 1), (256, 1, 1))

    def buffers(self, x: torch.Tensor, w: torch.Tensor) -> tuple | None:
        """What a call writes: ``(dx, partials, dweight+dbias, dweight, dbias)`` (``None`` where the
        call takes the general launcher). Allocated by the caller ahead of time if it likes."""
        return None if self.kernel is None else checks.layernorm_bwd_buffers(x, w, self.groups)

    def __call__(self, dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stats: torch.Tensor,
                 buffers: tuple | None = None):
        if self.kernel is None or (dy.data_ptr() | x.data_ptr() | w.data_ptr()) & 15:
            return None
        m, n, g = self.m, self.n, self.groups
        dx, part, dwdb, dw, db = buffers or self.buffers(x, w)
        if dx.data_ptr() & 15:
            return None
        ps, pp, pd = stats.data_ptr(), part.data_ptr(), dwdb.data_ptr()
        self.kernel(dy.data_ptr(), x.data_ptr(), w.data_ptr(), ps, ps + 4 * m, dx.data_ptr(), pp, pp + 4 * g * n,
                    m, n, (m + g - 1) // g)
        self.total(pp, pp + 4 * g * n, pd, pd + dwdb.element_size() * n, g, n)
        return dx, dw, db

    def native(self) -> list[tuple[cuda.Site, tuple]] | None:
        """The launches of :meth:`__call__` with their arguments as templates (see
        :meth:`FwdPlan.native`), ``None`` where it takes the general launcher (v3)."""
        if self.kernel is None:
            return None
        m, n, g = self.m, self.n, self.groups
        return [(self.kernel, ("dy", "x", "w", "stats", ("stats", 4 * m), "dx", "part", ("part", 4 * g * n),
                               m, n, (m + g - 1) // g)),
                (self.total, ("part", ("part", 4 * g * n), "dwdb", ("dwdb", self.esize * n), g, n))]


ROWSUM_BLOCK = 512  # threads of the v3 row-sum kernel (a block per row, a loop over the row)
V3_BLOCK = 128  # threads of the v3 tile kernel under "auto" (a column tile of 128 vectors)


def bwd_plan(n: int, esize: int, block: int | str, version: str, aligned: bool) -> tuple[str, int, int]:
    """``(version, threads per block, items)`` of the backward.

    ``auto``: v2 with one 16-byte vector a thread when the row fits in 1024 of them (bf16: n <=
    8192; v2 with two or more vectors a thread spills under ``__launch_bounds__(1024)``), else v3.
    v2 threads under ``auto`` block: one vector each. v3: ``items`` 1 for 16-byte vectors, 0 for
    scalars; ``auto`` block 128.
    """
    vec = 16 // esize
    if version == "auto":
        fits = aligned and n % vec == 0 and n // vec <= 1024
        version = "v2" if fits else "v3"
    if version == "v3":
        b = V3_BLOCK if block == "auto" else int(block)
        return "v3", b, 1 if (aligned and n % vec == 0) else 0
    return row_plan(n, esize, block, version, aligned, vecs_per_thread=1)
