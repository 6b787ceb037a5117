"""``xrt bisect``: halve the first-parent commits between a measured good and bad commit until one
commit is to blame (Chromium Pinpoint's idea), measuring each midpoint with ``xrt bench run``.

The series bisected is the one of BENCHMARK (a regex or asv's full name) on the machine that
changed most between GOOD and BAD. A midpoint is "bad" when its samples are nearer to BAD's
than to GOOD's (distance of the log medians); the Mann-Whitney p-values against both ends are
printed with each step so an ambiguous midpoint (neither differs) shows.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xrt.db import store
from xrt.track import stats
from xrt.track.detect import higher_is_better

Runner = Callable[[Path, str, Path, str], None]  # (repo, commit, results_dir, bench regex) -> writes results


def bench_runner(repo: Path, commit: str, results: Path, bench: str) -> None:
    """Measure one commit with ``xrt bench run`` (every GPU of this host)."""
    from xrt.bench import runner

    runner.run(repo, [commit], results, all_gpus=True, bench=bench)


def first_parent_between(repo: Path, good: str, bad: str) -> list[str]:
    """Commits after GOOD up to and including BAD on BAD's first-parent chain, oldest first."""
    out = subprocess.run(["git", "-C", str(repo), "rev-list", "--first-parent", "--reverse", f"{good}..{bad}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError(f"git rev-list {good}..{bad}: {out.stderr.strip()}")
    return out.stdout.split()


def _samples(db: Path, commit: str, machine: str, benchmark: str, param_key: str) -> np.ndarray:
    with store.read(db) as con:
        rows = con.execute("SELECT value, samples FROM results WHERE commit_hash = ? AND machine = ? AND "
                           "benchmark = ? AND param_key = ? AND status = 'ok'",
                           [commit, machine, benchmark, param_key]).fetchall()
    out: list[float] = []
    for value, samples in rows:
        out += list(samples) if samples else [value]
    return np.asarray(out, float)


def pick_series(db: Path, benchmark: str, good: str, bad: str, machine: str | None) -> tuple[str, str, str]:
    """(machine, benchmark, param_key) of the matching series that moved most from GOOD to BAD."""
    with store.read(db) as con:
        rows = con.execute(
            "SELECT g.machine, g.benchmark, g.param_key, abs(ln(b.value / g.value)) AS d FROM results g "
            "JOIN results b USING (machine, benchmark, param_key) WHERE g.commit_hash = ? AND b.commit_hash = ? "
            "AND g.status = 'ok' AND b.status = 'ok' AND g.value > 0 AND b.value > 0 "
            "AND (g.benchmark = ? OR regexp_matches(g.benchmark, ?))" + (" AND g.machine = ?" if machine else "")
            + " ORDER BY d DESC LIMIT 1", [good, bad, benchmark, benchmark] + ([machine] if machine else [])
        ).fetchall()
    if not rows:
        raise ValueError(f"no series of {benchmark!r} is measured at both {good[:10]} and {bad[:10]}")
    return rows[0][0], rows[0][1], rows[0][2]


class NotASlowdown(ValueError):
    """GOOD..BAD holds an improvement (or no change), not a slowdown: ``xrt bisect`` refuses (exit 2)."""


def _unit(db: Path, benchmark: str) -> str | None:
    with store.read(db) as con:
        row = con.execute("SELECT coalesce((SELECT any_value(unit) FROM results WHERE benchmark = ?), "
                          "(SELECT unit FROM benchmarks WHERE name = ?))", [benchmark, benchmark]).fetchone()
    return row[0] if row else None


@dataclass
class Bisection:
    culprit: str | None
    series: tuple[str, str, str]
    steps: list[dict] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)


def bisect(db: str | os.PathLike, repo: str | os.PathLike, benchmark: str, good: str, bad: str, *,
           results: str | os.PathLike | None = None, machine: str | None = None,
           runner: Runner = bench_runner, log: Callable[[str], None] = print) -> Bisection:
    """Find the first commit after GOOD whose measurement looks like BAD's."""
    from xrt.db.ingest import ingest

    db, repo = Path(db), Path(repo)
    results = Path(results) if results else repo / "results" / "asv"
    chain = first_parent_between(repo, good, bad)
    if not chain or chain[-1] != bad:
        raise ValueError(f"{bad[:10]} is not a first-parent descendant of {good[:10]}")
    series = pick_series(db, benchmark, good, bad, machine)
    m, bn, pk = series
    g, b = _samples(db, good, m, bn, pk), _samples(db, bad, m, bn, pk)
    lg, lb = np.log(np.median(g)), np.log(np.median(b))
    log(f"xrt bisect: {bn} [{pk or '-'}] on {m}: good {good[:10]} {np.exp(lg):.4g}, bad {bad[:10]} "
        f"{np.exp(lb):.4g} ({np.exp(lb - lg):.3f}x); {len(chain) - 1} commit(s) between")
    unit = _unit(db, bn)
    worse = (lg - lb) if higher_is_better(unit) else (lb - lg)  # > 0: BAD is slower than GOOD
    if worse <= 0:
        raise NotASlowdown(
            f"{bn} [{pk or '-'}] on {m} is {'an improvement' if worse < 0 else 'unchanged'} from GOOD to BAD "
            f"({np.exp(lb - lg):.3f}x{', higher is better' if higher_is_better(unit) else ''}), not a slowdown: "
            "nothing to bisect (to find the commit that made it faster, swap GOOD and BAD)")
    out = Bisection(None, series)
    lo, hi = -1, len(chain) - 1  # chain[lo] is good (-1: GOOD itself), chain[hi] is bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        c = chain[mid]
        x = _samples(db, c, m, bn, pk)
        if not len(x):
            log(f"  measuring {c[:10]} ...")
            runner(repo, c, results, bn)
            ingest(results, db, repo=str(repo), echo=lambda s: None)
            out.measured.append(c)
            x = _samples(db, c, m, bn, pk)
            if not len(x):
                raise RuntimeError(f"{c[:10]}: measured, but no result for {bn} [{pk}] on {m}")
        lx = np.log(np.median(x))
        is_bad = abs(lx - lb) < abs(lx - lg)
        pg, _ = stats.mannwhitney(g, x)
        pb, _ = stats.mannwhitney(b, x)
        out.steps.append({"commit": c, "value": float(np.exp(lx)), "bad": bool(is_bad), "p_vs_good": pg,
                          "p_vs_bad": pb})
        log(f"  {c[:10]}: {np.exp(lx):.4g} -> {'bad' if is_bad else 'good'} (p vs good {pg:.1e}, vs bad {pb:.1e})")
        if is_bad:
            hi = mid
        else:
            lo = mid
    out.culprit = chain[hi]
    log(f"xrt bisect: first bad commit: {out.culprit}")
    return out
