"""``xrt.pytorch.ops.linear_cross_entropy``: the mean ``cross_entropy(h @ weight.T, target)`` with the
gradients computed in the forward, chunk by chunk, so that the [tokens, vocab] logits never exist.

The custom op ``xrt::linear_cross_entropy`` returns ``(loss, grad_h, grad_w)``; its autograd saves the
two gradients and the backward only scales them by the loss's gradient (after Liger-Kernel's
FusedLinearCrossEntropy). Provider ``torch`` materializes the logits (the reference); ``triton`` is
the chunked path (cuBLAS GEMMs, the Triton row kernel). ``auto`` takes Triton wherever it runs.
"""

from __future__ import annotations

import torch

from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

OP = "linear_cross_entropy"
kernel_providers.register(OP, shape_args=lambda h, w, *rest: (h.shape[0], h.shape[1], w.shape[0]))
# auto: the chunked kernel wherever it runs, for its memory (no measured table decides this op)
_ORDER = {"cuda": ("triton", "torch"), "xpu": ("torch",), "cpu": ("torch",)}


@torch.library.custom_op(f"xrt::{OP}", mutates_args=())
def linear_cross_entropy_op(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ignore_index: int,
                            label_smoothing: float, grads: bool, provider: str,
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return dispatch.get(OP, provider).fn(h, weight, target, ignore_index, label_smoothing, grads)


@linear_cross_entropy_op.register_fake
def _(h, weight, target, ignore_index, label_smoothing, grads, provider):
    loss = h.new_empty((), dtype=torch.float64 if h.dtype == torch.float64 else torch.float32)
    if not grads:
        return loss, h.new_empty(0), weight.new_empty(0)
    return loss, torch.empty_like(h), torch.empty_like(weight)


def _setup_context(ctx, inputs, output) -> None:
    _, grad_h, grad_w = output
    ctx.mark_non_differentiable(grad_h, grad_w)
    ctx.save_for_backward(grad_h, grad_w)


@dispatch.once_differentiable  # the saved gradients are constants: no second derivative
def _backward(ctx, dloss, _dgrad_h, _dgrad_w):
    grad_h, grad_w = ctx.saved_tensors
    return grad_h * dloss, grad_w * dloss, None, None, None, None, None


linear_cross_entropy_op.register_autograd(_backward, setup_context=_setup_context)


class _EagerLinearCrossEntropy(torch.autograd.Function):
    """The custom op's forward and backward for eager training, without its dispatch: same provider
    function, same saved gradients."""

    @staticmethod
    def forward(ctx, h, weight, target, ignore_index, label_smoothing, provider):
        loss, grad_h, grad_w = dispatch.get(OP, provider).fn(h, weight, target, ignore_index, label_smoothing, True)
        ctx.save_for_backward(grad_h, grad_w)
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dloss):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * dloss, grad_w * dloss, None, None, None, None


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100,
                         label_smoothing: float = 0.0, provider: str | None = None) -> torch.Tensor:
    """``F.cross_entropy(F.linear(h, weight), target, ignore_index=..., label_smoothing=...)``, the mean
    over the tokens not ignored, without materializing the logits.

    Args:
        h: ``[..., d]`` floating hidden states (the tokens are all leading dims).
        weight: ``[V, d]``, an ``nn.Linear``'s weight (no bias), h's dtype.
        target: ``[...]`` int64 classes in ``[0, V)`` or ``ignore_index``, h's leading shape. A class
            outside that range is not checked (a check would cost a host sync) and gives a wrong loss.
        ignore_index: target value of tokens that count for nothing (loss and gradient 0, not in the mean).
        label_smoothing: in ``[0, 1]``, as ``F.cross_entropy``'s.
        provider: ``"torch"`` (logits materialized), ``"triton"`` (chunked) or ``"auto"``; overrides the policy.

    Returns:
        A 0-d tensor in h's dtype (float32 under autocast, as torch's; nan when every token is ignored,
        as torch's; summed in float32 either way), differentiable in ``h``
        and ``weight``. With grad enabled the forward computes both gradients (the backward only
        scales them), so the backward is once differentiable: no gradient of the gradient.

    Under ``torch.autocast`` h and weight are cast to the autocast dtype first, as ``F.linear`` is.

    >>> h, w = torch.randn(6, 4), torch.randn(10, 4)
    >>> float(linear_cross_entropy(h, w, torch.tensor([1, 2, 3, -100, 5, 9]))) > 0
    True
    """
    h = cast_for_hint(_checks.floating("h", OP, h))
    weight = cast_for_hint(_checks.floating("weight", OP, weight))
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{OP} expects a torch.Tensor for target, got {type(target).__name__}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"{OP}: label_smoothing={label_smoothing} must be in [0, 1]")
    out = h.dtype
    if torch.is_autocast_enabled(h.device.type):  # F.linear in the autocast dtype, cross_entropy in float32
        dt, out = torch.get_autocast_dtype(h.device.type), torch.float32
        h, weight = h.to(dt), weight.to(dt)
    if h.dim() < 1 or tuple(target.shape) != tuple(h.shape[:-1]):
        raise ValueError(f"{OP}: target.shape={tuple(target.shape)} must be h's leading shape "
                         f"{tuple(h.shape[:-1])} (h.shape={tuple(h.shape)})")
    h2, t1 = h.reshape(-1, h.shape[-1]), target.reshape(-1)
    chosen = dispatch.choose(OP, h2, provider, order=_ORDER)
    ii, ls = int(ignore_index), float(label_smoothing)
    with dispatch.op_range(OP, chosen.name):
        route = dispatch.route(h2, weight)
        if route == dispatch.DIRECT_GRAD:
            loss = _EagerLinearCrossEntropy.apply(h2, weight, t1, ii, ls, chosen.name)
        elif route == dispatch.DIRECT:
            loss = chosen.fn(h2, weight, t1, ii, ls, False)[0]
        else:
            grads = torch.is_grad_enabled() and (h2.requires_grad or weight.requires_grad)
            loss = dispatch.in_transforms(linear_cross_entropy_op)(h2, weight, t1, ii, ls, grads, chosen.name)[0]
    return loss.to(out)
