"""Alerts: the steps one machine saw at one commit, grouped into one thing for a team to read
(Perfherder's alert summary). The one home of that grouping:

- ``xrt regressions`` (:func:`xrt.track.regressions.group`, which adds the cause from the recorded
  environment) groups the detector's steps;
- ``xrt gate``'s terminal and markdown summary groups the failing series of head the same way;
- the dashboard's Regressions page groups the rows of the ``regressions`` table.

Stdlib only, no torch, no numpy: the dashboard imports the database layer and nothing else.
Items are objects with the attributes, or mappings with the keys, ``machine``, ``commit`` and
``previous_commit`` (other names can be given).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class Group:
    machine: str
    commit: str
    previous_commit: str  # the one most of its items name
    items: list[Any]


def _get(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, Mapping) else getattr(item, name)


def group(items: Iterable[Any], *, machine: str = "machine", commit: str = "commit",
          previous: str = "previous_commit", by_size: bool = True) -> list[Group]:
    """One :class:`Group` per (machine, commit), items in their given order within it. ``by_size``:
    the largest group first (then machine, commit); else the order in which each group first appears."""
    by: dict[tuple[str, str], list[Any]] = {}
    for it in items:
        by.setdefault((str(_get(it, machine)), str(_get(it, commit))), []).append(it)
    out = [Group(m, c, Counter(str(_get(i, previous)) for i in its).most_common(1)[0][0], its)
           for (m, c), its in by.items()]
    if by_size:
        out.sort(key=lambda g: (-len(g.items), g.machine, g.commit))
    return out


def counts_text(kinds: Iterable[str]) -> str:
    """``2 regressions, 1 clock``: how many steps of each kind, kinds in name order."""
    n = Counter(kinds)
    return ", ".join(f"{v} {k}{'s' if v != 1 else ''}" for k, v in sorted(n.items()))
