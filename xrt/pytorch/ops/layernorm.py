"""``xrt.pytorch.ops.fused_layernorm``: LayerNorm forward and backward in one kernel each.

Two custom ops: ``xrt::layernorm`` -> ``(y, mean, rstd)`` and ``xrt::layernorm_bwd`` ->
``(dx, dweight, dbias)``; the first's autograd calls the second with the same provider, so
training runs xrt's kernels both ways. Kernels see ``x`` as ``[M, N]``, ``N`` the number of
elements of ``normalized_shape``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _checks as C
from xrt.pytorch.ops import _providers as P
from xrt.pytorch.ops import _tuned as T

T.register_kernels("layernorm")
T.register_kernels("layernorm_bwd", module="layernorm")


@torch.library.custom_op("xrt::layernorm", mutates_args=())
def _layernorm_op(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor,
                  bias: torch.Tensor, eps: float, provider: str
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = math.prod(normalized_shape)
    y, mean, rstd = P.get("layernorm", provider).fn(x.reshape(-1, n), weight.reshape(n), bias.reshape(n), eps)
    return y.view(x.shape), mean, rstd


@_layernorm_op.register_fake
def _(x, normalized_shape, weight, bias, eps, provider):
    m = x.numel() // math.prod(normalized_shape)
    stat = x.new_empty((m,), dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), stat, torch.empty_like(stat)


@torch.library.custom_op("xrt::layernorm_bwd", mutates_args=())
def _layernorm_bwd_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                      rstd: torch.Tensor, provider: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = weight.numel()
    dx, dw, db = P.get("layernorm_bwd", provider).fn(dy.reshape(-1, n), x.reshape(-1, n), weight.reshape(n),
                                                     mean, rstd)
    return dx.view(x.shape), dw.view(weight.shape), db.view(weight.shape)


@_layernorm_bwd_op.register_fake
def _(dy, x, weight, mean, rstd, provider):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format))


def _setup_context(ctx, inputs, output) -> None:
    x, _, weight, _, _, provider = inputs
    _, mean, rstd = output
    ctx.provider = provider
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(x, weight, mean, rstd)


def _backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = _layernorm_bwd_op(dy.contiguous(), x, weight, mean, rstd, ctx.provider)
    return dx, None, dw, db, None, None


_layernorm_op.register_autograd(_backward, setup_context=_setup_context)


class _EagerLayerNorm(torch.autograd.Function):
    """The custom op's forward and backward for eager training, without its dispatch: the same
    provider functions, the same saved tensors, the backward's own kernel of the same provider.
    (Under torch.compile, modes or functorch transforms the custom op runs instead.)"""

    @staticmethod
    def forward(ctx, x, weight, bias, n, eps, provider):
        y, mean, rstd = P.get("layernorm", provider).fn(x.reshape(-1, n), weight.reshape(n), bias.reshape(n), eps)
        ctx.provider = provider
        ctx.save_for_backward(x, weight, mean, rstd)
        return y.view(x.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        n = weight.numel()
        dx, dw, db = P.get("layernorm_bwd", ctx.provider).fn(dy.contiguous().reshape(-1, n), x.reshape(-1, n),
                                                            weight.reshape(n), mean, rstd)
        return dx.view(x.shape), dw.view(weight.shape), db.view(weight.shape), None, None, None


def fused_layernorm(input: torch.Tensor, normalized_shape: int | Sequence[int],
                    weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                    eps: float = 1e-5, *, provider: str | None = None) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` with xrt's fused kernels (fp32, fp16, bf16).

    Args:
        input: ``[..., *normalized_shape]``, floating.
        normalized_shape: the trailing dims normalised over (an int or a sequence).
        weight, bias: ``normalized_shape``-shaped, or ``None`` (ones / zeros). They are cast to
            ``input``'s dtype (their gradients flow back through the cast).
        eps: added to the variance.
        provider: ``"torch"``, ``"triton"``, ``"cuda"``, ``"xpu"`` or ``"auto"``; overrides the policy.

    Returns:
        A contiguous tensor of ``input``'s shape and dtype. Differentiable in ``input``,
        ``weight`` and ``bias``; the backward is xrt's own kernel of the same provider.

    >>> fused_layernorm(torch.tensor([[1.0, 3.0]]), 2)
    tensor([[-1.0000,  1.0000]])
    """
    x = cast_for_hint(C.floating("input", "fused_layernorm", input))
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(d) for d in normalized_shape)
    if not ns or tuple(x.shape[x.dim() - len(ns):]) != ns or x.dim() < len(ns):
        raise ValueError(f"fused_layernorm: input.shape={tuple(x.shape)} must end with "
                         f"normalized_shape={ns}")
    if weight is None:
        weight = torch.ones(ns, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = torch.zeros(ns, dtype=x.dtype, device=x.device)
    for name, t in (("weight", weight), ("bias", bias)):
        C.floating(name, "fused_layernorm", t)
        if tuple(t.shape) != ns:
            raise ValueError(f"fused_layernorm: {name}.shape={tuple(t.shape)} must equal normalized_shape={ns}")
        if t.device != x.device:
            raise ValueError(f"fused_layernorm: {name} is on {t.device} but input is on {x.device}")
    chosen = P.choose("layernorm", x, provider)
    weight, bias = weight.to(x.dtype), bias.to(x.dtype)
    with P.op_range("layernorm", chosen.name):
        route = P.route(x, weight, bias)
        if route == P.DIRECT_GRAD:
            return _EagerLayerNorm.apply(x, weight, bias, math.prod(ns), float(eps), chosen.name)
        if route == P.DIRECT:  # what the custom op would run, without its dispatch
            n = math.prod(ns)
            y, _, _ = chosen.fn(x.reshape(-1, n), weight.reshape(n), bias.reshape(n), float(eps))
            return y.view(x.shape)
        y, _, _ = _layernorm_op(x, ns, weight, bias, float(eps), chosen.name)
    return y
