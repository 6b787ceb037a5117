"""``xrt.pytorch.ops.softmax``: softmax over the last dim (the ladder of :mod:`.square`)."""

from __future__ import annotations

import torch

from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

kernel_providers.register("softmax")


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)


def _backward(ctx, grad: torch.Tensor):
    from xrt.kernels.reference.softmax import softmax_bwd

    (y,) = ctx.saved_tensors
    return softmax_bwd(grad, y), None


# the custom op xrt::softmax, and the same for eager training
_softmax_op, _eager = dispatch.define("softmax", dispatch.contiguous_like, _setup_context, _backward,
                                     triton=True)
_floating, _choose, _call = _checks.floating, dispatch.choose, dispatch.call  # traced by name (dispatch's docstring)


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
    x = cast_for_hint(_floating("x", "softmax", x))
    if x.dim() == 0:
        raise ValueError("softmax needs at least one dimension, got a 0-d tensor")
    chosen = _choose("softmax", x, provider)
    return _call("softmax", chosen, _softmax_op, _eager, x)
