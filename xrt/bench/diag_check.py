"""One line of ``xrt diag``'s checklist: what it checked, what it saw, what to change.

Its own module so that the op-specific checks (:mod:`xrt.bench.diag_conv`) and the checklist that
calls them (:mod:`xrt.bench.diag`) both import it, and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, INFO = "ok", "warn", "info"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    advice: str = ""
