"""``xrt.pytorch.ops.linear_gelu``: ``F.gelu(F.linear(x, weight, bias), approximate=...)`` as one GEMM.

Two custom ops: ``xrt::linear_gelu`` -> ``(y, z)`` (``z`` the pre-activation, stored by the same GEMM
epilogue only when a backward will need it; an empty tensor otherwise) and ``xrt::linear_gelu_bwd``
-> ``(dx, dweight, dbias)``, which the first's autograd calls with the same provider. Under
torch.compile the Triton provider's calls go to their ``triton_op`` twins (``xrt::linear_gelu_triton``,
``xrt::linear_gelu_bwd_triton``), whose kernels Inductor launches itself. Saving z
rather than recomputing it: see ``xrt/kernels/triton/linear_gelu.py``. Kernels see ``x`` as
``[M, K]`` (leading dims flattened), ``weight`` ``[N, K]``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

kernel_providers.register("linear_gelu", shape_args=lambda x, w, *rest: (x.shape[0], w.shape[0], x.shape[1]))
kernel_providers.register("linear_gelu_bwd", shape_args=lambda dy, x, w, *rest: (x.shape[0], w.shape[0], x.shape[1]))


def _fwd(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, approximate: str, save: bool,
         provider: str):
    k, n = weight.shape[1], weight.shape[0]
    m = x.numel() // k if k else math.prod(x.shape[:-1])
    y, z = dispatch.get("linear_gelu", provider).fn(x.reshape(m, k), weight, bias, approximate, save)
    shape = (*x.shape[:-1], n)
    return y.view(shape), (z.view(shape) if save else z)


def _bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor, approximate: str, provider: str):
    k, n = weight.shape[1], weight.shape[0]
    m = math.prod(x.shape[:-1])
    dx, dw, db = dispatch.get("linear_gelu_bwd", provider).fn(dy.reshape(m, n), x.reshape(m, k), weight,
                                                              z.reshape(m, n), approximate)
    return dx.view(x.shape), dw, db


def _linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, approximate: str, save: bool,
                 provider: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _fwd(x, weight, bias, approximate, save, provider)


def _linear_gelu_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor, approximate: str,
                     provider: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bwd(dy, x, weight, z, approximate, provider)


linear_gelu_op = torch.library.custom_op("xrt::linear_gelu", _linear_gelu, mutates_args=())


@linear_gelu_op.register_fake
def _(x, weight, bias, approximate, save, provider):
    y = x.new_empty((*x.shape[:-1], weight.shape[0]))
    return y, (torch.empty_like(y) if save else x.new_empty((0,)))


linear_gelu_bwd_op = torch.library.custom_op("xrt::linear_gelu_bwd", _linear_gelu_bwd, mutates_args=())


@linear_gelu_bwd_op.register_fake
def _(dy, x, weight, z, approximate, provider):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format), weight.new_empty((weight.shape[0],)))


def _setup_context(ctx, inputs, output) -> None:
    x, weight, bias, approximate, save, provider = inputs
    _, z = output
    if not save:
        raise RuntimeError("xrt::linear_gelu: a differentiable call must pass save=True (the backward needs z)")
    ctx.approximate, ctx.provider, ctx.has_bias = approximate, provider, bias is not None
    ctx.mark_non_differentiable(z)
    ctx.save_for_backward(x, weight, z)


def _backward_with(bwd: Any):
    """The forward op's backward formula: the backward op ``bwd`` of the same provider."""

    def backward(ctx, dy, _dz):
        x, weight, z = ctx.saved_tensors
        dx, dw, db = dispatch.in_transforms(bwd)(dy.contiguous(), x, weight, z, ctx.approximate, ctx.provider)
        return dx, dw, (db if ctx.has_bias else None), None, None, None

    return backward


linear_gelu_op.register_autograd(_backward_with(linear_gelu_bwd_op), setup_context=_setup_context)
# torch.compile's twins (dispatch.compiled_twin): triton_ops whose kernels Inductor launches itself, the
# backward's gradient kernel and GEMMs included, where the custom op was one opaque call each way.
_bwd_twin = dispatch.compiled_twin("linear_gelu_bwd", "triton", _linear_gelu_bwd)
dispatch.compiled_twin("linear_gelu", "triton", _linear_gelu, _setup_context, _backward_with(_bwd_twin))


class _EagerLinearGelu(torch.autograd.Function):
    """The custom op's forward and backward for eager training, without its dispatch."""

    @staticmethod
    def forward(ctx, x, weight, bias, approximate, provider):
        y, z = _fwd(x, weight, bias, approximate, True, provider)
        ctx.approximate, ctx.provider, ctx.has_bias = approximate, provider, bias is not None
        ctx.save_for_backward(x, weight, z)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, weight, z = ctx.saved_tensors
        dx, dw, db = _bwd(dy.contiguous(), x, weight, z, ctx.approximate, ctx.provider)
        return dx, dw, (db if ctx.has_bias else None), None, None


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, approximate: str = "none",
                *, provider: str | None = None) -> torch.Tensor:
    """``F.gelu(F.linear(x, weight, bias), approximate=approximate)``, bias and GELU in the GEMM epilogue.

    Args:
        x: ``[..., K]``, floating.
        weight: ``[N, K]`` (``nn.Linear``'s layout), x's dtype and device.
        bias: ``[N]`` or ``None``.
        approximate: ``"none"`` (exact, erf) or ``"tanh"``, as ``F.gelu``.
        provider: ``"torch"`` (unfused), ``"triton"``, ``"xpu"`` or ``"auto"``; overrides the
            policy (``linear_gelu=``).

    Returns:
        ``[..., N]`` in x's dtype, contiguous. Differentiable in x, weight and bias; training keeps
        the pre-activation (one ``[..., N]`` tensor) for the backward.

    >>> linear_gelu(torch.ones(1, 2), torch.ones(3, 2), approximate="tanh")
    tensor([[1.9546, 1.9546, 1.9546]])
    """
    x = cast_for_hint(_checks.floating("x", "linear_gelu", x))
    weight = cast_for_hint(_checks.floating("weight", "linear_gelu", weight))
    if bias is not None:
        bias = cast_for_hint(_checks.floating("bias", "linear_gelu", bias))
    if approximate not in ("none", "tanh"):
        raise ValueError(f"linear_gelu: approximate={approximate!r} must be 'none' or 'tanh'")
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear_gelu: x.shape={tuple(x.shape)} must end with weight.shape[1]; "
                         f"weight.shape={tuple(weight.shape)} must be [N, K]")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dtype != x.dtype or t.device != x.device):
            raise ValueError(f"linear_gelu: {name} ({t.dtype}, {t.device}) must have x's dtype and device "
                             f"({x.dtype}, {x.device})")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"linear_gelu: bias.shape={tuple(bias.shape)} must be ({weight.shape[0]},)")
    chosen = dispatch.choose("linear_gelu", x, provider)
    with dispatch.op_range("linear_gelu", chosen.name):
        route = dispatch.route(x, weight, bias)
        if route == dispatch.DIRECT:
            return _fwd(x, weight, bias, approximate, False, chosen.name)[0]
        if route == dispatch.DIRECT_GRAD:
            return _EagerLinearGelu.apply(x, weight, bias, approximate, chosen.name)
        grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
        op = dispatch.compiled("linear_gelu", chosen.name, linear_gelu_op, x)  # (the twin under torch.compile)
        return op(x, weight, bias, approximate, grad, chosen.name)[0]
