"""Allocator control: PyTorch's CUDA caching allocator with expandable segments.

``set_allocator(True)`` switches the caching allocator to *expandable segments*: instead of many
fixed-size segments (which fragment when tensor sizes change from step to step, so reserved
memory keeps growing), each stream's pool is one virtual range that grows in place. On a
fragmenting workload this lowers reserved memory; ``benchmarks/bench_allocator.py``
measures it. ``reset_allocator()`` goes back to PyTorch's default and releases cached blocks.

The setting applies to segments allocated after the call, so set it before the big allocations.
"""

from __future__ import annotations

import torch

_state: dict[str, bool] = {"expandable_segments": False}


def _require_cuda() -> None:
    if not torch.cuda.is_available():
        raise RuntimeError("set_allocator controls the CUDA caching allocator; torch sees no CUDA device here")


def _apply(expandable: bool) -> None:
    setting = f"expandable_segments:{expandable}"
    new_api = getattr(torch._C, "_accelerator_setAllocatorSettings", None)  # torch >= 2.9
    if new_api is not None:
        new_api(setting)
    else:
        torch.cuda.memory._set_allocator_settings(setting)
    _state["expandable_segments"] = expandable


def set_allocator(enabled: bool = True) -> None:
    """Turn expandable segments on (``True``) or off (``False``) for new CUDA allocations."""
    _require_cuda()
    if not isinstance(enabled, bool):
        raise ValueError(f"set_allocator(enabled=...) takes a bool, got {enabled!r}")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # cached segments of the old kind would otherwise be reused
    _apply(enabled)


def reset_allocator() -> None:
    """Back to PyTorch's default allocator behaviour, with the cache emptied."""
    _require_cuda()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    _apply(False)


def allocator_settings() -> dict[str, bool]:
    """What :func:`set_allocator` last set (PyTorch offers no public getter)."""
    return dict(_state)
