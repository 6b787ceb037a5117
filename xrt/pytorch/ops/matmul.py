"""``xrt.pytorch.ops.matmul`` and ``bmm``: GEMM through torch (cuBLAS / cuBLASLt) or xrt's kernels.

The ``matmul`` policy governs both ops. ``default``, ``cublas`` and ``cublasLt`` set torch's
preferred BLAS library and these ops call ``torch.mm`` / ``torch.bmm``; ``triton`` (fp16, bf16,
fp32 without tf32) and ``cuda`` (fp32 SIMT) run xrt's kernels through the ``xrt::matmul`` /
``xrt::bmm`` custom ops; ``auto`` takes the measured table's choice on CUDA (``xrt.pytorch.auto``: torch
unless one of xrt's kernels measured faster for the shape's bucket), torch elsewhere.

The ladder is the one of :mod:`.square`: kernels (``xrt.kernels.{reference,triton,cuda}.matmul``)
-> providers registered here, tuned configs bucketed by ``(M, N, K)`` (``bmm``: ``(B, M, N, K)``)
-> the custom ops (fake implementations for torch.compile; the backward is two more GEMMs of the
same provider) -> :func:`matmul` and :func:`bmm`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch.utils import flop_counter

from xrt.kernels import checks
from xrt.pytorch import auto, policy
from xrt.pytorch.autocast import cast_for_hint, get_precision_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers, native


def _mnk(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    """(M, N, K) of ``a`` [M, K] x ``b`` [K, N]: what the GEMM's tuned configs are bucketed by."""
    return a.shape[0], b.shape[1], a.shape[1]


kernel_providers.register("matmul", shape_args=_mnk)
kernel_providers.register("bmm", shape_args=lambda a, b: (a.shape[0], a.shape[1], b.shape[2], a.shape[2]))


def _cuda_missing(x: torch.Tensor) -> str | None:
    why = dispatch.cuda_missing(x)
    if why is None and x.dtype != torch.float32:
        why = f"the CUDA C GEMM is fp32 only (SIMT SGEMM), got {x.dtype}"
    return why


for _op in ("matmul", "bmm"):  # the CUDA C provider says up front that it takes fp32 only
    dispatch.register(_op, "cuda", _cuda_missing)(dispatch.get(_op, "cuda").fn)

# What ``matmul=auto`` runs off CUDA, per device type: torch's GEMM. On CUDA the measured table
# (xrt.pytorch.auto) names it: torch's (cuBLAS) unless one of xrt's kernels measured ahead there.
AUTO_ORDER = {"cpu": ("torch",)}
_TORCH = {"matmul": torch.mm, "bmm": torch.bmm}


def choose_provider(op: str, a: torch.Tensor, explicit: str | None, b: torch.Tensor | None = None) -> str:
    """The provider that runs ``op`` on ``a`` (times ``b``): ``torch`` or one of xrt's (checked to run
    here). ``auto`` on CUDA: the measured table's choice for (M, N, K), bmm's (B, M, N, K)."""
    if explicit == "torch":
        return "torch"
    try:
        choice = policy.resolve("matmul", explicit)
    except ValueError as e:
        raise ValueError(f"{op}: provider={explicit!r} is not 'torch' or a matmul policy choice: {e}") from None
    if choice in policy.MATMUL_BLAS:
        return "torch"
    if choice == policy.AUTO:
        if a.is_cuda and b is not None:
            name = auto.pick(op, a, (*a.shape[:-2], a.shape[-2], b.shape[-1], a.shape[-1]))
            return name if name == "torch" or dispatch.get(op, name).missing(a) is None else "torch"
        for name in AUTO_ORDER.get(a.device.type, ("torch",)):
            if name == "torch" or dispatch.get(op, name).missing(a) is None:
                return name
        return "torch"
    why = dispatch.get(op, choice).missing(a)
    if why:
        raise ValueError(f"xrt op {op!r}: provider {choice!r} cannot take a {a.dtype} tensor on {a.device}: {why}")
    return choice


def _check(op: str, a: torch.Tensor, b: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    a = cast_for_hint(_checks.floating("a", op, a))
    b = cast_for_hint(_checks.floating("b", op, b))
    checks.gemm(op, a, b, rank)
    return a, b


def _column_major(t: torch.Tensor) -> bool:
    """Is ``t`` (.., rows, cols) a transposed row-major tensor (``W.T``) rather than a row-major one?"""
    return t.stride(-1) != 1 and t.stride(-2) == 1 and t.shape[-1] > 1


def _setup_context(ctx, inputs, output) -> None:
    """Saves what torch's ``mm`` / ``bmm`` saves, in its order: ``b`` where ``a`` needs a gradient,
    ``a`` where ``b`` does (memory, and a non-reentrant checkpoint that recomputes with torch's op
    finds the same tensors in the same places), and the operands' layouts, which the gradients follow."""
    a, b, provider = inputs
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ctx.provider, ctx.layouts = provider, (_column_major(a), _column_major(b))
    ctx.save_for_backward(b if need_a else None, a if need_b else None)


def _gemm_op(op: str, out_shape: Callable[[torch.Tensor, torch.Tensor], tuple[int, ...]]) -> tuple[Any, Any]:
    """The custom op ``xrt::<op>`` (its fake and its autograd: the gradients are GEMMs of the same op
    and provider) and its eager twin (:func:`dispatch.eager_autograd`)."""

    def impl(a: torch.Tensor, b: torch.Tensor, provider: str) -> torch.Tensor:
        return dispatch.get(op, provider).fn(a, b)

    def fake(a: torch.Tensor, b: torch.Tensor, provider: str) -> torch.Tensor:
        return a.new_empty(out_shape(a, b))

    def backward_with(gemm: Any) -> Callable[..., Any]:
        def backward(ctx, grad: torch.Tensor):
            b, a = ctx.saved_tensors
            p, (a_column, b_column) = ctx.provider, ctx.layouts
            # Each gradient is made in its input's layout: a transposed view's gradient (W.T in a routed
            # linear) as the transpose of a row-major product, so that it reaches W as a row-major
            # tensor and autograd's accumulation has no layout to copy into. The kernels read the
            # transposed operands (g.T, W.T) in place.
            da = db = None
            if ctx.needs_input_grad[0]:
                da = gemm(b, grad.mT, p).mT if a_column else gemm(grad, b.mT, p)
            if ctx.needs_input_grad[1]:
                db = gemm(grad.mT, a, p).mT if b_column else gemm(a.mT, grad, p)
            return da, db, None

        return backward

    custom = torch.library.custom_op(f"xrt::{op}", impl, mutates_args=())
    custom.register_fake(fake)

    def gemm(a: torch.Tensor, b: torch.Tensor, provider: str) -> torch.Tensor:
        """A gradient's GEMM, routed as the op's forward calls are (:func:`dispatch.call`): in plain eager
        backward the provider's function itself, not the custom op, whose dispatch cost tens of
        microseconds a GEMM of the step; the eager twin under double backward; the op otherwise."""
        return dispatch.call(op, dispatch.get(op, provider), custom, eager, a, b)

    backward = backward_with(gemm)
    custom.register_autograd(backward, setup_context=_setup_context)
    for name in ("triton", "cuda"):  # torch.compile's twins (dispatch.compiled_twin), their gradients GEMMs of the twin
        twin = dispatch.compiled_twin(op, name, impl, fake=fake)
        twin.register_autograd(backward_with(twin), setup_context=_setup_context)
    eager = dispatch.eager_autograd(op, _setup_context, backward)
    return custom, eager


_matmul_op, _eager_matmul = _gemm_op("matmul", lambda a, b: (a.shape[0], b.shape[1]))
_bmm_op, _eager_bmm = _gemm_op("bmm", lambda a, b: (a.shape[0], a.shape[1], b.shape[2]))
_OPS = {"matmul": (_matmul_op, _eager_matmul), "bmm": (_bmm_op, _eager_bmm)}


def _gemm_flops(count: Callable[..., int]) -> Callable[..., int]:
    def flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
        return count(a_shape, b_shape)

    return flops


# torch's FlopCounterMode counts xrt's GEMMs (the ops and their torch.compile twins) as torch's mm and
# bmm: 2 M N K a product. A routed model under the counter shows the FLOPs torch's own would.
for _op, _count in (("matmul", flop_counter.mm_flop), ("bmm", flop_counter.bmm_flop)):
    flop_counter.register_flop_formula([getattr(torch.ops.xrt, name) for name in (_op, f"{_op}_triton", f"{_op}_cuda")
                                  if hasattr(torch.ops.xrt, name)])(_gemm_flops(_count))


# -- a routed F.linear with a bias under torch.compile -------------------------------------------------


def _linear_bias(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, provider: str) -> torch.Tensor:
    """``x @ weight.T + bias`` for rows ``x`` [M, K] on the Triton GEMM, the bias in its epilogue (the
    config the provider's plain GEMM takes); the GEMM and an add where that config splits K, or K is 0."""
    wt = weight.t()
    cfg = kernel_providers.provider_config("matmul", "triton", x, wt)
    y = importlib.import_module("xrt.kernels.triton.matmul").linear(x, weight, bias, cfg)
    return y if y is not None else dispatch.get("matmul", provider).fn(x, wt) + bias


def _linear_bias_setup(ctx, inputs, output) -> None:
    x, weight, _, provider = inputs
    ctx.provider = provider
    ctx.save_for_backward(weight if ctx.needs_input_grad[0] else None, x if ctx.needs_input_grad[1] else None)


def _linear_bias_backward(ctx, grad: torch.Tensor):
    """``dX = g @ W`` and ``dW = g.T @ x`` on the matmul twin (the GEMMs a routed linear without the
    epilogue has), ``db`` the sum of ``g``'s rows (for Inductor to fuse with what made ``g``)."""
    weight, x = ctx.saved_tensors
    gemm = dispatch.COMPILED[("matmul", ctx.provider)]
    dx = gemm(grad, weight, ctx.provider) if ctx.needs_input_grad[0] else None
    dw = gemm(grad.mT, x, ctx.provider) if ctx.needs_input_grad[1] else None
    return dx, dw, grad.sum(0) if ctx.needs_input_grad[2] else None, None


# ``xrt::linear_triton``: what torch.compile records for a routed F.linear with a bias on the Triton
# provider. Without it the graph held the GEMM and an add, which Inductor fuses with the next
# pointwise op but cannot put into xrt's GEMM: one more read of [M, N] a linear.
dispatch.compiled_twin("linear", "triton", _linear_bias, _linear_bias_setup, _linear_bias_backward)
flop_counter.register_flop_formula(torch.ops.xrt.linear_triton)(
    lambda x_shape, w_shape, *args, out_shape=None, **kwargs: flop_counter.mm_flop(x_shape, w_shape[::-1]))


def _call(op: str, a: torch.Tensor, b: torch.Tensor, provider: str | None) -> torch.Tensor:
    name = choose_provider(op, a, provider, b)
    if name == "torch":
        return dispatch.unrouted(_TORCH[op], a, b)  # torch's own op: autograd, torch.compile and the BLAS switch apply
    custom, eager = _OPS[op]
    return dispatch.call(op, dispatch.get(op, name), custom, eager, a, b)


def matmul(a: torch.Tensor, b: torch.Tensor, *, provider: str | None = None) -> torch.Tensor:
    """``a @ b`` for 2-D ``a`` [M, K] and ``b`` [K, N] of one floating dtype, on one device.

    Args:
        a, b: the operands; any strides (the Triton kernel reads transposed views in place, the
            CUDA C kernel copies them to row-major first).
        provider: ``"torch"`` or a ``matmul`` policy choice (``"default"``, ``"cublas"``,
            ``"cublasLt"``: torch; ``"triton"``, ``"cuda"``: xrt's kernels; ``"auto"``); overrides
            the policy. ``"cuda"`` is fp32 only; ``"triton"`` takes fp16, bf16 and fp32 (no tf32).

    Returns:
        ``[M, N]`` in the operands' dtype (fp32 accumulation), contiguous. Differentiable in both.

    >>> matmul(torch.ones(2, 3), torch.ones(3, 4)).shape
    torch.Size([2, 4])
    """
    a, b = _check("matmul", a, b, 2)
    return _call("matmul", a, b, provider)


def bmm(a: torch.Tensor, b: torch.Tensor, *, provider: str | None = None) -> torch.Tensor:
    """``torch.bmm(a, b)`` for ``a`` [B, M, K] and ``b`` [B, K, N]: :func:`matmul` per batch entry.

    Args and returns as :func:`matmul`, with the batch dim in front: ``[B, M, N]``. The Triton
    and CUDA C kernels put the batch in the launch grid: one launch for the whole batch.

    >>> bmm(torch.ones(5, 2, 3), torch.ones(5, 3, 4)).shape
    torch.Size([5, 2, 4])
    """
    a, b = _check("bmm", a, b, 3)
    return _call("bmm", a, b, provider)


# -- a routed F.linear in plain eager PyTorch ---------------------------------------------------------

_set_grad = torch._C._set_grad_enabled
_compiling = torch.compiler.is_compiling


def _plan(key: tuple, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
          shape: tuple[int, ...] | None = None) -> torch.Tensor | None:
    """The first call of a signature: the Triton GEMM with the provider's config, and its
    ``GemmPlan`` kept under ``key`` (:func:`kernel_providers.keep_plan`)."""
    cfg = kernel_providers.provider_config("matmul", "triton", a, b)
    y, plan = importlib.import_module("xrt.kernels.triton.matmul").gemm_planned(a, b, bias, cfg, shape)
    kernel_providers.keep_plan(key, plan)
    return y


def _planned(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """The Triton provider's ``a @ b`` (+ ``bias`` in the epilogue) for 2-D tensors in plain eager
    PyTorch, through the launch plan kept for this signature (``xrt.kernels.triton.matmul.GemmPlan``):
    a repeated call allocates C and launches, with no checks, config lookup or descriptor made again.
    ``None`` where the caller takes the general path (no plan for this signature, or it cannot
    launch now)."""
    key = ("gemm-plan", a.shape, a.stride(), b.shape, b.stride(), None if bias is None else bias.stride(),
           a.dtype, b.dtype, a.is_cuda, a.get_device())
    plan = kernel_providers.kept_plan(key)
    if plan is None:
        return _plan(key, a, b, bias)
    return plan(a, b, bias) if plan else None


def _linear_key(kind: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple:
    return (kind, x.shape, x.stride(), weight.shape, weight.stride(), None if bias is None else bias.stride(),
            x.dtype, weight.dtype, x.is_cuda, x.get_device())


def _planned_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """:func:`_planned` for a whole ``F.linear(x, weight, bias)`` of any ``x`` [..., K] whose rows
    fold without a copy: keyed by ``x``'s own shape, the plan launches on ``x`` and ``weight`` as they
    are and allocates the output as [..., N], with no view, fold or transpose made per call."""
    key = _linear_key("linear-plan", x, weight, bias)
    plan = kernel_providers.kept_plan(key)
    if plan is not None:
        return plan(x, weight, bias) if plan else None
    n, k = weight.shape
    x2 = x.reshape(-1, k)
    if (bias is not None and bias.stride(0) != 1 or x.dim() == 0 or x2.data_ptr() != x.data_ptr()
            or x2.numel() == 0):
        kernel_providers.keep_plan(key, None)  # (a fold that copied: a plan would read x's memory as rows it is not)
        return None
    shape = (*x.shape[:-1], n)
    y = _plan(key, x2, weight.t(), bias, shape)
    return None if y is None else dispatch.fresh(y, shape)


def _native_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """A routed ``F.linear`` that autograd records, on the Triton provider in plain eager PyTorch,
    through the native op: forward and backward with no Python (``csrc/linear.cpp``). Training only:
    a call that autograd does not record costs less through the kept GEMM plan's Python than through
    the dispatcher and an autograd Function (``benchmarks/linear_host.py``). ``None`` where the
    caller takes the Python path: the library not built yet (it builds in the background), the
    signature's first call (it makes the forward's plan), a launch the library cannot take, a tensor
    not 16-byte aligned, or a kernel that cannot launch now."""
    plan = native.kept_plan(_linear_key("linear-native", x, weight, bias), lambda: _make_native_linear(x, weight, bias))
    if plan is None or (x.data_ptr() | weight.data_ptr() | (0 if bias is None else bias.data_ptr())) & 15:
        return None
    if not plan.ready():
        return None
    return native.op("linear")(x, weight, bias, plan.pid, native.current_stream(plan.device))


def _make_native_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
                        ) -> native.Plan | bool | None:
    """The native plan of this signature (``False``: none can be made; ``None``: not yet, the
    forward's GEMM plan is made by the Python path's first call). The backward's GEMMs are run here
    once each on an empty gradient, with the configs the Python backward takes, to describe their
    launches (dW's two where it splits K)."""
    fwd = kernel_providers.kept_plan(_linear_key("linear-plan", x, weight, bias))
    if not fwd:
        return fwd
    if not (x.is_contiguous() and weight.is_contiguous() and (bias is None or bias.is_contiguous())):
        return False  # (the native op takes them as stored: a strided x that folds keeps the Python plan)
    described = fwd.tma.native("x", "w", "y", "b" if bias is not None else None)
    if described is None:
        return False
    n, k = weight.shape
    m = x.numel() // k
    g = torch.empty((m, n), dtype=x.dtype, device=x.device)
    gemm = importlib.import_module("xrt.kernels.triton.matmul")
    launches, parts = [[described]], []
    for a, b, names in ((g, weight, ("g", "w", "dx")), (g.mT, x.reshape(m, k), ("g", "x", "dw"))):
        got = gemm.gemm_launches(a, b, kernel_providers.provider_config("matmul", "triton", a, b), names, "part")
        if got is None:
            return False
        launches.append(got[0])
        parts.append(got[1])
    device = x.get_device()
    try:
        pid = native.add_linear_plan(m, n, k, device, bias is not None, tuple(parts), *launches)
    except (ValueError, RuntimeError):  # a launch the library cannot take (a parameter it does not pack)
        return False
    return native.Plan(pid, tuple(spec.keep for gemm in launches for spec, _ in gemm), device)


def _rows_gemm(provider: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The provider's ``a @ b`` of 2-D tensors in plain eager PyTorch (the Triton GEMM's planned)."""
    if provider == "triton" and (y := _planned(a, b, None)) is not None:
        return y
    return dispatch.get("matmul", provider).fn(a, b)


def _linear_rows(provider: str, x2: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` of the rows ``x2`` [M, K] on a provider's GEMM -> [M, N]: the bias in the Triton
    GEMM's epilogue (added in place after the others'). The config is the one the provider's plain
    GEMM takes."""
    y, wt = None, weight.t()
    if provider == "triton" and (bias is None or bias.stride(0) == 1) and (y := _planned(x2, wt, bias)) is not None:
        return y
    if bias is not None and provider == "triton":
        cfg = kernel_providers.provider_config("matmul", "triton", x2, wt)
        y = importlib.import_module("xrt.kernels.triton.matmul").linear(x2, weight, bias, cfg)
    if y is None:
        y = dispatch.get("matmul", provider).fn(x2, wt)
        if bias is not None:
            y.add_(bias)
    return y


class _EagerLinear(torch.autograd.Function):
    """A routed ``F.linear`` that autograd records, in one Function: the rows folded, the weight
    transposed and the bias added inside it, so autograd records no view or add of its own, and the
    backward runs the provider's GEMMs directly (``dX = g @ W``, ``dW = g.T @ x``, ``db`` the sum of
    ``g``'s rows). It saves what torch's ``F.linear`` would, in its order: the folded rows where the
    weight needs a gradient, ``W.T`` where ``x`` does (``addmm``'s order where torch takes ``addmm``,
    ``mm``'s otherwise), so that a checkpoint that recomputes with torch's own op finds the same tensors
    in the same places; as views that keep their history, so that under ``create_graph`` the gradients
    are the differentiable op's GEMMs of them."""

    @staticmethod
    def forward(ctx, x, weight, bias, provider, through_op):
        n, k = weight.shape
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        # torch's F.linear: addmm (saves x, W.T) with a bias and a 2-D or contiguous x; else mm (W.T, x)
        ctx.addmm = bias is not None and (x.dim() == 2 or x.is_contiguous())
        ctx.provider, ctx.shape = provider, x.shape
        _set_grad(True)  # (cheaper than torch.enable_grad; nothing here raises)
        x2 = x.reshape(-1, k)
        wt = weight.t() if need_x else None
        _set_grad(False)
        saved = (x2 if need_w else None, wt)
        ctx.save_for_backward(*(saved if ctx.addmm else saved[::-1]))
        ctx.through_op = through_op
        if through_op:  # the custom op, which a mode sees (a FakeTensorMode, a flop counter)
            y = _matmul_op(x2, weight.t(), provider)
            y = y if bias is None else y + bias
        else:
            if provider == "triton" and (y := _planned_linear(x, weight, bias)) is not None:
                return y
            y = _linear_rows(provider, x2, weight, bias)
        return dispatch.fresh(y, (*x.shape[:-1], n))

    @staticmethod
    def backward(ctx, grad):
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        # (read only when saved: with only the bias to differentiate, a second backward must work, as torch's)
        saved = ctx.saved_tensors if need_x or need_w else (None, None)
        x2, wt = saved if ctx.addmm else saved[::-1]
        shape, p = ctx.shape, ctx.provider
        g = grad.reshape(math.prod(shape[:-1]), grad.shape[-1])  # (-1 cannot stand for M where N is 0)
        dx = dw = db = None
        with dispatch.op_range("matmul", p):
            if torch.is_grad_enabled():  # double backward: GEMMs autograd records
                if need_x:
                    dx = _call("matmul", g, wt.mT, p).reshape(shape)
                if need_w:
                    dw = _call("matmul", g.mT, x2, p)
            else:
                fn = partial(_matmul_op, provider=p) if ctx.through_op else partial(_rows_gemm, p)
                if need_x:
                    dx = fn(g, wt.mT).view(shape)
                if need_w:
                    dw = fn(g.mT, x2)
        if need_b:
            db = g.sum(0)
        return dx, dw, db, None, None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, provider: str) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` on ``provider``'s GEMM (one of xrt's, able to run ``x``), for the
    routing of unmodified models (xrt.pytorch.routing): ``x`` ``[..., K]``, ``weight`` ``[N, K]``,
    ``bias`` ``[N]`` or ``None``, one dtype and device, checked by the caller. In plain eager PyTorch
    one Function (:class:`_EagerLinear`) or, without autograd, the GEMM and an in-place add. Under a
    mode that autograd records, the same Function around the custom op (it saves what torch's
    ``F.linear`` saves, which the op alone cannot: ``addmm``'s order with a bias). Under torch.compile,
    and under modes without autograd, the op's GEMM and an add, as the graph should show them; under
    torch.compile on the Triton provider with a bias, ``xrt::linear_triton`` (the bias in the epilogue).
    Returns ``[..., N]``, a tensor of its own (not a view)."""
    how = dispatch.route(x, weight, bias)
    n, k = weight.shape
    records = how == dispatch.DIRECT_GRAD or (how == dispatch.OP and torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, weight, bias)))
    if _compiling() or get_precision_hint() is not None or how == dispatch.OP and not records:
        if bias is not None and provider == "triton" and _compiling() and get_precision_hint() is None:
            x2 = x.reshape(-1, k)
            twin = dispatch.compiled("linear", provider, None, x2)  # (None: CPU tensors keep the custom op)
            if twin is not None:
                return dispatch.fresh(twin(x2, weight, bias, provider), (*x.shape[:-1], n))
        y = matmul(x.reshape(-1, k), weight.t(), provider=provider)
        if bias is not None:
            y = y + bias
        return dispatch.fresh(y, (*x.shape[:-1], n))
    if provider == "triton" and how != dispatch.OP and not dispatch.profiling():  # (a profiler: the op's range below)
        if how == dispatch.DIRECT:
            y = _planned_linear(x, weight, bias)
        else:
            y = _native_linear(x, weight, bias) if x.is_cuda else None
        if y is not None:
            return y
    with dispatch.op_range("matmul", provider):
        if records:
            return _EagerLinear.apply(x, weight, bias, provider, how == dispatch.OP)
        return dispatch.fresh(_linear_rows(provider, x.reshape(-1, k), weight, bias), (*x.shape[:-1], n))
