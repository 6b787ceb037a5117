"""``xrt.pytorch.ops.fused_attention``: scaled dot-product attention with xrt's Triton kernels.

Two custom ops: ``xrt::attention`` -> ``(out, lse)`` and ``xrt::attention_bwd`` -> ``(dq, dk, dv)``;
the first's autograd calls the second with the same provider. Under ``torch.compile`` the Triton
provider's calls go to their ``triton_op`` twins instead (``xrt::attention_triton``,
``xrt::attention_bwd_triton``), whose kernels Inductor launches. What the Triton kernels do not
cover (masks, dropout, other head dims or dtypes, grouped-query attention) goes to
``torch.nn.functional.scaled_dot_product_attention``, with one warning per reason; a call that
forces the Triton provider raises instead.

Which implementation runs is the ``attention`` policy choice (or ``provider=``):

* ``"triton"``: xrt's kernels (CUDA; the CPU only under ``TRITON_INTERPRET=1``, fp16);
* ``"auto"`` (and ``"default"``, the choice when no policy names attention): xrt's kernels on CUDA
  where they cover the call, else SDPA;
* ``"torch"``: SDPA with its own backend choice;
* ``"flash_v2"``, ``"mem_efficient"``, ``"math"``, ``"cudnn"``: SDPA with only that backend (the
  policy flips PyTorch's switches; a ``provider=`` of one of these runs SDPA under ``sdpa_kernel``).
"""

from __future__ import annotations

import importlib
import math
import warnings
from typing import Any

import torch
from torch.utils import flop_counter

from xrt.kernels.reference.attention import empty_out
from xrt.pytorch import auto, policy
from xrt.pytorch.autocast import cast_for_hint, get_precision_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers, native

kernel_providers.register("attention")
kernel_providers.register("attention_bwd")

_SDPA_BACKENDS = {"flash_v2": "FLASH_ATTENTION", "mem_efficient": "EFFICIENT_ATTENTION", "math": "MATH",
                  "cudnn": "CUDNN_ATTENTION"}
_WARNED: set[str] = set()  # fallback reasons already reported (one warning each)


def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float,
         provider: str) -> tuple[torch.Tensor, torch.Tensor]:
    return dispatch.get("attention", provider).fn(q, k, v, is_causal, scale)


def _bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
         is_causal: bool, scale: float, provider: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return dispatch.get("attention_bwd", provider).fn(do, q, k, v, o, lse, is_causal, scale)


@torch.library.custom_op("xrt::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float,
                  provider: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _fwd(q, k, v, is_causal, scale, provider)


@attention_op.register_fake
def _(q, k, v, is_causal, scale, provider):
    b, h, s_q, _ = q.shape
    return empty_out(q, v.shape[-1]), q.new_empty((b, h, s_q), dtype=torch.float32)


@torch.library.custom_op("xrt::attention_bwd", mutates_args=())
def attention_bwd_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                      lse: torch.Tensor, is_causal: bool, scale: float, provider: str
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bwd(do, q, k, v, o, lse, is_causal, scale, provider)


@attention_bwd_op.register_fake
def _(do, q, k, v, o, lse, is_causal, scale, provider):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, is_causal, scale, provider = inputs
    o, lse = output
    ctx.is_causal, ctx.scale, ctx.provider = is_causal, scale, provider
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse)


def _backward_with(bwd: Any):
    """The forward op's backward formula: the backward op ``bwd`` of the same provider."""

    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = dispatch.in_transforms(bwd)(do, q, k, v, o, lse, ctx.is_causal, ctx.scale, ctx.provider)
        return dq, dk, dv, None, None, None

    return backward


attention_op.register_autograd(_backward_with(attention_bwd_op), setup_context=_setup_context)
# For torch.compile, the Triton provider's twins (dispatch.compiled_twin): triton_ops Inductor traces
# into, launching the pointer kernels (xrt.kernels.triton.attention._tma_layouts) itself.
_bwd_twin = dispatch.compiled_twin("attention_bwd", "triton", _bwd)
dispatch.compiled_twin("attention", "triton", _fwd, _setup_context, _backward_with(_bwd_twin))


# torch's FlopCounterMode counts xrt's attention (and its compiled twins) as torch's SDPA (its formula:
# 4 B H S_q S_k D forward, the causal mask not halving it, as for SDPA).
@flop_counter.register_flop_formula([torch.ops.xrt.attention, torch.ops.xrt.attention_triton])
def _attention_flops(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(q_shape, k_shape, v_shape)


@flop_counter.register_flop_formula([torch.ops.xrt.attention_bwd, torch.ops.xrt.attention_bwd_triton])
def _attention_bwd_flops(do_shape, q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(do_shape, q_shape, k_shape, v_shape)


class _EagerAttention(torch.autograd.Function):
    """The custom op's forward and backward for eager training, without its dispatch (as
    ``_EagerLayerNorm``): same provider functions, same saved tensors."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale, provider):
        if provider == "triton":
            o, lse = _forward(q, k, v, is_causal, scale)
        else:
            o, lse = _fwd(q, k, v, is_causal, scale, provider)
        ctx.is_causal, ctx.scale, ctx.provider = is_causal, scale, provider
        ctx.save_for_backward(q, k, v, o, lse)
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        if ctx.provider == "triton":
            dq, dk, dv = _backward(do, q, k, v, o, lse, ctx.is_causal, ctx.scale)
        else:
            dq, dk, dv = _bwd(do, q, k, v, o, lse, ctx.is_causal, ctx.scale, ctx.provider)
        return dq, dk, dv, None, None, None


def _signature(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    """Shapes, strides, dtypes and devices (``get_device()`` is an index: cuda:0 and xpu:0 share one,
    so the key holds ``is_cuda`` too)."""
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype,
            q.is_cuda, q.get_device(), k.get_device(), v.get_device())


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """The Triton provider's ``(out, lse)`` in plain eager PyTorch, through the forward's launch plan
    kept for this signature in the policy's memo (``xrt.kernels.triton.attention.ForwardPlan``: no
    checks, config lookup or descriptors made again); the provider's own call where there is none."""
    key = ("attention-plan", *_signature(q, k, v), causal, scale)
    plan = kernel_providers.kept_plan(key)
    if plan is None:
        cfg = kernel_providers.provider_config("attention", "triton", q, k, v, causal, scale)
        o, lse, plan = importlib.import_module("xrt.kernels.triton.attention").attention_planned(
            q, k, v, causal, scale, cfg)
        kernel_providers.keep_plan(key, plan)
        return o, lse
    out = plan(q, k, v) if plan else None
    return out if out is not None else dispatch.get("attention", "triton").fn(q, k, v, causal, scale)


def _backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
              lse: torch.Tensor, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Triton provider's ``(dq, dk, dv)`` in plain eager PyTorch, through the backward's launch
    plan kept for this signature (``xrt.kernels.triton.attention.BackwardPlan``), as :func:`_forward`."""
    key = ("attention-bwd-plan", *_signature(q, k, v), do.shape, do.stride(), o.shape, o.stride(), do.dtype,
           lse.stride(), causal, scale)
    plan = kernel_providers.kept_plan(key)
    if plan is None:
        cfg = kernel_providers.provider_config("attention_bwd", "triton", do, q, k, v, o, lse, causal, scale)
        dq, dk, dv, plan = importlib.import_module("xrt.kernels.triton.attention").attention_bwd_planned(
            do, q, k, v, o, lse, causal, scale, cfg)
        kernel_providers.keep_plan(key, plan)
        return dq, dk, dv
    out = plan(do, q, k, v, o, lse) if plan else None
    return out if out is not None else _bwd(do, q, k, v, o, lse, causal, scale, "triton")


def _call_key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: Any, scale: Any,
              provider: str | None, route: int) -> tuple:
    """A call of :func:`fused_attention` (no mask, dropout or grouped query) as a key: the same key in
    the same policy state is the same choice. The route says whether autograd records the call
    (``auto``'s table has training and inference rows)."""
    return ("attention-call", provider, route, *_signature(q, k, v), is_causal, scale)


def _repeat(q: Any, k: Any, v: Any, is_causal: Any, scale: Any, provider: str | None) -> torch.Tensor | None:
    """A plain eager call whose key took the Triton kernels before in this policy state, straight to
    them (no checks, casts or choice made again); ``None`` for the general path."""
    if (torch.compiler.is_compiling() or get_precision_hint() is not None or dispatch.profiling()
            or dispatch._forward_ad._current_level >= 0):
        return None  # (traced, the op's own path; Dynamo cannot trace the profiler's switch)
    if type(q) is not torch.Tensor or q.is_nested:  # (a nested tensor has no shape to key by)
        return None
    route = dispatch.route(q, k, v)
    if route == dispatch.OP:
        return None
    try:
        if policy.tuned_state().memo.get(_call_key(q, k, v, is_causal, scale, provider, route)) is None:
            return None
    except (AttributeError, TypeError, RuntimeError):  # not tensors, an unhashable scale
        return None
    causal, s = bool(is_causal), float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if route == dispatch.DIRECT_GRAD:
        if q.is_cuda and (o := _native_attention(q, k, v, causal, s)) is not None:
            return o
        return _EagerAttention.apply(q, k, v, causal, s, "triton")
    return _forward(q, k, v, causal, s)[0]


def _native_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
                      ) -> torch.Tensor | None:
    """A repeated call on the Triton kernels that autograd records, through the native op: forward
    and backward with no Python (``csrc/attention.cpp``). ``None`` where the caller takes the Python
    path: the library not built yet (it builds in the background), no forward plan for the signature
    yet, launches the library cannot take, inputs not 16-byte aligned, a kernel that cannot launch now."""
    plan = native.kept_plan(("attention-native", *_signature(q, k, v), causal, scale),
                            lambda: _make_native_attention(q, k, v, causal, scale))
    if plan is None or (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15 or not plan.ready():
        return None
    return native.op("attention")(q, k, v, plan.pid, native.current_stream(plan.device))


def _make_native_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
                           ) -> native.Plan | bool | None:
    """The native plan of this signature (``False``: none can be made; ``None``: not yet). The
    backward's plan is made here by one backward on zeros, its gradient laid out as the output (as a
    model's ``out.transpose(1, 2).reshape(B, S, D)`` hands it back), with the config the Python
    backward takes."""
    fwd = kernel_providers.kept_plan(("attention-plan", *_signature(q, k, v), causal, scale))
    if not fwd:
        return fwd
    forward = fwd.native()
    if forward is None:
        return False
    o = torch.zeros(fwd.shape, dtype=q.dtype, device=q.device)
    o = o.transpose(1, 2) if fwd.heads_inside else o
    lse = torch.zeros(o.shape[:3], dtype=torch.float32, device=q.device)
    do = torch.zeros_like(o)
    cfg = kernel_providers.provider_config("attention_bwd", "triton", do, q, k, v, o, lse, causal, scale)
    bwd = importlib.import_module("xrt.kernels.triton.attention").attention_bwd_planned(
        do, q, k, v, o, lse, causal, scale, cfg)[3]
    backward = bwd.native() if bwd is not None else None
    if backward is None:
        return False
    device = q.get_device()
    strides = tuple(t.stride() for t in (q, k, v, o, do))
    try:
        pid = native.add_attention_plan(q.shape, k.shape[2], device, fwd.heads_inside, strides, [forward], backward)
    except (ValueError, RuntimeError):  # a launch the library cannot take (a parameter it does not pack)
        return False
    return native.Plan(pid, (forward[0].keep, *(spec.keep for spec, _ in backward)), device)


def unsupported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                dropout_p: float, enable_gqa: bool, scale: float | None = None) -> str | None:
    """Why xrt's Triton kernels do not cover this call (arguments only, not the device), or ``None``."""
    if attn_mask is not None:
        return (f"attn_mask (shape {tuple(attn_mask.shape)}, dtype {attn_mask.dtype}) is given; "
                "the Triton kernel has no masks")
    if dropout_p != 0.0:
        return f"dropout_p={dropout_p}; the Triton kernel has no dropout"
    if scale is not None and not scale > 0:
        return f"scale={scale}; the Triton kernel takes a positive softmax scale"
    if enable_gqa and q.dim() == 4 and k.dim() == 4 and q.shape[1] != k.shape[1]:
        return f"enable_gqa=True with query heads {q.shape[1]} != key heads {k.shape[1]}"
    from xrt.kernels.triton.attention import missing

    return missing(q, k, v)


def _sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, backend: str | None) -> torch.Tensor:
    kw = {"enable_gqa": True} if enable_gqa else {}
    if backend is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                                                is_causal=is_causal, scale=scale, **kw)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, backend)):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                                                is_causal=is_causal, scale=scale, **kw)


def _warn_once(why: str) -> None:
    if why not in _WARNED:
        _WARNED.add(why)
        warnings.warn(f"fused_attention: falling back to scaled_dot_product_attention: {why}", UserWarning,
                      stacklevel=3)


def _auto_runs_triton(q: torch.Tensor, is_causal: bool = False) -> bool:
    """Does ``auto`` take the Triton kernels for this call? On CUDA where they measured faster than
    SDPA for its (B, H, S, D, causal) bucket (``xrt.pytorch.auto``); never off CUDA."""
    return q.is_cuda and q.dim() == 4 and auto.pick("attention", q, (*q.shape, int(bool(is_causal)))) == "triton"


def choose(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
           dropout_p: float = 0.0, enable_gqa: bool = False, provider: str | None = None,
           scale: float | None = None, is_causal: bool = False) -> str:
    """``"triton"`` or the SDPA route (``"torch"`` or a backend name) for this call, as
    :func:`fused_attention` decides it (a fallback warns once; forced Triton raises)."""
    choice = policy.resolve("attention", provider)
    if choice not in ("triton", "auto", "default"):
        return choice
    why = unsupported(q, k, v, attn_mask, dropout_p, enable_gqa, scale)
    if choice == "triton":
        why = why or dispatch.triton_missing(q)
        if why:
            raise ValueError(f"fused_attention: provider 'triton' cannot run this call: {why}")
        return "triton"
    if not _auto_runs_triton(q, is_causal):
        return "torch"  # auto off CUDA, or where SDPA measured as fast: SDPA
    if why:
        _warn_once(why)
        return "torch"
    return "triton"


def fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                    scale: float | None = None, enable_gqa: bool = False, *,
                    provider: str | None = None) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` with xrt's fused Triton kernels.

    Args:
        query: ``[B, H, S_q, D]``; key, value: ``[B, H, S_k, D]``. Any strides: a ``[B, S, H, D]``
            tensor ``.transpose(1, 2)`` is read in place. The Triton kernels take fp16 and bf16,
            ``D`` in (64, 128).
        attn_mask, dropout_p, enable_gqa: as SDPA; any of them sends the call to SDPA.
        is_causal: causal mask aligned top-left (query ``i`` sees keys ``j <= i``), SDPA's
            semantics, also when ``S_q != S_k``.
        scale: the softmax scale, ``1 / sqrt(D)`` when ``None``.
        provider: ``"triton"``, ``"auto"``, ``"torch"`` or an SDPA backend name
            (``"flash_v2"``, ``"mem_efficient"``, ``"math"``, ``"cudnn"``); overrides the policy.

    Returns:
        ``[B, H, S_q, D]`` in ``query``'s dtype. From xrt's kernels laid out as ``query``: [B, S_q, H, D]
        in memory where ``query`` is a [B, S, H, D] tensor seen per head (as SDPA's), else contiguous.
        Differentiable in query, key and value; the backward is xrt's own kernels.

    Raises:
        ValueError: ``provider="triton"`` (or the policy's ``attention="triton"``) for a call the
            kernels do not cover, naming the value (``head_dim=59 is not one of (64, 128)``).

    >>> q = torch.randn(1, 2, 5, 64, dtype=torch.float16, device="cuda")  # doctest: +SKIP
    >>> fused_attention(q, q, q, is_causal=True).shape  # doctest: +SKIP
    torch.Size([1, 2, 5, 64])
    """
    plain = attn_mask is None and not dropout_p and not enable_gqa
    if plain and (out := _repeat(query, key, value, is_causal, scale, provider)) is not None:
        return out
    q = cast_for_hint(_checks.floating("query", "fused_attention", query))
    k = cast_for_hint(_checks.floating("key", "fused_attention", key))
    v = cast_for_hint(_checks.floating("value", "fused_attention", value))
    chosen = choose(q, k, v, attn_mask, dropout_p, enable_gqa, provider, scale, is_causal)
    if chosen != "triton":
        backend = _SDPA_BACKENDS.get(chosen) if provider is not None else None
        with dispatch.op_range("attention", chosen):
            return dispatch.unrouted(_sdpa, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, backend)
    s = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    causal = bool(is_causal)
    with dispatch.op_range("attention", "triton"):
        route = dispatch.route(q, k, v)
        if route != dispatch.OP and plain and q.is_cuda and get_precision_hint() is None:
            try:  # the next such call goes straight to the kernels (_repeat)
                policy.tuned_state().keep(_call_key(query, key, value, is_causal, scale, provider, route), True)
            except (TypeError, RuntimeError):  # (an unhashable scale; a tensor with no shape to key by)
                pass
        if route == dispatch.DIRECT_GRAD:
            return _EagerAttention.apply(q, k, v, causal, s, "triton")
        if route == dispatch.DIRECT:
            return _forward(q, k, v, causal, s)[0]
        return dispatch.compiled("attention", "triton", attention_op, q)(q, k, v, causal, s, "triton")[0]
