"""``XRT_KERNEL_STATS=1``: counters of which path a kernel launch took (vectorized or fallback),
kept per process and read by ``xrt diag``. Off (one environment lookup a launch) otherwise."""

from __future__ import annotations

import os
from collections import Counter

_COUNTS: Counter[str] = Counter()


def enabled() -> bool:
    return os.environ.get("XRT_KERNEL_STATS") == "1"


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` (``"conv_bn_relu.direct.vec"``) when stats are enabled."""
    if os.environ.get("XRT_KERNEL_STATS") == "1":
        _COUNTS[name] += n


def snapshot(prefix: str = "") -> dict[str, int]:
    """The counters whose names start with ``prefix``."""
    return {k: v for k, v in sorted(_COUNTS.items()) if k.startswith(prefix)}


def reset() -> None:
    _COUNTS.clear()
