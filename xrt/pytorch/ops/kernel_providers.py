"""The providers that launch xrt's kernels: their registration (:func:`register`: ``torch``, ``triton``,
``cuda`` and ``xpu`` for an op), the tuned config they launch with (:func:`config`) and the cached device
facts that config is looked up by (:func:`device_info`). The registry and the choice between providers
are :mod:`xrt.pytorch.ops.dispatch`'s."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from xrt.kernels import defs
from xrt.pytorch import policy

_INFO: dict[Any, Any] = {}


def device_info(x: torch.Tensor) -> Any:
    """The :class:`xrt.device.DeviceInfo` of ``x``'s CUDA device or of the CPU (cached), ``None`` elsewhere."""
    if x.device.type == "cpu":
        if "cpu" not in _INFO:
            from xrt.device import cpu_info

            _INFO["cpu"] = cpu_info()
        return _INFO["cpu"]
    if x.device.type != "cuda":
        return None
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    if index not in _INFO:
        from xrt.device import cuda_info

        _INFO[index] = cuda_info(index)
    return _INFO[index]


def config(op: str, space: str, x: torch.Tensor, shape: Sequence[int] | None = None) -> dict[str, Any]:
    """The tuned config of ``op`` for this input (policy lookup), checked against ``space``.

    ``shape`` is the shape the configs are bucketed by (``x.shape`` unless given; ``square`` and
    ``vector_add`` use ``(numel,)``, as their kernels see a flat tensor). Memoized per
    (kernel, device, dtype, shape) until the policy in force changes; the answer is a read-only
    :class:`xrt.kernels.checks.Tuning` that the launchers take without checking it again.
    """
    state = policy.tuned_state()
    shape = tuple(x.shape) if shape is None else tuple(shape)
    key = (space, x.is_cuda, x.get_device(), x.dtype, shape)
    try:
        hit = state.memo.get(key)
    except TypeError:  # symbolic sizes (torch.compile, dynamic shapes): the config of their hints, no guard
        from xrt.kernels.checks import size_hint

        shape = tuple(size_hint(d) for d in shape)
        key = (space, x.is_cuda, x.get_device(), x.dtype, shape)
        hit = state.memo.get(key)
    if hit is None:
        from xrt.kernels import checks

        tuned = policy.lookup_tuned_kernel(op, space, device=device_info(x), dtype=x.dtype, shape=shape)
        hit = state.keep(key, checks.tuning(space, tuned))
    return hit


_CONFIG_OF: dict[tuple[str, str], Callable[..., Any]] = {}  # (op, "triton" / "cuda") -> its config lookup


def provider_config(op: str, kind: str, *args: Any) -> Any:
    """The tuned config the ``kind`` (``"triton"``, ``"cuda"``) provider of ``op`` launches with for
    these arguments: what its registered function passes to the kernel (:func:`register`)."""
    return _CONFIG_OF[(op, kind)](*args)


def kept_plan(key: Any) -> Any:
    """The launch plan kept under ``key`` in the policy state's memo (so another policy, a tuned
    config or a new auto table drops it): a plan, ``False`` (none can be made for that signature), or
    ``None``: none yet, or its kernel's Launcher was cleared (``plan.stale()``); then the caller
    makes one and keeps it (:func:`keep_plan`)."""
    plan = policy.tuned_state().memo.get(key)
    return None if plan and plan.stale() else plan


def keep_plan(key: Any, plan: Any) -> None:
    """Keep ``plan`` (``None``: none can be made, kept as ``False``) under ``key`` for :func:`kept_plan`."""
    policy.tuned_state().keep(key, plan if plan is not None else False)


def _numel(x: torch.Tensor) -> tuple[int]:
    return (x.numel(),)


def register(op: str, module: str | None = None, fn: str | None = None,
                     shape: Callable[[torch.Tensor], Sequence[int]] | None = None,
                     shape_args: Callable[..., Sequence[int]] | None = None) -> None:
    """Register the four providers of ``op`` the way every xrt op has them.

    ``torch`` calls ``xrt.kernels.reference.<module>.<fn>(*args)``; ``triton`` and ``xpu`` call
    ``xrt.kernels.triton.<module>.<fn>(*args, config)``, ``cuda`` calls
    ``xrt.kernels.cuda.<module>.<fn>(*args, config)``, with the tuned config of the
    ``<op>.triton`` / ``<op>.cuda`` space for the first argument (bucketed by ``shape(x)``).
    ``module`` defaults to the file stem of the op's definition (``xrt/kernels/defs``: ``layernorm_bwd``
    lives in ``layernorm``), ``fn`` to ``op``. ``shape`` defaults to ``(numel,)`` for an op defined
    ``flat``, else ``x.shape``; ``shape_args`` buckets by all the arguments instead (``matmul``:
    ``(M, N, K)`` from ``a`` and ``b``).
    """
    from xrt.pytorch.ops import dispatch

    d = defs.OPS.get(op)
    module, fn = module or (d.file if d else op), fn or op
    if shape is None and shape_args is None and d is not None and d.flat:
        shape = _numel

    found: dict[str, Callable[..., Any]] = {}

    def kernel(kind: str) -> Callable[..., Any]:
        f = found.get(kind)
        if f is None:  # imported at first use (Triton, pycuda), then kept
            f = found[kind] = getattr(importlib.import_module(f"xrt.kernels.{kind}.{module}"), fn)
        return f

    def reference(*args: Any) -> Any:
        return dispatch.unrouted(kernel("reference"), *args)  # the plain call while nothing is routed

    keys = d.space_keys if d is not None else {}

    def tuned(kind: str, space: str) -> Callable[..., Any]:
        key = keys.get(space, f"{op}.{space}")  # the definition's space for the provider (``spaces``)

        def config_of(*args: Any) -> Any:
            x = args[0]
            return config(op, key, x, shape_args(*args) if shape_args else shape(x) if shape else None)

        def run(*args: Any) -> Any:
            return kernel(kind)(*args, config_of(*args))

        run.__name__ = f"_{op}_{kind}"
        _CONFIG_OF[(op, space)] = config_of
        return run

    dispatch.register(op, "torch", dispatch.torch_missing)(reference)
    dispatch.register(op, "triton", dispatch.triton_missing)(tuned("triton", "triton"))
    dispatch.register(op, "cuda", dispatch.cuda_missing)(tuned("cuda", "cuda"))
    # Upstream torch.xpu: the Triton kernel compiles for Intel GPUs through Triton's XPU backend.
    dispatch.register(op, "xpu", dispatch.xpu_missing)(tuned("triton", "triton"))
