"""Routing unmodified models: torch's own calls sent to xrt's kernels by the kernel policy.

While a policy routes an op (names one of xrt's providers for it, or ``auto`` where this machine's
table can pick one), that op's torch functions are replaced by wrappers that send these calls to
``xp.ops``:

=================================================  ==============  =========================
torch call                                         policy op       xrt op
=================================================  ==============  =========================
``F.linear`` (``nn.Linear``)                       ``matmul``      ``matmul`` (+ bias)
``torch.matmul``, ``Tensor.matmul``, ``a @ b``,    ``matmul``      ``matmul`` or ``bmm``
``torch.mm``, ``torch.bmm`` (and the methods)
``F.layer_norm``, ``torch.layer_norm``             ``layernorm``   ``fused_layernorm``
(``nn.LayerNorm``)
``F.scaled_dot_product_attention``                 ``attention``   ``fused_attention``
``F.softmax``, ``torch.softmax``,                  ``softmax``     ``softmax``
``Tensor.softmax``
=================================================  ==============  =========================

Why wrappers in torch's namespace (Liger-Kernel's way) and not a ``TorchFunctionMode``: a mode's
Python hook runs for every torch call of the thread (views, adds, GELU), and cost a GPT-style model
10 % (train) and 22 % (inference) on the H100 with every call left to torch. A wrapper runs only for
its own function; torch's other calls pay nothing. The wrappers are process-wide but the routing is
per thread: a wrapper on a thread that does not route its op calls torch's function at once. They
run above autograd, so the xrt op's own backward runs, and Dynamo inlines them, so
``torch.compile`` puts the xrt custom ops in its graph. Leaving the policy puts back the very
objects torch had. Registering kernels for ``aten::linear`` would be process-wide, below autograd
(torch's formula, not xrt's backward) and bypassed by Inductor's decompositions.

Not seen: code that bound a function before the policy (``from torch.nn.functional import
linear``), and, under ``torch.compile``, ``a @ b`` and the tensor methods (Dynamo takes them as
graph ops without looking them up on the class).

Every call that the xrt op cannot take exactly as torch would goes to torch's own function with
its arguments untouched: a policy choice of torch's, a provider that cannot run the tensor here,
another dtype, a tensor subclass (DTensor), ``out=``, masks or dropout, autocast, functorch
transforms, forward-mode AD. ``docs/runtime.md`` ("Routing unmodified models") lists the limits.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch

from xrt.kernels import autotable, defs
from xrt.pytorch import auto, ops, policy
from xrt.pytorch.ops import dispatch
from xrt.pytorch.ops.attention import unsupported as attention_unsupported
from xrt.pytorch.ops.matmul import linear as _linear_op

F = torch.nn.functional
TORCH = "torch"

# The choices of each routed policy op that send a call to one of xrt's providers (its definition's
# providers but torch: xrt/kernels/defs); every other choice of the op (torch's own: "torch", "default",
# "cublasLt", an SDPA backend) leaves it to torch.
XRT_CHOICES: dict[str, tuple[str, ...]] = {
    d.name: tuple(p for p in d.providers if p != TORCH) for d in defs.OPS.values() if d.routed}
# The dtypes xrt's GEMM, layernorm and softmax kernels take (attention checks its own).
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_functorch = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_forward_ad = importlib.import_module("torch.autograd.forward_ad")


def auto_provider(op: str, x: torch.Tensor, shape: Sequence[int] | None = None, train: bool | None = None) -> str:
    """What ``auto`` routes ``op`` on ``x`` to: the provider that measured fastest on this GPU for
    ``op``'s (dtype, shape bucket), from the committed table (:mod:`xrt.pytorch.auto`), else torch
    (the rule in :mod:`xrt.kernels.autotable`). ``op`` is the measured op (``bmm`` for a batched
    ``matmul``) and ``shape`` its suite shape (xrt/kernels/defs); by default the rows of ``x``.
    ``train``: autograd records the call (forward plus backward times decide where measured)."""
    if shape is None:
        shape = autotable.row_shape(x.shape, defs.get(op).flat)
    return auto.pick(op, x, shape, train)


# A routed call's measured op, its suite shape (what auto looks up) and whether autograd records it,
# from the call's arguments; None when they do not give one (then auto leaves the call to torch).
Measured = tuple[str, Sequence[int], bool] | None


def _records(*tensors: Any) -> bool:
    """Does autograd record a call on these arguments (one requires grad, grad mode on)?"""
    return torch.is_grad_enabled() and any(type(t) in _PLAIN and t.requires_grad for t in tensors)


def auto_device(x: torch.Tensor) -> bool:
    """Can ``auto`` name an xrt provider for a tensor on ``x``'s device? Only on CUDA
    (:mod:`xrt.pytorch.auto`); a seam for the tests."""
    return x.is_cuda


def provider(op: str, x: torch.Tensor, measured: Callable[[], Measured] | None = None) -> str:
    """The provider a routed call of policy op ``op`` on ``x`` goes to: ``"torch"`` (torch's own
    function, untouched) or one of xrt's that can run ``x`` here. The one place routing asks the
    policy: the merged choice (scopes, global, ``XRT_KERNEL_POLICY``), ``auto`` through
    :func:`auto_provider` with what ``measured()`` gives (by default ``op`` on the rows of ``x``);
    it is called only for ``auto``."""
    choice = policy.resolve(op)
    if choice == policy.AUTO:
        if not auto_device(x):  # no need to measure the call
            return TORCH
        which = measured() if measured is not None else (op, None, _records(x))
        choice = TORCH if which is None else auto_provider(which[0], x, which[1], which[2])
    if choice not in XRT_CHOICES[op]:
        return TORCH
    if dispatch.get(op, choice).missing(x) is not None:
        return TORCH
    return choice


def _plain(*tensors: Any) -> bool:
    """Plain tensors (or parameters) or ``None``: no subclass (DTensor, FakeTensor wrappers...)."""
    return all(t is None or type(t) in _PLAIN for t in tensors)


def _eager_safe(x: torch.Tensor) -> bool:
    """Does this call's context leave xrt's ops free to run? Not under autocast (its casts are the
    dispatcher's, below the wrappers), a functorch transform or forward-mode AD (no rules for them).
    Under torch.compile, not inside a traced ``torch.func`` transform or forward-mode AD either (xrt's
    ops do not run there, :func:`xrt.pytorch.ops.dispatch.compiled`): constants of the trace."""
    if torch.is_autocast_enabled("cuda" if x.is_cuda else x.device.type):  # (a device object costs a microsecond)
        return False
    if torch.compiler.is_compiling():
        return not (_functorch() or dispatch._forward_ad_level() >= 0)
    return not (_functorch() or _forward_ad._current_level >= 0)


def _usable(x: Any, *others: Any) -> bool:
    """A non-empty plain tensor of a routed dtype, with ``others`` (tensors or ``None``) of its
    dtype and device."""
    if type(x) not in _PLAIN or x.dtype not in DTYPES or x.numel() == 0:
        return False
    dtype = x.dtype
    for t in others:
        if t is not None and (type(t) not in _PLAIN or t.dtype != dtype):
            return False
    return _same_device(x, *others)


def _same_device(x: torch.Tensor, *others: Any) -> bool:
    """Are ``others`` (tensors or ``None``) on ``x``'s device? (A ``torch.device`` is made anew on each
    access: two CUDA tensors compare by index alone.)"""
    index, cuda = x.get_device(), x.is_cuda
    for t in others:
        if t is not None and (t.get_device() != index or not (cuda and t.is_cuda) and t.device != x.device):
            return False
    return True


# -- the handlers: (func, args, kwargs) -> torch's result or the xrt op's ---------------------------

_fresh = dispatch.fresh

def _bind(signature: Callable[..., tuple], args: tuple, kwargs: dict) -> tuple | None:
    """The call's arguments by ``signature``'s parameters, or ``None`` when they do not fit it
    (then torch's function gets them, and raises its own error)."""
    try:
        return signature(*args, **kwargs)
    except TypeError:
        return None


def _linear_sig(input, weight, bias=None):
    return input, weight, bias


def _layer_norm_sig(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return input, normalized_shape, weight, bias, eps


def _f_softmax_sig(input, dim=None, _stacklevel=3, dtype=None):
    return input, dim, dtype  # F.softmax's third parameter is _stacklevel


def _softmax_sig(input, dim=None, dtype=None):
    return input, dim, dtype  # torch.softmax's and Tensor.softmax's third parameter is dtype


def _sdpa_sig(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


def _first(args: tuple, kwargs: dict, name: str) -> Any:
    """The call's first argument (``self`` of a method): what the policy is asked about."""
    return args[0] if args else kwargs.get(name)


def _ask(op: str, x: Any, measured: Callable[[], Measured] | None = None) -> str:
    """:func:`provider` for a plain tensor ``x``; ``"torch"`` for anything else."""
    return provider(op, x, measured) if type(x) in _PLAIN else TORCH


# -- what auto looks up for each routed call: the measured op and its suite shape (xrt/kernels/defs) ---

def _dims(t: Any, n: int) -> bool:
    return type(t) in _PLAIN and t.dim() >= n


def _linear_measured(args: tuple, kwargs: dict) -> Measured:
    bound = _bind(_linear_sig, args, kwargs)
    if bound is None or not _dims(bound[0], 1) or not _dims(bound[1], 2) or bound[0].shape[-1] == 0:
        return None
    input, weight, bias = bound
    return "matmul", (input.numel() // input.shape[-1], weight.shape[0], weight.shape[1]), _records(input, weight, bias)


def _matmul_measured(args: tuple, kwargs: dict) -> Measured:
    if kwargs or len(args) != 2 or not _dims(args[0], 2) or not _dims(args[1], 2):
        return None
    a, b = args
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.dim() == 2:
        return "matmul", (a.numel() // k if k else 0, n, k), _records(a, b)
    if a.dim() == b.dim() and a.shape[:-2] == b.shape[:-2]:
        return "bmm", (math.prod(a.shape[:-2]), m, n, k), _records(a, b)
    return None


def _layer_norm_measured(args: tuple, kwargs: dict) -> Measured:
    bound = _bind(_layer_norm_sig, args, kwargs)
    if bound is None or type(bound[0]) not in _PLAIN:
        return None
    input, ns, weight, bias = bound[:4]
    try:
        n = int(ns) if isinstance(ns, int) else math.prod([int(d) for d in ns])  # a list: Dynamo traces it
    except (TypeError, ValueError):
        return None  # torch's function raises its own error
    return "layernorm", (input.numel() // n if n else 0, n), _records(input, weight, bias)


def _sdpa_measured(args: tuple, kwargs: dict) -> Measured:
    bound = _bind(_sdpa_sig, args, kwargs)
    if bound is None or not _dims(bound[0], 4) or bound[0].dim() != 4:
        return None
    q, is_causal = bound[0], bound[5]
    return "attention", (*q.shape, int(bool(is_causal))), _records(*bound[:3])


# -- the decision's key: the call's cheap values that the provider depends on -----------------------
#
# A routed call's provider depends on the policy in force (the op's choice; under auto the table)
# and, of the call, only on what ``provider`` reads: the asked tensor's type, device and dtype, and
# under auto the measured op's shape and whether autograd records the call. Each key function gives
# those from the call's usual forms (positional tensors, the keywords of the signature), without
# binding it; ``None`` for any other form, which is then decided uncached. Shapes are the tensors'
# own (``torch.Size``), cheaper to hash than a bucket to compute. A key's first item ("route:...")
# keeps it apart from the other answers the merged policy's memo holds (tuned configs, plans).

_grad = torch.is_grad_enabled


def _where(x: torch.Tensor) -> int | str:
    """A tensor's device as a key: the index of a CUDA device, the type of any other (what the
    decision reads of it): a ``torch.device`` is made anew on each access and is slow to hash and compare."""
    return x.get_device() if x.is_cuda else "cpu" if x.is_cpu else x.device.type


def _rg(t: Any) -> bool:
    """Does ``t`` (any argument) count for :func:`_records`?"""
    return type(t) in _PLAIN and t.requires_grad


def _linear_key(args: tuple, kwargs: dict) -> tuple | None:
    if kwargs or not 2 <= len(args) <= 3:
        return None
    x, w = args[0], args[1]
    if type(x) not in _PLAIN or type(w) not in _PLAIN:
        return None
    train = _grad() and (w.requires_grad or x.requires_grad or len(args) == 3 and _rg(args[2]))
    return ("route:linear", _where(x), x.dtype, x.shape, w.shape, train)


def _matmul_key(args: tuple, kwargs: dict) -> tuple | None:
    if kwargs or len(args) != 2:
        return None
    a, b = args
    if type(a) not in _PLAIN or type(b) not in _PLAIN:
        return None
    return ("route:matmul", _where(a), a.dtype, a.shape, b.shape, _grad() and (a.requires_grad or b.requires_grad))


def _keywords_after(signature: Callable[..., tuple]) -> tuple[frozenset[str], ...]:
    """Per count of positional arguments, the parameter names a call may still pass by keyword:
    a call that passes more, or a name twice, does not bind, and gets no key (its decision, torch's
    for an unbound auto call, must not stand for the calls that bind)."""
    names = signature.__code__.co_varnames[:signature.__code__.co_argcount]
    return tuple(frozenset(names[i:]) for i in range(len(names) + 1))


_LAYER_NORM_KW = _keywords_after(_layer_norm_sig)


def _layer_norm_key(args: tuple, kwargs: dict) -> tuple | None:
    n = len(args)
    if n < 2 or n >= len(_LAYER_NORM_KW) or (kwargs and not kwargs.keys() <= _LAYER_NORM_KW[n]):
        return None
    x, ns = args[0], args[1]
    if type(x) not in _PLAIN or type(ns) not in (int, tuple, torch.Size):
        return None
    train = _grad() and (x.requires_grad or _rg(args[2] if n > 2 else kwargs.get("weight"))
                         or _rg(args[3] if n > 3 else kwargs.get("bias")))
    return ("route:layer_norm", _where(x), x.dtype, x.shape, ns, train)


def _softmax_key(args: tuple, kwargs: dict) -> tuple | None:
    # softmax's decision binds nothing (auto measures the input's rows): any form of the call keys
    if not args:
        return None
    x = args[0]
    if type(x) not in _PLAIN:
        return None
    return ("route:softmax", _where(x), x.dtype, x.shape, _grad() and x.requires_grad)


_SDPA_KW = _keywords_after(_sdpa_sig)


def _sdpa_key(args: tuple, kwargs: dict) -> tuple | None:
    n = len(args)
    if n < 3 or n >= len(_SDPA_KW) or (kwargs and not kwargs.keys() <= _SDPA_KW[n]):
        return None
    q = args[0]
    if type(q) not in _PLAIN:
        return None
    causal = args[5] if len(args) > 5 else kwargs.get("is_causal", False)
    train = _grad() and (q.requires_grad or _rg(args[1]) or _rg(args[2]))
    return ("route:sdpa", _where(q), q.dtype, q.shape, causal, train)


# -- a row op's width: what auto's floor is compared with, before any key ---------------------------
#
# Under auto, a row op's call whose rows are no wider than every width the table gives to xrt
# (:func:`xrt.pytorch.auto.torch_width`) is torch's whatever else it holds: the wrapper calls torch
# without making its key. A model's layer norms are mostly such calls (d <= 1024 on the H100).

def _layer_norm_width(args: tuple, kwargs: dict) -> int | None:
    ns = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
    if type(ns) is int:
        return ns
    if type(ns) in (tuple, torch.Size) and len(ns) == 1 and type(ns[0]) is int:
        return ns[0]
    return None  # several dims, or a form the key decides


def _softmax_width(args: tuple, kwargs: dict) -> int | None:
    x = args[0] if args else None
    return x.shape[-1] if type(x) in _PLAIN and x.dim() else None


# -- the handlers: (func, args, kwargs, provider) -> the xrt op's result, or torch's ---------------
#
# A handler runs once the call's provider is one of xrt's; it still falls back to torch's function
# for any argument the xrt op cannot take as torch would.

def _linear(func: Callable, args: tuple, kwargs: dict, p: str) -> Any:
    bound = _bind(_linear_sig, args, kwargs)
    if bound is None:
        return func(*args, **kwargs)
    input, weight, bias = bound
    if (not _usable(input, weight, bias) or weight.dim() != 2 or input.dim() < 1
            or input.shape[-1] != weight.shape[1] or (bias is not None and tuple(bias.shape) != (weight.shape[0],))
            or not _eager_safe(input)):
        return func(*args, **kwargs)
    return _linear_op(input, weight, bias, p)


def _matmul(func: Callable, args: tuple, kwargs: dict, p: str) -> Any:
    if kwargs or len(args) != 2:  # out=, or a call torch rejects itself
        return func(*args, **kwargs)
    a, b = args
    if not _usable(a, b) or not _eager_safe(a):
        return func(*args, **kwargs)
    if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != b.shape[-2] or b.numel() == 0:
        return func(*args, **kwargs)
    if func in _MM and (a.dim(), b.dim()) != (2, 2) or func in _BMM and (a.dim(), b.dim()) != (3, 3):
        return func(*args, **kwargs)  # torch.mm / bmm take exactly that rank: torch's error
    if b.dim() == 2:  # [..., M, K] @ [K, N]: one GEMM over all rows
        k = a.shape[-1]
        y = ops.matmul(a.reshape(-1, k), b, provider=p)
        return _fresh(y, (*a.shape[:-1], b.shape[-1]))
    if a.dim() == b.dim() and a.shape[:-2] == b.shape[:-2]:  # equal batch dims: one batched GEMM
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        y = ops.bmm(a.reshape(-1, m, k), b.reshape(-1, k, n), provider=p)
        return _fresh(y, (*a.shape[:-2], m, n))
    return func(*args, **kwargs)  # broadcast batch dims, matrix-vector: torch


def _layer_norm(func: Callable, args: tuple, kwargs: dict, p: str) -> Any:
    bound = _bind(_layer_norm_sig, args, kwargs)
    if bound is None:
        return func(*args, **kwargs)
    input, normalized_shape, weight, bias, eps = bound
    if not _usable(input, weight, bias) or not _eager_safe(input):
        return func(*args, **kwargs)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if (not ns or input.dim() < len(ns) or tuple(input.shape[input.dim() - len(ns):]) != ns
            or any(t is not None and tuple(t.shape) != ns for t in (weight, bias))):
        return func(*args, **kwargs)
    if p in ("triton", "xpu"):
        from xrt.kernels.triton.layernorm import MAX_N

        if math.prod(ns) > MAX_N:
            return func(*args, **kwargs)
    y = ops.fused_layernorm(input, ns, weight, bias, eps, provider=p)
    return y if y._base is None else _fresh(y, y.shape)


def _softmax_call(func: Callable, args: tuple, kwargs: dict, p: str, signature: Callable[..., tuple]) -> Any:
    bound = _bind(signature, args, kwargs)
    if bound is None:
        return func(*args, **kwargs)
    input, dim, dtype = bound
    if (not _usable(input) or type(dim) is not int or input.dim() == 0 or dim not in (-1, input.dim() - 1)
            or (dtype is not None and dtype != input.dtype) or not _eager_safe(input)):
        return func(*args, **kwargs)
    return ops.softmax(input, provider=p)


def _softmax(func: Callable, args: tuple, kwargs: dict, p: str) -> Any:
    return _softmax_call(func, args, kwargs, p, _softmax_sig)


def _f_softmax(func: Callable, args: tuple, kwargs: dict, p: str) -> Any:
    return _softmax_call(func, args, kwargs, p, _f_softmax_sig)


def _sdpa(func: Callable, args: tuple, kwargs: dict, p: str) -> Any:
    bound = _bind(_sdpa_sig, args, kwargs)
    if bound is None:
        return func(*args, **kwargs)
    query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa = bound
    if not _plain(key, value, attn_mask) or not _eager_safe(query):
        return func(*args, **kwargs)
    if (query.numel() == 0 or not _same_device(query, key, value)
            or attention_unsupported(query, key, value, attn_mask, dropout_p, enable_gqa, scale) is not None):
        return func(*args, **kwargs)
    return ops.fused_attention(query, key, value, is_causal=bool(is_causal), scale=scale, provider=p)


_MM = (torch.mm, torch.Tensor.mm)
_BMM = (torch.bmm, torch.Tensor.bmm)

Handler = Callable[[Callable, tuple, dict, str], Any]


class Rule(NamedTuple):
    """How a handler's calls are decided: the policy op, the argument the policy is asked about
    (its name, for a call that passes it by keyword), the measured op's shape for auto, the key."""

    op: str
    first: str
    measured: Callable[[tuple, dict], Measured] | None
    key: Callable[[tuple, dict], tuple | None]
    width: Callable[[tuple, dict], int | None] | None = None  # a row op's N (auto's floor)


RULES: dict[Handler, Rule] = {
    _linear: Rule("matmul", "input", _linear_measured, _linear_key),
    _matmul: Rule("matmul", "input", _matmul_measured, _matmul_key),
    _layer_norm: Rule("layernorm", "input", _layer_norm_measured, _layer_norm_key, _layer_norm_width),
    _softmax: Rule("softmax", "input", None, _softmax_key, _softmax_width),
    _f_softmax: Rule("softmax", "input", None, _softmax_key, _softmax_width),
    _sdpa: Rule("attention", "query", _sdpa_measured, _sdpa_key),
}

# Each routed torch function's handler, by the name the op definitions route (OpDef.routes).
# ``F.layer_norm`` calls ``torch.layer_norm`` and ``F.softmax`` ``Tensor.softmax``: both are
# routed, since Dynamo takes the ``F`` functions as graph ops without looking inside. ``a @ b`` is
# ``Tensor.__matmul__``; ``b.__rmatmul__`` calls ``torch.matmul``.
_HANDLER_OF: dict[str, Handler] = {
    "torch.nn.functional.linear": _linear,
    **dict.fromkeys(("torch.matmul", "torch.Tensor.matmul", "torch.Tensor.__matmul__", "torch.mm", "torch.Tensor.mm",
                     "torch.bmm", "torch.Tensor.bmm"), _matmul),
    **dict.fromkeys(("torch.nn.functional.layer_norm", "torch.layer_norm"), _layer_norm),
    "torch.nn.functional.softmax": _f_softmax,
    **dict.fromkeys(("torch.softmax", "torch.Tensor.softmax"), _softmax),
    "torch.nn.functional.scaled_dot_product_attention": _sdpa,
}


def _owner(path: str) -> tuple[Any, str]:
    """``"torch.nn.functional.linear"`` -> ``(torch.nn.functional, "linear")``."""
    where, name = path.rsplit(".", 1)
    owner: Any = torch
    for part in where.split(".")[1:]:
        owner = getattr(owner, part)
    return owner, name


def _targets(d: Any) -> tuple[tuple[Any, str, Handler], ...]:
    if any(path not in _HANDLER_OF for path in d.routes):
        raise RuntimeError(f"op {d.name!r} routes {[p for p in d.routes if p not in _HANDLER_OF]}, which "
                           "xrt.pytorch.routing has no handler for")
    return tuple((*_owner(path), _HANDLER_OF[path]) for path in d.routes)


# The routed torch functions, by policy op: (owner, attribute, handler), from the op definitions.
TARGETS: dict[str, tuple[tuple[Any, str, Handler], ...]] = {d.name: _targets(d) for d in defs.OPS.values() if d.routes}
# Each routed torch function (as torch defines it) and its handler.
HANDLERS: dict[Any, Handler] = {getattr(o, n): h for targets in TARGETS.values() for o, n, h in targets}
# Where each routed torch function stands (the first of its names), by the function as torch defines it.
_HOMES: dict[Any, tuple[Any, str]] = {}
for _op_targets in TARGETS.values():
    for _o, _n, _ in _op_targets:
        _HOMES.setdefault(getattr(_o, _n), (_o, _n))
_LATE: dict[tuple[Any, str], Callable] = {}


def late(func: Any) -> Any:
    """A routed torch function (or its policy wrapper) as a call that reads the function's attribute
    each time it runs, for code that keeps functions by object: ``torch.fx`` records
    ``F.scaled_dot_product_attention`` as ``torch._C._nn.scaled_dot_product_attention``, which no
    policy replaces. The policy in force at the call then routes it as the model's own call.
    Any other ``func`` as it is."""
    base = func.__wrapped__ if getattr(func, "xrt_routed", None) else func
    try:
        home = _HOMES.get(base)
    except TypeError:  # (an unhashable target)
        return func
    if home is None:
        return func
    call = _LATE.get(home)
    if call is None:
        owner, name = home

        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(owner, name)(*args, **kwargs)

        call.__name__ = call.__qualname__ = name
        call.__module__ = __name__
        call = _LATE[home] = call
    return call


# -- the wrappers: torch's function, replaced while some thread's policy routes its op -------------

class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.ops: frozenset[str] = frozenset()  # the policy ops whose calls this thread routes now
        self.policy_ops: frozenset[str] = frozenset()  # those its policy routes (sync)
        self.explicit = 0  # open routed() blocks


_tls = _ThreadState()


def _decide(rule: Rule, args: tuple, kwargs: dict) -> str:
    """The provider of this call, uncached: :func:`provider` asked about the call's first tensor."""
    x = _first(args, kwargs, rule.first)
    if rule.measured is None:
        return _ask(rule.op, x)
    measured = rule.measured
    return _ask(rule.op, x, lambda: measured(args, kwargs))


def _remember(state: Any, key: tuple | None, rule: Rule, args: tuple, kwargs: dict) -> str:
    """A decision not in ``state``'s memo: made uncached (:func:`_decide`) and kept under ``key``."""
    p = _decide(rule, args, kwargs)
    return p if key is None else state.keep(key, p)


_ROUTING = dispatch.ROUTING
# Dynamo folds it to True as it traces; in eager it is one frame (is_compiling is two).
_compiling = torch.compiler.is_dynamo_compiling
_state = policy.state


# F.layer_norm's own body (torch/nn/functional.py) for a call that stays torch's, in the form
# nn.LayerNorm makes it (five positional arguments, no tensor subclass or torch-function mode): aten's
# layer_norm with cuDNN's switch, read from torch._C as torch.backends.cudnn.enabled reads it, without
# that property's 0.4 µs; and without the wrapper of torch.layer_norm inside F.layer_norm.
_aten_layer_norm = torch._C._VariableFunctions.layer_norm
_cudnn_enabled = torch._C._get_cudnn_enabled
_has_torch_function = torch._C._has_torch_function_variadic
_ANY_WIDTH = autotable.ANY_WIDTH


def _f_layer_norm_as_torch(args: tuple, kwargs: dict, floor: int) -> Any:
    """``F.layer_norm(*args)`` where the call's form allows and its row is no wider than ``floor``
    (:data:`_ANY_WIDTH`: any row), else ``None`` (the caller decides, or calls it)."""
    if kwargs or len(args) != 5:
        return None
    x, ns, w, b, eps = args
    if floor != _ANY_WIDTH and (type(ns) is not tuple or len(ns) != 1 or type(ns[0]) is not int or ns[0] > floor):
        return None
    if _has_torch_function(x, w, b):
        return None
    return _aten_layer_norm(x, ns, w, b, eps, _cudnn_enabled())


_F_FILE = F.__file__  # torch/nn/functional.py, where torch's F.layer_norm is defined


def _as_torch(func: Callable) -> Callable[[tuple, dict], Any] | None:
    """How a wrapper calls ``func`` for a call that stays torch's, where that is not ``func`` itself:
    for torch's own ``F.layer_norm`` (by its code, not by the object in the namespace now: a function
    that another library put there before xrt is called as it is)."""
    code = getattr(func, "__code__", None)
    if code is not None and code.co_name == "layer_norm" and code.co_filename == _F_FILE:
        return _f_layer_norm_as_torch
    return None


@policy.trace_constant
def _floor(op: str, choice: str, generation: int) -> int:
    """The widest row of ``op`` whose calls are torch's without a lookup under ``choice``, the op's
    choice in force: under ``auto`` the table's (:func:`xrt.pytorch.auto.torch_width`), else -1
    (none). ``generation`` is auto's: while Dynamo traces, the answer is a constant of the choice and
    the generation (its guards), not of the tables and memos it reads."""
    return auto.torch_width(op) if choice == policy.AUTO else -1


def _route(func: Callable, handler: Handler, rule: Rule, args: tuple, kwargs: dict) -> Any:
    """A routed call decided afresh, without the kept decisions: what Dynamo traces under
    ``torch.compile`` (it guards on what the decision reads; the pause is eager's). A row op's call
    below auto's floor is torch's before the decision, as in eager: fewer guards on every call."""
    if rule.width is not None:
        w = rule.width(args, kwargs)
        if w is not None and w <= _floor(rule.op, policy.resolve(rule.op), auto._generation):
            return func(*args, **kwargs)
    p = _decide(rule, args, kwargs)
    return func(*args, **kwargs) if p == TORCH else handler(func, args, kwargs, p)


def _wrapper(op: str, func: Callable, handler: Handler) -> Callable:
    """What replaces ``func`` while it is routed. On a thread that does not route ``op`` it costs
    one thread-local lookup before calling ``func`` with the arguments as given.

    On a thread that routes it, the call is decided once per key (:data:`Rule.key`) and policy
    state, and the decision kept in the thread's merged policy (``policy.state().memo``), which any
    change of policy replaces: a scope of other choices, the global policy, ``XRT_KERNEL_POLICY``, a
    new auto table (``auto.clear``); a policy entered again finds its merged state and decisions
    kept. So a call that stays torch's costs the key, one dict lookup and
    torch's own call. While torch's function or the handler runs, the routed functions called inside
    them (the xrt op's own, torch's fallback) are torch's (the thread's pause)."""
    rule = RULES[handler]
    key_of, width_of = rule.key, rule.width
    as_torch = _as_torch(func)
    floor_key = f"route-floor:{op}"  # a str: its hash is kept

    def routed_call(*args: Any, **kwargs: Any) -> Any:
        # The pause first: the second wrapper inside a routed call (torch.layer_norm inside
        # F.layer_norm) costs two attribute reads. Tracing, Dynamo reads it as 0 and guards on that.
        pause = _ROUTING.pause
        if pause.depth or op not in _tls.ops:
            return func(*args, **kwargs)
        if _compiling():
            return _route(func, handler, rule, args, kwargs)
        state = _state()
        memo = state.memo
        pause.depth += 1  # (a dispatch mode or saved-tensor hook inside torch's op sees torch's functions)
        try:
            if as_torch is not None:  # below the floor: aten's own op, before the width, key and decision
                floor = memo.get(floor_key)
                if floor is not None and (y := as_torch(args, kwargs, floor)) is not None:
                    return y
            p = None
            if width_of is not None:
                floor = memo.get(floor_key)
                if floor is None:
                    floor = memo[floor_key] = _floor(op, policy.resolve(op), auto._generation)
                w = width_of(args, kwargs)
                if w is not None and w <= floor:
                    p = TORCH
            if p is None:
                key = key_of(args, kwargs)
                try:
                    p = memo.get(key)  # None: not decided yet, or no key (never stored)
                except TypeError:  # an unhashable argument (a list as normalized_shape)
                    p = key = None
                if p is None:
                    p = _remember(state, key, rule, args, kwargs)
            if p == TORCH:
                if as_torch is not None and (y := as_torch(args, kwargs, _ANY_WIDTH)) is not None:
                    return y
                return func(*args, **kwargs)
            return handler(func, args, kwargs, p)
        finally:
            pause.depth -= 1

    routed_call.__name__ = getattr(func, "__name__", op)
    routed_call.__qualname__ = getattr(func, "__qualname__", routed_call.__name__)
    routed_call.__doc__ = getattr(func, "__doc__", None)
    routed_call.__wrapped__ = func  # type: ignore[attr-defined]
    routed_call.xrt_routed = op  # type: ignore[attr-defined]
    return routed_call


_lock = threading.Lock()  # serialises installing and restoring the wrappers
_wants: dict[int, frozenset[str]] = {}  # thread ident -> the ops it routes (non-empty)
# (owner, attribute) -> (its own attribute before?, torch's function, the wrapper in its place)
_patched: dict[tuple[Any, str], tuple[bool, Any, Callable]] = {}
# (op, owner, attribute) -> (torch's function, its rule, its wrapper): made once and installed again
# on each scope entry (a loop that enters a policy every step), while the function and rule are the same
_made: dict[tuple[str, Any, str], tuple[Any, Any, Callable]] = {}


def _apply(ops: frozenset[str]) -> None:
    """Install the wrappers of ``ops``' functions and restore torch's own for every other op.
    Restoring puts back the very object that was there (or removes the class attribute that
    shadowed ``TensorBase``'s); a function someone replaced after xrt is left as they set it."""
    if ops and not _patched:
        # Dynamo maps torch's functions to its rules by object, once, when it is imported: imported
        # while the wrappers are in place, it would not know torch's own (the wrappers' fallback).
        importlib.import_module("torch._dynamo.trace_rules").get_torch_obj_rule_map()
    for op, targets in TARGETS.items():
        for owner, name, handler in targets:
            key = (owner, name)
            if op in ops and key not in _patched:
                own, func = name in vars(owner), getattr(owner, name)
                made, rule = _made.get((op, owner, name)), RULES[handler]
                if made is None or made[0] is not func or made[1] is not rule:
                    made = _made[(op, owner, name)] = (func, rule, _wrapper(op, func, handler))
                wrapper = made[2]
                setattr(owner, name, wrapper)
                _patched[key] = (own, func, wrapper)
            elif op not in ops and key in _patched:
                own, func, wrapper = _patched.pop(key)
                if vars(owner).get(name) is wrapper:
                    if own:
                        setattr(owner, name, func)
                    else:
                        delattr(owner, name)
    dispatch.PATCHED[0] = bool(_patched)


def _set_ops(ops: frozenset[str]) -> None:
    """This thread routes ``ops`` from now on; the wrappers installed follow every thread's wish."""
    _tls.ops = ops
    with _lock:
        if ops:
            _wants[threading.get_ident()] = ops
        else:
            _wants.pop(threading.get_ident(), None)
        _apply(frozenset().union(*_wants.values()))


def patched() -> dict[Any, Callable]:
    """The wrappers installed now: torch's function -> its wrapper."""
    with _lock:
        return {func: wrapper for _, func, wrapper in _patched.values()}


# -- which ops this thread routes -------------------------------------------------------------------

# The measured ops auto looks up for a routed op's calls (xrt/kernels/defs): a batched matmul is bmm.
MEASURED_OPS = {d.name: (d.name, d.batched) if d.batched else (d.name,) for d in defs.OPS.values() if d.routes}


def wanted() -> frozenset[str]:
    """The routed ops the policy this thread set (its scopes, the global policy) routes: those it
    names an xrt provider for, and those at ``auto`` whose table on this machine names one for some
    entry (:func:`xrt.pytorch.auto.routes`). ``XRT_KERNEL_POLICY`` alone routes nothing."""
    merged: dict[str, str] = {}
    layers = list(policy._tls.scopes)  # innermost last
    if policy._global_policy is not None:
        layers.insert(0, policy._global_policy)
    for layer in layers:
        merged.update(layer.choices)
    return frozenset(op for op in XRT_CHOICES if merged.get(op) in XRT_CHOICES[op]
                     or merged.get(op) == policy.AUTO and auto.routes(MEASURED_OPS.get(op, (op,))))


def _refresh() -> None:
    ops = frozenset(XRT_CHOICES) if _tls.explicit else _tls.policy_ops
    if ops != _tls.ops:
        _set_ops(ops)


def sync() -> None:
    """Route this thread's calls of the ops :func:`wanted` names (called by the policy after each
    change made on this thread)."""
    if torch.compiler.is_compiling():
        return
    _tls.policy_ops = wanted()
    _refresh()


def active() -> bool:
    """Does this thread route any op's calls now?"""
    return bool(_tls.ops)


@contextlib.contextmanager
def routed() -> Iterator[None]:
    """Route this thread's torch calls by the policy in force, whichever thread set it.

    A policy routes the calls of the thread that sets it or enters the scope; a worker thread that
    runs the model under the global policy set elsewhere enters this block.
    """
    _tls.explicit += 1
    _refresh()
    try:
        yield
    finally:
        _tls.explicit -= 1
        _refresh()


policy.ON_CHANGE.append(sync)
