"""``xrt.pytorch.ops.softmax``: softmax over the last dim (the ladder of :mod:`.square`)."""

from __future__ import annotations

import torch

from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

kernel_providers.register("softmax")


@torch.library.custom_op("xrt::softmax", mutates_args=())
def _softmax_op(x: torch.Tensor, provider: str) -> torch.Tensor:
    return dispatch.get("softmax", provider).fn(x)


@_softmax_op.register_fake
def _(x: torch.Tensor, provider: str) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)


def _backward(ctx, grad: torch.Tensor):
    from xrt.kernels.reference.softmax import softmax_bwd

    (y,) = ctx.saved_tensors
    return softmax_bwd(grad, y), None


_softmax_op.register_autograd(_backward, setup_context=_setup_context)
_eager = dispatch.eager_autograd("softmax", _setup_context, _backward)  # the same, for eager training


def softmax(x: torch.Tensor, *, provider: str | None = None) -> torch.Tensor:
    """``softmax(x, dim=-1)``; the fused kernels read x once when the row fits in registers.

    Args:
        x: a floating tensor ``[..., n]``.
        provider: ``"torch"``, ``"triton"``, ``"cuda"``, ``"xpu"`` or ``"auto"``; overrides the policy.

    Returns:
        A contiguous tensor of ``x``'s shape and dtype whose rows sum to 1.

    >>> softmax(torch.tensor([0.0, 0.0]))
    tensor([0.5000, 0.5000])
    """
    x = cast_for_hint(_checks.floating("x", "softmax", x))
    if x.dim() == 0:
        raise ValueError("softmax needs at least one dimension, got a 0-d tensor")
    chosen = dispatch.choose("softmax", x, provider)
    route = dispatch.route(x)
    if route == dispatch.DIRECT and not dispatch.profiling():
        return chosen.fn(x)  # what the custom op would run, without its dispatch
    with dispatch.op_range("softmax", chosen.name):
        if route == dispatch.DIRECT:
            return chosen.fn(x)
        if route == dispatch.DIRECT_GRAD:
            return _eager.apply(x, chosen.name)
        return _softmax_op(x, chosen.name)
