"""The newest commit of every series, judged as soon as its results land (``xrt db ingest``, ``xrt demo``).

The change-point detector (:mod:`xrt.track.detect`) needs ``min_points`` commits on each side of a
step, so it can never report the newest commits of a series. Here each series' newest commit is
judged at once against the commit before it on the same machine, by the gate's own rules
(:mod:`xrt.track.gate`: effect ≥ threshold, Mann-Whitney on the samples, and the per-series
run-to-run noise model of :mod:`xrt.track.noise`; with too few samples, the head against its
history's level). Nothing of the judgement is re-implemented here: the gate's functions decide.

A slowdown is stored at once in ``regressions`` with status ``new`` and ``suspected = true``, with
its ``--diag`` checklist. The detector later confirms it (same id: ``suspected`` becomes false,
:func:`xrt.track.regressions.save`) or withdraws it (:func:`xrt.track.suspects.settle`: once the
series has ``min_points`` commits on both sides of it and the detector found no step there, the
suspected row goes). Every series' judgement, with the reason where it could not be judged, is stored in
``newest_judgements`` (schema migration 7): the dashboard's grid shows it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xrt.db import store
from xrt.db.store import Connection
from xrt.track import diag, gate, labels, regressions
from xrt.track import env as envmod
from xrt.track import noise as noisemod
from xrt.track.detect import higher_is_better
from xrt.track.load import order_expr, recent_commits_sql

# the verdicts stored in newest_judgements.verdict
REGRESSION = "regression"        # suspected regression (stored in regressions)
WITHIN_NOISE = "within noise"    # slower by the samples, within the series' run-to-run noise
CLOCK = "clock"                  # time moved, cycles did not
MACHINE_CHANGED = "machine changed"
OK = "ok"                        # judged: no slowdown
NOT_JUDGED = "not judged"        # the reason says why
FAILED = "failed"                # failed / missing / skipped at the newest commit


@dataclass
class Judgement:
    machine: str
    benchmark: str
    param_key: str
    params: list[str]
    unit: str | None
    commit: str
    previous_commit: str | None
    verdict: str
    reason: str
    ratio: float | None = None
    z: float | None = None
    p_value: float | None = None
    before: float | None = None
    after: float | None = None
    n_before: int = 0
    n_after: int = 0
    cycles_ratio: float | None = None


def _heads(con: Any, machine: str | None) -> list[tuple]:
    """Per series: (machine, benchmark, param_key, newest commit, the latest earlier commit with an ok
    value, how many commits with ok values came before the newest), within the machine's last
    :data:`~xrt.track.load.LOOKBACK` measured commits (a series not measured in them is not judged;
    one whose last ok value is older has no base there)."""
    order, where = order_expr(con)
    recent = recent_commits_sql(con, machine=bool(machine), upto=False)
    sql = f"""
        WITH pc AS (
            SELECT r.machine, r.benchmark, r.param_key, {order} AS ord, r.commit_hash,
                   bool_or(r.status = 'ok' AND r.value IS NOT NULL) AS ok
            FROM results r JOIN commits c ON c.hash = r.commit_hash JOIN {recent} w ON w.machine = r.machine
            WHERE {where} AND {order} >= w.lo{' AND r.machine = ?' if machine else ''}
            GROUP BY ALL),
        h AS (SELECT machine, benchmark, param_key, arg_max(commit_hash, ord) AS head, max(ord) AS head_ord
              FROM pc GROUP BY ALL)
        SELECT h.machine, h.benchmark, h.param_key, h.head,
               arg_max(pc.commit_hash, pc.ord) FILTER (pc.ok AND pc.ord < h.head_ord) AS base,
               count(*) FILTER (pc.ok AND pc.ord < h.head_ord) AS n_hist
        FROM h JOIN pc USING (machine, benchmark, param_key)
        GROUP BY ALL ORDER BY ALL"""
    return con.execute(sql, [machine, machine] if machine else []).fetchall()


def judge(con: Connection, machine: str | None = None, *, threshold: float = 0.05, alpha: float = 0.002,
          min_samples: int = 5) -> list[Judgement]:
    """Every series' newest commit against the one before it (on its machine), by the gate's rules."""
    cfg = gate.Settings(threshold, alpha, min_samples)
    eff = float(np.log1p(cfg.threshold))
    out: list[Judgement] = []
    hist_memo: dict[tuple, dict] = {}
    env_memo: dict[tuple[str, str, str], list[str] | None] = {}
    heads = _heads(con, machine)
    # every (commit, machine) judged, read at once
    rows = gate.rows_of(con, sorted({(h, m) for m, _, _, h, _, _ in heads} |
                                     {(b, m) for m, _, _, _, b, _ in heads if b is not None}))
    for m, bn, pk, head, base, n_hist in heads:
        h = rows[head, m].get((m, bn, pk))
        params, unit = (h.params or [], h.unit) if h is not None else ([], None)
        j = Judgement(m, bn, pk, list(params), unit, head, base, NOT_JUDGED, "")
        out.append(j)
        if base is None:
            j.reason = ("first commit of this series on this machine: nothing before it to compare with"
                        if h is not None and "ok" in h.status else
                        "no earlier commit with a value on this machine")
            if h is None or "ok" not in h.status:
                j.verdict = FAILED
            continue
        b = rows[base, m].get((m, bn, pk))
        if (base, m) not in hist_memo:
            hist_memo[base, m] = gate.history_values(con, base, m)
        if (m, base, head) not in env_memo:
            envs = envmod.environments(con, m, commits=[base, head])
            env_memo[m, base, head] = envmod.changes(envs.get((m, base)), envs.get((m, head)))
        units = gate.per_env(b, h)
        if len(units) == 1:
            _judge_one(j, cfg, eff, b, h, hist_memo[base, m].get((m, bn, pk), []),
                       bool(env_memo[m, base, head]), int(n_hist))
            continue
        # asv environments are judged apart (their samples never pooled); the worst one is stored
        if (base, m, "env") not in hist_memo:
            hist_memo[base, m, "env"] = gate.history_values(con, base, m, by_env=True)
        subs = []
        for env, be, he in units:
            sj = Judgement(m, bn, pk, list(params), unit, head, base, NOT_JUDGED, "")
            _judge_one(sj, cfg, eff, be, he, hist_memo[base, m, "env"].get((m, bn, pk, env), []),
                       bool(env_memo[m, base, head]), int(n_hist))
            subs.append((env, sj))
        env, worst = min(subs, key=lambda es: (_SEVERITY.index(es[1].verdict), -(es[1].ratio or 0)))
        for k in ("verdict", "ratio", "z", "p_value", "before", "after", "n_before", "n_after", "cycles_ratio"):
            setattr(j, k, getattr(worst, k))
        j.reason = f"environment {env} (the worst of {len(subs)} judged apart): {worst.reason}"
    return out


# which environment's judgement a series gets when its environments are judged apart: the worst
_SEVERITY = [REGRESSION, MACHINE_CHANGED, CLOCK, WITHIN_NOISE, FAILED, NOT_JUDGED, OK]


def _judge_one(j: Judgement, cfg: gate.Settings, eff: float, b: gate.Side | None, h: gate.Side | None,
               history: list[tuple], machine_changed: bool, n_hist: int) -> None:
    several = gate.several_runs(b, h)
    if several:
        j.reason = f"result files of one commit ({several}): {gate.SEVERAL_RUNS.text}"
        return
    outcome = gate.outcome(b, h)
    if outcome is not None:
        j.verdict = FAILED if outcome.blocks else NOT_JUDGED
        j.reason = outcome.text
        return
    xs, ys = np.asarray(b.samples, float), np.asarray(h.samples, float)
    j.n_before, j.n_after = len(xs), len(ys)
    if gate.identical(xs, ys):
        j.verdict, j.ratio = OK, 1.0
        j.before = j.after = float(xs[0])
        j.reason = "the same value at both commits: unchanged"
        return
    if not (np.isfinite(xs).all() and (xs > 0).all() and np.isfinite(ys).all() and (ys > 0).all()):
        j.reason = "invalid samples (negative, zero or not finite)"
        return
    j.before, j.after = float(np.median(xs)), float(np.median(ys))
    j.ratio = j.after / j.before
    v = gate.Verdict()
    # history: per commit (value, smallest sample, largest sample), as the gate reads it
    model = noisemod.from_values([t[0] for t in history])
    need = cfg.samples_needed
    if len(xs) < need or len(ys) < need:
        if model is None:
            j.reason = (f"too few samples to test ({len(xs)} before, {len(ys)} now; need {need}) and too little "
                        f"history to judge it otherwise ({n_hist} earlier commit{'s' if n_hist != 1 else ''}, "
                        f"need {noisemod.MIN_HISTORY})")
            return
        gate.against_history(v, eff, (j.machine, j.benchmark, j.param_key), b, ys, model, machine_changed)
        how = f"against its history ({model.describe()})"
    elif b.paired and h.paired and min(len(b.paired), len(h.paired)) >= need:
        # host series with their reference call beside each sample: judged op / reference, as the gate does
        gate.compare(v, cfg, eff, (j.machine, j.benchmark, j.param_key), b, h, np.asarray(b.paired, float),
                     np.asarray(h.paired, float), machine_changed, paired=True)
        how = "on samples against the reference call (op / reference)"
    else:
        model, stat = noisemod.steadier(history, higher_is_better(b.unit))
        gate.compare(v, cfg, eff, (j.machine, j.benchmark, j.param_key), b, h, xs, ys, machine_changed, model, stat)
        how = ("on samples and run-to-run noise (" + model.describe() + ")" if model is not None else
               f"on samples only (fewer than {noisemod.MIN_HISTORY} commits of history: no noise model yet)")
    for verdict, items in ((REGRESSION, v.regressions), (WITHIN_NOISE, v.within_noise), (CLOCK, v.clock),
                           (MACHINE_CHANGED, v.changed_machine)):
        if items:
            it = items[0]
            j.verdict, j.ratio = verdict, it["ratio"]
            j.before, j.after = it.get("before", j.before), it.get("after", j.after)
            j.z, j.p_value, j.cycles_ratio = it.get("z"), it.get("p_value"), it.get("cycles_ratio")
            j.reason = f"{it['ratio']:.3f}x, judged {how}" + (f": {it['judged']}" if verdict == WITHIN_NOISE else "")
            return
    j.verdict = OK
    j.reason = f"{j.ratio:.3f}x, judged {how}: no slowdown beyond the gate's bar"


def records(js: list[Judgement]) -> list[Any]:
    """The suspected regressions as :class:`xrt.track.regressions.Record` (status ``new``)."""
    Record, record_id = regressions.Record, regressions.record_id
    nan = float("nan")
    kind = labels.REGRESSION
    return [Record(record_id(j.machine, j.benchmark, j.param_key, j.commit, kind), j.machine, j.benchmark,
                   j.params, j.param_key, j.commit, j.previous_commit, j.before, j.after, j.ratio,
                   j.p_value if j.p_value is not None else nan, j.z if j.z is not None else nan, kind,
                   "new", j.unit, j.n_before, j.n_after, j.cycles_ratio, None)
            for j in js if j.verdict == REGRESSION]


def store_judgements(con: Connection, js: list[Judgement], scope_machine: str | None = None,
                     diag_for: Callable[[list[Any]], list[Any]] | None = None) -> dict[str, int]:
    """Write the judgements (replacing the scope's previous ones) and the suspected regressions.
    A suspected regression already stored keeps its status, note and checklist (and a confirmed one
    stays confirmed); one no longer suspected at the same commit, still ``new``, is withdrawn.
    ``con``: a write connection (:func:`xrt.db.store.write`)."""
    recs = records(js)
    known = regressions.stored(con)
    fresh = [r for r in recs if r.id not in known]
    if diag_for is None:
        def diag_for(rs):
            return [diag.as_json(c) for c in diag.checklists(con, rs)]
    diags = dict(zip((r.id for r in fresh), diag_for(fresh))) if fresh else {}
    jrows = [[j.machine, j.benchmark, j.param_key, j.commit, j.previous_commit, j.verdict, j.reason, _f(j.ratio),
              _f(j.z), _f(j.p_value)] for j in js]
    scope = "TRUE" if scope_machine is None else "machine = ?"
    sargs = [] if scope_machine is None else [scope_machine]
    con.execute(f"DELETE FROM newest_judgements WHERE {scope}", sargs)
    store.insert_rows(con, "newest_judgements", jrows, extra=("now()::TIMESTAMP",))
    # withdrawn: suspected at a series' newest commit, not suspected any more there
    flagged = {r.id for r in recs}
    gone = [regressions.record_id(j.machine, j.benchmark, j.param_key, j.commit, labels.REGRESSION)
            for j in js if j.verdict != REGRESSION]
    withdrawn = len(con.execute("DELETE FROM regressions WHERE id IN (SELECT unnest(?::VARCHAR[])) AND suspected "
                                "AND status = 'new' RETURNING id", [gone]).fetchall()) if gone else 0
    added = 0
    for r in recs:
        row = [r.id, r.machine, r.benchmark, r.param_key, r.params, r.kind, r.commit, r.previous_commit,
               r.before, r.after, r.ratio, r.p_value, r.z, r.cycles_ratio, r.unit, r.n_before, r.n_after,
               r.fixed_by, r.status, r.note]
        if r.id in known:  # update the figures of a still-suspected row; leave confirmed / acked rows be
            con.execute("UPDATE regressions SET before = ?, after = ?, ratio = ?, p_value = ?, z = ?, "
                        "n_before = ?, n_after = ?, updated_at = now()::TIMESTAMP WHERE id = ? AND suspected",
                        [r.before, r.after, r.ratio, r.p_value, r.z, r.n_before, r.n_after, r.id])
            continue
        d = diags.get(r.id)
        con.execute("INSERT INTO regressions (id, machine, benchmark, param_key, params, kind, \"commit\", "
                    "previous_commit, before, after, ratio, p_value, z, cycles_ratio, unit, n_before, n_after, "
                    "fixed_by, status, note, detected_at, updated_at, still_detected, diag, suspected) VALUES ("
                    + ", ".join("?" * len(row)) + ", now()::TIMESTAMP, now()::TIMESTAMP, true, ?, true)",
                    row + [json.dumps(d) if d is not None else None])
        added += 1
    return {"series": len(js), "suspected": len(flagged), "added": added, "withdrawn": withdrawn,
            "not_judged": sum(j.verdict == NOT_JUDGED for j in js)}


def _f(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def pending(con: Connection) -> bool:
    """Whether ``newest_judgements`` lacks the newest commit of some series (or holds a series that
    is gone): an ingest was stopped after its results were committed and before they were judged,
    or ran with ``--no-judge``. The next ingest then judges even if it has nothing new to write."""
    heads = {(m, b, pk, h) for m, b, pk, h, _, _ in _heads(con, None)}
    have = set(con.execute('SELECT machine, benchmark, param_key, "commit" FROM newest_judgements').fetchall())
    return heads != have


def after_ingest(con: Connection, echo: Callable[[str], None] = print) -> dict[str, int] | None:
    """``xrt db ingest``'s last step, on its write connection: judge and store every series' newest
    commit; one line said."""
    js = judge(con)
    if not js:
        return None
    s = store_judgements(con, js)
    sus = [j for j in js if j.verdict == REGRESSION]
    head = ", ".join(f"{j.benchmark} [{j.param_key or '-'}] {j.ratio:.3f}x on {j.machine}" for j in
                     sorted(sus, key=lambda j: -(j.ratio or 0))[:3])
    echo(f"newest commits judged: {s['series']} series, {len(sus)} suspected regression"
         f"{'s' if len(sus) != 1 else ''}" + (f" ({head}{', ...' if len(sus) > 3 else ''})" if sus else "") +
         f", {s['not_judged']} not judged (reasons on the dashboard)")
    return s
