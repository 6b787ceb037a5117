"""Kernel policy: which kernel runs each op, and the tuned configs the ops look up.

Two kinds of op are governed here:

* *switch* ops are PyTorch's own (``matmul``, ``attention``, ``conv``): the policy flips the real
  PyTorch switch (the preferred BLAS library, the SDPA backends, cuDNN autotuning). ``matmul`` is
  also xrt's ``xp.ops.matmul`` / ``xp.ops.bmm``: ``default``, ``cublas`` and ``cublasLt`` set the
  BLAS switch and those ops call torch; ``triton``, ``cuda`` (fp32) and ``auto`` run xrt's GEMM
  kernels (see :mod:`xrt.pytorch.ops.matmul`) and leave the switch as it was;
* *provider* ops are xrt's custom ops (``square``, ``layernorm``, ...): the policy names the
  provider (``torch``, ``triton``, ``cuda``, ``xpu`` or ``auto``) that the op dispatches to.

Which choice wins, highest first:

1. ``provider=`` passed to the op call;
2. the innermost ``with kernel_policy(...)`` block;
3. the global policy of :func:`set_kernel_policy`;
4. the ``XRT_KERNEL_POLICY`` environment variable (``"square=triton,matmul=cublasLt"``);
5. ``auto``: on a GPU the provider measured fastest there for the call's shape bucket, else torch
   (:mod:`xrt.pytorch.auto`); on XPU ``xpu``; on the CPU torch.

Tuned configs are keyed by (op, device, dtype, shape bucket), see :meth:`KernelPolicy.tuned_config`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from xrt.kernels import defs, opdef, rawenv

AUTO = "auto"
PROVIDERS = opdef.PROVIDERS  # every provider name; each op's own are in its definition (xrt/kernels/defs)


@dataclass(frozen=True)
class OpSpec:
    name: str
    choices: tuple[str, ...]
    apply: Callable[[str], None] | None = None  # switch ops: flips PyTorch's own setting
    doc: str = ""
    save: Callable[[], Any] | None = None  # switch ops: PyTorch's current setting
    restore: Callable[[Any], None] | None = None  # switch ops: put back what save returned
    leaves: tuple[str, ...] = ()  # switch ops: the choices that leave PyTorch's setting as found


MATMUL_BLAS = ("default", "cublas", "cublasLt")  # matmul choices that are torch's BLAS switch
MATMUL_KERNELS = ("triton", "cuda", "auto")  # matmul choices that name xrt's GEMM kernels (xp.ops.matmul)


def _apply_matmul(choice: str) -> None:
    # torch.backends.cuda.preferred_blas_library is PyTorch's switch between cuBLAS and cuBLASLt.
    # The kernel choices (MATMUL_KERNELS) never reach here: they leave it as found.
    if torch.version.cuda is None:
        if choice == "default":
            return  # nothing to restore on a build without CUDA
        raise RuntimeError(f"matmul={choice!r} needs a CUDA build of PyTorch; this torch is "
                           f"{torch.__version__}, which has neither cuBLAS nor cuBLASLt")
    lib = {"default": "default", "cublas": "cublas", "cublasLt": "cublaslt"}[choice]
    _set_blas(lib)


_SDPA_FLAGS = ("flash", "mem_efficient", "math", "cudnn")


# attention choices that pick no SDPA backend: xrt's Triton kernel ("triton"), SDPA with its own
# backend choice ("torch"), or either ("auto"); the SDPA switches stay as the user had them.
ATTENTION_OWN = ("triton", "torch", "auto")


def _apply_attention(choice: str) -> None:
    # The provider choices (ATTENTION_OWN) never reach here: they leave the switches as found.
    keep = {
        "default": set(_SDPA_FLAGS),
        "flash_v2": {"flash"},
        "mem_efficient": {"mem_efficient"},
        "math": {"math"},
        "cudnn": {"cudnn"},
    }[choice]
    for flag in _SDPA_FLAGS:
        _set_sdp(flag, flag in keep)


def _apply_conv(choice: str) -> None:
    torch.backends.cudnn.benchmark = choice == "cudnn_benchmark"


def _save_matmul() -> Any:
    return torch.backends.cuda.preferred_blas_library() if torch.version.cuda is not None else None


def _set_blas(lib: Any) -> None:
    """PyTorch's BLAS preference (a name or the enum it returns), set only when it differs: a scope
    entered and left every step need not touch it."""
    def name(b: Any) -> str:
        return str(getattr(b, "name", b)).lower()

    if name(torch.backends.cuda.preferred_blas_library()) != name(lib):
        torch.backends.cuda.preferred_blas_library(lib)


def _set_sdp(flag: str, on: bool) -> None:
    """One of SDPA's backend switches, set only when it differs."""
    getter = getattr(torch.backends.cuda, f"{flag}_sdp_enabled", None)
    setter = getattr(torch.backends.cuda, f"enable_{flag}_sdp", None)
    if setter is not None and (getter is None or getter() != on):
        setter(on)


def _restore_matmul(saved: Any) -> None:
    if saved is not None:
        _set_blas(saved)


def _save_attention() -> dict[str, bool]:
    return {flag: getattr(torch.backends.cuda, f"{flag}_sdp_enabled")() for flag in _SDPA_FLAGS
            if hasattr(torch.backends.cuda, f"{flag}_sdp_enabled")}


def _restore_attention(saved: dict[str, bool]) -> None:
    for flag, on in saved.items():
        _set_sdp(flag, on)


def _save_conv() -> bool:
    return torch.backends.cudnn.benchmark


def _restore_conv(saved: bool) -> None:
    torch.backends.cudnn.benchmark = saved


_OPS: dict[str, OpSpec] = {}


def register_op(name: str, choices: Sequence[str], apply: Callable[[str], None] | None = None,
                doc: str = "", save: Callable[[], Any] | None = None,
                restore: Callable[[Any], None] | None = None, leaves: Sequence[str] = ()) -> OpSpec:
    """Declare an op and its kernel choices (provider ops get ``auto`` added).

    A switch op (``apply``) also has ``save`` / ``restore``: the setting xrt found, put back when
    no policy names the op any more. Its ``leaves`` choices name no setting of PyTorch's (xrt's
    kernels): for the switch they are as if no policy named the op.
    """
    choices = tuple(choices)
    if apply is None and AUTO not in choices:
        choices = (AUTO,) + choices
    if apply is not None and (save is None or restore is None):
        raise ValueError(f"switch op {name!r} needs save and restore as well as apply")
    spec = OpSpec(name, choices, apply, doc, save, restore, tuple(leaves))
    _OPS[name] = spec
    return spec


register_op("matmul", MATMUL_BLAS + MATMUL_KERNELS, _apply_matmul,
            "torch.backends.cuda.preferred_blas_library (default, cublas, cublasLt: xp.ops.matmul and bmm "
            "call torch); xrt's GEMM kernels for xp.ops.matmul and bmm (triton, cuda, auto)",
            _save_matmul, _restore_matmul, MATMUL_KERNELS)
# attention is both: the SDPA-backend names flip PyTorch's switches (and route xrt's
# fused_attention to SDPA); "triton", "torch" and "auto" leave them alone and pick fused_attention's
# provider (xrt.pytorch.ops.attention).
register_op("attention", ("default", "flash_v2", "mem_efficient", "math", "cudnn") + ATTENTION_OWN,
            _apply_attention, "the scaled_dot_product_attention backends that stay enabled, or "
            "fused_attention's provider", _save_attention, _restore_attention, ATTENTION_OWN)
register_op("conv", ("default", "cudnn_benchmark"), _apply_conv, "torch.backends.cudnn.benchmark",
            _save_conv, _restore_conv)
# Provider ops: each op defined with a policy entry of its own (xrt/kernels/defs), its providers the
# choices; their implementations register the providers in xrt.pytorch.ops.
for _def in defs.OPS.values():
    if not _def.policy:
        register_op(_def.name, _def.providers, doc=_def.doc)
del _def


def _tuned_keys() -> set[str]:
    """What a tuned config may be keyed by: the ops, the tuning spaces and the spaces' ops."""
    from xrt.kernels import spaces

    return set(_OPS) | set(spaces.SPACES) | {k.split(".", 1)[0] for k in spaces.SPACES}


def known_ops() -> dict[str, tuple[str, ...]]:
    return {name: spec.choices for name, spec in sorted(_OPS.items())}


def _validate(op: str, choice: Any) -> str:
    if op not in _OPS:
        raise ValueError(f"unknown op {op!r} in kernel policy; valid ops: {', '.join(sorted(_OPS))}")
    spec = _OPS[op]
    if choice not in spec.choices:
        raise ValueError(f"unknown kernel {choice!r} for op {op!r}; valid choices: {', '.join(spec.choices)}")
    return choice


def dtype_key(dtype: Any) -> str:
    """``torch.bfloat16`` or ``"bfloat16"`` -> ``"bfloat16"``; ``None`` / ``"*"`` -> ``"*"``."""
    if dtype is None or dtype == "*":
        return "*"
    return str(dtype).removeprefix("torch.")


def shape_bucket(shape: Sequence[int] | str | None) -> str:
    """Each dim rounded up to a power of two: ``(1000, 4097)`` -> ``"1024x8192"``."""
    if shape is None or shape == "*":
        return "*"
    if isinstance(shape, str):
        return shape
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise ValueError(f"shape {tuple(dims)} has a negative dimension")
    return "x".join(str(1 if d <= 1 else 2 ** math.ceil(math.log2(d))) for d in dims)


def _device_keys(device: Any) -> list[str]:
    """Most specific first: the GPU model, then its architecture (``sm_90``), then ``*``."""
    if device is None:
        return ["*"]
    if isinstance(device, str):
        return [device, "*"] if device != "*" else ["*"]
    keys = [device.model_key]
    if getattr(device, "arch_key", None):
        keys.append(device.arch_key)
    return keys + ["*"]


TunedKey = tuple[str, str, str, str]  # (op, device, dtype, shape bucket)


class KernelPolicy:
    """Which kernel each op uses, plus tuned configs.

    >>> KernelPolicy(matmul="cublasLt", attention="flash_v2", square="triton").choices
    {'matmul': 'cublasLt', 'attention': 'flash_v2', 'square': 'triton'}
    """

    def __init__(self, tuned: dict[TunedKey, dict[str, Any]] | None = None, **choices: str) -> None:
        self.choices: dict[str, str] = {op: _validate(op, c) for op, c in choices.items()}
        self.tuned: dict[TunedKey, dict[str, Any]] = {}
        self._quiet = False
        for key, config in (tuned or {}).items():
            op, dev, dt, bucket = key
            self.add_tuned(op, config, device=dev, dtype=dt, shape=bucket)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.choices.items())
        extra = f", tuned={len(self.tuned)} configs" if self.tuned else ""
        return f"KernelPolicy({inner}{extra})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelPolicy) and (self.choices, self.tuned) == (other.choices, other.tuned)

    def get(self, op: str) -> str | None:
        return self.choices.get(op)

    # -- tuned configs -------------------------------------------------------------------------
    def add_tuned(self, op: str, config: dict[str, Any], *, device: Any = "*", dtype: Any = "*",
                  shape: Sequence[int] | str | None = "*") -> KernelPolicy:
        """Record ``config`` for ``op`` on ``device`` (a DeviceInfo, a model key or ``sm_90``).

        ``op`` is an op (``"layernorm"``: the config applies to whichever provider its parameters
        belong to) or a tuning space (``"layernorm.triton"``, ``"layernorm_bwd.cuda"``: that kernel
        only, which is what the tuner writes).
        """
        if op not in _tuned_keys():
            raise ValueError(f"unknown op {op!r} for a tuned config; valid: {', '.join(sorted(_tuned_keys()))}")
        if not isinstance(config, dict):
            raise ValueError(f"tuned config for {op!r} must be a dict, got {type(config).__name__}")
        dev = device if isinstance(device, str) else _device_keys(device)[0]
        self.tuned[(op, dev, dtype_key(dtype), shape_bucket(shape))] = dict(config)
        if not self._quiet:
            _bump()  # this policy may be in force: cached lookups are stale
        return self

    def tuned_config(self, op: str, *, device: Any = None, dtype: Any = None,
                     shape: Sequence[int] | None = None) -> dict[str, Any] | None:
        """The most specific tuned config for this call, or ``None``.

        Search order: device (model, then architecture, then any) is the outer loop, shape
        bucket (exact, then any) the inner one: a config tuned on this GPU for another shape beats
        one tuned on another GPU for this shape. dtype must match exactly or be ``*``.
        """
        buckets = [shape_bucket(shape), "*"] if shape is not None else ["*"]
        for dev in _device_keys(device):
            for bucket in buckets:
                for dt in (dtype_key(dtype), "*"):
                    hit = self.tuned.get((op, dev, dt, bucket))
                    if hit is not None:
                        return dict(hit)
        return None

    def save_tuned(self, path: str | Path) -> None:
        rows = [{"op": k[0], "device": k[1], "dtype": k[2], "shape": k[3], "config": v}
                for k, v in sorted(self.tuned.items())]
        Path(path).write_text(json.dumps(rows, indent=1) + "\n")

    def load_tuned(self, path: str | Path) -> KernelPolicy:
        """Add the configs of a JSON file written by :meth:`save_tuned` (or the tuner)."""
        path = Path(path)
        try:
            rows = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"tuned-config file {path}: {e}") from e
        if not isinstance(rows, list):
            raise ValueError(f"tuned-config file {path}: expected a JSON list of entries")
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ValueError(f"tuned-config file {path}: entry {i} is not an object")
            missing = {"op", "config"} - set(row)
            if missing:
                raise ValueError(f"tuned-config file {path}: entry {i} lacks {', '.join(sorted(missing))}")
            if row.get("rank", 1) != 1:
                continue  # the tuner's runners-up: the suites time them, the ops use the best
            self.add_tuned(row["op"], row["config"], device=row.get("device", "*"),
                           dtype=row.get("dtype", "*"), shape=row.get("shape", "*"))
        return self


def _parse_env_policy(text: str) -> KernelPolicy:
    choices = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise ValueError(f"XRT_KERNEL_POLICY item {item!r} must look like op=kernel")
        op, choice = (s.strip() for s in item.split("=", 1))
        choices[op] = choice
    try:
        return KernelPolicy(**choices)
    except ValueError as e:
        raise ValueError(f"XRT_KERNEL_POLICY={text!r}: {e}") from e


# -- policy state -------------------------------------------------------------------------------
#
# The global policy is process-wide; ``kernel_policy(...)`` scopes are per thread (each thread has
# its own stack). What the op calls read -- the merged choices and the tuned-config lookups -- is
# computed once per change and cached per thread under a stamp: the global version (bumped by
# set/clear, by ``add_tuned``/``load_tuned`` on any policy, and by a changed ``XRT_TUNED`` file)
# and the raw strings of ``XRT_KERNEL_POLICY`` and ``XRT_TUNED``. A thread's scope enter/exit
# leaves that thread's current state; a scope of the same content finds its kept state again
# (``_merged``). Under ``torch.compile`` the uncached path runs instead, so Dynamo reads (and guards
# on) the policy state itself.

_global_policy: KernelPolicy | None = None
_version = 0  # bumped by every change that is not an environment variable or a thread's scope
_synced_env: list[Any] = [None]  # the raw XRT_KERNEL_POLICY the switches were last synced with
_lock = threading.RLock()  # serialises changes of the global policy and of PyTorch's switches


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.scopes: list[KernelPolicy] = []  # innermost last
        self.merged: _Merged | None = None
        self.scope_stamp = 0  # the stamp of the scopes' merged choices (_stamp)
        self.states: dict[tuple, _Merged] = {}  # recent merged states by content (_merged), oldest first


_tls = _ThreadState()

# Under torch.compile an op's choice is a constant of three stamps (resolve): the thread's scopes',
# the global policy's and the raw XRT_KERNEL_POLICY. Dynamo guards on those alone, not on every
# layer and dict it would read, and a compiled model checks its guards on every call. A stamp
# numbers the content of a merged set of choices, so an equal scope entered again is the same stamp
# and traces nothing again.
_STAMPS: dict[tuple[tuple[str, str], ...], int] = {(): 0}
_STAMPED: list[dict[str, str]] = [{}]  # stamp -> its choices
_global_stamp = 0


def _stamp(layers: Sequence[KernelPolicy | None]) -> int:
    """The stamp of ``layers``' merged choices (lowest precedence first)."""
    merged: dict[str, str] = {}
    for layer in layers:
        if layer is not None:
            merged.update(layer.choices)
    key = tuple(sorted(merged.items()))
    with _lock:
        hit = _STAMPS.get(key)
        if hit is None:
            hit = _STAMPS[key] = len(_STAMPED)
            _STAMPED.append(merged)
    return hit


def _restamp_scopes() -> None:
    _tls.scope_stamp = _stamp(_tls.scopes)

# os.environ.get costs about a microsecond; the mapping behind it (bytes keys on POSIX) a tenth.
POLICY_ENV, TUNED_ENV = "XRT_KERNEL_POLICY", "XRT_TUNED"  # the policy layer and the tuned configs of the environment
_ENV_DATA, _ENV_KEYS = rawenv.DATA, (rawenv.key(POLICY_ENV), rawenv.key(TUNED_ENV))


def _env_stamp() -> tuple[Any, Any]:
    """The raw values of ``XRT_KERNEL_POLICY`` and ``XRT_TUNED`` (compared, never parsed, per call)."""
    return _ENV_DATA.get(_ENV_KEYS[0]), _ENV_DATA.get(_ENV_KEYS[1])


def _bump() -> None:
    global _version
    with _lock:
        _version += 1


def trace_constant(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compiler.assume_constant_result(fn)`` without importing Dynamo (an eager user never
    pays for that import; the mark is this attribute): while torch.compile traces, Dynamo calls
    ``fn`` with the call's constants and keeps its answer as a constant, leaving no guard on what
    ``fn`` read. Its answer must depend only on its arguments (a stamp among them, where it reads
    state that can change)."""
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


def invalidate() -> None:
    """Drop every thread's memoized answers (tuned lookups, routed calls' decisions): what they were
    computed from changed outside the policy (``auto``'s tables read again)."""
    _bump()


class _Merged:
    """One thread's policy layers at one stamp, with the memoized answers computed from them."""

    __slots__ = ("version", "env", "layers", "choices", "memo")

    def __init__(self, version: int, env: tuple[Any, Any], layers: list[KernelPolicy]) -> None:
        self.version, self.env, self.layers = version, env, layers
        choices: dict[str, str] = {}
        for layer in reversed(layers):
            choices.update(layer.choices)
        self.choices = choices  # op -> the choice of the highest layer that names it
        self.memo: dict[Any, Any] = {}  # tuned-config lookups, and the ops' own per-input answers

    def keep(self, key: Any, value: Any) -> Any:
        """``memo[key] = value``, the memo held to :data:`MEMO_MAX` entries (one more empties it: shapes
        without end, such as a growing KV cache, start afresh); returns ``value``."""
        memo = self.memo
        if len(memo) > MEMO_MAX:
            memo.clear()
        memo[key] = value
        return value


MEMO_MAX = 4096  # answers a merged state keeps (tuned lookups, routing decisions, launch plans)


def _merged() -> _Merged:
    """The merged policy in force on this thread, looked up again only when the stamp changed (one
    kept for the same content comes back, :func:`_content`); ``.memo`` is valid until it changes.
    Read on every op call and routed call: the stamp is compared inline."""
    m = _tls.merged
    env = (_ENV_DATA.get(_ENV_KEYS[0]), _ENV_DATA.get(_ENV_KEYS[1]))
    if m is not None and m.version == _version and m.env == env:
        return m
    if env[0] != _synced_env[0]:
        _sync_switches_from_env()
    # The version first: a change swaps its layers in, then bumps it. Read after the layers, a new
    # version could stamp the old layers, and that state would pass as current until the next bump.
    version = _version
    layers = _layers()
    key = (version, env, _content(layers))
    states = _tls.states
    m = states.pop(key, None)
    if m is None:
        m = _Merged(version, env, layers)
        for old in [k for k in states if k[0] != version]:  # never found again: their memos go
            del states[old]
        if len(states) >= KEPT_STATES:
            del states[next(iter(states))]
    states[key] = m  # the newest last
    _tls.merged = m
    return m


KEPT_STATES = 8  # merged states a thread keeps by content


def _content(layers: list[KernelPolicy]) -> tuple:
    """What a merged state's answers depend on, per layer: its choices, and its tuned configs (by
    identity: adding one bumps the version). A loop that enters ``kernel_policy(matmul="triton")``
    every step gets the same state back, with its memo: tuned lookups, routing decisions and launch
    plans are made once, not once a step."""
    return tuple((tuple(sorted(layer.choices.items())), id(layer.tuned) if layer.tuned else None)
                 for layer in layers)


state = _merged  # the public name


def tuned_state() -> _Merged:
    """:func:`state`, after a look (at most every ``TUNED_RECHECK_S``) at the ``XRT_TUNED`` files."""
    m = _merged()
    if m.env[1] is not None:
        _refresh_tuned(m.env[1])
        if m.version != _version:
            m = _merged()
    return m


def _sync_switches() -> None:
    """Make PyTorch's switches (matmul, attention, conv) say what the merged policy says.

    The one place they are set: at import, on set/clear, on scope enter and exit and when
    ``XRT_KERNEL_POLICY`` changes. A switch op that no layer names, or names with a choice of xrt's
    kernels (``OpSpec.leaves``: a scope of those enters and leaves without touching PyTorch), is
    left to its owner: xrt puts back the setting it found before it first took the switch over,
    and otherwise never touches it.
    Raises (after putting nothing half-set) when a choice cannot be applied here.
    """
    with _lock:
        _synced_env[0] = _env_stamp()[0]
        merged: dict[str, str] = {}
        for layer in reversed(_choice_layers()):
            merged.update(layer.choices)
        for op, spec in _OPS.items():
            if spec.apply is None:
                continue
            want = merged.get(op)
            if want in spec.leaves:  # xrt's kernels: PyTorch's switch stays as found
                want = None
            if want == _APPLIED.get(op):
                continue
            if want is None:
                spec.restore(_SAVED.pop(op))
                del _APPLIED[op]
                continue
            if op not in _SAVED:
                _SAVED[op] = spec.save()
            try:
                spec.apply(want)
            except Exception:
                if op not in _APPLIED:
                    _SAVED.pop(op)
                raise
            _APPLIED[op] = want


def _sync_switches_from_env() -> None:
    """``XRT_KERNEL_POLICY`` changed (or is read for the first time, at import): the switches
    follow. A choice this PyTorch cannot apply is a warning here, not an error of every op call."""
    try:
        _sync_switches()
    except Exception as e:
        warnings.warn(f"XRT_KERNEL_POLICY: {e}", RuntimeWarning, stacklevel=3)


_APPLIED: dict[str, str] = {}  # switch op -> the choice xrt last applied
_SAVED: dict[str, Any] = {}  # switch op -> PyTorch's setting before xrt took it over


# Called on the changing thread after each policy change (set, clear, scope enter and exit):
# xrt.pytorch.routing installs or restores the wrappers of the ops that thread routes.
ON_CHANGE: list[Callable[[], None]] = []


def _notify() -> None:
    for fn in ON_CHANGE:
        fn()


def _changed(rollback: Callable[[], None], everywhere: bool = True) -> None:
    """After a change of policy state: drop the cached merged policy (every thread's, or only this
    thread's for a change of its own scopes) and sync the switches; on failure, undo the change
    (``rollback``), sync again and raise."""
    if everywhere:
        _bump()
    _tls.merged = None
    try:
        _sync_switches()
    except Exception:
        rollback()
        if everywhere:
            _bump()
        _tls.merged = None
        _sync_switches()
        raise
    _notify()


def _given(fn: str, policy: Any, kwargs: dict[str, str]) -> KernelPolicy | None:
    """The policy a call of ``fn`` names: ``policy`` (a :class:`KernelPolicy`) or ``op=kernel``
    keywords, not both; None for neither."""
    if policy is not None and kwargs:
        raise ValueError(f"{fn} takes a KernelPolicy or op=kernel keywords, not both")
    if policy is not None and not isinstance(policy, KernelPolicy):
        hint = f" (for a dict, {fn}(**choices))" if isinstance(policy, dict) else ""
        raise ValueError(f"{fn} expects a KernelPolicy, got {type(policy).__name__}{hint}")
    return policy if policy is not None else (KernelPolicy(**kwargs) if kwargs else None)


def set_kernel_policy(policy: KernelPolicy | None = None, **kwargs: str) -> KernelPolicy | None:
    """Set the global kernel policy, from a :class:`KernelPolicy` or as ``op=kernel`` keywords.

    ``set_kernel_policy()`` with neither clears it. Switch ops take effect at once.

        set_kernel_policy(matmul="cublasLt", attention="flash_v2")
        set_kernel_policy(KernelPolicy(square="triton"))
    """
    global _global_policy, _global_stamp
    new = _given("set_kernel_policy", policy, kwargs)
    with _lock:
        old, old_stamp = _global_policy, _global_stamp
        _global_policy, _global_stamp = new, _stamp([new])

        def rollback() -> None:
            global _global_policy, _global_stamp
            _global_policy, _global_stamp = old, old_stamp

        _changed(rollback)
    return new


def get_kernel_policy() -> KernelPolicy | None:
    """The global policy set by :func:`set_kernel_policy` (``None`` when unset)."""
    return _global_policy


def clear_kernel_policy() -> None:
    """Forget the global policy; PyTorch's switches go back to what they were before xrt set them
    (unless a scope or ``XRT_KERNEL_POLICY`` still names them)."""
    set_kernel_policy(None)


@contextlib.contextmanager
def kernel_policy(policy: KernelPolicy | None = None, **kwargs: str) -> Iterator[KernelPolicy]:
    """A policy for the ``with`` block only; it wins over the global one for the ops it names.

    Scopes belong to the thread that enters them: another thread does not see them. The switch
    ops (matmul, attention, conv) set PyTorch's own switches, which are process-wide.
    """
    scoped = _given("kernel_policy", policy, kwargs)
    scoped = scoped if scoped is not None else KernelPolicy()
    scopes = _tls.scopes

    def rollback() -> None:
        scopes.pop()
        _restamp_scopes()

    with _lock:
        scopes.append(scoped)
        _restamp_scopes()
        _changed(rollback, everywhere=False)
    try:
        yield scoped
    finally:
        with _lock:
            # Pop this scope even if an inner one was left open (a generator never closed).
            for i in range(len(scopes) - 1, -1, -1):
                if scopes[i] is scoped:
                    del scopes[i]
                    break
            _restamp_scopes()
            _tls.merged = None
            _sync_switches()
        _notify()


def _layers() -> list[KernelPolicy]:
    """This thread's policies from highest to lowest precedence (uncached)."""
    layers = list(reversed(_tls.scopes))
    if _global_policy is not None:
        layers.append(_global_policy)
    env = os.environ.get(POLICY_ENV)
    if env:
        layers.append(_env_policy(env))
    tuned = os.environ.get(TUNED_ENV)
    if tuned:
        layers.append(_env_tuned(tuned))
    return layers


def _choice_layers() -> list[KernelPolicy]:
    """The layers that hold choices (not XRT_TUNED's configs), for PyTorch's switches: a malformed
    XRT_KERNEL_POLICY is a warning here (an op's resolve raises)."""
    layers = list(reversed(_tls.scopes))
    if _global_policy is not None:
        layers.append(_global_policy)
    env = os.environ.get(POLICY_ENV)
    if env:
        try:
            layers.append(_env_policy(env))
        except ValueError as e:
            warnings.warn(f"{e}; PyTorch's switches ignore it", RuntimeWarning, stacklevel=4)
    return layers


_ENV_POLICY: dict[str, KernelPolicy] = {}


def _env_policy(text: str) -> KernelPolicy:
    """``XRT_KERNEL_POLICY``, parsed once per distinct value."""
    pol = _ENV_POLICY.get(text)
    if pol is None:
        pol = _ENV_POLICY[text] = _parse_env_policy(text)
    return pol


class _TunedFiles:
    """The policy of one ``XRT_TUNED`` value and the (mtime, size) of what it was read from."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.stamp = self._stat()
        self.policy = self._load()
        self.checked = time.monotonic()

    def _paths(self) -> list[Path]:
        paths = []
        for item in filter(None, self.value.split(os.pathsep)):
            p = Path(item)
            if not p.exists():
                raise ValueError(f"XRT_TUNED={self.value!r}: {item} does not exist")
            paths.append(p)
            if p.is_dir():
                paths.extend(sorted(p.glob("*.json")))
        return paths

    def _stat(self) -> tuple[Any, ...]:
        out = []
        for p in self._paths():
            st = p.stat()
            out.append((str(p), st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _load(self) -> KernelPolicy:
        pol = KernelPolicy()
        pol._quiet = True  # building it is no policy change
        for p in self._paths():
            if not p.is_dir():
                pol.load_tuned(p)
        pol._quiet = False
        return pol

    def refresh(self) -> bool:
        """Re-read the files if any changed (checked at most every ``TUNED_RECHECK_S``)."""
        now = time.monotonic()
        if now - self.checked < TUNED_RECHECK_S:
            return False
        self.checked = now
        stamp = self._stat()
        if stamp == self.stamp:
            return False
        try:
            policy = self._load()
        except ValueError as e:  # a file caught half-written, say: keep the last good read, retry later
            warnings.warn(f"{e}; keeping the tuned configs read before", RuntimeWarning, stacklevel=2)
            return False
        self.policy, self.stamp = policy, stamp
        return True


TUNED_RECHECK_S = 1.0  # how often the XRT_TUNED files are looked at again for changes
_ENV_TUNED: dict[Any, _TunedFiles] = {}  # by the value as a string, and as the raw bytes


def _env_tuned(value: str) -> KernelPolicy:
    """``XRT_TUNED``: tuned-config files or folders of them (``os.pathsep``-separated), read once
    per value and again when a file changes (noticed within ``TUNED_RECHECK_S``)."""
    entry = _ENV_TUNED.get(value)
    if entry is None:
        entry = _ENV_TUNED[value] = _TunedFiles(value)
    return entry.policy


def _refresh_tuned(value: Any) -> None:
    """Called by tuned lookups: a changed ``XRT_TUNED`` file bumps the version (all threads).
    ``value`` is the raw environment value (bytes on POSIX)."""
    if value is None:
        return
    entry = _ENV_TUNED.get(value)
    if entry is None:
        entry = _ENV_TUNED.get(os.fsdecode(value) if isinstance(value, bytes) else value)
        if entry is None:
            return
        _ENV_TUNED[value] = entry  # found by the raw value from now on
    if entry.refresh():
        _bump()


def resolve(op: str, explicit: str | None = None) -> str:
    """The choice in force for ``op`` (see the module docstring for the order)."""
    if explicit is not None:
        return _validate(op, explicit)
    if op not in _OPS:
        _validate(op, AUTO)
    if torch.compiler.is_compiling():  # Dynamo guards on the three stamps, the choice is a constant
        # os.environ, not its raw mapping: Dynamo guards on the one variable, not on every key
        return _compiled_choice(op, _tls.scope_stamp, _global_stamp, os.environ.get(POLICY_ENV))
    choice = _merged().choices.get(op)
    return choice if choice is not None else _unnamed(op)


def _unnamed(op: str) -> str:
    """The choice of an op that no layer names: ``auto``, or a switch op's ``default``."""
    return AUTO if _OPS[op].apply is None else "default"


@trace_constant
def _compiled_choice(op: str, scope_stamp: int, global_stamp: int, env: Any) -> str:
    """:func:`resolve` from the stamps of the layers (scopes, global) and ``XRT_KERNEL_POLICY``:
    what Dynamo runs as it traces, keeping the answer as a constant."""
    choice = _STAMPED[scope_stamp].get(op) or _STAMPED[global_stamp].get(op)
    if choice is None and env:
        choice = _env_policy(env).get(op)  # a malformed value raises, as uncompiled
    return choice if choice is not None else _unnamed(op)


def lookup_tuned_kernel(op: str, space: str, *, device: Any = None, dtype: Any = None,
                        shape: Sequence[int] | None = None) -> dict[str, Any] | None:
    """The tuned config for kernel ``space`` (``"square.triton"``) of ``op``, policies in precedence order.

    In each policy, a config keyed by the kernel itself (what the tuner writes) comes first, then
    one keyed by the op, unless that one's parameter names are those of another of the op's
    kernels (``{"block": 512}`` is CUDA C's, not Triton's). Memoized until the policy changes.
    """
    if torch.compiler.is_compiling():
        return _lookup_tuned_kernel(_layers(), op, space, device, dtype, shape)
    m = tuned_state()
    key = ("tuned", op, space, _device_memo_key(device), dtype_key(dtype), None if shape is None else tuple(shape))
    try:
        hit = m.memo[key]
    except KeyError:
        hit = m.keep(key, _lookup_tuned_kernel(m.layers, op, space, device, dtype, shape))
    return None if hit is None else dict(hit)


def _device_memo_key(device: Any) -> Any:
    return device if device is None or isinstance(device, str) else tuple(_device_keys(device))


def _lookup_tuned_kernel(layers: list[KernelPolicy], op: str, space: str, device: Any, dtype: Any,
                         shape: Sequence[int] | None) -> dict[str, Any] | None:
    for layer in layers:
        hit = layer.tuned_config(space, device=device, dtype=dtype, shape=shape)
        if hit is not None:
            return hit
        hit = layer.tuned_config(op, device=device, dtype=dtype, shape=shape)
        if hit is not None and not _for_another_kernel(op, space, hit):
            return hit
    return None


def _for_another_kernel(op: str, space: str, config: dict[str, Any]) -> bool:
    """Do ``config``'s names fit another of ``op``'s tuning spaces but not ``space``?"""
    from xrt.kernels import spaces

    names = set(config)
    if names <= set(spaces.space(space)):
        return False
    return any(names <= set(spaces.space(k)) for k in spaces.SPACES if k.split(".", 1)[0] == op and k != space)


def lookup_tuned(op: str, *, device: Any = None, dtype: Any = None,
                 shape: Sequence[int] | None = None) -> dict[str, Any] | None:
    """The tuned config for this call from the policies in force, most specific policy first."""
    if not torch.compiler.is_compiling():
        _refresh_tuned(_merged().env[1])
    for layer in _layers():
        hit = layer.tuned_config(op, device=device, dtype=dtype, shape=shape)
        if hit is not None:
            return hit
    return None


# PyTorch's switches say what XRT_KERNEL_POLICY says from the start (a choice this PyTorch cannot
# apply, matmul=cublasLt on a build without CUDA, is a warning at import).
_sync_switches_from_env()
