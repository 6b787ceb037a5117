"""The environment a commit was measured in, per machine, and what changed between two of them.

A benchmark machine's name stays while what is under it changes: a driver or torch upgrade, a
new GPU behind the same runner label, another CPU under ``ubuntu-latest``. A step at such a commit
is an environment change, not a code change. This module says which of the two it is, from what
the runs recorded:

- the ``runs`` columns the timing layer's sidecar fills (GPU model, driver, CUDA, torch, Triton);
- the sidecar's facts (device kind, compute capability, SM count, power limit, memory; on the CPU
  the processor model and the kernel, where the sidecar recorded them).

- what asv itself records in every result file: the Python version (``python``), the environment's
  name (``env_name``, e.g. ``conda-py3.10``) and the dependency versions (``requirements``, one field
  per package). A change of any of them is an environment change: a dependency upgrade that moves
  86 series at once is one environment change, not 86 code regressions. asv's ``existing``
  environment records the interpreter's path instead of a version (``/opt/venv/bin/python``,
  ``existing-py_opt_venv_bin_python``): that moves with the checkout and is left out.

Where a run recorded none of these, its environment is *unknown*: :func:`changes` answers ``None``,
"cannot be told", never "the same". Where only asv's facts were recorded (plain asv results, such
as the django corpus) and they are the same on both sides, the machine under them may still have
changed: also ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from xrt.db.asv_files import TEXT_FACTS

# runs columns, and sidecar facts, that describe the machine and its software (not the measurement)
# (asv's ``python`` is :data:`ASV`'s, and only where it names a version: :func:`_asv`)
COLUMNS = TEXT_FACTS
FACTS = ("device_kind", "compute_capability", "sm_count", "total_memory_bytes", "power_limit_w", "cpu_model",
         "kernel")
# facts the sidecar began recording later (xrt.bench.machine.sidecar): a change only where both sides
# recorded them, so the first run with a newer sidecar is not a "machine changed" on every machine
LATER = ("cpu_model", "kernel")
# the sidecar's presence: without one of these, nothing about the machine was recorded
_RECORDED = (*COLUMNS, *FACTS)
# what asv records in every result file (runs columns); requirements become one field per package
ASV = ("python", "env_name")
REQUIREMENT = "requirement "  # field-name prefix of a package of asv's ``requirements``

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
    rows = con.execute(f"SELECT machine, commit_hash, {', '.join(COLUMNS)}, python, env_name, requirements, facts "
                       f"FROM runs WHERE {' AND '.join(where)}", args).fetchall()
    seen: dict[tuple[str, str], dict[str, set[str]]] = {}
    for m, c, *vals in rows:
        facts, reqs = _dict(vals.pop()), _dict(vals.pop())
        python, env_name = vals[-2:]
        fields = (dict(zip(COLUMNS, vals)) | {k: facts.get(k) for k in FACTS} | _asv(python, env_name)
                  | {f"{REQUIREMENT}{k}": v for k, v in reqs.items()})
        d = seen.setdefault((m, c), {})
        for k, v in fields.items():
            if (v := _norm(v)) is not None:
                d.setdefault(k, set()).add(v)
    out: dict[tuple[str, str], Env | None] = {}
    for key, d in seen.items():
        out[key] = {k: " / ".join(sorted(v)) for k, v in d.items()} or None
    return out


def _dict(v: Any) -> dict:
    """A JSON object column (``facts``, ``requirements``) as a dict; anything else as ``{}``."""
    try:
        v = json.loads(v) if isinstance(v, str) else (v or {})
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def _asv(python: Any, env_name: Any) -> dict[str, Any]:
    """asv's ``python`` and ``env_name``, where they name a version rather than a path (the ``existing``
    environment records the interpreter's path, which moves with the checkout)."""
    out = {}
    if python is not None and not any(ch in str(python) for ch in "/\\"):
        out["python"] = python
    if env_name is not None and not str(env_name).startswith("existing"):
        out["env_name"] = env_name
    return out


def _machine(env: Env) -> bool:
    """Whether ``env`` holds any of the sidecar's machine facts."""
    return any(k in env for k in _RECORDED)


def changes(before: Env | None, after: Env | None) -> list[str] | None:
    """What differs, as ``field: old → new`` lines; ``[]`` the same; ``None`` cannot be told.

    A fact of :data:`LATER` counts only where both sides recorded it.
    """
    if before is None or after is None:
        return None
    machine = _machine(before) and _machine(after)  # the sidecar's facts count where both sides have them
    reqs = sorted({k for k in (*before, *after) if k.startswith(REQUIREMENT)})
    out = []
    for k in (*(COLUMNS + FACTS if machine else ()), *ASV, *reqs):
        a, b = before.get(k), after.get(k)
        if k in LATER and (a is None or b is None):
            continue
        if a != b and (a is not None or b is not None):
            out.append(f"{k}: {a or '(not recorded)'} → {b or '(not recorded)'}")
    return out if out or machine else None
