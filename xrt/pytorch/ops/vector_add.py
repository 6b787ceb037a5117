"""``xrt.pytorch.ops.vector_add``: y = a + b, elementwise (the ladder of :mod:`.square`)."""

from __future__ import annotations

import torch

from xrt.kernels import checks
from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

kernel_providers.register("vector_add")


def _setup_context(ctx, inputs, output) -> None:
    pass


def _backward(ctx, grad: torch.Tensor):
    return grad, grad, None


# the custom op xrt::vector_add, and the same for eager training
_vector_add_op, _eager = dispatch.define("vector_add", dispatch.contiguous_like, _setup_context, _backward,
                                         inputs=2)


def vector_add(a: torch.Tensor, b: torch.Tensor, *, provider: str | None = None) -> torch.Tensor:
    """Elementwise ``a + b`` (no broadcasting).

    Args:
        a, b: floating tensors of one shape, dtype and device.
        provider: ``"torch"``, ``"triton"``, ``"cuda"``, ``"xpu"`` or ``"auto"``; overrides the policy.

    Returns:
        A contiguous tensor of ``a``'s shape and dtype.

    >>> vector_add(torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0]))
    tensor([1.5000, 1.0000])
    """
    a, b = cast_for_hint(_checks.floating("a", "vector_add", a)), cast_for_hint(_checks.floating("b", "vector_add", b))
    checks.same("vector_add", a, b)
    chosen = dispatch.choose("vector_add", a, provider)
    return dispatch.call("vector_add", chosen, _vector_add_op, _eager, a, b)
