"""``xrt.pytorch.ops.conv_bn_relu``: 3x3 convolution + BatchNorm + ReLU on NHWC, fused.

The ladder of :mod:`.square`: kernels (``xrt.kernels.{reference,triton}.conv_bn_relu``) ->
providers registered here -> two custom ops -> :func:`conv_bn_relu`.

* ``xrt::conv_bias_relu`` (inference): ``relu(conv(x, w') + b')`` with BatchNorm folded into the
  weight and bias (:func:`fold_bn`), once per weight version: the fold is cached, keyed by the five
  tensors' identity, address and version counter, so an in-place update of any of them (an
  optimizer step, ``load_state_dict``) refolds at the next call. Backward: the conv's two
  gradients through ``torch.nn.grad`` with the ReLU mask of the saved output.
* ``xrt::conv_bn_relu_train`` (training): the provider's conv without epilogue, then batch
  statistics and the normalisation + ReLU in torch; it returns the batch mean and (biased)
  variance, from which :func:`conv_bn_relu` updates the running statistics as ``nn.BatchNorm2d``
  does (unbiased variance, ``momentum``). Backward: BatchNorm's training formula, then the conv's.

Provider ``torch`` is the unfused reference (cuDNN conv, BatchNorm, ReLU: the baseline) and is
what ``auto`` runs until a GPU run shows the Triton kernels meet their targets (docs/kernels.md);
``triton`` (CUDA, or the CPU under ``TRITON_INTERPRET=1``) and ``xpu`` run the fused kernels.
"""

from __future__ import annotations

import math
import warnings
import weakref
from typing import Any

import torch
from torch.nn.grad import conv2d_input, conv2d_weight

from xrt.kernels import checks, stats
from xrt.kernels.reference import conv_bn_relu as ref
from xrt.pytorch.ops import _checks, dispatch, kernel_providers

OP = "conv_bn_relu"
# What ``conv_bn_relu=auto`` runs, per device type: the unfused torch path until the H100 run shows
# the fused one at or under it (then put "triton" first for "cuda").
AUTO_ORDER = {"cuda": ("triton", "torch"), "xpu": ("xpu", "torch"), "cpu": ("torch",)}
# auto in training: torch (the fused training step ran 5.3 x slower than cuDNN's on the H100: the fused
# op times only the conv in Triton, the batch statistics and the backward are torch's formulas).
AUTO_TRAINING = {"cuda": ("torch",), "xpu": ("torch",), "cpu": ("torch",)}


def _space(stride: int) -> str:
    """The tuning space of ``stride`` (``xrt/kernels/spaces.py``): a tuned config keyed by it applies to
    that stride only, one keyed by the op to both."""
    return f"{OP}_s{stride}.triton"


def _kernel_conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: int, padding: int,
                 relu: bool) -> torch.Tensor:
    """The Triton provider: the tuned config of this stride's space for (N, C, H, W, K)."""
    from xrt.kernels.triton.conv_bn_relu import conv_bias_relu

    cfg = kernel_providers.config(OP, _space(stride), x, (*x.shape, w.shape[3]))
    return conv_bias_relu(x, w, bias, stride, padding, relu, cfg)


def _train_forward(conv: Any, x: torch.Tensor, weight: torch.Tensor, bn_weight: torch.Tensor,
                   bn_bias: torch.Tensor, eps: float, stride: int, padding: int):
    """``(y, batch mean, biased batch var)``: ``conv`` (a provider's ``conv(x, w_rsck, None, stride,
    padding, relu=False)``), then the batch statistics and the normalisation + ReLU in fp32."""
    z = conv(x, weight.permute(2, 3, 1, 0).contiguous(), None, stride, padding, False).float()
    var, mean = torch.var_mean(z, dim=(0, 2, 3), unbiased=False)
    scale = bn_weight.float() * torch.rsqrt(var + eps)
    shift = bn_bias.float() - mean * scale
    y = torch.relu(z * scale[:, None, None] + shift[:, None, None]).to(x.dtype)
    return y.contiguous(memory_format=torch.channels_last), mean, var


dispatch.register(OP, "torch", dispatch.torch_missing)(ref.conv_bias_relu)
dispatch.register(OP, "triton", dispatch.triton_missing)(_kernel_conv)
dispatch.register(OP, "xpu", dispatch.xpu_missing)(_kernel_conv)  # Triton's XPU backend compiles the same kernels
for _name in ("torch", "triton", "xpu"):
    _conv = dispatch.get(OP, _name).fn
    dispatch.register(f"{OP}_train", _name, dispatch.get(OP, _name).missing)(
                      lambda *a, _conv=_conv: _train_forward(_conv, *a))


# -- xrt::conv_bias_relu (inference, BatchNorm folded) ---------------------------------------------

def _nhwc_empty(x: torch.Tensor, k: int, ho: int, wo: int) -> torch.Tensor:
    return x.new_empty((x.shape[0], ho, wo, k)).permute(0, 3, 1, 2)


def _out_hw(x: torch.Tensor, stride: int, padding: int) -> tuple[int, int]:
    return checks.conv_out(x.shape[2], x.shape[3], stride, padding)


@torch.library.custom_op("xrt::conv_bias_relu", mutates_args=())
def _infer_op(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: int, padding: int,
              relu: bool, provider: str) -> torch.Tensor:
    return dispatch.get(OP, provider).fn(x, w, bias, stride, padding, relu)


@_infer_op.register_fake
def _(x, w, bias, stride, padding, relu, provider):
    return _nhwc_empty(x, w.shape[3], *_out_hw(x, stride, padding))


def _infer_setup(ctx, inputs, output) -> None:
    x, w, bias, stride, padding, relu, _ = inputs
    ctx.stride, ctx.padding, ctx.relu, ctx.has_bias = stride, padding, relu, bias is not None
    ctx.bias_dtype = bias.dtype if bias is not None else None
    ctx.save_for_backward(x, w, output)


def _infer_backward(ctx, grad: torch.Tensor):
    x, w, y = ctx.saved_tensors
    gz = grad * (y > 0) if ctx.relu else grad
    w_kcrs = w.permute(3, 2, 0, 1)
    dx = conv2d_input(x.shape, w_kcrs, gz, ctx.stride, ctx.padding) if ctx.needs_input_grad[0] else None
    dw = (conv2d_weight(x, w_kcrs.shape, gz, ctx.stride, ctx.padding).permute(2, 3, 1, 0)
          if ctx.needs_input_grad[1] else None)
    db = gz.sum((0, 2, 3), dtype=ctx.bias_dtype) if ctx.has_bias and ctx.needs_input_grad[2] else None
    return dx, dw, db, None, None, None, None


_infer_op.register_autograd(_infer_backward, setup_context=_infer_setup)
_eager_infer = dispatch.eager_autograd(OP, _infer_setup, _infer_backward)


# -- xrt::conv_bn_relu_train (batch statistics) ------------------------------------------------------

@torch.library.custom_op("xrt::conv_bn_relu_train", mutates_args=())
def _train_op(x: torch.Tensor, weight: torch.Tensor, bn_weight: torch.Tensor, bn_bias: torch.Tensor, eps: float,
              stride: int, padding: int, provider: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return dispatch.get(f"{OP}_train", provider).fn(x, weight, bn_weight, bn_bias, eps, stride, padding)


@_train_op.register_fake
def _(x, weight, bn_weight, bn_bias, eps, stride, padding, provider):
    k = weight.shape[0]
    stat = x.new_empty((k,), dtype=torch.float32)
    return _nhwc_empty(x, k, *_out_hw(x, stride, padding)), stat, stat.clone()


def _train_setup(ctx, inputs, output) -> None:
    x, weight, bn_weight, _, eps, stride, padding, _ = inputs
    y, mean, var = output
    ctx.eps, ctx.stride, ctx.padding = eps, stride, padding
    ctx.mark_non_differentiable(mean, var)
    ctx.save_for_backward(x, weight, bn_weight, y, mean, var)


@dispatch.once_differentiable  # mean and var enter as constants: no second derivative
def _train_backward(ctx, grad: torch.Tensor, _gmean: Any = None, _gvar: Any = None):
    x, weight, gamma, y, mean, var = ctx.saved_tensors
    z = torch.nn.functional.conv2d(x, weight, None, ctx.stride, ctx.padding).float()  # recomputed
    rstd = torch.rsqrt(var + ctx.eps)
    xhat = (z - mean[:, None, None]) * rstd[:, None, None]
    gy = grad.float() * (y > 0)
    dgamma = (gy * xhat).sum((0, 2, 3))
    dbeta = gy.sum((0, 2, 3))
    dxhat = gy * gamma.float()[:, None, None]
    dz = rstd[:, None, None] * (dxhat - dxhat.mean((0, 2, 3), keepdim=True)
                                - xhat * (dxhat * xhat).mean((0, 2, 3), keepdim=True))
    dz = dz.to(x.dtype)
    dx = conv2d_input(x.shape, weight, dz, ctx.stride, ctx.padding) if ctx.needs_input_grad[0] else None
    dw = conv2d_weight(x, weight.shape, dz, ctx.stride, ctx.padding) if ctx.needs_input_grad[1] else None
    return (dx, dw, dgamma.to(gamma.dtype) if ctx.needs_input_grad[2] else None,
            dbeta.to(gamma.dtype) if ctx.needs_input_grad[3] else None, None, None, None, None)


_train_op.register_autograd(_train_backward, setup_context=_train_setup)


# -- the fold cache ----------------------------------------------------------------------------------

_FOLDS: dict[int, tuple[Any, tuple, torch.Tensor, torch.Tensor]] = {}
FOLD_CACHE_SIZE = 256


def _stamp(t: torch.Tensor) -> tuple[int, int, int]:
    return id(t), t.data_ptr(), t._version


def fold_bn(weight: torch.Tensor, bn_weight: torch.Tensor, bn_bias: torch.Tensor, running_mean: torch.Tensor,
            running_var: torch.Tensor, eps: float, dtype: torch.dtype, cache: bool = True,
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """BatchNorm folded into the conv (RSCK weight in ``dtype``, fp32 bias), cached per version of
    the five tensors when ``cache``. A tensor changed in place through ``.data`` keeps its version
    counter: call :func:`clear_fold_cache` after such a change."""
    if not cache:
        return ref.fold_bn(weight, bn_weight, bn_bias, running_mean, running_var, eps, dtype)
    try:
        key = (*(_stamp(t) for t in (weight, bn_weight, bn_bias, running_mean, running_var)), eps, dtype)
    except RuntimeError:  # inference tensors have no version counter: fold every call
        return ref.fold_bn(weight, bn_weight, bn_bias, running_mean, running_var, eps, dtype)
    hit = _FOLDS.get(id(weight))
    if hit is not None and hit[0]() is weight and hit[1] == key:
        return hit[2], hit[3]
    stats.count(f"{OP}.fold")
    with torch.no_grad():
        w, b = ref.fold_bn(weight, bn_weight, bn_bias, running_mean, running_var, eps, dtype)
    if len(_FOLDS) >= FOLD_CACHE_SIZE:
        _FOLDS.clear()
    _FOLDS[id(weight)] = (weakref.ref(weight), key, w, b)
    return w, b


def clear_fold_cache() -> None:
    """Forget every folded weight (they are refolded at their next call)."""
    _FOLDS.clear()


# -- the public op -------------------------------------------------------------------------------------

def _provider(x: torch.Tensor, explicit: str | None, training: bool = False) -> str:
    return dispatch.choose(OP, x, explicit, AUTO_TRAINING if training else AUTO_ORDER).name


def _autocast(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Under ``torch.autocast`` (AMP) x and the weight run in the autocast dtype, as ``nn.Conv2d``'s
    would (the weight is folded from its fp32 master copy; the fold cache keeps the result);
    ``(x, the weight as checked)``."""
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        dtype = torch.get_autocast_dtype(dev)
        return x.to(dtype), weight.detach().to(dtype) if weight.dtype != dtype else weight
    return x, weight


def conv_bn_relu(x: torch.Tensor, weight: torch.Tensor, bn_weight: torch.Tensor, bn_bias: torch.Tensor,
                 running_mean: torch.Tensor | None, running_var: torch.Tensor | None, eps: float = 1e-5,
                 stride: int = 1, padding: int = 1, training: bool = False, momentum: float = 0.1, *,
                 provider: str | None = None) -> torch.Tensor:
    """``relu(batch_norm(conv2d(x, weight, stride=stride, padding=padding)))`` for a 3x3 ``weight``.

    Args:
        x: ``[N, C, H, W]``, fp16, bf16 or fp32, best ``channels_last`` (NHWC); another layout is
            converted once, with a warning (and a count under ``XRT_KERNEL_STATS=1``).
        weight: ``[K, C, 3, 3]`` (``nn.Conv2d(C, K, 3, bias=False).weight``), x's dtype or fp32 under
            autocast.
        bn_weight, bn_bias, running_mean, running_var: ``[K]``, as ``nn.BatchNorm2d(K)``'s.
        eps, momentum: as ``nn.BatchNorm2d``'s (``momentum`` a float).
        stride: 1 or 2; padding: 0, 1 or 2.
        training: batch statistics, and ``running_mean`` / ``running_var`` (if given) updated in
            place as ``nn.BatchNorm2d`` does; else the running statistics, folded into the weight.
        provider: ``"torch"``, ``"triton"``, ``"xpu"`` or ``"auto"``; overrides the policy.

    Returns:
        ``[N, K, Ho, Wo]`` channels_last in x's dtype; differentiable in x, weight, bn_weight, bn_bias.

    >>> conv = torch.nn.Conv2d(4, 8, 3, padding=1, bias=False); bn = torch.nn.BatchNorm2d(8).eval()
    >>> x = torch.randn(2, 4, 5, 5).to(memory_format=torch.channels_last)
    >>> conv_bn_relu(x, conv.weight, bn.weight, bn.bias, bn.running_mean, bn.running_var).shape
    torch.Size([2, 8, 5, 5])
    """
    x = _checks.floating("x", OP, x)
    weight = _checks.floating("weight", OP, weight)
    x, checked = _autocast(x, weight)
    checks.conv3x3(OP, x, checked, stride, padding)
    checks.channel_vectors(OP, weight.shape[0], bn_weight=bn_weight, bn_bias=bn_bias, running_mean=running_mean,
                           running_var=running_var)
    if not training and (running_mean is None or running_var is None):
        raise ValueError(f"{OP}: inference (training=False) needs running_mean and running_var")
    if training and x.shape[0] * math.prod(checks.conv_out(x.shape[2], x.shape[3], stride, padding)) == 1:
        raise ValueError(f"{OP}: training needs more than one value per channel (N * Ho * Wo = 1 for "
                         f"x.shape={tuple(x.shape)}, stride={stride}), as nn.BatchNorm2d does")
    name = _provider(x, provider, training)
    if name == "torch":  # the unfused reference: torch's own ops (autograd, torch.compile, cuDNN)
        w = _checks.of_dtype(weight, x.dtype)
        return ref.conv_bn_relu(x, w, bn_weight, bn_bias, running_mean, running_var, eps, stride, padding,
                                training, momentum)
    if not x.is_contiguous(memory_format=torch.channels_last):
        warnings.warn(f"{OP}: x is not channels_last (NHWC); converted for the fused kernel on each call: "
                      "keep the model and its inputs in torch.channels_last", RuntimeWarning, stacklevel=2)
        stats.count(f"{OP}.converted_to_channels_last")
        x = x.contiguous(memory_format=torch.channels_last)
    if training:
        w = _checks.of_dtype(weight, x.dtype)
        with dispatch.op_range(OP, name):
            y, mean, var = dispatch.in_transforms(_train_op)(x, w, bn_weight, bn_bias, eps, stride, padding, name)
        if running_mean is not None and running_var is not None:
            count = y.numel() // y.shape[1]
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                unbiased = var * (count / max(count - 1, 1))
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        return y
    grads = torch.is_grad_enabled() and any(t.requires_grad for t in (weight, bn_weight, bn_bias))
    route = dispatch.route(x, weight, bn_weight, bn_bias)
    w, b = fold_bn(weight, bn_weight, bn_bias, running_mean, running_var, eps, x.dtype,
                   cache=not grads and route != dispatch.OP)
    fn = dispatch.get(OP, name).fn
    if route == dispatch.DIRECT and not dispatch.profiling():
        return fn(x, w, b, stride, padding, True)  # what the custom op would run, without its dispatch
    with dispatch.op_range(OP, name):
        if route == dispatch.DIRECT:
            return fn(x, w, b, stride, padding, True)
        if route == dispatch.DIRECT_GRAD:
            return _eager_infer.apply(x, w, b, stride, padding, True, name)
        return dispatch.in_transforms(_infer_op)(x, w, b, stride, padding, True, name)
