"""``xrt gate``: head against base, exit 0 (pass), 1 (regression) or 2 (cannot judge).

It fails closed: a base or head without results on a machine, an ingest error on either's
files, a benchmark that ran at base but failed or is missing at head, or fewer than
``min_samples`` samples on a side, is exit 2, never a pass. A regression wins over "cannot
judge" (exit 1 is the more useful news; both fail the build).

A series regresses when head is worse than base by at least ``threshold`` (default 5 %, the
ratio of the medians of the samples) and a Mann-Whitney U test of the samples gives
p ≤ ``alpha`` (0.002, asv compare's bar). Where cycles were recorded on both sides and they
did not move (less than half the threshold), the slowdown is a clock change: listed, not failing.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xrt.db import store
from xrt.track import stats
from xrt.track.detect import higher_is_better
from xrt.track.load import columns

PASS, REGRESSION, CANNOT_JUDGE = 0, 1, 2


@dataclass
class Verdict:
    code: int = PASS
    base: str = ""
    head: str = ""
    regressions: list[dict] = field(default_factory=list)
    clock: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    compared: int = 0
    history: list[Any] = field(default_factory=list)  # detector steps between base and head


def resolve(repo: str | os.PathLike | None, rev: str, db: str | os.PathLike) -> str:
    """A full hash: ``git rev-parse`` in REPO when given, else a unique prefix in the database."""
    if repo is not None:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise ValueError(f"{rev!r} is not a commit of {repo}")
        return out.stdout.strip()
    from xrt.track.regressions import resolve_in_db

    return resolve_in_db(db, rev)


def _rows(con: Any, commit: str, machine: str | None) -> dict[tuple, dict]:
    rc, runc = columns(con, "results"), columns(con, "runs")
    cyc = "r.cycles" if "cycles" in rc else "NULL::DOUBLE[]"
    sm = [x for x, ok in (("r.sm_mhz", "sm_mhz" in rc), ("ru.sm_clock_mhz", "sm_clock_mhz" in runc)) if ok]
    sm_sql = f"coalesce({', '.join(sm)})" if sm else "NULL::DOUBLE"
    sql = (f"SELECT r.machine, r.benchmark, r.param_key, r.params, r.status, r.value, r.samples, {cyc}, {sm_sql}, "
           "coalesce(r.unit, b.unit) FROM results r LEFT JOIN benchmarks b ON b.name = r.benchmark "
           "LEFT JOIN runs ru ON ru.run_id = r.run_id "
           "WHERE r.commit_hash = ?" + (" AND r.machine = ?" if machine else ""))
    out: dict[tuple, dict] = {}
    for m, bn, pk, params, status, value, samples, cycles, clock, unit in con.execute(
            sql, [commit] + ([machine] if machine else [])).fetchall():
        d = out.setdefault((m, bn, pk), {"params": params, "unit": unit, "ok": False, "samples": [], "cycles": []})
        if status == "ok" and value is not None:
            d["ok"] = True
            smp = list(samples) if samples else [value]
            d["samples"] += smp
            # cycles per sample where recorded, else time x the run's SM clock
            d["cycles"] += list(cycles) if cycles else ([x * clock for x in smp] if clock else [])
    return out


def _errors(con: Any, commit: str) -> list[str]:
    rows = con.execute("SELECT file, kind, reason FROM ingest_errors WHERE contains(file, ?)",
                       [f"/{commit[:8]}"]).fetchall()
    return [f"ingest error in {f}: {k}: {r}" for f, k, r in rows]


def judge(db: str | os.PathLike, base: str, head: str, *, threshold: float = 0.05, alpha: float = 0.002,
          min_samples: int = 5, machine: str | None = None, history: bool = True) -> Verdict:
    v = Verdict(base=base, head=head)
    with store.read(db) as con:
        b_rows, h_rows = _rows(con, base, machine), _rows(con, head, machine)
        for c in (base, head):
            v.problems += _errors(con, c)
    if not b_rows:
        v.problems.append(f"base {base[:10]} has no results{' on ' + machine if machine else ''} (never measured)")
    if not h_rows:
        v.problems.append(f"head {head[:10]} has no results{' on ' + machine if machine else ''} (never measured)")
    for m in sorted({k[0] for k in b_rows} - {k[0] for k in h_rows}):
        if h_rows:
            v.problems.append(f"head {head[:10]} was not measured on {m}")
    eff = np.log1p(threshold)
    for key, b in sorted(b_rows.items()):
        m, bn, pk = key
        h = h_rows.get(key)
        if not b["ok"] or m not in {k[0] for k in h_rows}:
            continue
        label = f"{m} {bn} [{pk or '-'}]"
        if h is None or not h["ok"]:
            v.problems.append(f"{label}: {'missing' if h is None else 'failed'} at head")
            continue
        xs, ys = np.asarray(b["samples"], float), np.asarray(h["samples"], float)
        if len(xs) < min_samples or len(ys) < min_samples:
            v.problems.append(f"{label}: too few samples ({len(xs)} at base, {len(ys)} at head; need {min_samples})")
            continue
        v.compared += 1
        ratio = float(np.median(ys) / np.median(xs))
        worse = np.log(ratio) * (-1 if higher_is_better(b["unit"]) else 1)
        if worse < eff:
            continue
        p, _ = stats.mannwhitney(xs, ys)
        if p > alpha:
            continue
        item = {"machine": m, "benchmark": bn, "params": b["params"], "param_key": pk, "ratio": ratio,
                "p_value": p, "before": float(np.median(xs)), "after": float(np.median(ys))}
        bc = [c for c in b["cycles"] or [] if c is not None]  # None: no SM clock recorded (CPU, no NVML)
        hc = [c for c in h["cycles"] or [] if c is not None]
        if len(bc) >= min_samples and len(hc) >= min_samples:
            item["cycles_ratio"] = float(np.median(hc) / np.median(bc))
            if abs(np.log(item["cycles_ratio"])) < eff / 2:
                v.clock.append(item)
                continue
        v.regressions.append(item)
    if history and b_rows and h_rows:
        v.history = _history(db, base, head, machine)
    v.code = REGRESSION if v.regressions else (CANNOT_JUDGE if v.problems else PASS)
    return v


def _history(db: str | os.PathLike, base: str, head: str, machine: str | None) -> list[Any]:
    """The detector's regressions whose first slow commit lies in (base, head]: context for the summary."""
    from xrt.track.regressions import commit_order, detect_db

    order = commit_order(db)
    lo, hi = order.get(base), order.get(head)
    if lo is None or hi is None:
        return []
    return [r for r in detect_db(db, machine=machine)
            if r.kind == "regression" and lo < order.get(r.commit, -1) <= hi]


def report(v: Verdict) -> str:
    """stdout: one line per slow benchmark (``benchmark params ratio``), then the verdict."""
    lines = [f"REGRESSION {r['benchmark']} [{r['param_key'] or '-'}] {r['ratio']:.3f} "
             f"(machine {r['machine']}, p={r['p_value']:.1e})" for r in v.regressions]
    lines += [f"clock change (not failing): {r['benchmark']} [{r['param_key'] or '-'}] time {r['ratio']:.3f}, "
              f"cycles {r['cycles_ratio']:.3f} (machine {r['machine']})" for r in v.clock]
    lines += [f"cannot judge: {p}" for p in v.problems]
    word = {PASS: "pass", REGRESSION: "REGRESSION", CANNOT_JUDGE: "CANNOT JUDGE"}[v.code]
    lines.append(f"xrt gate: {word}: head {v.head[:10]} vs base {v.base[:10]}: {v.compared} series compared, "
                 f"{len(v.regressions)} regression(s), {len(v.problems)} problem(s) (exit {v.code})")
    return "\n".join(lines)


def summary_markdown(v: Verdict) -> str:
    icon = {PASS: "✅ pass", REGRESSION: "❌ regression", CANNOT_JUDGE: "⚠️ cannot judge"}[v.code]
    out = [f"## xrt gate: {icon}", "",
           f"head `{v.head[:12]}` vs base `{v.base[:12]}`: {v.compared} series compared (exit {v.code}).", ""]
    if v.regressions:
        out += ["| machine | benchmark | params | before | after | ratio | p |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r['machine']} | `{r['benchmark']}` | {r['param_key'] or '-'} | {r['before']:.4g} | "
                f"{r['after']:.4g} | **{r['ratio']:.3f}** | {r['p_value']:.1e} |" for r in v.regressions]
        out.append("")
    if v.clock:
        out += ["Clock changes (time moved, cycles did not; not failing):", ""]
        out += [f"- {r['machine']} `{r['benchmark']}` [{r['param_key'] or '-'}]: time {r['ratio']:.3f}, "
                f"cycles {r['cycles_ratio']:.3f}" for r in v.clock] + [""]
    if v.problems:
        out += ["Cannot judge:", ""] + [f"- {p}" for p in v.problems[:50]]
        if len(v.problems) > 50:
            out.append(f"- … and {len(v.problems) - 50} more")
        out.append("")
    if v.history:
        out += ["Steps the detector found between base and head (`xrt regressions show ID`):", ""]
        out += [f"- `{r.id}` {r.machine} `{r.benchmark}` [{r.param_key or '-'}] {r.ratio:.3f} at `{r.commit[:10]}`"
                for r in v.history] + [""]
    return "\n".join(out) + "\n"


def write_summary(path: str | os.PathLike, v: Verdict) -> None:
    """Append (``$GITHUB_STEP_SUMMARY`` is shared by every step of the job)."""
    with Path(path).open("a") as f:
        f.write(summary_markdown(v))
