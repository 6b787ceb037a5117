"""Strings from users and data (machine, benchmark and parameter names, messages, notes) in Markdown:
the one escaping rule of every Markdown the tracker writes (the gate's summary, ``xrt regressions
--format markdown``, ``xrt explain``'s Markdown) and of the dashboard's pages.

Names come from result files and sidecars anyone can write, and the Markdown goes to a CI step
summary, a pull-request comment or a page: a name must show as it is, never as a link, an image,
HTML, emphasis, a heading, a mention, a formula or a cell break.
"""

from __future__ import annotations

import re
from typing import Any

_PLAIN = re.compile(r"[^\W_][\w-]*(?: [^\W_][\w-]*)*")


def lit(s: Any, limit: int | None = 200, code: bool = False, cell: bool = False) -> str:
    """``s`` for a Markdown body, a label or (``cell``) a table cell, shown as it is.

    Words (letters, digits, ``-`` and ``_`` inside words, single spaces) stay plain unless ``code``;
    anything else becomes one inline code span whose fence is longer than any run of backticks
    inside (CommonMark), so nothing in it is parsed. Whitespace runs, newlines included, become one
    space (a blank line would end the span); past ``limit`` characters it is cut with "…". In a
    table cell a ``|`` would end the cell even inside a code span, so ``cell`` escapes it as GFM
    says (``\\|``, shown as ``|``).
    """
    t = " ".join(str(s).split())
    if limit and len(t) > limit:
        t = t[: limit - 1] + "…"
    if not t:
        return ""
    if not code and _PLAIN.fullmatch(t):
        return t
    fence = "`" * (max((len(m) for m in re.findall("`+", t)), default=0) + 1)
    out = f"{fence} {t} {fence}"  # CommonMark drops one space each side: a leading/trailing ` stays safe
    return out.replace("|", "\\|") if cell else out
