"""Values in their units, for people: the one formatter of the gate's summary, `xrt report` and
the dashboard."""

from __future__ import annotations

from typing import Any


def fmt_value(v: Any, unit: str | None) -> str:
    """One value in its unit, readable: times as ns / µs / ms / s, anything else with 4 digits."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return "—"
    if unit == "seconds":
        a = abs(v)
        for f, lab in ((1e9, "ns"), (1e6, "µs"), (1e3, "ms")):
            if a * f < 1000:
                return f"{v * f:.3g} {lab}"
        return f"{v:.3g} s"
    return f"{v:.4g} {unit}" if unit else f"{v:.4g}"
