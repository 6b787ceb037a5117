"""``linear_gelu`` in Triton: ``gelu(x @ weight.T + bias)`` as one GEMM with its epilogue, and its backward.

Forward: xrt's GEMM (xrt/kernels/triton/matmul.py) with the bias add and GELU in the epilogue on the
fp32 tile, so the pre-activation never makes a round trip through memory before GELU. The weight
[N, K] is read as it is stored: the TMA kernel loads K-major tiles of it (``B_T``), the tiled kernel
reads the transposed view through its strides. Training
also stores the pre-activation ``z`` from the same epilogue (``STORE_Z``).

Backward, from the saved ``z`` rather than by recomputing it: recomputing costs a second forward
GEMM (2MNK FLOPs, as much as each of the two backward GEMMs); saving costs one ``[M, N]`` tensor,
the one the unfused ``F.gelu(F.linear(...))`` saves for GELU's backward anyway (the output y is not
saved). So ``dz = dy * gelu'(z)`` (one elementwise kernel), ``dx = dz @ weight``, ``dweight = dz.T @ x``
(xrt's GEMM, with ``xp.ops.matmul``'s default for each one's layout and shape) and ``dbias = dz.sum(0)``
(torch, accumulated in fp32).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks, spaces
from xrt.kernels.triton.launch import Launcher, cdiv
from xrt.kernels.triton.matmul import (
    ACT_GELU_ERF,
    ACT_GELU_TANH,
    Epilogue,
    _matmul_kernel,  # noqa: F401  (`xrt kernels dump linear_gelu` compiles it)
    check_pair,
    default_config,
    run,
)

ACTS = {"tanh": ACT_GELU_TANH, "none": ACT_GELU_ERF}  # F.gelu's ``approximate`` -> the epilogue's ACT


@triton.jit
def _gelu_grad_kernel(
    dy_ptr,  # [M, N] gradient of the output, contiguous
    z_ptr,  # [M, N] saved pre-activation, contiguous, dy's dtype
    dz_ptr,  # [M, N] output dy * gelu'(z), contiguous, dy's dtype
    n,  # elements
    ACT: tl.constexpr,  # ACT_GELU_TANH or ACT_GELU_ERF
    BLOCK_SIZE: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if ACT == 1:
        inner = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        t = 1.0 - 2.0 / (1.0 + tl.exp(2.0 * inner))  # tanh(inner)
        d = 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * z * z)
    else:
        d = 0.5 * (1.0 + tl.erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)
    tl.store(dz_ptr + offs, (dy * d).to(dz_ptr.dtype.element_ty), mask=mask)


_grad = Launcher(_gelu_grad_kernel)


def act_of(approximate: str) -> int:
    """The epilogue's ``ACT`` for ``F.gelu``'s ``approximate`` (``"none"`` or ``"tanh"``)."""
    if approximate not in ACTS:
        raise ValueError(f"approximate={approximate!r} must be 'none' or 'tanh'")
    return ACTS[approximate]


def check_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """``x`` [M, K], ``weight`` [N, K], ``bias`` [N] or None, one dtype and device."""
    check_pair("linear_gelu", x, weight.mT, 2)
    if bias is not None and (tuple(bias.shape) != (weight.shape[0],) or bias.dtype != x.dtype):
        raise ValueError(f"linear_gelu: bias.shape={tuple(bias.shape)} ({bias.dtype}) must be "
                         f"({weight.shape[0]},) in x's dtype {x.dtype}")


_DEFAULTS: dict[tuple[int, str], Any] = {}


def _default(m: int, approximate: str) -> Any:
    """``spaces.linear_gelu_default`` checked, memoized per (M, GELU)."""
    hit = _DEFAULTS.get((m, approximate))
    if hit is None:
        if len(_DEFAULTS) > 4096:
            _DEFAULTS.clear()
        hit = checks.tuning("linear_gelu.triton", spaces.linear_gelu_default(m, approximate))
        _DEFAULTS[m, approximate] = hit
    return hit


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, approximate: str, save: bool,
                config: dict[str, Any] | None = None):
    """``(y, z)``: ``z = x @ weight.T + bias`` (stored only when ``save``; else an empty tensor),
    ``y = gelu(z, approximate)``, both [M, N] in x's dtype; config from ``linear_gelu.triton`` (the
    default: ``spaces.linear_gelu_default``, by M and the GELU)."""
    check_linear(x, weight, bias)
    act = act_of(approximate)
    cfg = checks.tuning("linear_gelu.triton", config)
    if cfg.is_default:
        cfg = _default(checks.size_hint(x.shape[0]), approximate)
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    z = torch.empty((m, n) if save else (0,), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y, z
    if k == 0:  # no GEMM to run: z is the bias (or zeros)
        zt = (bias.float() if bias is not None else torch.zeros(n, device=x.device)).expand(m, n)
        if save:
            z.copy_(zt)
        return y.copy_(torch.nn.functional.gelu(zt, approximate=approximate)), z
    ep = Epilogue(bias.contiguous() if bias is not None else None, act, z[None] if save else None)
    run(x[None], weight.mT[None], cfg, ep, y[None])
    return y, z


def linear_gelu_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor, approximate: str,
                    config: dict[str, Any] | None = None):
    """``(dx, dweight, dbias)`` from the saved pre-activation ``z``; shapes as :func:`linear_gelu`
    (dbias always computed; the caller drops it when there is no bias); config from
    ``linear_gelu_bwd.triton`` (the gradient kernel), the GEMMs take matmul's default for their layout."""
    check_linear(x, weight, None)
    act = act_of(approximate)
    m, n = dy.shape
    if z.shape != dy.shape or dy.shape != (x.shape[0], weight.shape[0]):
        raise ValueError(f"dy.shape={tuple(dy.shape)} and z.shape={tuple(z.shape)} must be "
                         f"({x.shape[0]}, {weight.shape[0]})")
    cfg = checks.tuning("linear_gelu_bwd.triton", config)
    dy, z = dy.contiguous(), z.contiguous()
    dz = torch.empty_like(z)
    if dz.numel():
        _grad((cdiv(dz.numel(), cfg["BLOCK_SIZE"]),), dy, z, dz, dz.numel(), ACT=act, BLOCK_SIZE=cfg["BLOCK_SIZE"],
              num_warps=cfg["num_warps"])
    # The GEMMs take matmul's defaults for their layout and shape (the layout table's H100 winners):
    # dx = dz @ weight is "nn", dweight = dz.T @ x "tn".
    dx = run(dz[None], weight[None], default_config(dz, weight, None))[0]
    dw = run(dz.mT[None], x[None], default_config(dz.mT, x, None))[0]
    # torch's reduction accumulates fp16 / bf16 in fp32 and rounds once: one kernel and one
    # allocation (on autograd's thread), where sum(dtype=float32).to(dtype) made two of each
    db = dz.sum(0)
    return dx, dw, db
