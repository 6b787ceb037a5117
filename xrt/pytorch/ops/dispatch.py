"""Providers of xrt ops, the choice between them and how a call reaches the chosen one.

Each provider has a ``missing(x)`` check that says why it cannot run this input (or ``None``);
an explicitly chosen provider that cannot run fails with that reason; ``auto`` takes, on a GPU, the
provider that measured fastest there (``xrt.pytorch.auto``) and elsewhere the first that can run, in
the device's preference order.

Under torch.compile an op's public function is traced, and Dynamo guards on the path to every
object it reads; the compiled code checks those guards on every call. So the traced path is kept
short: :func:`choose` checks the chosen provider in a constant of the trace (:func:`_checked`),
:func:`call` goes straight to the op's twin, and layernorm, softmax and square call these
functions by names of their own (``_choose = dispatch.choose``): a module reached by two paths (an op
module's ``dispatch`` and ``dispatch``'s own globals) costs a Python check on every call (CPU: the
guard check of ``fused_layernorm`` went from 3.8 to 2.6 µs, the twin called directly 1.2).
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from xrt.kernels import autotable, defs, rawenv
from xrt.pytorch import auto, policy

# What ``auto`` tries, per device type, in order (on CUDA only an op with its own order: the others
# take the measured table's choice, see choose).
AUTO_ORDER = {"cuda": ("triton", "cuda", "torch"), "xpu": ("xpu", "torch"), "cpu": ("torch",)}


@dataclass(frozen=True)
class Provider:
    op: str
    name: str
    fn: Callable[..., torch.Tensor]
    missing: Callable[[torch.Tensor], str | None]


_REGISTRY: dict[str, dict[str, Provider]] = {}


def register(op: str, name: str, missing: Callable[[torch.Tensor], str | None]):
    """Decorator: ``fn`` implements ``op`` for provider ``name``. ``missing(x)`` may read only
    ``x``'s device and dtype (and the environment): under torch.compile its answer is a constant
    of the trace (:func:`choose`)."""
    if name not in policy.PROVIDERS:
        raise ValueError(f"unknown provider {name!r}; valid: {', '.join(policy.PROVIDERS)}")

    def deco(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        _REGISTRY.setdefault(op, {})[name] = Provider(op, name, fn, missing)
        return fn

    return deco


def providers(op: str) -> dict[str, Provider]:
    return dict(_REGISTRY.get(op, {}))


def ops() -> list[str]:
    """The ops that have providers registered, sorted."""
    return sorted(_REGISTRY)


def get(op: str, name: str) -> Provider:
    try:
        return _REGISTRY[op][name]
    except KeyError:
        have = ", ".join(_REGISTRY.get(op, {})) or "none"
        raise ValueError(f"op {op!r} has no provider {name!r}; registered: {have}") from None


def require(op: str, name: str, x: torch.Tensor) -> Provider:
    """Provider ``name`` of ``op``; a RuntimeError that says why when it cannot run ``x`` here."""
    p = get(op, name)
    why = p.missing(x)
    if why:
        raise RuntimeError(f"xrt op {op!r}: provider {name!r} is unavailable: {why}")
    return p


class _Probe:
    """What a provider's ``missing`` reads of a tensor: its device and dtype."""

    __slots__ = ("device", "dtype", "is_cuda", "is_cpu")

    def __init__(self, device_type: str, index: int | None, dtype: torch.dtype) -> None:
        self.device, self.dtype = torch.device(device_type, index), dtype
        self.is_cuda, self.is_cpu = device_type == "cuda", device_type == "cpu"


@policy.trace_constant
def _checked(op: str, name: str, device_type: str, index: int | None, dtype: torch.dtype) -> str:
    """``name``, a valid choice of ``op`` whose provider can run a tensor of this device and dtype
    (else the error :func:`require` raises). Under torch.compile a constant of the trace: Dynamo
    runs it as it traces, and leaves no guard on the registry and the checks it read (some 30 a
    call, each evaluated on every call of the compiled function)."""
    policy.resolve(op, name)  # an unknown choice raises here
    require(op, name, _Probe(device_type, index, dtype))  # type: ignore[arg-type]
    return name


def choose(op: str, x: torch.Tensor, explicit: str | None = None,
           order: dict[str, tuple[str, ...]] | None = None) -> Provider:
    """The provider that runs ``op`` on ``x`` under the policy in force. ``auto`` on a GPU takes
    the provider that measured fastest for ``op`` on the rows of ``x`` (``xrt.pytorch.auto``: the
    GPU's table, else torch) where it can run ``x``, else torch; elsewhere, or for an op with its own
    ``order``, the first of ``order[device type]`` (else :data:`AUTO_ORDER`) that can run ``x``."""
    if _is_compiling():
        # Dynamo guards on the policy it reads (a change retraces), not on the checks of the choice.
        name = explicit if explicit is not None else policy.resolve(op)
        if name != policy.AUTO:
            return _REGISTRY[op][_checked(op, name, x.device.type, x.device.index, x.dtype)]
    name = policy.resolve(op, explicit)
    if name != policy.AUTO:
        return require(op, name, x)
    if x.device.type == "cuda" and order is None:
        d = defs.OPS.get(op)
        p = _REGISTRY.get(op, {}).get(auto.pick(op, x, autotable.row_shape(x.shape, d is not None and d.flat)))
        return p if p is not None and p.missing(x) is None else get(op, "torch")
    for cand in (order or AUTO_ORDER).get(x.device.type, ("torch",)):
        p = _REGISTRY.get(op, {}).get(cand)
        if p is not None and p.missing(x) is None:
            return p
    return get(op, "torch")


_is_compiling = torch.compiler.is_compiling
_function_modes = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_grad_enabled = torch.is_grad_enabled
_profiling = torch._C._autograd._profiler_enabled
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_forward_ad = importlib.import_module("torch.autograd.forward_ad")


OP, DIRECT, DIRECT_GRAD = 0, 1, 2


def route(*tensors: torch.Tensor | None) -> int:
    """How an op call gets to its provider: ``DIRECT`` (call the provider's function itself,
    skipping the custom op's dispatch), ``DIRECT_GRAD`` (likewise, but autograd records the call)
    or ``OP`` (through the custom op).

    Direct only in plain eager PyTorch: not while torch.compile traces, not under a torch-function
    mode (``with torch.device(...)``) or a dispatch mode
    (FakeTensorMode, functionalization), not inside a functorch transform (vmap, grad), not under
    forward-mode AD (``dual_level``), and only for plain tensors and parameters.
    """
    if (_is_compiling() or _function_modes() or _dispatch_modes() or _functorch()
            or _forward_ad._current_level >= 0):
        if _forward_ad._current_level >= 0 and not (_is_compiling() or _functorch()):
            _refuse_tangents(tensors)
        return OP
    grad = False
    for t in tensors:
        if t is not None:
            if type(t) not in _PLAIN:
                return OP
            grad = grad or t.requires_grad
    return DIRECT_GRAD if grad and torch.is_grad_enabled() else DIRECT


def _refuse_tangents(tensors: tuple[torch.Tensor | None, ...]) -> None:
    """Forward-mode AD (``dual_level``) reaching an xrt op with a tangent: the custom ops have no
    forward rule, and the output would come back without its tangent."""
    for t in tensors:
        if t is not None and _forward_ad.unpack_dual(t).tangent is not None:
            raise NotImplementedError("xrt's ops have no forward-mode derivative: an input carries a tangent "
                                      "(torch.autograd.forward_ad); use torch's op, or reverse mode")


class Pause:
    """How deep this thread is in calls whose routed torch functions are torch's (a routed call's
    own work, an op's torch provider): routing leaves them to torch while ``depth`` is not 0."""

    __slots__ = ("depth",)

    def __init__(self) -> None:
        self.depth = 0


class _Routing(threading.local):
    """This thread's state of :mod:`xrt.pytorch.routing` that the ops must see. The pause is a plain
    object: changing its attribute costs a fraction of changing a thread-local's, on every routed call."""

    def __init__(self) -> None:
        self.pause = Pause()


ROUTING = _Routing()


# Set by xrt.pytorch.routing while some of torch's functions are its wrappers.
PATCHED = [False]


def unrouted(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, torch's own op run by an op's torch provider: a routing policy in force does
    not send it to xrt's kernels (``provider="torch"`` stays torch). Free while nothing is routed."""
    if _is_compiling() or not PATCHED[0]:
        return fn(*args)
    pause = ROUTING.pause
    pause.depth += 1
    try:
        return fn(*args)
    finally:
        pause.depth -= 1


def eager_autograd(op: str, setup_context: Callable[..., None],
                   backward: Callable[..., Any]) -> type[torch.autograd.Function]:
    """An ``autograd.Function`` for the ``DIRECT_GRAD`` route of a one-output op: ``apply(*inputs,
    provider)`` runs the provider's function, with the custom op's own ``setup_context`` and
    ``backward`` (same ``inputs``, same saved tensors, same formula, so double backward behaves as
    the custom op's does), without the custom op's dispatch."""

    # forward(ctx, ...) rather than a separate setup_context: with one, every apply() binds its
    # arguments through inspect.signature (torch 2.11), about 10 us a call of Python.
    def forward(ctx: Any, *args: Any) -> Any:
        out = get(op, args[-1]).fn(*args[:-1])
        setup_context(ctx, args, out)
        return out

    def back(ctx: Any, *grads: Any) -> Any:
        return backward(ctx, *grads)

    # Built with type() so that the graph node is named after the op (Eager_squareBackward).
    return type(f"Eager_{op}", (torch.autograd.Function,), {
        "forward": staticmethod(forward), "backward": staticmethod(back)})


_unsafe_view = torch.ops.aten._unsafe_view.default


def fresh(y: torch.Tensor, shape: Any) -> torch.Tensor:
    """An op's output ``y``, shaped ``shape``, that autograd does not take for a view (as
    ``aten::matmul`` returns its folded result): ``y`` may be a view made inside the op's autograd
    Function, which an in-place op after it (``nn.ReLU(inplace=True)``) would fail on, and FSDP2
    warns on module outputs that are views. Only for outputs that no backward saves (GEMM,
    layernorm): an in-place op on them cannot corrupt a saved tensor."""
    return _unsafe_view(y, shape)


def contiguous_like(x: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """The fake output of an op whose output is shaped like its first input, contiguous."""
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# The ops that torch.compile gets instead of ``xrt::<op>`` for a provider, by (op, provider): for
# ``triton``, a ``torch.library.triton_op`` whose kernels Inductor sees and launches from its own
# code; for ``cuda``, the op tagged ``cudagraph_unsafe``. Filled by :func:`define` and :func:`compiled_twin`.
COMPILED: dict[tuple[str, str], Any] = {}

# CUDA C kernels launch through pycuda on the legacy default stream and synchronise on any other
# stream (a CUDA graph's capture stream among them): a graph cannot capture them.
CUDA_TAGS = (torch.Tag.cudagraph_unsafe,)


# The functions of the triton_op twins, by op name: what triton_op's own scan would have read.
SCANNED: dict[str, Callable[..., Any]] = {}


def unscanned(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` whose source ``inspect`` cannot find (its code names no file). ``triton_op`` scans a
    function's source for ``wrap_triton`` calls to key its compile cache, and that scan imports
    Inductor and Dynamo: 2.7 s of every ``import xrt.pytorch`` on the CPU. The twins launch through
    the Launcher, so the scan finds no kernel in them; skipped, it returns the same empty list at once.
    tests/test_compile_triton.py checks that the full scan of each twin's function finds nothing."""
    code = fn.__code__.replace(co_filename=f"<xrt twin: {fn.__code__.co_filename}>")
    out = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__annotations__, out.__kwdefaults__ = dict(fn.__annotations__), fn.__kwdefaults__
    out.__qualname__, out.__module__, out.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return out


_SOURCES: list[str] = []  # the hash of the twins' code, made at the first compile that asks for it


def _sources_hash() -> str:
    """sha256 of the code a twin's trace runs: xrt's kernel layer (kernels, launchers, configs and
    tables, ``xrt/kernels``) and the ops' functions (``xrt/pytorch/ops``), file by file."""
    if not _SOURCES:
        import hashlib
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]  # the xrt package
        h = hashlib.sha256()
        for path in sorted([*root.joinpath("kernels").rglob("*.py"), *root.joinpath("pytorch", "ops").glob("*.py")]):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        _SOURCES.append(h.hexdigest())
    return _SOURCES[0]


def cache_fingerprint() -> str:
    """What a twin's traced kernels depend on beyond the graph that calls it: xrt's code
    (:func:`_sources_hash`) and the tuned configs of the policies in force on this thread. The
    twin's body picks its kernels, configs and grid while AOTAutograd traces it, after Dynamo made
    the graph, so none of that is in the graph."""
    import hashlib
    import json

    tuned = [sorted((list(k), v) for k, v in layer.tuned.items()) for layer in policy._layers()]
    text = json.dumps(tuned, sort_keys=True, default=repr)
    return f"# xrt twins: code {_sources_hash()}, tuned configs {hashlib.sha256(text.encode()).hexdigest()}"


def _no_kernel() -> None:
    """The body torch's cache key reads for :class:`_CacheKey` (its code names nothing)."""


class _CacheKey:
    """The kernel torch's compile caches are told a twin launches (``triton_ops_to_kernels``). The
    AOTAutograd cache keys a graph on the source of each triton_op's kernels, which it knows from
    a scan for ``wrap_triton`` calls; a twin launches through the Launcher, so the scan finds none,
    and a warm cache would serve a graph traced with another xrt's kernels or another tuned config.
    Its ``src`` is :func:`cache_fingerprint`, read when the key is made; ``fn`` and ``__name__``
    are what torch's source walk reads besides."""

    def __init__(self) -> None:
        self.__name__ = "xrt_twin_cache_key"
        self.fn = _no_kernel

    @property
    def src(self) -> str:
        return cache_fingerprint()


CACHE_KEY = _CacheKey()


def compiled_twin(op: str, provider: str, fn: Callable[..., Any], setup_context: Callable[..., None] | None = None,
                  backward: Callable[..., Any] | None = None, fake: Callable[..., Any] | None = None) -> Any:
    """The op that torch.compile calls for ``op`` run by ``provider`` (:data:`COMPILED`), with the
    schema of ``fn``: ``xrt::<op>_triton``, a ``triton_op`` (``fn`` launches its kernels through
    :class:`~xrt.kernels.triton.launch.Launcher`, which records them for ``wrap_triton`` in a trace,
    so no fake is needed), or ``xrt::<op>_cuda``, a custom op tagged ``cudagraph_unsafe`` with
    ``fake``. Autograd from ``setup_context`` and ``backward``, registered outside the op, so a
    compiled backward traces through it too."""
    name = f"xrt::{op}_{provider}"
    if provider == "triton":
        twin = torch.library.triton_op(name, unscanned(fn), mutates_args=())
        SCANNED[name] = fn
        kernels = getattr(torch._library.triton, "triton_ops_to_kernels", None)  # (torch 2.11 to 2.13)
        if kernels is not None:
            kernels[name] = [CACHE_KEY]
    elif provider == "cuda":
        twin = torch.library.custom_op(name, fn, mutates_args=(), tags=CUDA_TAGS)
        twin.register_fake(fake)
    else:
        raise ValueError(f"xrt op {op!r}: no compiled twin for provider {provider!r} (triton or cuda)")
    if backward is not None:
        twin.register_autograd(backward, setup_context=setup_context)
    COMPILED[(op, provider)] = twin
    return twin


def define(op: str, fake: Callable[..., torch.Tensor], setup_context: Callable[..., None],
           backward: Callable[..., Any], inputs: int = 1, triton: bool = False,
           ) -> tuple[Any, type[torch.autograd.Function]]:
    """The custom op ``xrt::<op>(*tensors, provider)`` of a one-output op with ``inputs`` tensor inputs
    (1 or 2): the provider's function, ``fake(*tensors)`` for torch.compile, autograd from
    ``setup_context`` and ``backward``; and its :func:`eager_autograd` twin, for :func:`call`.

    Also the ops torch.compile calls instead (:func:`compiled_twin`): ``xrt::<op>_cuda`` for the
    CUDA C provider and, with ``triton``, ``xrt::<op>_triton`` for the Triton provider, whose
    function must launch only through ``Launcher`` (or ``wrap_triton``) and torch ops."""
    if inputs == 1:
        def impl(x: torch.Tensor, provider: str) -> torch.Tensor:
            return get(op, provider).fn(x)

        def fake_impl(x: torch.Tensor, provider: str) -> torch.Tensor:
            return fake(x)
    elif inputs == 2:
        def impl(a: torch.Tensor, b: torch.Tensor, provider: str) -> torch.Tensor:
            return get(op, provider).fn(a, b)

        def fake_impl(a: torch.Tensor, b: torch.Tensor, provider: str) -> torch.Tensor:
            return fake(a, b)
    else:
        raise ValueError(f"xrt op {op!r}: define() takes 1 or 2 tensor inputs, not {inputs}")
    custom = torch.library.custom_op(f"xrt::{op}", impl, mutates_args=())
    custom.register_fake(fake_impl)
    custom.register_autograd(backward, setup_context=setup_context)
    compiled_twin(op, "cuda", impl, setup_context, backward, fake_impl)
    if triton:
        compiled_twin(op, "triton", impl, setup_context, backward)
    return custom, eager_autograd(op, setup_context, backward)


def call(op: str, chosen: Provider, custom: Any, eager: type[torch.autograd.Function],
         *tensors: torch.Tensor) -> torch.Tensor:
    """Run ``chosen`` on ``tensors`` the way :func:`route` says: its function itself in plain eager
    PyTorch (what the custom op would run, without its dispatch), ``eager`` when autograd records the
    call, else the custom op (under torch.compile, its :data:`COMPILED` twin for this provider where
    there is one); inside :func:`op_range` while a profiler records."""
    if _is_compiling():  # the OP route, no profiler range (Dynamo drops record_function)
        return compiled(op, chosen.name, custom, tensors[0])(*tensors, chosen.name)
    how = route(*tensors)
    if how == DIRECT and not _profiling():
        return chosen.fn(*tensors)
    with op_range(op, chosen.name):
        if how == DIRECT:
            return chosen.fn(*tensors)
        if how == DIRECT_GRAD:
            return eager.apply(*tensors, chosen.name)
        return compiled(op, chosen.name, custom, tensors[0])(*tensors, chosen.name)


# Whether CPU tensors (Triton's interpreter) take the triton_op twins under torch.compile. Off:
# Inductor cannot launch a Triton kernel on CPU tensors, so there the opaque custom op stays. The
# tests turn it on to check the traced graphs with a backend that runs them in Python (aot_eager).
TRITON_OP_ON_CPU = False


def _refuse_traced_derivatives(op: str) -> None:
    """Raise while Dynamo traces an xrt op under forward-mode AD (``jvp``, ``jacfwd``, ``dual_level``)
    or under a torch.func gradient transform with grad mode on: the custom ops have no rule there, and
    forward mode gave zero tangents without a word. (vmap runs: torch's per-sample fallback; so does
    a call under ``no_grad`` inside ``grad``.) Eager transforms run. Every op's compiled call passes
    here: :func:`compiled` (the ops of :func:`call`, layernorm) and :func:`in_transforms` (the others)."""
    if not (_functorch() or _forward_ad_level() >= 0):
        return
    kinds = set(_traced_transforms())
    if _forward_ad_level() >= 0 or "Jvp" in kinds or (kinds - {"Vmap", "Jvp"} and _grad_enabled()):
        raise NotImplementedError(f"xrt::{op}: torch.compile of forward-mode AD (jvp, jacfwd, dual_level) or of a "
                                  f"torch.func gradient transform (grad, vjp, jacrev) over xrt's ops is not "
                                  f"supported; run the transform eagerly or compile without it")


@policy.trace_constant
def _forward_ad_level() -> int:
    """``torch.autograd.forward_ad``'s current level (-1: none); while Dynamo traces, a constant."""
    return _forward_ad._current_level


@policy.trace_constant
def _traced_transforms() -> tuple[str, ...]:
    """The kinds of the torch.func transforms in force ("Vmap", "Grad", "Jvp", ...), outermost
    first; while Dynamo traces, a constant of the trace."""
    return tuple(str(i.key()).rsplit(".", 1)[-1] for i in torch._C._functorch.get_interpreter_stack() or ())


def compiled(op: str, provider: str, custom: Any, x: torch.Tensor) -> Any:
    """The op a call of ``op`` on ``x`` through ``provider`` goes to on the ``OP`` route: under
    torch.compile its :data:`COMPILED` twin where there is one (for a CPU ``x`` only with
    :data:`TRITON_OP_ON_CPU`); inside a functorch transform, ``custom`` through
    :func:`transformable`; else ``custom``. (Only under compile: in eager the twins would add
    nothing but their own dispatch.)"""
    if _is_compiling():
        _refuse_traced_derivatives(op)
        if x.device.type != "cpu" or TRITON_OP_ON_CPU:
            return COMPILED.get((op, provider), custom)
        return custom
    return in_transforms(custom)


def in_transforms(custom: Any) -> Any:
    """``custom``, or inside a functorch transform where autograd records (grad mode on) its
    :func:`transformable` form. Under ``no_grad`` torch's autograd of the op runs nothing, and
    under torch.compile the custom op stays (inside a traced derivative transform it raises,
    :func:`_refuse_traced_derivatives`)."""
    if _is_compiling():
        _refuse_traced_derivatives(custom._qualname.removeprefix("xrt::"))
        return custom
    return transformable(custom) if _functorch() and _grad_enabled() else custom


def once_differentiable(backward: Callable[..., Any]) -> Callable[..., Any]:
    """A custom op's backward whose gradients have no derivative of their own (saved constants):
    torch's ``once_differentiable`` in eager autograd; inside functorch transforms
    (:func:`transformable`) the op refuses nested gradient transforms, where a second derivative
    would read as zeros."""
    wrapped = torch.autograd.function.once_differentiable(backward)
    wrapped.xrt_once = True  # type: ignore[attr-defined]
    return wrapped


def _gradient_levels() -> int:
    """How many functorch transforms that differentiate (grad, vjp, jacrev, jvp) are active."""
    from torch._C._functorch import TransformType
    from torch._functorch import pyfunctorch

    levels = pyfunctorch.retrieve_all_functorch_interpreters()
    return sum(i.key() in (TransformType.Grad, TransformType.Jvp) for i in levels)


_TRANSFORMABLE: dict[str, Callable[..., Any]] = {}


def transformable(custom: Any) -> Callable[..., Any]:
    """``custom`` (a ``torch.library.custom_op`` with ``register_autograd``), callable inside
    functorch transforms (``torch.func.grad``, ``vjp``, ``jacrev``, ``vmap``): torch's own autograd of
    a custom op is an ``autograd.Function`` without a separate ``setup_context``, which functorch
    refuses. This one runs the op with its registered ``setup_context`` and ``backward``, and lets
    functorch derive its vmap rule (the op itself then runs once per batch entry under ``vmap``)."""
    name = custom._qualname
    fn = _TRANSFORMABLE.get(name)
    if fn is None:
        setup, back = custom._setup_context_fn, custom._backward_fn
        once = getattr(back, "xrt_once", False)

        def forward(*args: Any) -> Any:
            return custom(*args)

        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            # functorch calls it at every level, a level without gradients included: the op's own
            # runs where autograd records, as for torch's autograd of the op
            if setup is not None and any(getattr(ctx, "needs_input_grad", (True,))):
                setup(ctx=ctx, inputs=inputs, output=output)

        def backward(ctx: Any, *grads: Any) -> Any:
            if back is None:
                raise RuntimeError(f"{name} has no derivative (its backward is not differentiable)")
            return back(ctx, *grads)

        cls = type(f"Transformable_{name.replace('::', '_')}", (torch.autograd.Function,), {
            "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
            "backward": staticmethod(backward), "generate_vmap_rule": True})
        fn = cls.apply
        if once:
            def fn(*args: Any, _apply: Callable[..., Any] = cls.apply) -> Any:
                if _gradient_levels() > 1:
                    raise RuntimeError(f"{name}: its gradient has no derivative, so it cannot run inside nested "
                                       "gradient transforms (grad of grad, jacrev of jacrev, hessian)")
                return _apply(*args)
        _TRANSFORMABLE[name] = fn
    return fn


def profiling() -> bool:
    """Is a profiler recording (then ops wrap their call in :func:`op_range`)?"""
    return _profiling()


def op_range(op: str, provider: str):
    """The profiler range ``xrt::<op>[<provider>]`` around an op call (none while compiling:
    Dynamo drops record_function anyway, and says so on every call; none while no profiler runs:
    a range nobody records still costs microseconds of Python)."""
    if _is_compiling() or not _profiling():
        return contextlib.nullcontext()
    return torch.profiler.record_function(f"xrt::{op}[{provider}]")


# -- availability checks shared by all ops ------------------------------------------------------

def torch_missing(x: torch.Tensor) -> str | None:
    return None


def _have(module: str) -> bool:
    """Is ``module`` installed (asked once; a plain dict, which Dynamo traces without a warning)?"""
    have = _HAVE.get(module)
    if have is None:
        have = _HAVE[module] = importlib.util.find_spec(module) is not None
    return have


# Asked at import: Dynamo refuses to trace importlib's find_spec, and an op's first call may be
# inside a compiled function.
_HAVE: dict[str, bool] = {"triton": importlib.util.find_spec("triton") is not None}


# TRITON_INTERPRET read raw (xrt.kernels.rawenv): a tenth of os.environ.get's cost, changes seen at once.
_ENV, _INTERPRET, _ON = rawenv.DATA, rawenv.key("TRITON_INTERPRET"), rawenv.value("1")


def triton_missing(x: torch.Tensor) -> str | None:
    if not _have("triton"):
        return "triton is not installed (pip install -e '.[torch]' in an xpuruntime checkout on Linux x86_64)"
    if x.is_cuda:
        return None
    if x.is_cpu:
        if _ENV.get(_INTERPRET) == _ON:
            if x.dtype == torch.bfloat16:  # numpy has no bfloat16: the interpreter returns NaNs
                return "Triton's CPU interpreter (TRITON_INTERPRET=1) cannot compute in bfloat16"
            return None
        return "the tensor is on the CPU; Triton runs there only under TRITON_INTERPRET=1"
    if x.device.type == "xpu":
        return "use provider 'xpu' for XPU tensors"
    return f"Triton does not run on {x.device.type} tensors"


def cuda_missing(x: torch.Tensor) -> str | None:
    from xrt.kernels import cuda

    why = cuda.missing()
    if why:
        return why
    if not x.is_cuda:
        return f"the tensor is on {x.device}, not on a CUDA device"
    return None


def xpu_missing(x: torch.Tensor) -> str | None:
    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        return "no Intel XPU is visible to torch.xpu (needs torch's XPU build and Intel's GPU driver)"
    if x.device.type != "xpu":
        return f"the tensor is on {x.device}, not on an XPU"
    if not _have("triton"):
        return "triton (Intel's XPU backend ships with torch's XPU wheels) is not installed"
    return None
