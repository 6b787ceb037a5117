"""Values in their units and ratios, for people: the one formatter of the gate's output and summary,
`xrt regressions`, `xrt report` and the dashboard."""

from __future__ import annotations

import math
from typing import Any


def fmt_value(v: Any, unit: str | None) -> str:
    """One value in its unit, readable: times as ns / µs / ms / s, anything else with 4 digits."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return "—"
    unit = unit if isinstance(unit, str) and unit else None  # NULL in a table arrives as None or NaN
    if unit == "seconds":
        for f, lab in ((1e9, "ns"), (1e6, "µs"), (1e3, "ms")):
            text = f"{v * f:.3g}"
            if abs(float(text)) < 1000:  # after rounding: 999.95 ns is "1 µs", never "1e+03 ns"
                return f"{text} {lab}"
        return f"{v:.3g} s"
    return f"{v:.4g} {unit}" if unit else f"{v:.4g}"


def fmt_ratio(r: Any) -> str:
    """A ratio (after / before) with 3 decimals. One past the largest float (a value near 1e308 over
    a small one) is "∞", not numpy's "inf"; a missing one is "—"."""
    if r is None or isinstance(r, bool) or not isinstance(r, int | float) or r != r:
        return "—"
    if math.isinf(r):
        return "∞" if r > 0 else "-∞"
    return f"{r:.3f}"
