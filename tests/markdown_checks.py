"""Checks on Markdown shared by the tests of the tracker's outputs and of the dashboard."""

from __future__ import annotations

import re


def outside_code(md: str) -> str:
    """A Markdown string without its code spans (CommonMark: a run of N backticks opens a span that
    the next run of exactly N closes; a run with no partner is literal)."""
    runs = [(m.start(), m.end()) for m in re.finditer(r"`+", md)]
    out, pos, j = [], 0, 0
    while j < len(runs):
        s, e = runs[j]
        close = next((k for k in range(j + 1, len(runs)) if runs[k][1] - runs[k][0] == e - s), None)
        if close is None:
            j += 1
            continue
        out.append(md[pos:s])
        pos, j = runs[close][1], close + 1
    return "".join(out) + md[pos:]
