"""Kernel policy: which kernel runs each op, and the tuned configs the ops look up.

Two kinds of op are governed here:

* *switch* ops are PyTorch's own (``matmul``, ``attention``, ``conv``): the policy flips the real
  PyTorch switch (the preferred BLAS library, the SDPA backends, cuDNN autotuning);
* *provider* ops are xrt's custom ops (``square``, ``layernorm``, ...): the policy names the
  provider (``torch``, ``triton``, ``cuda``, ``xpu`` or ``auto``) that the op dispatches to.

Which choice wins, highest first:

1. ``provider=`` passed to the op call;
2. the innermost ``with kernel_policy(...)`` block;
3. the global policy of :func:`set_kernel_policy`;
4. the ``XRT_KERNEL_POLICY`` environment variable (``"square=triton,matmul=cublasLt"``);
5. ``auto`` (the fastest provider available for the tensor's device).

Tuned configs are keyed by (op, device, dtype, shape bucket), see :meth:`KernelPolicy.tuned_config`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

AUTO = "auto"
PROVIDERS = ("torch", "triton", "cuda", "xpu")


@dataclass(frozen=True)
class OpSpec:
    name: str
    choices: tuple[str, ...]
    apply: Callable[[str], None] | None = None  # switch ops: flips PyTorch's own setting
    doc: str = ""


def _apply_matmul(choice: str) -> None:
    # torch.backends.cuda.preferred_blas_library is PyTorch's switch between cuBLAS and cuBLASLt.
    if torch.version.cuda is None:
        if choice == "default":
            return  # nothing to restore on a build without CUDA
        raise RuntimeError(f"matmul={choice!r} needs a CUDA build of PyTorch; this torch is "
                           f"{torch.__version__}, which has neither cuBLAS nor cuBLASLt")
    lib = {"default": "default", "cublas": "cublas", "cublasLt": "cublaslt"}[choice]
    torch.backends.cuda.preferred_blas_library(lib)


_SDPA_FLAGS = ("flash", "mem_efficient", "math", "cudnn")


def _apply_attention(choice: str) -> None:
    keep = {
        "default": set(_SDPA_FLAGS),
        "flash_v2": {"flash"},
        "mem_efficient": {"mem_efficient"},
        "math": {"math"},
        "cudnn": {"cudnn"},
    }[choice]
    for flag in _SDPA_FLAGS:
        setter = getattr(torch.backends.cuda, f"enable_{flag}_sdp", None)
        if setter is not None:
            setter(flag in keep)


def _apply_conv(choice: str) -> None:
    torch.backends.cudnn.benchmark = choice == "cudnn_benchmark"


_OPS: dict[str, OpSpec] = {}


def register_op(name: str, choices: Sequence[str], apply: Callable[[str], None] | None = None,
                doc: str = "") -> OpSpec:
    """Declare an op and its kernel choices (provider ops get ``auto`` added)."""
    choices = tuple(choices)
    if apply is None and AUTO not in choices:
        choices = (AUTO,) + choices
    spec = OpSpec(name, choices, apply, doc)
    _OPS[name] = spec
    return spec


register_op("matmul", ("default", "cublas", "cublasLt"), _apply_matmul,
            "torch.backends.cuda.preferred_blas_library")
register_op("attention", ("default", "flash_v2", "mem_efficient", "math", "cudnn"), _apply_attention,
            "the scaled_dot_product_attention backends that stay enabled")
register_op("conv", ("default", "cudnn_benchmark"), _apply_conv, "torch.backends.cudnn.benchmark")
# Provider ops; their implementations register providers in xrt.pytorch.ops.
register_op("square", PROVIDERS)
register_op("vector_add", PROVIDERS)
register_op("window_sum", PROVIDERS)
register_op("layernorm", PROVIDERS)
register_op("softmax", PROVIDERS)


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


# The only global state of xrt: the policy store.
_global_policy: KernelPolicy | None = None
# Scoped policies, innermost last. A plain list (not a ContextVar) so torch.compile can trace it.
_scoped: list[KernelPolicy] = []


def _apply_switches(policy: KernelPolicy | None) -> None:
    for op, spec in _OPS.items():
        if spec.apply is not None:
            spec.apply(policy.get(op) if policy and policy.get(op) else "default")


def set_kernel_policy(policy: KernelPolicy | None = None, **kwargs: str) -> KernelPolicy | None:
    """Set the global kernel policy, from a :class:`KernelPolicy` or as ``op=kernel`` keywords.

    ``set_kernel_policy()`` with neither clears it. Switch ops take effect at once.

        set_kernel_policy(matmul="cublasLt", attention="flash_v2")
        set_kernel_policy(KernelPolicy(square="triton"))
    """
    global _global_policy
    if policy is not None and kwargs:
        raise ValueError("set_kernel_policy takes a KernelPolicy or op=kernel keywords, not both")
    if policy is not None and not isinstance(policy, KernelPolicy):
        raise ValueError(f"set_kernel_policy expects a KernelPolicy, got {type(policy).__name__}")
    new = policy if policy is not None else (KernelPolicy(**kwargs) if kwargs else None)
    _apply_switches(new)
    _global_policy = new
    return new


def get_kernel_policy() -> KernelPolicy | None:
    """The global policy set by :func:`set_kernel_policy` (``None`` when unset)."""
    return _global_policy


def clear_kernel_policy() -> None:
    """Forget the global policy and put PyTorch's switches back to their defaults."""
    set_kernel_policy(None)


@contextlib.contextmanager
def kernel_policy(policy: KernelPolicy | None = None, **kwargs: str) -> Iterator[KernelPolicy]:
    """A policy for the ``with`` block only; it wins over the global one for the ops it names."""
    scoped = policy if policy is not None else KernelPolicy(**kwargs)
    _scoped.append(scoped)
    try:
        _apply_switches(effective_policy_for_switches())
        yield scoped
    finally:
        _scoped.pop()
        _apply_switches(effective_policy_for_switches())


def _layers() -> list[KernelPolicy]:
    """Policies from highest to lowest precedence."""
    layers = list(reversed(_scoped))
    if _global_policy is not None:
        layers.append(_global_policy)
    env = os.environ.get("XRT_KERNEL_POLICY")
    if env:
        layers.append(_parse_env_policy(env))
    tuned = os.environ.get("XRT_TUNED")
    if tuned:
        layers.append(_env_tuned(tuned))
    return layers


_ENV_TUNED: dict[str, KernelPolicy] = {}


def _env_tuned(value: str) -> KernelPolicy:
    """``XRT_TUNED``: tuned-config files or folders of them (``os.pathsep``-separated), read once."""
    if value not in _ENV_TUNED:
        pol = KernelPolicy()
        for item in filter(None, value.split(os.pathsep)):
            p = Path(item)
            files = sorted(p.glob("*.json")) if p.is_dir() else [p]
            if not p.exists():
                raise ValueError(f"XRT_TUNED={value!r}: {item} does not exist")
            for f in files:
                pol.load_tuned(f)
        _ENV_TUNED[value] = pol
    return _ENV_TUNED[value]


def effective_policy_for_switches() -> KernelPolicy:
    merged: dict[str, str] = {}
    for layer in reversed(_layers()):
        merged.update(layer.choices)
    return KernelPolicy(**merged)


def resolve(op: str, explicit: str | None = None) -> str:
    """The choice in force for ``op`` (see the module docstring for the order)."""
    if explicit is not None:
        return _validate(op, explicit)
    if op not in _OPS:
        _validate(op, AUTO)
    for layer in _layers():
        choice = layer.get(op)
        if choice is not None:
            return choice
    return AUTO if _OPS[op].apply is None else "default"


def lookup_tuned_kernel(op: str, space: str, *, device: Any = None, dtype: Any = None,
                        shape: Sequence[int] | None = None) -> dict[str, Any] | None:
    """The tuned config for kernel ``space`` (``"square.triton"``) of ``op``, policies in precedence order.

    In each policy, a config keyed by the kernel itself (what the tuner writes) comes first, then
    one keyed by the op, unless that one's parameter names are those of another of the op's
    kernels (``{"block": 512}`` is CUDA C's, not Triton's).
    """
    for layer in _layers():
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
    for layer in _layers():
        hit = layer.tuned_config(op, device=device, dtype=dtype, shape=shape)
        if hit is not None:
            return hit
    return None
