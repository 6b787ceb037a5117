"""``xrt.pytorch.ops.window_sum``: the 3-wide window sum over the last dim (ladder of :mod:`.square`)."""

from __future__ import annotations

import torch

from xrt.kernels import checks
from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

kernel_providers.register("window_sum")


@torch.library.custom_op("xrt::window_sum", mutates_args=())
def _window_sum_op(x: torch.Tensor, provider: str) -> torch.Tensor:
    return dispatch.get("window_sum", provider).fn(x)


@_window_sum_op.register_fake
def _(x: torch.Tensor, provider: str) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], x.shape[-1] - 2))


def _setup_context(ctx, inputs, output) -> None:
    pass


def _backward(ctx, grad: torch.Tensor):
    # dx[j] = g[j] + g[j - 1] + g[j - 2], each term where it exists.
    pad = torch.nn.functional.pad
    return pad(grad, (0, 2)) + pad(grad, (1, 1)) + pad(grad, (2, 0)), None


_window_sum_op.register_autograd(_backward, setup_context=_setup_context)
_eager = dispatch.eager_autograd("window_sum", _setup_context, _backward)  # the same, for eager training


def window_sum(x: torch.Tensor, *, provider: str | None = None) -> torch.Tensor:
    """``y[..., i] = x[..., i] + x[..., i + 1] + x[..., i + 2]`` for ``i`` in ``[0, n - 2)``.

    The TensorIR chapter's ``B[i] = A[i] + A[i+1] + A[i+2]`` on every row: a convolution with the
    weights ``[1, 1, 1]``, no padding. fp16/bf16 inputs are summed in fp32.

    Args:
        x: a floating tensor ``[..., n]`` with ``n >= 3``.
        provider: ``"torch"``, ``"triton"``, ``"cuda"``, ``"xpu"`` or ``"auto"``; overrides the policy.

    Returns:
        A contiguous tensor ``[..., n - 2]`` of ``x``'s dtype.

    >>> window_sum(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    tensor([6., 9.])
    """
    x = cast_for_hint(_checks.floating("x", "window_sum", x))
    checks.window_width(x)
    chosen = dispatch.choose("window_sum", x, provider)
    route = dispatch.route(x)
    if route == dispatch.DIRECT and not dispatch.profiling():
        return chosen.fn(x)  # what the custom op would run, without its dispatch
    with dispatch.op_range("window_sum", chosen.name):
        if route == dispatch.DIRECT:
            return chosen.fn(x)
        if route == dispatch.DIRECT_GRAD:
            return _eager.apply(x, chosen.name)
        return _window_sum_op(x, chosen.name)
