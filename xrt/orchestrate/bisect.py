"""``xrt bisect``: halve the first-parent commits between a measured good and bad commit until one
commit is to blame (Chromium Pinpoint's idea).

The series bisected is the one of BENCHMARK (a regex or asv's full name) on the machine that
changed most between GOOD and BAD. Before anything is measured, the stored GOOD and BAD are judged
by the gate's rules (:func:`xrt.track.gate.judge`): an improvement, or a range where the series did
not move, is refused. Each step then measures GOOD and the midpoint in one job on the series' own
machine and device (:func:`measure_pair`), and the midpoint is bad when the gate, fed just that
pair, calls it a regression of the series, by at least half (in log) the slowdown being bisected.
A step is never decided by comparing today's midpoint with a measurement taken on another day; the
halfway bar keeps a drift within the job (the two commits run one after the other) smaller than
half the slowdown from deciding it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xrt.db import store
from xrt.db.store import Connection
from xrt.track import gate, stats
from xrt.track.detect import higher_is_better

# (repo, commits, results dir, bench regex, machine, profile) -> writes asv results of every commit
Runner = Callable[[Path, list[str], Path, str, str, str | None], None]


class BisectError(ValueError):
    """Bad input to ``xrt bisect`` (a machine not on this host, a range that is not a chain): exit 2."""


def device_for(machine: str) -> str:
    """The torch device of this host whose asv machine name is ``machine`` (``cpu``, ``cuda:1``)."""
    from xrt.bench.machine import machine_name
    from xrt.device import discover

    devices = discover()
    for d in devices:
        if machine_name(d) == machine:
            return d.torch_device
    have = ", ".join(f"{machine_name(d)} ({d.torch_device})" for d in devices)
    raise BisectError(f"machine {machine!r}: the series was measured on a device this host does not have "
                      f"(here: {have}); run xrt bisect on that machine")


def bench_runner(repo: Path, commits: list[str], results: Path, bench: str, machine: str,
                 profile: str | None) -> None:
    """Measure ``commits`` in one ``xrt bench run`` on the device of ``machine``, in that order."""
    from xrt.bench import runner

    out = runner.run(repo, commits, results, device=device_for(machine), quick=profile == "quick", bench=bench,
                     processes=1, log=lambda s: None)  # each candidate beside the good commit, one process each
    bad = [f"{c['commit'][:10]}: {m}: {v['status']}" for c in out["commits"]
           for m, v in c.get("machines", {}).items() if v.get("status") not in ("ok", "benchmark failures")]
    if bad:
        raise RuntimeError(f"xrt bench run --bench {bench!r} measured nothing: {'; '.join(bad)}")


def first_parent_between(repo: Path, good: str, bad: str) -> list[str]:
    """Commits after GOOD up to and including BAD on BAD's first-parent chain, oldest first."""
    out = subprocess.run(["git", "-C", str(repo), "rev-list", "--first-parent", "--reverse", f"{good}..{bad}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise BisectError(f"git rev-list {good}..{bad}: {out.stderr.strip()}")
    return out.stdout.split()


def subject(repo: Path, commit: str) -> str:
    """The commit's subject line ('' when git cannot tell)."""
    out = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%s", commit], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def pick_series(con: Connection, benchmark: str, good: str, bad: str, machine: str | None,
                param_key: str | None = None) -> tuple[str, str, str]:
    """(machine, benchmark, param_key) of the matching series that moved most from GOOD to BAD."""
    rows = con.execute(
        "SELECT g.machine, g.benchmark, g.param_key, abs(ln(b.value / g.value)) AS d FROM results g "
        "JOIN results b USING (machine, benchmark, param_key) WHERE g.commit_hash = ? AND b.commit_hash = ? "
        "AND g.status = 'ok' AND b.status = 'ok' AND g.value > 0 AND b.value > 0 "
        "AND (g.benchmark = ? OR regexp_matches(g.benchmark, ?))" + (" AND g.machine = ?" if machine else "")
        + (" AND g.param_key = ?" if param_key is not None else "") + " ORDER BY d DESC LIMIT 1",
        [good, bad, benchmark, benchmark] + ([machine] if machine else [])
        + ([param_key] if param_key is not None else [])).fetchall()
    if not rows:
        raise BisectError(f"no series of {benchmark!r} is measured at both {good[:10]} and {bad[:10]}"
                          + (f" on {machine}" if machine else ""))
    return rows[0][0], rows[0][1], rows[0][2]


class NotASlowdown(BisectError):
    """GOOD..BAD holds an improvement, or nothing moved: ``xrt bisect`` refuses (exit 2)."""


def _profile(con: Connection, machine: str, commit: str) -> str | None:
    """The suite profile (quick, full) the series' machine measured ``commit`` with, where recorded."""
    row = con.execute("SELECT any_value(json_extract_string(facts, '$.profile')) FROM runs "
                      "WHERE machine = ? AND commit_hash = ?", [machine, commit]).fetchone()
    return row[0] if row else None


@dataclass
class Step:
    """One measured candidate: GOOD and it, measured in one job; the verdict is the gate's."""

    commit: str
    good_value: float
    value: float
    ratio: float  # candidate / good, of the medians
    p_value: float
    bad: bool  # the step's decision: flagged, and at least halfway to BAD's stored level (bisect)
    seconds: float
    flagged: bool = False  # the gate called the candidate a regression of the series against GOOD


@dataclass
class Bisection:
    culprit: str | None
    series: tuple[str, str, str]
    good: str = ""
    bad: str = ""
    unit: str | None = None
    status: str = ""  # found, budget (stopped with a narrowed range), nothing moved
    last_good: str = ""  # the narrowed range: the culprit is after last_good, at or before first_bad
    first_bad: str = ""
    steps: list[Step] = field(default_factory=list)

    @property
    def measured(self) -> list[str]:
        return [s.commit for s in self.steps]

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["series"] = {"machine": self.series[0], "benchmark": self.series[1], "param_key": self.series[2]}
        return d


def bench_regex(benchmark: str) -> str:
    """asv's ``--bench`` for exactly one benchmark."""
    return f"^{re.escape(benchmark)}(?!\\w)"  # asv finds no benchmark for a pattern that ends in $


def measure_pair(repo: Path, good: str, candidate: str, series: tuple[str, str, str], *, profile: str | None,
                 runner: Runner, work: Path) -> Step:
    """GOOD and CANDIDATE measured in one job on the series' machine, CANDIDATE judged against GOOD.

    The one place a bisect step measures: both commits go to one ``xrt bench run`` (one after the
    other, on the same device) into ``work`` (a folder and database of their own: the stored
    results are untouched), and the gate (:func:`xrt.track.gate.judge`) judges that pair alone.
    """
    from xrt.db.ingest import ingest

    t0 = time.time()
    machine, benchmark, param_key = series
    results, db = work / "asv", work / "pair.duckdb"
    runner(repo, [good, candidate], results, bench_regex(benchmark), machine, profile)
    ingest(results, db, repo=str(repo), echo=lambda s: None)
    with store.read(db) as con:  # the pair's own database, opened once
        v = gate.judge(con, good, candidate, machine=machine, history=False)
        rows = gate.rows_of(con, [(good, machine), (candidate, machine)])
    sides = (rows[good, machine].get(series), rows[candidate, machine].get(series))  # None: no rows there
    g, x = (np.asarray(s.samples if s else [], float) for s in sides)
    if not len(g) or not len(x):
        why = "; ".join(v.problems[:3]) or "no samples"
        raise RuntimeError(f"{candidate[:10]}: measured beside {good[:10]}, but {benchmark} [{param_key or '-'}] on "
                           f"{machine} has no result on both sides ({why})")
    bad = any((r["machine"], r["benchmark"], r["param_key"]) == series for r in v.regressions)
    p, _ = stats.mannwhitney(g, x)
    return Step(candidate, float(np.median(g)), float(np.median(x)), float(np.median(x) / np.median(g)), float(p),
                bad, round(time.time() - t0, 1), flagged=bad)


def stored_verdict(con: Connection, series: tuple[str, str, str], good: str, bad: str) -> tuple[bool, float, str]:
    """(moved, ratio, why) of the stored GOOD and BAD of ``series`` by the gate's rules. ``moved``:
    the gate flags BAD as a regression of the series; raises :class:`NotASlowdown` for an improvement."""
    m, bn, pk = series
    rows = gate.rows_of(con, [(good, m), (bad, m)])
    gs, bs = rows[good, m].get(series), rows[bad, m].get(series)  # None: no rows there
    g, b = (np.asarray(s.samples if s else [], float) for s in (gs, bs))
    unit = gs.unit if gs else None
    if not len(g) or not len(b):
        side = "GOOD " + good[:10] if not len(g) else "BAD " + bad[:10]
        raise BisectError(f"{bn} [{pk or '-'}] on {m} has no samples of its own at {side} (carried forward, or "
                          "failed): measure it there first")
    ratio = float(np.median(b) / np.median(g))
    worse = np.log(ratio) * (-1 if higher_is_better(unit) else 1)
    hib = ", higher is better" if higher_is_better(unit) else ""
    if worse < 0:
        raise NotASlowdown(f"{bn} [{pk or '-'}] on {m} is an improvement from GOOD to BAD ({ratio:.3f}x{hib}), "
                           "not a slowdown: nothing to bisect (to find the commit that made it faster, swap GOOD "
                           "and BAD)")
    v = gate.judge(con, good, bad, machine=m, history=False)
    moved = any((r["machine"], r["benchmark"], r["param_key"]) == series for r in v.regressions)
    why = "" if moved else (f"{ratio:.3f}x, within the gate's threshold or its noise "
                            f"(p {stats.mannwhitney(g, b)[0]:.1e})" if len(g) and len(b) else "no samples")
    return moved, ratio, why


def _worse(ratio: float, unit: str | None) -> float:
    """How much worse ``ratio`` (after / before) is, in log: > 0 slower, whatever the unit's direction."""
    return float(np.log(ratio)) * (-1 if higher_is_better(unit) else 1)


def bisect(db: str | os.PathLike, repo: str | os.PathLike, benchmark: str, good: str, bad: str, *,
           results: str | os.PathLike | None = None, machine: str | None = None, param_key: str | None = None,
           budget_s: float | None = None,
           runner: Runner = bench_runner, log: Callable[[str], None] = print) -> Bisection:
    """Find the first commit after GOOD that the gate calls a regression of the series against GOOD.

    ``results``: keep each step's asv results there (``step-N-<commit>``) [a temporary folder].
    ``budget_s``: stop before a step that would end after this many seconds; the narrowed range is
    returned (``status`` ``budget``, ``culprit`` None).
    """
    t0 = time.time()
    db, repo = Path(db), Path(repo)
    chain = first_parent_between(repo, good, bad)
    if not chain or chain[-1] != bad:
        raise BisectError(f"{bad[:10]} is not a first-parent descendant of {good[:10]}")
    with store.read(db) as con:  # the stored results, read once before the measuring starts
        series = pick_series(con, benchmark, good, bad, machine, param_key)
        m, bn, pk = series
        moved, ratio, why = stored_verdict(con, series, good, bad)
        row = con.execute("SELECT any_value(unit) FROM results WHERE benchmark = ?", [bn]).fetchone()
        profile = _profile(con, m, good)
    log(f"xrt bisect: {bn} [{pk or '-'}] on {m}: bad {bad[:10]} is {ratio:.3f}x good {good[:10]} (stored); "
        f"{len(chain) - 1} commit(s) between")
    out = Bisection(None, series, good=good, bad=bad, last_good=good, first_bad=bad)
    out.unit = row[0] if row else None
    if not moved:
        out.status = "nothing moved"
        log(f"xrt bisect: nothing moved: {bn} [{pk or '-'}] on {m} at {bad[:10]} is not a regression of "
            f"{good[:10]} by the gate's rules ({why}); nothing to bisect")
        return out
    keep = Path(results) if results else None
    work_root = Path(tempfile.mkdtemp(prefix="xrt-bisect-"))
    lo, hi = -1, len(chain) - 1  # chain[lo] is good (-1: GOOD itself), chain[hi] is bad
    left = max(1, int(np.ceil(np.log2(hi - lo)))) if hi - lo > 1 else 0
    try:
        while hi - lo > 1:
            longest = max((s.seconds for s in out.steps), default=0.0)
            spent = time.time() - t0
            if budget_s is not None and out.steps and spent + longest > budget_s:
                out.status = "budget"
                log(f"xrt bisect: budget of {budget_s:g} s spent ({spent:.0f} s, a step takes ~{longest:.0f} s): "
                    f"the first bad commit is after {out.last_good[:10]}, at or before {out.first_bad[:10]} "
                    f"({hi - lo} commit(s))")
                return out
            mid = (lo + hi) // 2
            c = chain[mid]
            n = len(out.steps) + 1
            log(f"  step {n}/~{n + left - 1}: measuring {c[:10]} beside good {good[:10]} on {m} "
                f"({hi - lo - 1} candidate(s) left, {time.time() - t0:.0f} s spent)")
            work = work_root / f"step-{n}-{c[:10]}"
            work.mkdir()
            st = measure_pair(repo, good, c, series, profile=profile, runner=runner, work=work)
            # Both commits of a step run one after the other: on a busy host the later one can drift by
            # more than the gate's threshold. A candidate is bad only when it is also at least halfway
            # (in log) to the slowdown GOOD..BAD showed, so a drift under half the slowdown decides nothing.
            st.bad = st.flagged and _worse(st.ratio, out.unit) >= _worse(ratio, out.unit) / 2
            if st.flagged and not st.bad:
                log(f"  {c[:10]}: flagged by the gate at {st.ratio:.3f}x, under half the slowdown being bisected "
                    f"({ratio:.3f}x): good")
            if keep is not None:
                shutil.copytree(work / "asv", keep / work.name, dirs_exist_ok=True)
            out.steps.append(st)
            left -= 1
            log(f"  {c[:10]}: {st.value:.4g} vs good {st.good_value:.4g} ({st.ratio:.3f}x, p {st.p_value:.1e}) -> "
                f"{'bad' if st.bad else 'good'} ({st.seconds:.0f} s)")
            if st.bad:
                hi, out.first_bad = mid, c
            else:
                lo, out.last_good = mid, c
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    out.culprit, out.status = chain[hi], "found"
    log(f"xrt bisect: first bad commit: {out.culprit} {subject(repo, out.culprit)}")
    return out
