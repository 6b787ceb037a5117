"""Checks on Markdown shared by the tests of the tracker's outputs and of the dashboard."""

from __future__ import annotations

import re


def _spans(md: str) -> list[tuple[int, int, int, int]]:
    """The code spans of a Markdown string as (open start, content start, content end, close end)
    (CommonMark: a run of N backticks opens a span that the next run of exactly N closes; a run with
    no partner is literal)."""
    runs = [(m.start(), m.end()) for m in re.finditer(r"`+", md)]
    out, j = [], 0
    while j < len(runs):
        s, e = runs[j]
        close = next((k for k in range(j + 1, len(runs)) if runs[k][1] - runs[k][0] == e - s), None)
        if close is None:
            j += 1
            continue
        out.append((s, e, runs[close][0], runs[close][1]))
        j = close + 1
    return out


def outside_code(md: str) -> str:
    """A Markdown string without its code spans."""
    out, pos = [], 0
    for s, _, _, end in _spans(md):
        out.append(md[pos:s])
        pos = end
    return "".join(out) + md[pos:]


def code_spans(md: str) -> list[str]:
    """The contents of a Markdown string's code spans, one space of padding stripped each side."""
    out = []
    for _, a, b, _ in _spans(md):
        text = md[a:b].replace("\n", " ")
        out.append(text[1:-1] if len(text) > 2 and text[0] == text[-1] == " " and text.strip() else text)
    return out
