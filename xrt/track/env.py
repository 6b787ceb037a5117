"""The environment a commit was measured in, per machine, and what changed between two of them.

A benchmark machine's name stays while what is under it changes: a driver or torch upgrade, a
new GPU behind the same runner label, another CPU under ``ubuntu-latest``. A step at such a commit
is an environment change, not a code change. This module says which of the two it is, from what
the runs recorded:

- the ``runs`` columns the timing layer's sidecar fills (GPU model, driver, CUDA, torch, Triton);
- the sidecar's facts (device kind, compute capability, SM count, power limit, memory; on the CPU
  the processor model and the kernel, where the sidecar recorded them).

Where a run recorded none of these (plain asv results, such as the django corpus), its
environment is *unknown*: :func:`changes` answers ``None``, "cannot be told", never "the same".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from xrt.db.asv_files import TEXT_FACTS

# runs columns, and sidecar facts, that describe the machine and its software (not the measurement)
# (not ``python``: asv stores the interpreter's path there, which moves with the checkout)
COLUMNS = TEXT_FACTS
FACTS = ("device_kind", "compute_capability", "sm_count", "total_memory_bytes", "power_limit_w", "cpu_model",
         "kernel")
# facts the sidecar began recording later (xrt.bench.machine.sidecar): a change only where both sides
# recorded them, so the first run with a newer sidecar is not a "machine changed" on every machine
LATER = ("cpu_model", "kernel")
# the sidecar's presence: without one of these, nothing about the environment was recorded
_RECORDED = (*COLUMNS, *FACTS)

Env = dict[str, str]


def _norm(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v)


def environments(con: Any, machine: str | None = None,
                 commits: Iterable[str] | None = None) -> dict[tuple[str, str], Env | None]:
    """``{(machine, commit): env}``; ``None`` where no run of that commit recorded its environment.

    Several runs of one commit on one machine that disagree are listed together (``a / b``): the
    commit's measurement itself spans two environments.
    """
    where, args = ["TRUE"], []
    if machine:
        where.append("machine = ?")
        args.append(machine)
    if commits is not None:
        commits = list(commits)
        where.append("list_contains(?, commit_hash)")
        args.append(commits)
    rows = con.execute(f"SELECT machine, commit_hash, {', '.join(COLUMNS)}, facts FROM runs "
                       f"WHERE {' AND '.join(where)}", args).fetchall()
    seen: dict[tuple[str, str], dict[str, set[str]]] = {}
    for m, c, *vals in rows:
        facts = vals.pop()
        try:
            facts = json.loads(facts) if isinstance(facts, str) else (facts or {})
        except ValueError:
            facts = {}
        if not isinstance(facts, dict):
            facts = {}
        fields = dict(zip(COLUMNS, vals)) | {k: facts.get(k) for k in FACTS}
        d = seen.setdefault((m, c), {})
        for k, v in fields.items():
            if (v := _norm(v)) is not None:
                d.setdefault(k, set()).add(v)
    out: dict[tuple[str, str], Env | None] = {}
    for key, d in seen.items():
        out[key] = {k: " / ".join(sorted(v)) for k, v in d.items()} if any(k in d for k in _RECORDED) else None
    return out


def changes(before: Env | None, after: Env | None) -> list[str] | None:
    """What differs, as ``field: old → new`` lines; ``[]`` the same; ``None`` cannot be told.

    A fact of :data:`LATER` counts only where both sides recorded it.
    """
    if before is None or after is None:
        return None
    out = []
    for k in (*COLUMNS, *FACTS):
        a, b = before.get(k), after.get(k)
        if k in LATER and (a is None or b is None):
            continue
        if a != b and (a is not None or b is not None):
            out.append(f"{k}: {a or '(not recorded)'} → {b or '(not recorded)'}")
    return out
