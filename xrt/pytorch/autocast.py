"""Mixed precision: torch.autocast on any device, plus the precision hint that xrt ops read.

PyTorch's autocast does not know xrt's custom ops, so each op asks :func:`get_precision_hint`
and computes in that dtype when it is set (and the input is a wider float).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

# A plain stack rather than a ContextVar: torch.compile (Dynamo) traces reads of module globals
# (and guards on them) but cannot trace ContextVar.get.
_HINTS: list[torch.dtype | None] = []
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def get_precision_hint() -> torch.dtype | None:
    """The dtype of the innermost active :func:`autocast`, or ``None`` outside one."""
    return _HINTS[-1] if _HINTS else None


@contextlib.contextmanager
def _hint(dtype: torch.dtype | None) -> Iterator[None]:
    _HINTS.append(dtype)
    try:
        yield
    finally:
        _HINTS.pop()


def _default_device_type() -> str:
    if torch.cuda.is_available():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu"
    return "cpu"


@contextlib.contextmanager
def autocast(dtype: torch.dtype = torch.float16, enabled: bool = True, cache_enabled: bool = True,
             device_type: str | None = None) -> Iterator[None]:
    """Run the block under ``torch.autocast`` for ``device_type`` and set xrt's precision hint.

    ``device_type`` defaults to the machine's accelerator (cuda, then xpu), else cpu.

        with xrt.pytorch.autocast(torch.bfloat16):
            y = model(x)
    """
    if dtype not in _LOW_PRECISION:
        raise ValueError(f"autocast dtype must be torch.float16 or torch.bfloat16, got {dtype}")
    device_type = device_type or _default_device_type()
    if device_type not in ("cuda", "xpu", "cpu"):
        raise ValueError(f"autocast device_type must be 'cuda', 'xpu' or 'cpu', got {device_type!r}")
    with torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled):
        with _hint(dtype if enabled else None):
            yield


def cast_for_hint(x: torch.Tensor) -> torch.Tensor:
    """What an xrt op applies to its floating inputs: fp32/fp64 -> the hint dtype, if any."""
    hint = get_precision_hint()
    if hint is not None and x.is_floating_point() and x.dtype not in _LOW_PRECISION:
        return x.to(hint)
    return x
