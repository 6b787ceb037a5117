"""The benchmark specs of the fused transformer ops: ``add_layernorm``, ``linear_gelu`` and their
backwards (:mod:`xrt.bench.specs` imports this module at its end, so ``specs.SPECS`` holds them).

add_layernorm's shape is (M, N); linear_gelu's (M, N, K): x [M, K], weight [N, K]. Provider
"torch" is the unfused pair each replaces, the baseline to beat.
"""

from __future__ import annotations

from typing import Any

from xrt.bench.specs import Shape, _kernel_spec, _randn, numel, register


def _add_ln_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    n = shape[-1]
    return (_randn(shape, dtype, device), _randn(shape, dtype, device), _randn((n,), dtype, device),
            _randn((n,), dtype, device), 1e-5)


def _add_ln_bwd_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    import torch

    h = _randn(shape, dtype, device)
    hf = h.float()
    mean = hf.mean(-1)
    rstd = torch.rsqrt(hf.var(-1, unbiased=False) + 1e-5)
    return (_randn(shape, dtype, device), _randn(shape, dtype, device), h, _randn((shape[-1],), dtype, device),
            mean, rstd)


def _add_ln_public(args: tuple, provider: str):
    import xrt.pytorch as xp

    x, r, w, b, eps = args
    return xp.ops.add_layernorm(x, r, x.shape[-1], w, b, eps, provider=provider)


def _add_ln_bwd_public(args: tuple, provider: str):
    from xrt.pytorch.ops.add_layernorm import add_layernorm_bwd_op

    return add_layernorm_bwd_op(*args, provider)


def _lg_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    m, n, k = shape
    # weight scaled by 1/sqrt(K): pre-activations of order one, where GELU is not linear
    return (_randn((m, k), dtype, device), _randn((n, k), dtype, device) * k ** -0.5, _randn((n,), dtype, device),
            "tanh", False)


def _lg_bwd_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    m, n, k = shape
    return (_randn((m, n), dtype, device), _randn((m, k), dtype, device), _randn((n, k), dtype, device),
            _randn((m, n), dtype, device), "tanh")


def _lg_public(args: tuple, provider: str):
    import xrt.pytorch as xp

    x, w, b, approximate, _ = args
    return xp.ops.linear_gelu(x, w, b, approximate, provider=provider)


def _lg_bwd_public(args: tuple, provider: str):
    from xrt.pytorch.ops.linear_gelu import linear_gelu_bwd_op

    return linear_gelu_bwd_op(*args, provider)


def _lg_bytes(shape: Shape, esize: int) -> int:
    m, n, k = shape
    return (m * k + n * k + m * n) * esize  # read x and weight, write y (the bias is negligible)


def _lg_bwd_bytes(shape: Shape, esize: int) -> int:
    m, n, k = shape
    # dz = dy * gelu'(z): read dy and z, write dz; dx = dz @ W and dW = dz.T @ x: read dz twice, W, x,
    # write dx and dW; dbias: read dz
    return (6 * m * n + 2 * m * k + 2 * n * k) * esize


register(_kernel_spec(
    "linear_gelu", make_inputs=_lg_inputs, bytes_moved=_lg_bytes,
    flops=lambda shape: 2 * shape[0] * shape[1] * shape[2], public=_lg_public))
register(_kernel_spec(
    "linear_gelu_bwd", make_inputs=_lg_bwd_inputs, bytes_moved=_lg_bwd_bytes,
    flops=lambda shape: 4 * shape[0] * shape[1] * shape[2], public=_lg_bwd_public))

register(_kernel_spec(
    "add_layernorm", make_inputs=_add_ln_inputs,
    bytes_moved=lambda shape, esize: 4 * numel(shape) * esize,  # read x and residual, write h and y
    flops=lambda shape: 9 * numel(shape), public=_add_ln_public))
register(_kernel_spec(
    "add_layernorm_bwd", make_inputs=_add_ln_bwd_inputs,
    bytes_moved=lambda shape, esize: 4 * numel(shape) * esize,  # read dy, dh and h, write dx
    flops=lambda shape: 13 * numel(shape), public=_add_ln_bwd_public))
