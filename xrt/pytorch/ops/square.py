"""``xrt.pytorch.ops.square``: y = x * x, the op every layer of xrt is first proven on.

The ladder: kernels (``xrt.kernels.{reference,triton,cuda}.square``) -> providers registered
here -> the ``xrt::square`` custom op (fake implementation for torch.compile, autograd formula)
-> :func:`square`, which applies the precision hint and the policy.
"""

from __future__ import annotations

import torch

from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import dispatch, kernel_providers

kernel_providers.register("square", shape=lambda x: (x.numel(),))


@torch.library.custom_op("xrt::square", mutates_args=())
def _square_op(x: torch.Tensor, provider: str) -> torch.Tensor:
    return dispatch.get("square", provider).fn(x)


@_square_op.register_fake
def _(x: torch.Tensor, provider: str) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    x, _ = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad: torch.Tensor):
    (x,) = ctx.saved_tensors
    return grad * 2 * x, None


_square_op.register_autograd(_backward, setup_context=_setup_context)
_eager = dispatch.eager_autograd("square", _setup_context, _backward)  # the same, for eager training


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
    chosen = dispatch.choose("square", x, provider)
    route = dispatch.route(x)
    if route == dispatch.DIRECT and not dispatch.profiling():
        return chosen.fn(x)  # what the custom op would run, without its dispatch
    with dispatch.op_range("square", chosen.name):
        if route == dispatch.DIRECT:
            return chosen.fn(x)
        if route == dispatch.DIRECT_GRAD:
            return _eager.apply(x, chosen.name)
        return _square_op(x, chosen.name)
