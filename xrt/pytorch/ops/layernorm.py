"""``xrt.pytorch.ops.fused_layernorm``: LayerNorm forward and backward in one kernel each.

Two custom ops: ``xrt::layernorm`` -> ``(y, mean, rstd)`` and ``xrt::layernorm_bwd`` ->
``(dx, dweight, dbias)``; the first's autograd calls the second with the same provider, so
training runs xrt's kernels both ways. Kernels see ``x`` as ``[M, N]``, ``N`` the number of
elements of ``normalized_shape``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any

import torch

from xrt.pytorch import policy
from xrt.pytorch.autocast import cast_for_hint, get_precision_hint
from xrt.pytorch.ops import _checks, dispatch, kernel_providers, native

kernel_providers.register("layernorm")
kernel_providers.register("layernorm_bwd")


def _layernorm(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor,
               bias: torch.Tensor, eps: float, provider: str
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = math.prod(normalized_shape)
    y, mean, rstd = dispatch.get("layernorm", provider).fn(x.reshape(-1, n), weight.reshape(n), bias.reshape(n), eps)
    return y.view(x.shape), mean, rstd


def _layernorm_infer_triton(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor,
                            bias: torch.Tensor, eps: float, provider: str) -> torch.Tensor:
    """The Triton forward's ``y`` alone: what torch.compile runs for a call that no autograd records
    (no statistics computed or allocated; the op has no backward)."""
    from xrt.kernels.triton.layernorm import layernorm_infer

    n = math.prod(normalized_shape)
    x2 = x.reshape(-1, n)
    w, b = weight.reshape(n), bias.reshape(n)
    cfg = kernel_providers.provider_config("layernorm", "triton", x2, w, b, eps)
    return layernorm_infer(x2, w, b, eps, cfg).view(x.shape)


def _layernorm_fake(x, normalized_shape, weight, bias, eps, provider):
    m = x.numel() // math.prod(normalized_shape)
    stat = x.new_empty((m,), dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), stat, torch.empty_like(stat)


def _layernorm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                   rstd: torch.Tensor, provider: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = weight.numel()
    dx, dw, db = dispatch.get("layernorm_bwd", provider).fn(dy.reshape(-1, n), x.reshape(-1, n), weight.reshape(n),
                                                            mean, rstd)
    return dx.view(x.shape), dw.view(weight.shape), db.view(weight.shape)


def _layernorm_bwd_fake(dy, x, weight, mean, rstd, provider):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format),
            torch.empty_like(weight, memory_format=torch.contiguous_format))


def _setup_context(ctx, inputs, output) -> None:
    x, _, weight, _, _, provider = inputs
    _, mean, rstd = output
    ctx.provider = provider
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(x, weight, mean, rstd)


def _backward_with(bwd: Any):
    """The forward op's backward formula: the backward op ``bwd`` of the same provider."""

    def backward(ctx, dy, _dmean, _drstd):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = dispatch.in_transforms(bwd)(dy.contiguous(), x, weight, mean, rstd, ctx.provider)
        return dx, None, dw, db, None, None

    return backward


# xrt::layernorm and xrt::layernorm_bwd; for torch.compile, their twins per provider
# (dispatch.compiled_twin): the Triton ones are triton_ops that Inductor traces into.
_layernorm_op = torch.library.custom_op("xrt::layernorm", _layernorm, mutates_args=())
_layernorm_op.register_fake(_layernorm_fake)
layernorm_bwd = torch.library.custom_op("xrt::layernorm_bwd", _layernorm_bwd, mutates_args=())
layernorm_bwd.register_fake(_layernorm_bwd_fake)
_layernorm_op.register_autograd(_backward_with(layernorm_bwd), setup_context=_setup_context)
for _name in ("triton", "cuda"):
    _bwd = dispatch.compiled_twin("layernorm_bwd", _name, _layernorm_bwd, fake=_layernorm_bwd_fake)
    dispatch.compiled_twin("layernorm", _name, _layernorm, _setup_context, _backward_with(_bwd), _layernorm_fake)
# xrt::layernorm_infer_triton: torch.compile's Triton forward where autograd records nothing.
dispatch.compiled_twin("layernorm_infer", "triton", _layernorm_infer_triton)


class _EagerLayerNorm(torch.autograd.Function):
    """The custom op's forward and backward for eager training, without its dispatch: the same
    provider functions, the same saved tensors, the backward's own kernel of the same provider.
    (Under torch.compile, modes or functorch transforms the custom op runs instead.)"""

    @staticmethod
    def forward(ctx, x, weight, bias, n, eps, provider):
        fn = dispatch.get("layernorm", provider).fn
        y, mean, rstd = fn(x.reshape(-1, n), weight.reshape(n), bias.reshape(n), eps)
        ctx.provider = provider
        ctx.save_for_backward(x, weight, mean, rstd)
        return y.view(x.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        n = weight.numel()
        dx, dw, db = dispatch.get("layernorm_bwd", ctx.provider).fn(dy.contiguous().reshape(-1, n), x.reshape(-1, n),
                                                                   weight.reshape(n), mean, rstd)
        return dx.view(x.shape), dw.view(weight.shape), db.view(weight.shape), None, None, None


class _Plan:
    """What an eager call of :func:`fused_layernorm` needs, worked out once per input signature
    (shapes, strides, dtypes, devices, provider argument) under the policy in force: the provider
    the policy chose and its kernels' launch plans (``xrt.kernels.<provider>.layernorm``
    ``FwdPlan`` / ``BwdPlan``, tuned configs included). Kept in the policy state's memo, so any
    policy change, scope of other choices or ``XRT_TUNED`` edit makes a new one. Only for contiguous, non-empty
    inputs whose weight and bias have the input's dtype and device, through Triton or CUDA C; every
    other call takes the general path."""

    __slots__ = ("provider", "m", "n", "shape", "fwd", "bwd", "kind", "device", "native", "keep", "tries")

    def __init__(self, provider: str, x: torch.Tensor, m: int, n: int) -> None:
        self.provider, self.m, self.n, self.shape = provider, m, n, x.shape
        self.device = x.device.index if x.is_cuda else -1
        # The native op's plan id: None while it may still come (see make_native), False never.
        self.native: int | bool | None = None if x.is_cuda else False
        self.keep: Any = None
        self.tries = 0
        self.kind = "triton" if provider in ("triton", "xpu") else provider
        kernels = importlib.import_module(f"xrt.kernels.{self.kind}.layernorm")
        cfg = kernel_providers.config("layernorm", f"layernorm.{self.kind}", x, (m, n))
        bcfg = kernel_providers.config("layernorm_bwd", f"layernorm_bwd.{self.kind}", x, (m, n))
        if self.kind == "triton":
            self.fwd, self.bwd = kernels.FwdPlan(m, n, cfg), kernels.BwdPlan(m, n, bcfg, x)
        else:
            self.fwd, self.bwd = kernels.FwdPlan(m, n, cfg, x), kernels.BwdPlan(m, n, bcfg, x)

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float, save: bool):
        """``(y, stats)``: stats the fp32 ``[2, M]`` mean and rstd (``None`` when not ``save``, Triton)."""
        y = torch.empty_like(x)
        if self.kind == "triton":
            if save:
                stats = torch.empty((2, self.m), dtype=torch.float32, device=x.device)
                self.fwd(x, w, b, y, stats, eps, True)
                return y, stats
            self.fwd(x, w, b, y, y, eps, False)
            return y, None
        stats = torch.empty((2, self.m), dtype=torch.float32, device=x.device)
        if self.fwd(x, w, b, y, stats, eps):
            return y, stats
        n = self.n  # a tensor not 16-byte aligned: the launcher picks the kernel that takes it
        y, mean, rstd = dispatch.get("layernorm", self.provider).fn(x.reshape(-1, n), w, b, eps)
        return y.view(x.shape), torch.stack((mean, rstd))

    def make_native(self) -> int | bool | None:
        """The plan's id in the native op (:mod:`xrt.pytorch.ops.native`), registered once the
        library is loaded and every kernel of the forward and backward has launched (Triton's
        compiled handles exist from then on); ``None`` while that may still come, ``False`` where
        it will not (the library cannot be had, a launch it cannot describe)."""
        if not native.ready():
            if native.why() is not None:
                self.native = False
            return self.native
        bwd = self.bwd.native()
        got = None if bwd is None else native.add_plan(self.m, self.n, self.bwd.groups, self.device,
                                                      self.fwd.native(), bwd)
        if got is not None:
            self.native, self.keep = got
        else:
            self.tries += 1
            if bwd is None or self.tries >= NATIVE_TRIES:
                self.native = False
        return self.native

    def buffers(self, x: torch.Tensor, w: torch.Tensor) -> tuple | None:
        """The backward's output buffers, allocated now when ``x`` is small (see ``EARLY_BUFFERS``)."""
        return self.bwd.buffers(x, w) if x.numel() <= EARLY_BUFFERS else None

    def backward(self, dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stats: torch.Tensor,
                 buffers: tuple | None = None):
        got = self.bwd(dy, x, w, stats, buffers)
        if got is not None:
            return got
        n = self.n
        mean, rstd = stats.unbind(0)
        dx, dw, db = dispatch.get("layernorm_bwd", self.provider).fn(dy.reshape(-1, n), x.reshape(-1, n), w, mean, rstd)
        return dx.view(x.shape), dw, db


_FAST = {torch.float16, torch.bfloat16, torch.float32}

# Training calls of a plan that may pass before its kernels have all launched once (a Triton
# kernel has no compiled handle before its first launch) and the native op takes over; after
# that many the plan stays on the Python path.
NATIVE_TRIES = 8

# Inputs of at most this many elements get their backward's buffers (dx, the dweight / dbias
# partials, dweight and dbias) allocated in the forward. On a CUDA device autograd runs the
# backward on its own thread, where each allocation from Python cost 10-15 us on the H100 against
# 2-3 us on the caller's thread (scripts/host_layers.py); for small inputs, where the host is the
# bottleneck, that was a third of the training step's host time. The price: those buffers (about
# x's size) live from the forward to the backward instead of only during it, so large inputs,
# whose kernels take longer than the host anyway, allocate in the backward.
EARLY_BUFFERS = 1 << 18


def _plan(x: torch.Tensor, ns: Any, w: torch.Tensor, b: torch.Tensor, provider: str | None) -> _Plan | bool:
    """A :class:`_Plan` for this signature, or ``False`` where the general path must run (it also
    raises whatever the input deserves)."""
    if type(x) not in (torch.Tensor, torch.nn.Parameter) or x.dtype not in _FAST:
        return False
    dims = (ns,) if isinstance(ns, int) else tuple(ns) if isinstance(ns, tuple) else None
    if not dims or x.dim() < len(dims) or tuple(x.shape[x.dim() - len(dims):]) != dims:
        return False
    for t in (w, b):
        if (type(t) not in (torch.Tensor, torch.nn.Parameter) or tuple(t.shape) != dims or t.dtype != x.dtype
                or t.device != x.device or not t.is_contiguous()):
            return False
    n = math.prod(dims)
    if not x.is_contiguous() or x.numel() == 0 or n == 0:
        return False
    try:
        chosen = dispatch.choose("layernorm", x, provider)
    except (ValueError, RuntimeError):
        return False
    if chosen.name not in ("triton", "cuda"):  # (Triton on the CPU: the interpreter, which the Sites fall back to)
        return False
    if chosen.name == "triton":
        from xrt.kernels.triton.layernorm import MAX_N

        if n > MAX_N:
            return False
    return _Plan(chosen.name, x, x.numel() // n, n)


class _LeanLayerNorm(torch.autograd.Function):
    """Eager training through a :class:`_Plan`: the forward saves ``x``, ``weight`` and one
    ``[2, M]`` stats buffer; the backward launches the provider's backward kernels."""

    @staticmethod
    def forward(ctx, x, weight, bias, plan, eps):
        y, stats = plan.forward(x, weight, bias, eps, True)
        ctx.plan = plan
        ctx.buffers = plan.buffers(x, weight)  # used by the first backward only (retain_graph: fresh ones)
        ctx.save_for_backward(x, weight, stats)
        return y

    @staticmethod
    def backward(ctx, dy):
        if torch.is_grad_enabled():  # create_graph=True: as once_differentiable, a second backward fails
            return _lean_backward_once(ctx, dy)
        return _lean_backward(ctx, dy)


def _lean_backward(ctx, dy):
    x, weight, stats = ctx.saved_tensors
    buffers, ctx.buffers = ctx.buffers, None
    dx, dw, db = ctx.plan.backward(dy.contiguous(), x, weight, stats, buffers)
    if weight.dim() != 1:  # the kernels' dweight and dbias are flat
        dw, db = dw.view(weight.shape), db.view(weight.shape)
    return dx, dw, db, None, None


# once_differentiable's wrapper costs microseconds a call: only where a graph of the backward is asked for
_lean_backward_once = torch.autograd.function.once_differentiable(_lean_backward)


def _fast(x: Any, ns: Any, w: Any, b: Any, eps: float, provider: str | None) -> torch.Tensor | None:
    """The eager call through a cached :class:`_Plan`, or ``None`` for the general path."""
    if w is None or b is None or get_precision_hint() is not None:
        return None
    # First: under torch.compile (and modes, transforms, tensor subclasses) the call goes through
    # the custom op, and nothing below may be traced (planning imports the kernel modules).
    route = dispatch.route(x, w, b)
    if route == dispatch.OP or dispatch.profiling():
        return None
    try:
        state = policy.tuned_state()
        key = ("fused_layernorm", x.shape, x.stride(), x.dtype, x.device, ns, w.shape, w.stride(), w.dtype,
               w.device, b.shape, b.stride(), b.dtype, b.device, provider)
        plan = state.memo.get(key)
    except (AttributeError, TypeError):  # not tensors, an unhashable normalized_shape
        return None
    if plan is None:
        plan = state.keep(key, _plan(x, ns, w, b, provider))
    if plan is False:
        return None
    if route == dispatch.DIRECT:
        return plan.forward(x, w, b, float(eps), False)[0]
    nid = plan.native
    if nid is None:
        nid = plan.make_native()
    if (nid is not False and nid is not None and not (x.data_ptr() | w.data_ptr() | b.data_ptr()) & 15
            and _current_device() == plan.device and not (plan.kind == "triton" and triton_hooks())):
        return native.op("layernorm")(x, w, b, float(eps), nid, _current_stream(plan.device))
    return _LeanLayerNorm.apply(x, w, b, plan, float(eps))


_compiling = torch.compiler.is_compiling
# traced by these names under torch.compile (xrt.pytorch.ops.dispatch's docstring says why)
_floating, _of_dtype, _choose, _compiled_op = _checks.floating, _checks.of_dtype, dispatch.choose, dispatch.compiled
_grad_enabled = torch.is_grad_enabled
_current_device = torch._C._cuda_getDevice if hasattr(torch._C, "_cuda_getDevice") else lambda: -1
_current_stream = native.current_stream


_HOOKS_SET: list[Any] = []


def triton_hooks() -> bool:
    """Are Triton launch hooks set (a profiler's)? The native op does not call them, so it steps
    aside (``xrt.kernels.triton.launch.hooks_set``, imported at the first call)."""
    if not _HOOKS_SET:
        from xrt.kernels.triton.launch import hooks_set

        _HOOKS_SET.append(hooks_set)
    return _HOOKS_SET[0]()


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
    if not _compiling():  # (under torch.compile the custom op's twin, and nothing of the plans traced)
        y = _fast(input, normalized_shape, weight, bias, eps, provider)
        if y is not None:
            return y
    x = cast_for_hint(_floating("input", "fused_layernorm", input))
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(d) for d in normalized_shape)
    if not ns or tuple(x.shape[x.dim() - len(ns):]) != ns or x.dim() < len(ns):
        raise ValueError(f"fused_layernorm: input.shape={tuple(x.shape)} must end with "
                         f"normalized_shape={ns}")
    if weight is None:
        weight = torch.ones(ns, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = torch.zeros(ns, dtype=x.dtype, device=x.device)
    for name, t in (("weight", weight), ("bias", bias)):
        _floating(name, "fused_layernorm", t)
        if tuple(t.shape) != ns:
            raise ValueError(f"fused_layernorm: {name}.shape={tuple(t.shape)} must equal normalized_shape={ns}")
        if t.device != x.device:
            raise ValueError(f"fused_layernorm: {name} is on {t.device} but input is on {x.device}")
    chosen = _choose("layernorm", x, provider)
    weight, bias = _of_dtype(weight, x.dtype), _of_dtype(bias, x.dtype)
    if _compiling():  # the OP route, no profiler range (as dispatch.call)
        return _through_op(x, ns, weight, bias, eps, chosen.name)
    with dispatch.op_range("layernorm", chosen.name):
        route = dispatch.route(x, weight, bias)
        if route == dispatch.DIRECT_GRAD:
            return _EagerLayerNorm.apply(x, weight, bias, math.prod(ns), float(eps), chosen.name)
        if route == dispatch.DIRECT:  # what the custom op would run, without its dispatch
            n = math.prod(ns)
            y, _, _ = chosen.fn(x.reshape(-1, n), weight.reshape(n), bias.reshape(n), float(eps))
            return y.view(x.shape)
        return _through_op(x, ns, weight, bias, eps, chosen.name)


def _through_op(x: torch.Tensor, ns: tuple[int, ...], weight: torch.Tensor, bias: torch.Tensor, eps: float,
                provider: str) -> torch.Tensor:
    """The call through the custom op (under torch.compile its twin for ``provider``; where autograd
    records nothing, the twin without statistics when ``provider`` has one)."""
    if _compiling() and not (_grad_enabled() and (x.requires_grad or weight.requires_grad or bias.requires_grad)):
        infer = _compiled_op("layernorm_infer", provider, None, x)
        if infer is not None:
            return infer(x, ns, weight, bias, float(eps), provider)
    y, _, _ = _compiled_op("layernorm", provider, _layernorm_op, x)(x, ns, weight, bias, float(eps), provider)
    return y
