"""``xrt culprit``: after a failing gate over several commits, name the commit to blame.

The gate can only say "between BASE and HEAD". This judges BASE..HEAD as ``xrt gate`` does, and for
each group of series that moved together (one alert: a machine's regressions at HEAD, grouped by
:func:`xrt.track.regressions.group`, the gate's own grouping) bisects the group's worst series
(:func:`xrt.orchestrate.bisect.bisect`), worst group first, within a time budget. ``xrt explain``
then runs on the culprit of the worst series (the culprit's first parent against it). The culprit,
the bisect's measured commits and the explanation are stored on the group's regressions and told in
a Markdown summary, which also lists what was not bisected and why.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xrt.db import store as dbstore
from xrt.orchestrate import bisect as bisectmod
from xrt.track import gate
from xrt.track import regressions as regmod
from xrt.track.detect import higher_is_better

EXPLAIN_ROWS = 5  # the explanation's rows shown in the summary (all are stored)


@dataclass
class Group:
    """One alert of the gate: its series, and what bisecting its worst one found."""

    machine: str
    items: list[dict]
    bisection: bisectmod.Bisection | None = None
    subject: str = ""
    not_bisected: str = ""  # why not (budget spent, an error)
    explanation: dict | None = None  # {"markdown": ..., "rows": [...]} of the worst series' culprit

    @property
    def worst(self) -> dict:
        return self.items[0]


@dataclass
class Outcome:
    base: str
    head: str
    commits: int = 0
    gate_code: int = 0
    groups: list[Group] = field(default_factory=list)
    note: str = ""  # why nothing was bisected


def worse_by(r: dict) -> float:
    """How much slower a gate item is, as a ratio above 1 whatever the unit's direction."""
    ratio = r["ratio"] or 1.0
    return 1 / ratio if higher_is_better(r.get("unit")) else ratio


def md(text: Any) -> str:
    """``text`` as literal Markdown inline text, never at a line's start: a commit subject or a name
    can hold no emphasis, link, image, code, HTML or table cell break in the step summary."""
    out = []
    for ch in " ".join(str(text).split()):
        if ch in "<>&":
            out.append(f"&#{ord(ch)};")
        elif ch in "\\`*_[]|~":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def code(text: Any) -> str:
    """``text`` as one inline code span (CommonMark: a fence longer than any run of backticks in it);
    a ``|`` is escaped, which GitHub's tables need even inside code."""
    t = " ".join(str(text).split()).replace("|", "\\|")
    runs = [len(x) for x in re.findall(r"`+", t)]
    fence = "`" * (max(runs, default=0) + 1)
    return f"{fence} {t} {fence}" if runs else f"`{t}`"


def find(db: str | os.PathLike, repo: str | os.PathLike, base: str, head: str, *, budget_s: float = 3600.0,
         explain: bool = True, runner: bisectmod.Runner = bisectmod.bench_runner,
         explainer: Callable[..., dict] | None = None, log: Callable[[str], None] = print) -> Outcome:
    """Judge BASE..HEAD, bisect each failing group worst first within ``budget_s``, explain the worst."""
    t0 = time.time()
    repo = Path(repo)
    out = Outcome(base, head)
    chain = bisectmod.first_parent_between(repo, base, head)
    out.commits = len(chain)
    with dbstore.read(db) as con:
        v = gate.judge(con, base, head, history=False)
    out.gate_code = v.code
    if not v.regressions:
        out.note = "the gate found no regression between base and head: nothing to bisect"
        return out
    if len(chain) <= 1:
        out.note = f"one commit from base to head: {head[:10]} is the culprit, nothing to bisect"
        return out
    for alert, items in gate.alerts_of(v, v.regressions):
        out.groups.append(Group(alert.machine, sorted(items, key=lambda r: -worse_by(r))))
    out.groups.sort(key=lambda g: -worse_by(g.worst))
    for i, g in enumerate(out.groups, 1):
        w = g.worst
        left = budget_s - (time.time() - t0)
        if left <= 0:
            g.not_bisected = f"time budget of {budget_s:g} s spent"
            log(f"xrt culprit: group {i}/{len(out.groups)} ({g.machine}, {len(g.items)} series) not bisected: "
                f"{g.not_bisected}")
            continue
        log(f"xrt culprit: group {i}/{len(out.groups)}: {len(g.items)} series on {g.machine} moved together; "
            f"bisecting the worst, {w['benchmark']} [{w['param_key'] or '-'}] ({w['ratio']:.3f}x), "
            f"{left:.0f} s of budget left")
        try:
            b = bisectmod.bisect(db, repo, w["benchmark"], base, head, machine=g.machine,
                                 param_key=w["param_key"], budget_s=left, runner=runner, log=log)
        except Exception as e:  # noqa: BLE001 - one group's failure is reported, the other groups still run
            g.not_bisected = f"bisect failed: {e}"
            log(f"xrt culprit: group {i}: {g.not_bisected}")
            continue
        g.bisection = b
        if b.culprit:
            g.subject = bisectmod.subject(repo, b.culprit)
        elif b.status == "budget":
            g.not_bisected = (f"time budget spent: the culprit is after {b.last_good[:10]}, at or before "
                              f"{b.first_bad[:10]}")
        else:
            g.not_bisected = f"bisect: {b.status}"
    found = [g for g in out.groups if g.bisection and g.bisection.culprit]
    saved = None
    if explain and found:
        g = found[0]  # the worst group with a culprit: its worst series
        if time.time() - t0 > budget_s:
            g.explanation = {"error": f"not explained: time budget of {budget_s:g} s spent"}
        else:
            g.explanation, saved = _explain(repo, g, explainer, log)
    store(db, out, saved)
    return out


def _explain(repo: Path, g: Group, explainer: Callable[..., dict] | None,
             log: Callable[[str], None]) -> tuple[dict, tuple[dict, str] | None]:
    """``xrt explain`` of the group's worst series: the culprit's first parent against the culprit.
    Returns the summary's part and (payload, Markdown) to store (None when not explained)."""
    from xrt.bench import worktrees
    from xrt.track import explain

    b, w = g.bisection, g.worst
    assert b is not None and b.culprit
    try:
        case = explain.make_case(w["benchmark"], list(w.get("params") or []) or w["param_key"])
        parent = worktrees.resolve(repo, f"{b.culprit}^")
        rid = regmod.record_id(w["machine"], w["benchmark"], w["param_key"], b.culprit, "regression")
        log(f"xrt culprit: xrt explain {case.benchmark} [{case.param_key}] {parent[:10]} -> {b.culprit[:10]}")
        if explainer is None:
            from xrt.orchestrate import explain_collect

            explainer = explain_collect.explain
        payload = explainer(repo, parent, b.culprit, case,
                            regression={"id": rid, "machine": w["machine"], "ratio": w["ratio"]}, log=log)
        text = explain.render_markdown(payload, heading="####")
    except (ValueError, RuntimeError, OSError) as e:
        log(f"xrt culprit: not explained: {e}")
        return {"error": f"not explained: {e}"}, None
    return ({"markdown": text, "rows": (payload.get("changes") or [])[:EXPLAIN_ROWS],
             "n_rows": len(payload.get("changes") or [])}, (payload, text))


def store(db: str | os.PathLike, out: Outcome, explained: tuple[dict, str] | None = None) -> None:
    """In one write: each bisected group's culprit and evidence on its series' regressions (the gate's
    records at HEAD, and the detector's steps of those series inside BASE..HEAD), and the culprit's
    explanation (``explained``: payload and Markdown) where there is one."""
    from xrt.track import explain

    todo = [g for g in out.groups if g.bisection is not None]
    if not todo and explained is None:
        return

    def fn(con) -> None:
        if explained is not None:
            explain.save(con, *explained)
        for g in todo:
            recs = regmod.gate_records(out.base, out.head, g.items)
            evidence = {**g.bisection.as_json(), "subject": g.subject, "bisected_series": len(g.items),
                        "explanation": g.explanation}
            regmod.save_culprit(con, recs, g.bisection.culprit, evidence)

    dbstore.write(db, fn)


def summary_markdown(out: Outcome) -> str:
    """The step summary: per group its culprit, the measured commits and their verdicts, the
    explanation's first rows; then what was not bisected. Every text from git or the database is
    escaped (:func:`md`)."""
    lines = [f"## xrt culprit: base `{out.base[:12]}` → head `{out.head[:12]}` ({out.commits} commits)", ""]
    if out.note:
        return "\n".join(lines + [md(out.note), ""]) + "\n"
    skipped = []
    for g in out.groups:
        w, b = g.worst, g.bisection
        head = (f"{md(g.machine)}: {len(g.items)} series moved together; the worst, "
                f"{code(w['benchmark'])} \\[{md(w['param_key'] or '-')}\\] ({w['ratio']:.3f}×)")
        if b is None or not b.culprit:
            skipped.append(f"- {head}: {md(g.not_bisected)}")
            if b is None or not b.steps:
                continue
        if b.culprit:
            lines += [f"### culprit `{b.culprit[:12]}` {md(g.subject)}", "", head, ""]
        else:
            lines += [f"### no culprit yet on {md(g.machine)}", "", head + ": " + md(g.not_bisected), ""]
        lines += [f"Each commit measured in one job beside good `{b.good[:12]}`, judged by the gate's rules "
                  "(bad: a regression, by at least half the slowdown bisected):", "",
                  "| commit | good | commit's | ratio | p | verdict |", "|---|---|---|---|---|---|"]
        from xrt.track.units import fmt_value

        lines += [f"| `{s.commit[:12]}` | {md(fmt_value(s.good_value, b.unit))} | {md(fmt_value(s.value, b.unit))} | "
                  f"{s.ratio:.3f} | {s.p_value:.1e} | {'**bad**' if s.bad else 'good'} |" for s in b.steps]
        lines.append("")
        ex = g.explanation
        if ex and ex.get("error"):
            lines += [md(ex["error"]), ""]
        elif ex:
            shown = f", the first {len(ex['rows'])} of {ex['n_rows']} rows" if ex["n_rows"] > len(ex["rows"]) else ""
            lines += [f"What changed at the culprit (`xrt explain`{shown}):", ""]
            if ex["rows"]:
                lines += ["| group | what | kernel | base | head | change |", "|---|---|---|---|---|---|"]
                lines += ["| " + " | ".join(md(r.get(k) if r.get(k) not in (None, "") else "-")
                                            for k in ("group", "what", "kernel", "base", "head", "change")) + " |"
                          for r in ex["rows"]]
            else:
                lines.append("Nothing that was collected differs between the culprit and its parent.")
            lines.append("")
    if skipped:
        lines += ["Not bisected:", ""] + skipped + [""]
    return "\n".join(lines) + "\n"


def report(out: Outcome) -> str:
    """stdout: one ``culprit`` line per group (``culprit <commit> <subject>``), then what was not."""
    if out.note:
        return f"xrt culprit: {out.note}"
    lines = []
    for g in out.groups:
        w, b = g.worst, g.bisection
        what = f"({g.machine}, {len(g.items)} series, worst {w['benchmark']} [{w['param_key'] or '-'}])"
        if b is not None and b.culprit:
            lines.append(f"culprit {b.culprit} {g.subject} {what}")
        else:
            lines.append(f"not bisected {what}: {g.not_bisected}")
    return "\n".join(lines)
