"""``xrt.pytorch.ops.window_sum``: the 3-wide window sum over the last dim (ladder of :mod:`.square`)."""

from __future__ import annotations

import torch

from xrt.kernels import checks
from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

kernel_providers.register("window_sum")


def _setup_context(ctx, inputs, output) -> None:
    pass


def _backward(ctx, grad: torch.Tensor):
    # dx[j] = g[j] + g[j - 1] + g[j - 2], each term where it exists.
    pad = torch.nn.functional.pad
    return pad(grad, (0, 2)) + pad(grad, (1, 1)) + pad(grad, (2, 0)), None


# the custom op xrt::window_sum, and the same for eager training
_window_sum_op, _eager = dispatch.define("window_sum", lambda x: x.new_empty((*x.shape[:-1], x.shape[-1] - 2)),
                                         _setup_context, _backward)


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
    return dispatch.call("window_sum", chosen, _window_sum_op, _eager, x)
