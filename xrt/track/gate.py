"""``xrt gate``: head against base, exit 0 (pass), 1 (regression) or 2 (cannot judge).

It fails closed. The gate exits 0 only when every series it was asked to judge (every machine x
benchmark x parameters measured at base or head, on the machines in scope) was compared on enough
valid samples on both sides; a slowdown is exit 1; anything else is exit 2 with the reasons listed.
The situations and their exits are the table in ``docs/regressions.md`` ("The gate's rule"); each
series gets one :class:`Outcome` below, whose ``blocks`` says whether it stops a pass.

A series regresses when head is worse than base by at least ``threshold`` (default 5 %, the
ratio of the medians of the samples) and a Mann-Whitney U test of the samples gives
p <= ``alpha`` (0.002, asv compare's bar). "Enough samples" means at least ``min_samples`` per
side *and* enough for the test to be able to reach ``alpha`` at all (8 per side at 0.002: with
5 against 5 even a 2x slowdown gives p = 0.012). Where cycles were recorded on both sides and they
did not move (less than half the threshold), the slowdown is a clock change: listed, not failing.
A regression wins over "cannot judge" (exit 1 is the more useful news; both fail the build).

Three layers: :mod:`xrt.track.gate_data` reads both sides of every series once (the SQL),
:mod:`xrt.track.gate_rules` judges each series by an ordered list of named rules (and
:mod:`xrt.track.gate_compare` places a compared series' slowdown by its steps, into the
:mod:`xrt.track.gate_verdict`), and :mod:`xrt.track.gate_render` tells the verdict. This module
runs one comparison through them (:func:`judge`) and keeps the names the CLI and other modules
import.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from xrt.bench.sources import unit_of_benchmark
from xrt.db import git
from xrt.db.store import Connection
from xrt.track import env as envmod
from xrt.track import regressions
from xrt.track.gate_compare import COMPARE_STEPS, compare, round_ratios, run_gap
from xrt.track.gate_data import (
    Pair,
    Side,
    carried,
    histories,
    history_values,
    like,
    like_series_noise,
    pairs,
    per_env,
    rows,
    rows_of,
)
from xrt.track.gate_data import ingest_errors as _errors
from xrt.track.gate_render import alerts_of, evidence, report, summary_markdown
from xrt.track.gate_rules import (
    RULES,
    Context,
    against_history,
    identical,
    judge_series,
    machine_drift,
    outcome,
    process_spread_pool,
    round_spread_pool,
    several_runs,
)
from xrt.track.gate_verdict import (
    CANNOT_JUDGE,
    CARRIED,
    COMPARED,
    FAILED_AT_BASE,
    FAILED_AT_HEAD,
    HISTORY,
    INVALID,
    MISSING_AT_HEAD,
    NEW_AT_HEAD,
    OUTCOMES,
    PASS,
    REGRESSION,
    SEVERAL_RUNS,
    SKIPPED_AT_HEAD,
    SKIPPED_BOTH,
    TOO_FEW,
    VERSION_CHANGED,
    Outcome,
    Settings,
    Verdict,
    parse_threshold,
)

# What other modules and the tests import from here (the modules above are their homes).
__all__ = ["CANNOT_JUDGE", "CARRIED", "COMPARED", "COMPARE_STEPS", "FAILED_AT_BASE", "FAILED_AT_HEAD", "HISTORY",
           "INVALID", "MISSING_AT_HEAD", "NEW_AT_HEAD", "OUTCOMES", "PASS", "REGRESSION", "RULES", "SEVERAL_RUNS",
           "SKIPPED_AT_HEAD", "SKIPPED_BOTH", "TOO_FEW", "VERSION_CHANGED", "Outcome", "Pair", "Settings", "Side",
           "Verdict", "_errors", "against_history", "alerts_of", "compare", "evidence", "history_values", "identical",
           "judge", "like", "like_series_noise", "outcome", "parse_threshold", "per_env", "report", "resolve",
           "round_ratios", "rows_of", "run_gap", "several_runs", "summary_markdown"]


def resolve(repo: str | os.PathLike | None, rev: str, con: Connection | None) -> str:
    """A full hash: ``git rev-parse`` in REPO when given; else a unique prefix in the database open
    on ``con``, or failing that a name (``HEAD~1``, a branch, a tag) of the git checkout in the
    current directory, as ``xrt explain`` reads its ``--repo .``."""
    if repo is not None:
        full = _rev_parse(repo, rev)
        if full is None:
            raise ValueError(f"{rev!r} is not a commit of {repo}")
        return full
    try:
        return regressions.resolve_in_db(con, rev)
    except ValueError as e:
        full = _rev_parse(".", rev)
        if full is None:
            raise ValueError(f"{e}, and it is not a commit of the git checkout here (.)") from None
        return full


def _rev_parse(repo: str | os.PathLike, rev: str) -> str | None:
    """The commit ``rev`` names in ``repo`` (a rev that reads as an option is refused: None)."""
    return git.rev_commit(repo, rev)




def judge(con: Connection, base: str, head: str, *, threshold: float = 0.05, alpha: float = 0.002,
          min_samples: int = 5, machine: str | None = None, history: bool = True,
          noise: Connection | None = None) -> Verdict:
    """Judge every series of ``base`` and ``head`` (full hashes) on ``machine`` (default: all), on the
    database open on ``con``.

    ``noise``: a connection to the database each series' run-to-run noise is learnt from (its
    history up to ``base``), when not ``con``'s (a paired measurement's database holds only its own
    runs)."""
    cfg = Settings(threshold, alpha, min_samples)
    v = Verdict(base=base, head=head, counts={o.name: 0 for o in OUTCOMES})
    if base == head:
        v.problems.append(f"base and head are the same commit ({head[:10]}): nothing new to judge "
                          "(identical results on both sides are not evidence of anything)")
        v.code = CANNOT_JUDGE
        return v
    b_rows, h_rows, hist = _load(v, con, machine, noise)
    changed = _scope(v, b_rows, h_rows, machine)
    eff = np.log1p(cfg.threshold)
    v.drift = machine_drift(b_rows, h_rows, eff)
    for m, (d, n) in sorted(v.drift.items()):
        v.notes.append(f"machine drift on {m}: the reference call took {d:.2f}x its base time at head "
                       f"({n} host series); host series are judged against it (op / reference), so the "
                       "drift is not blamed on code")
    todo = pairs(b_rows, h_rows)
    ctx = Context(v, cfg, eff, base, hist, changed, process_spread_pool(todo), round_spread_pool(todo))
    for p in todo:
        judge_series(p, ctx)
    _sum_up(v, bool(b_rows and h_rows))
    if history and b_rows and h_rows:
        v.history = _history(con, base, head, machine)
    v.code = REGRESSION if v.regressions else (CANNOT_JUDGE if v.problems else PASS)
    return v


def _load(v: Verdict, con: Connection, machine: str | None,
          noise: Connection | None) -> tuple[dict[tuple, Side], dict[tuple, Side], dict[str, dict]]:
    """Both sides of every series (carried series included), the ingest errors and the recorded
    environments into ``v``, and the noise models' history (from ``noise`` where given)."""
    base, head = v.base, v.head
    b_rows, h_rows = rows(con, base, machine), rows(con, head, machine)
    v.problems += _carry(con, b_rows, base, machine, "base") + _carry(con, h_rows, head, machine, "head")
    for c in (base, head):
        v.problems += _errors(con, c)
    v.envs = envmod.environments(con, machine, commits=[base, head])
    several_envs = any(len(per_env(b_rows.get(k), h_rows.get(k))) > 1 for k in set(b_rows) | set(h_rows))
    hist = histories(noise if noise is not None else con, base, machine, several_envs)
    return b_rows, h_rows, hist


def _carry(con: Any, sides: dict[tuple, Side], commit: str, machine: str | None, side: str) -> list[str]:
    """Add to ``sides`` the series ``commit`` carries forward, from the commit each was measured at (a
    unit's series by :func:`xrt.bench.sources.unit_of_benchmark`, the runner's mapping); a series
    ``commit`` measured itself keeps its own rows. Returns problems."""
    problems = []
    for m, unit, frm in carried(con, commit, machine):
        got = {k: v for k, v in rows(con, frm, m).items() if unit_of_benchmark(k[1]) == unit}
        if not got:
            problems.append(f"{m} {unit}: carried forward at {side} {commit[:10]} from {frm[:10]}, which has no "
                            f"results for it on {m} (measure {commit[:10]} without --changed-only)")
        for k, v in got.items():
            if k not in sides:
                sides[k] = replace(v, carried_from=frm)
    return problems


def _scope(v: Verdict, b_rows: dict[tuple, Side], h_rows: dict[tuple, Side], machine: str | None) -> set[str]:
    """The problems of the comparison as a whole (a side never measured, a machine measured on one side
    only, a machine whose environment changed); returns the changed machines."""
    base, head = v.base, v.head
    where = f" on {machine}" if machine else ""
    if not b_rows:
        v.problems.append(f"base {base[:10]} has no results{where} (never measured)")
    if not h_rows:
        v.problems.append(f"head {head[:10]} has no results{where} (never measured)")
    b_machines, h_machines = {k[0] for k in b_rows}, {k[0] for k in h_rows}
    if b_rows and h_rows:
        for m in sorted(b_machines - h_machines):
            v.problems.append(f"head {head[:10]} was not measured on {m} "
                              f"({sum(k[0] == m for k in b_rows)} series at base not judged)")
        for m in sorted(h_machines - b_machines):
            v.problems.append(f"base {base[:10]} was not measured on {m} "
                              f"({sum(k[0] == m for k in h_rows)} series at head not judged)")
    changed = set()  # machines whose recorded environment differs between base and head
    for m in sorted(b_machines & h_machines):
        diff = envmod.changes(v.envs.get((m, base)), v.envs.get((m, head)))
        if diff:
            changed.add(m)
            v.problems.append(f"machine changed on {m} between base and head ({'; '.join(diff)}): a slowdown "
                              "there cannot be told from the change; measure base again on this environment")
        elif diff is None:
            v.notes.append(f"{m}: no machine environment recorded at base or head, so a slowdown cannot be told "
                           "from a machine change")
    return changed


def _sum_up(v: Verdict, both_sides: bool) -> None:
    """The counts and the notes of what was not judged; no series compared at all is a problem."""
    v.compared = v.counts[COMPARED.name] + v.counts[HISTORY.name] + v.carried_compared
    for o in (NEW_AT_HEAD, SKIPPED_BOTH):
        if v.counts[o.name]:
            v.notes.append(f"{v.counts[o.name]} series {o.text}")
    if v.counts[CARRIED.name]:
        origin = ", ".join(f"{n} from {c[:10]}" + (" (base)" if c == v.base else "")
                           for c, n in sorted(v.carried_from.items()))
        v.notes.append(f"{v.counts[CARRIED.name]} series {CARRIED.text}: {origin}; "
                       f"{v.carried_compared} of them compared with base on those samples")
    if both_sides and not v.compared and not v.counts[CARRIED.name] and not v.problems:
        v.problems.append("no series was compared (nothing ran at both base and head)")


def _history(con: Connection, base: str, head: str, machine: str | None) -> list[Any]:
    """The detector's regressions whose first slow commit lies in (base, head]: context for the summary."""
    order = regressions.commit_order(con)
    lo, hi = order.get(base), order.get(head)
    if lo is None or hi is None:
        return []
    return [r for r in regressions.detect_db(con, machine=machine)
            if r.kind == "regression" and lo < order.get(r.commit, -1) <= hi]


