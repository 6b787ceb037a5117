"""Launcher for fp32 ``matmul`` in CUDA C (``matmul.cu``): checks, the per-config compile, grid."""

from __future__ import annotations

from typing import Any

import torch

from xrt.kernels import checks, cuda

V4_THREADS = 128  # matmul.cu's XRT_V4_THREADS: four warps, 2 x 2 over the block tile
TX_ORDER = (4, 8, 2, 16, 1, 32)  # v4: threads of a warp along N, first that fits


def plan(cfg: dict[str, Any]) -> tuple[str, int, int, int, tuple[tuple[str, int], ...]]:
    """``(entry, threads per block, BM, BN, defines)`` of a ``matmul.cuda`` config; a tile
    combination the version cannot take is a ``ValueError`` naming the rule it breaks."""
    version = cfg["version"]
    bm, bn, bk, tm, tn = (int(cfg[k]) for k in ("BM", "BN", "BK", "TM", "TN"))
    entry = f"matmul_{version}_f32"
    if version == "v1":
        return entry, 256, 16, 16, (("XRT_ONLY", 1),)
    defines = [("XRT_BM", bm), ("XRT_BN", bn), ("XRT_BK", bk), ("XRT_TM", tm), ("XRT_TN", tn)]
    if version in ("v2", "v3"):
        threads = (bm // tm) * (bn // tn)
        if bm % tm or bn % tn or threads > 1024:
            raise ValueError(f"matmul.cuda {version}: BM={bm}, BN={bn}, TM={tm}, TN={tn} must give "
                             f"(BM/TM)*(BN/TN) <= 1024 threads with BM % TM == BN % TN == 0")
        return entry, threads, bm, bn, (*defines, ("XRT_ONLY", int(version[1])))
    per_thread = (bm // 2) * (bn // 2) // 32  # outputs of a thread in a (BM/2) x (BN/2) warp tile
    for tx in TX_ORDER:
        ty = 32 // tx
        if (bm // 2) % (ty * tm) == 0 and (bn // 2) % (tx * tn) == 0:
            if per_thread > 256:
                break
            return entry, V4_THREADS, bm, bn, (*defines, ("XRT_TX", tx), ("XRT_ONLY", 4))
    raise ValueError(f"matmul.cuda v4: no warp layout fits BM={bm}, BN={bn}, TM={tm}, TN={tn}: a warp's 32 "
                     f"threads must tile the (BM/2) x (BN/2) warp tile in (32/TX)*TM x TX*TN sub-tiles, "
                     f"with at most 256 outputs a thread")


def check_inputs(op: str, a: torch.Tensor, b: torch.Tensor, rank: int) -> None:
    """:func:`xrt.kernels.checks.gemm`, plus what the CUDA C kernels need: fp32 CUDA tensors whose
    dims fit the kernels' int32 indices."""
    for name, t in (("a", a), ("b", b)):
        if t.device.type != "cuda":
            raise ValueError(f"CUDA C {op} needs CUDA tensors; {name} is on {t.device}")
        if t.dtype != torch.float32:
            raise ValueError(f"CUDA C {op} is fp32 only (SIMT SGEMM); got {name}.dtype={t.dtype}")
    checks.gemm(op, a, b, rank)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if max(m * k, k * n, m * n) >= 2**31:
        raise ValueError(f"CUDA C {op} indexes a matrix with int32: a.shape={tuple(a.shape)}, "
                         f"b.shape={tuple(b.shape)} is too large")


def _run(a: torch.Tensor, b: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
    """C = A @ B for contiguous [B, M, K] x [B, K, N]: the batch is grid axis z."""
    entry, threads, bm, bn, defines = plan(cfg)
    a, b = a.contiguous(), b.contiguous()
    batch, m, k = a.shape
    n = b.shape[2]
    c, done = checks.gemm_output(a, b)
    if done:
        return c
    fn = cuda.prepared("matmul", entry, a.device.index or 0, "PPPiii", defines)
    grid = (-(-n // bn), -(-m // bm), batch)
    cuda.launch(fn, a.device, grid, (threads, 1, 1), a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k)
    return c


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``a @ b`` for fp32 ``a`` [M, K] and ``b`` [K, N] with ``matmul_<version>_f32`` -> [M, N]
    contiguous; ``config`` from the ``matmul.cuda`` space. Inputs that are not row-major
    contiguous are copied first (the kernels read row-major operands)."""
    check_inputs("matmul", a, b, 2)
    cfg = checks.tuning("matmul.cuda", config)
    return _run(a.unsqueeze(0), b.unsqueeze(0), cfg)[0]


def bmm(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``torch.bmm(a, b)`` for fp32 ``a`` [B, M, K] and ``b`` [B, K, N] -> [B, M, N] contiguous;
    ``config`` from the ``bmm.cuda`` space (the same kernels, the batch in the grid)."""
    check_inputs("bmm", a, b, 3)
    cfg = checks.tuning("bmm.cuda", config)
    return _run(a, b, cfg)
