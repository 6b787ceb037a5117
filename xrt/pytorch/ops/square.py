"""``xrt.pytorch.ops.square``: y = x * x, the op every layer of xrt is first proven on.

The ladder: kernels (``xrt.kernels.{reference,triton,cuda}.square``) -> providers registered
here -> the ``xrt::square`` custom op (fake implementation for torch.compile, autograd formula)
-> :func:`square`, which applies the precision hint and the policy.
"""

from __future__ import annotations

import torch

from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import dispatch, kernel_providers

kernel_providers.register("square")


def _setup_context(ctx, inputs, output) -> None:
    x, _ = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad: torch.Tensor):
    (x,) = ctx.saved_tensors
    return grad * 2 * x, None


# the custom op xrt::square, and the same for eager training
_square_op, _eager = dispatch.define("square", dispatch.contiguous_like, _setup_context, _backward, triton=True)
_choose, _call = dispatch.choose, dispatch.call  # traced by name (dispatch's docstring)


def square(x: torch.Tensor, *, provider: str | None = None) -> torch.Tensor:
    """Elementwise ``x * x``.

    Args:
        x: a floating tensor of any shape, on the CPU, a CUDA GPU or an XPU.
        provider: ``"torch"``, ``"triton"``, ``"cuda"``, ``"xpu"`` or ``"auto"``; overrides the policy.

    Returns:
        A contiguous tensor of ``x``'s shape; under :func:`xrt.pytorch.autocast`, in its dtype.

    >>> square(torch.tensor([1.0, -2.0, 3.0]))
    tensor([1., 4., 9.])
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"square expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"square expects a floating tensor, got dtype {x.dtype}")
    x = cast_for_hint(x)
    chosen = _choose("square", x, provider)
    return _call("square", chosen, _square_op, _eager, x)
