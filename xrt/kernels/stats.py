"""``XRT_KERNEL_STATS=1``: counters of which path a kernel launch took (vectorized or fallback),
kept per process and read by ``xrt diag``. Off (one environment lookup a launch) otherwise."""

from __future__ import annotations

from collections import Counter

from xrt.kernels import rawenv

_COUNTS: Counter[str] = Counter()
ENV = "XRT_KERNEL_STATS"
# read raw on every launch (xrt.kernels.rawenv)
_ENV, _KEY, _ON = rawenv.DATA, rawenv.key(ENV), rawenv.value("1")


def enabled() -> bool:
    return _ENV.get(_KEY) == _ON


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` (``"conv_bn_relu.direct.vec"``) when stats are enabled."""
    if _ENV.get(_KEY) == _ON:
        _COUNTS[name] += n


def snapshot(prefix: str = "") -> dict[str, int]:
    """The counters whose names start with ``prefix``."""
    return {k: v for k, v in sorted(_COUNTS.items()) if k.startswith(prefix)}


def reset() -> None:
    _COUNTS.clear()
