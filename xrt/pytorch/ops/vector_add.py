"""``xrt.pytorch.ops.vector_add``: y = a + b, elementwise (the ladder of :mod:`.square`)."""

from __future__ import annotations

import torch

from xrt.kernels import checks
from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

kernel_providers.register("vector_add", shape=lambda a: (a.numel(),))


@torch.library.custom_op("xrt::vector_add", mutates_args=())
def _vector_add_op(a: torch.Tensor, b: torch.Tensor, provider: str) -> torch.Tensor:
    return dispatch.get("vector_add", provider).fn(a, b)


@_vector_add_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, provider: str) -> torch.Tensor:
    return torch.empty_like(a, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    pass


def _backward(ctx, grad: torch.Tensor):
    return grad, grad, None


_vector_add_op.register_autograd(_backward, setup_context=_setup_context)
_eager = dispatch.eager_autograd("vector_add", _setup_context, _backward)  # the same, for eager training


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
    route = dispatch.route(a, b)
    if route == dispatch.DIRECT and not dispatch.profiling():
        return chosen.fn(a, b)  # what the custom op would run, without its dispatch
    with dispatch.op_range("vector_add", chosen.name):
        if route == dispatch.DIRECT:
            return chosen.fn(a, b)
        if route == dispatch.DIRECT_GRAD:
            return _eager.apply(a, b, chosen.name)
        return _vector_add_op(a, b, chosen.name)
