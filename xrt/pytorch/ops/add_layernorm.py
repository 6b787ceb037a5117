"""``xrt.pytorch.ops.add_layernorm``: the pre-norm residual step ``h = x + residual``, ``y = layer_norm(h)``.

Two custom ops: ``xrt::add_layernorm`` -> ``(y, h, mean, rstd)`` and ``xrt::add_layernorm_bwd`` ->
``(dx, dweight, dbias)``; the first's autograd calls the second with the same provider. The
backward saves only ``h`` (an output the caller keeps anyway), weight and the fp32 statistics; it
adds h's own gradient (the residual stream's) into dx, which is the gradient of both x and
residual. Kernels see the rows as ``[M, N]``, ``N`` the number of elements of ``normalized_shape``.

Eager calls of the Triton provider on plain, contiguous tensors of one dtype skip all of that: a
plan per input signature (``xrt.kernels.triton.add_layernorm.Plan``, kept in the policy state's
memo as layernorm's) launches the kernels through their cached handles, and the autograd function
calls the plan's backward. The op's own Python then costs about what a kernel launch does, where the
general path cost several times the device time of the kernels at a transformer's shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from xrt.pytorch import policy
from xrt.pytorch.autocast import cast_for_hint, get_precision_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

kernel_providers.register("add_layernorm")
kernel_providers.register("add_layernorm_bwd")


def _fwd(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
         provider: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    n = weight.numel()
    y, h, mean, rstd = dispatch.get("add_layernorm", provider).fn(x.reshape(-1, n), residual.reshape(-1, n),
                                                                  weight.reshape(n), bias.reshape(n), eps)
    return y.view(x.shape), h.view(x.shape), mean, rstd


def _bwd(dy: torch.Tensor | None, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor,
         mean: torch.Tensor, rstd: torch.Tensor, provider: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = weight.numel()
    if dy is None:  # y unused downstream: its gradient is zero
        dy = torch.zeros_like(h)
    dx, dw, db = dispatch.get("add_layernorm_bwd", provider).fn(
        dy.reshape(-1, n), None if dh is None else dh.reshape(-1, n), h.reshape(-1, n), weight.reshape(n), mean, rstd)
    return dx.view(h.shape), dw.view(weight.shape), db.view(weight.shape)


@torch.library.custom_op("xrt::add_layernorm", mutates_args=())
def add_layernorm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
                     provider: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _fwd(x, residual, weight, bias, eps, provider)


@add_layernorm_op.register_fake
def _fwd_fake(x, residual, weight, bias, eps, provider):
    stat = x.new_empty((x.numel() // max(weight.numel(), 1),), dtype=torch.float32)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    return out, torch.empty_like(out), stat, torch.empty_like(stat)


@torch.library.custom_op("xrt::add_layernorm_bwd", mutates_args=())
def add_layernorm_bwd_op(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor,
                         mean: torch.Tensor, rstd: torch.Tensor, provider: str
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bwd(dy, dh, h, weight, mean, rstd, provider)


@add_layernorm_bwd_op.register_fake
def _bwd_fake(dy, dh, h, weight, mean, rstd, provider):
    return (torch.empty_like(h, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format))


def _setup_context(ctx, inputs, output) -> None:
    *_, weight, _, _, provider = inputs
    _, h, mean, rstd = output
    ctx.provider = provider
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(h, weight, mean, rstd)


def _backward_with(bwd: Any):
    """The forward op's backward formula: the backward op ``bwd`` of the same provider."""

    def backward(ctx, dy, dh, _dmean, _drstd):
        h, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = dispatch.in_transforms(bwd)(dy.contiguous(), dh, h, weight, mean, rstd, ctx.provider)
        return dx, dx, dw, db, None, None

    return backward


add_layernorm_op.register_autograd(_backward_with(add_layernorm_bwd_op), setup_context=_setup_context)
# For torch.compile, the Triton provider's twins (dispatch.compiled_twin): triton_ops Inductor traces into.
_bwd_twin = dispatch.compiled_twin("add_layernorm_bwd", "triton", _bwd, fake=_bwd_fake)
dispatch.compiled_twin("add_layernorm", "triton", _fwd, _setup_context, _backward_with(_bwd_twin), _fwd_fake)


class _EagerAddLayerNorm(torch.autograd.Function):
    """The custom op's forward and backward for eager training, without its dispatch. Gradients are
    not materialized: an unused h costs no read of a zero tensor in the backward."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, eps, provider):
        y, h, mean, rstd = _fwd(x, residual, weight, bias, eps, provider)
        ctx.provider = provider
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(mean, rstd)
        ctx.save_for_backward(h, weight, mean, rstd)
        return y, h, mean, rstd

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy, dh, _dmean, _drstd):
        h, weight, mean, rstd = ctx.saved_tensors
        if dy is None and dh is None:
            return None, None, None, None, None, None
        dx, dw, db = _bwd(None if dy is None else dy.contiguous(), dh, h, weight, mean, rstd, ctx.provider)
        return dx, dx, dw, db, None, None


_FAST = {torch.float16, torch.bfloat16, torch.float32}
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plan(x: torch.Tensor, residual: torch.Tensor, ns: Any, w: torch.Tensor, b: torch.Tensor,
          provider: str | None) -> Any:
    """The Triton kernels' :class:`Plan` for this signature, or ``False`` where the general path
    must run (another provider, a cast, a stride or shape it checks and reports)."""
    if type(x) not in _PLAIN or x.dtype not in _FAST or not x.is_contiguous() or x.numel() == 0:
        return False
    dims = (ns,) if isinstance(ns, int) else tuple(ns) if isinstance(ns, tuple) else None
    if not dims or x.dim() < len(dims) or tuple(x.shape[x.dim() - len(dims):]) != dims or 0 in dims:
        return False
    if (type(residual) not in _PLAIN or residual.shape != x.shape or residual.dtype != x.dtype
            or residual.device != x.device or not residual.is_contiguous()):
        return False
    for t in (w, b):
        if (type(t) not in _PLAIN or tuple(t.shape) != dims or t.dtype != x.dtype or t.device != x.device
                or not t.is_contiguous()):
            return False
    try:
        chosen = dispatch.choose("add_layernorm", x, provider)
    except (ValueError, RuntimeError):
        return False
    from xrt.kernels.triton import add_layernorm as kernels

    n = math.prod(dims)
    if chosen.name != "triton" or n > kernels.MAX_N:
        return False
    m = x.numel() // n
    cfg = kernel_providers.config("add_layernorm", "add_layernorm.triton", x, (m, n))
    bcfg = kernel_providers.config("add_layernorm_bwd", "add_layernorm_bwd.triton", x, (m, n))
    return kernels.Plan(m, n, cfg, bcfg, x)


class _LeanAddLayerNorm(torch.autograd.Function):
    """Eager training through a :class:`Plan`: saves h, weight, mean and rstd, as the custom op."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, plan, eps):
        y, h, mean, rstd = plan.forward(x, residual, weight, bias, eps)
        ctx.plan = plan
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(h, weight, mean, rstd)
        return y, h

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy, dh):
        if dy is None and dh is None:
            return None, None, None, None, None, None
        h, weight, mean, rstd = ctx.saved_tensors
        dy = torch.zeros_like(h) if dy is None else dy.contiguous()
        dx, dw, db = ctx.plan.backward(dy, None if dh is None else dh.contiguous(), h, weight, mean, rstd)
        return dx, dx, dw, db, None, None


def _fast(x: Any, residual: Any, ns: Any, w: Any, b: Any, eps: float,
          provider: str | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The eager call through a cached plan, or ``None`` for the general path."""
    if w is None or b is None or get_precision_hint() is not None:
        return None
    route = dispatch.route(x, residual, w, b)  # first: nothing below may be traced
    if route == dispatch.OP or dispatch.profiling():
        return None
    try:
        key = ("add_layernorm", x.shape, x.stride(), x.dtype, x.device, residual.shape, residual.stride(),
               residual.dtype, residual.device, ns, w.shape, w.stride(), w.dtype, w.device, b.shape, b.stride(),
               b.dtype, b.device, provider)
        state = policy.tuned_state()
        plan = state.memo.get(key)
    except (AttributeError, TypeError):  # not tensors, an unhashable normalized_shape
        return None
    if plan is None:
        plan = state.keep(key, _plan(x, residual, ns, w, b, provider))
    if plan is False:
        return None
    if route == dispatch.DIRECT:
        return plan.forward(x, residual, w, b, float(eps))[:2]
    return _LeanAddLayerNorm.apply(x, residual, w, b, plan, float(eps))


def add_layernorm(x: torch.Tensor, residual: torch.Tensor, normalized_shape: int | Sequence[int],
                  weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5, *,
                  provider: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(layer_norm(x + residual), x + residual)`` in one kernel: a pre-norm block's residual add
    and the next LayerNorm.

    Args:
        x, residual: floating tensors of one shape ``[..., *normalized_shape]``, dtype and device.
        normalized_shape: the trailing dims normalised over (an int or a sequence).
        weight, bias: ``normalized_shape``-shaped, or ``None`` (ones / zeros); cast to x's dtype.
        eps: added to the variance.
        provider: ``"torch"`` (the unfused pair), ``"triton"``, ``"xpu"`` or ``"auto"``; overrides
            the policy (``add_layernorm=``).

    Returns:
        ``(y, h)``: contiguous, x's shape and dtype; ``h`` is the sum the residual stream carries
        on. Differentiable in x, residual, weight and bias, through both outputs.

    >>> y, h = add_layernorm(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 1.0]]), 2)
    >>> h
    tensor([[1., 3.]])
    """
    got = _fast(x, residual, normalized_shape, weight, bias, eps, provider)
    if got is not None:
        return got
    x = cast_for_hint(_checks.floating("x", "add_layernorm", x))
    residual = cast_for_hint(_checks.floating("residual", "add_layernorm", residual))
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(d) for d in normalized_shape)
    if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(f"add_layernorm: residual ({tuple(residual.shape)}, {residual.dtype}, {residual.device}) "
                         f"must match x ({tuple(x.shape)}, {x.dtype}, {x.device})")
    if not ns or x.dim() < len(ns) or tuple(x.shape[x.dim() - len(ns):]) != ns or not math.prod(ns):
        raise ValueError(f"add_layernorm: x.shape={tuple(x.shape)} must end with normalized_shape={ns} "
                         "(of at least one element)")
    if weight is None:
        weight = torch.ones(ns, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = torch.zeros(ns, dtype=x.dtype, device=x.device)
    for name, t in (("weight", weight), ("bias", bias)):
        _checks.floating(name, "add_layernorm", t)
        if tuple(t.shape) != ns:
            raise ValueError(f"add_layernorm: {name}.shape={tuple(t.shape)} must equal normalized_shape={ns}")
        if t.device != x.device:
            raise ValueError(f"add_layernorm: {name} is on {t.device} but x is on {x.device}")
    chosen = dispatch.choose("add_layernorm", x, provider)
    weight, bias = _checks.of_dtype(weight, x.dtype), _checks.of_dtype(bias, x.dtype)
    eps = float(eps)
    with dispatch.op_range("add_layernorm", chosen.name):
        route = dispatch.route(x, residual, weight, bias)
        if route == dispatch.DIRECT:
            y, h, _, _ = _fwd(x, residual, weight, bias, eps, chosen.name)
        elif route == dispatch.DIRECT_GRAD:
            y, h, _, _ = _EagerAddLayerNorm.apply(x, residual, weight, bias, eps, chosen.name)
        else:
            op = dispatch.compiled("add_layernorm", chosen.name, add_layernorm_op, x)
            y, h, _, _ = op(x, residual, weight, bias, eps, chosen.name)
    return y, h
