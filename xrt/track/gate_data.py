"""The gate's data: both sides of every series, read from the database once, as typed objects.

The SQL of the gate (:mod:`xrt.track.gate`) and of the newest-commit judge (:mod:`xrt.track.newest`)
lives here: the result rows of a commit pooled per series (:class:`Side`), a series' two sides in one
environment (:class:`Pair`), the units carried forward, the ingest errors, and the history the noise
models learn from. The rules (:mod:`xrt.track.gate_rules`) read these objects and no SQL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from xrt.bench.suite import series_of
from xrt.db import result_names
from xrt.track import noise as noisemod
from xrt.track.load import LOOKBACK, USABLE, order_expr, recent_commits_sql


@dataclass
class Side:
    """One side (base or head) of one series: every result row of one commit on one machine, pooled."""

    params: Any
    unit: str | None
    status: set[str] = field(default_factory=set)  # "ok", "failed", "skipped": of every row
    samples: list[float] = field(default_factory=list)
    cycles: list[float] = field(default_factory=list)  # per sample, where recorded or derived from the clock
    versions: set[str] = field(default_factory=set)  # asv's benchmark versions of the ok rows
    paired: list[float] | None = field(default_factory=list)  # sample / reference call; None: a row had none
    refs: list[float] = field(default_factory=list)  # the reference call's samples (host series)
    runs: list[tuple] = field(default_factory=list)  # per run: ((round, run id), median, paired median)
    processes: bool = False  # its runs are processes of `xrt bench run --processes N` (-proc<k> files)
    files: dict[str, str] = field(default_factory=dict)  # result file -> its environment
    by_env: dict[str, Side] = field(default_factory=dict)  # the same, each environment apart
    carried_from: str | None = None  # the commit whose measurement this side carries forward


@dataclass
class Pair:
    """One series' two sides, in one environment where environments are judged apart (:func:`per_env`)."""

    key: tuple  # (machine, benchmark, param_key)
    env: str | None
    base: Side | None
    head: Side | None

    @property
    def machine(self) -> str:
        return self.key[0]

    @property
    def label(self) -> str:
        """The series in a problem line: machine, benchmark, parameters (and environment)."""
        m, bn, pk = self.key
        return f"{m} {bn} [{pk or '-'}]" + (f" (environment {self.env})" if self.env is not None else "")

    @property
    def hkey(self) -> tuple:
        """Its key in the history (:func:`histories`): with the environment where judged apart."""
        return self.key if self.env is None else (*self.key, self.env)

    @property
    def carried(self) -> str | None:
        return self.head.carried_from if self.head is not None else None

    @cached_property
    def xs(self) -> np.ndarray:
        return np.asarray(self.base.samples, float)

    @cached_property
    def ys(self) -> np.ndarray:
        return np.asarray(self.head.samples, float)


def per_env(b: Side | None, h: Side | None) -> list[tuple[str | None, Side | None, Side | None]]:
    """What to judge of one series: ``[(None, b, h)]`` where base and head ran it in one environment
    (the same), else one ``(environment, base's rows there, head's rows there)`` per environment
    either side ran: asv keeps one file per environment, and their samples are never pooled (one
    slower environment would hide in the others' samples)."""
    envs_b, envs_h = set(b.by_env if b else ()), set(h.by_env if h else ())
    if len(envs_b) <= 1 and len(envs_h) <= 1:  # one a side: the same, or one that changed (an upgrade's
        return [(None, b, h)]                   # new name), which the environment-change class takes

    out = []
    for env in sorted(envs_b | envs_h, key=str):
        sides = []
        for d in (b, h):
            sub = d.by_env.get(env) if d is not None else None
            if sub is not None and d.carried_from:
                sub = replace(sub, carried_from=d.carried_from)
            sides.append(sub)
        out.append((env, *sides))
    return out


def pairs(b_rows: dict[tuple, Side], h_rows: dict[tuple, Side]) -> list[Pair]:
    """Every series to judge, in a fixed order, each environment apart where judged apart; the series
    of a machine measured on one side only are left out (the gate names the machine instead)."""
    machines = {k[0] for k in b_rows} & {k[0] for k in h_rows}
    return [Pair(key, env, b, h) for key in sorted(set(b_rows) | set(h_rows), key=lambda k: tuple(str(x) for x in k))
            if key[0] in machines for env, b, h in per_env(b_rows.get(key), h_rows.get(key))]


def rows(con: Any, commit: str, machine: str | None) -> dict[tuple, Side]:
    """Every result row of ``commit`` (on ``machine``), pooled per series: statuses, samples, cycles."""
    return rows_of(con, [(commit, machine)])[commit, machine]


def rows_of(con: Any, wanted: list[tuple[str, str | None]]) -> dict[tuple[str, str | None], dict[tuple, Side]]:
    """:func:`rows` of several (commit, machine or None) pairs, read in one scan of ``results``."""
    out: dict[tuple[str, str | None], dict[tuple, Side]] = {w: {} for w in wanted}
    if not wanted:
        return out
    commits = sorted({c for c, _ in wanted})
    sql = (f"SELECT r.commit_hash, r.machine, r.benchmark, r.param_key, r.params, r.status, r.value, r.samples, "
           "r.cycles, coalesce(r.sm_mhz, ru.sm_clock_mhz), coalesce(r.unit, b.unit), r.version, r.ref_samples, "
           f"coalesce(try_cast(regexp_extract(ru.file, '{result_names.ROUND_RE}', 1) AS INTEGER), 0), r.run_id, "
           f"ru.file, ru.env_name, coalesce(regexp_matches(ru.file, '{result_names.PROCESS_RE}'), false) "
           "FROM results r "
           "LEFT JOIN benchmarks b ON b.name = r.benchmark LEFT JOIN runs ru ON ru.run_id = r.run_id "
           f"WHERE r.commit_hash IN ({', '.join('?' * len(commits))})")  # an IN list: filters pushed down
    for (commit, m, bn, pk, params, status, value, samples, cycles, clock, unit, version, refs, rnd,
         run_id, file, env, proc) in con.execute(sql, commits).fetchall():
        for key in ((commit, m), (commit, None)):  # asked for on this machine, or on any
            series = out.get(key)
            if series is not None:
                d = series.setdefault((m, bn, pk), Side(params, unit))
                d.files[file] = env
                d.processes |= proc
                _pool(d, status, value, samples, cycles, clock, version, refs, (rnd, run_id or 0))
                e = d.by_env.setdefault(env, Side(params, unit))  # each environment apart as well
                e.files[file] = env
                e.processes |= proc
                _pool(e, status, value, samples, cycles, clock, version, refs, (rnd, run_id or 0))
    return out


def _pool(d: Side, status: Any, value: Any, samples: Any, cycles: Any, clock: Any, version: Any,
          refs: Any = None, order: tuple = (0, 0)) -> None:
    """Add one result row to its series' side (``rows_of``).

    ``paired`` gets sample / reference where the row has the host series' reference call beside each
    sample (``refs``); a row without it leaves the series unpaired (``paired`` None). ``runs`` keeps
    each run's medians: what the verdict compares round by round (:func:`xrt.track.gate_rules.round_ratios`)."""
    ok = status == "ok" and value is not None
    if ok and version:
        d.versions.add(version)
    d.status.add("ok" if ok else ("skipped" if status == "skipped" else "failed"))
    if ok:
        smp = list(samples) if samples else [value]
        if samples and not _valid(value):
            smp.append(value)  # an impossible summary value spoils the run like an impossible sample
        d.samples += smp
        # cycles per sample where recorded, else time x the run's SM clock
        d.cycles += list(cycles) if cycles else ([x * clock for x in smp] if clock else [])
        paired = None
        if d.paired is not None and refs and len(refs) == len(smp) and all(map(_valid, refs)):
            paired = [x / r for x, r in zip(smp, refs)]
            d.paired += paired
            d.refs += list(refs)
        else:
            d.paired = None
        meds = [float(np.median(x)) if x and all(map(_valid, x)) else None for x in (smp, paired)]
        d.runs.append((order, *meds))  # ((round, run), median, paired median)


# A row's samples over its reference call's, sample by sample (host series; xrt.bench.suite.HostCase).
_PAIRED = ("list_transform(range(1, len(r.samples) + 1), lambda i: r.samples[i] / r.ref_samples[i])")


def history_values(con: Any, base: str, machine: str | None,
                    window: int = noisemod.WINDOW, paired: bool = False,
                    by_env: bool = False) -> dict[tuple, list[tuple]]:
    """Per series, the per-commit (value, smallest sample, largest sample) (medians over runs) of the
    last ``window`` commits up to and including ``base`` in history order, oldest first: what the
    noise model learns from. Read from the machine's last :data:`~xrt.track.load.LOOKBACK` measured
    commits (a series measured in fewer of them has fewer points). ``paired``: of the rows with the
    reference call beside their samples, in sample / reference (what the gate judges them on).
    ``by_env``: each environment apart, keyed (machine, benchmark, param_key, environment)
    (:func:`per_env`)."""
    order, where_order = order_expr(con)
    env = ", r.env_name" if by_env else ""
    row = con.execute(f"SELECT {order} FROM commits c WHERE c.hash = ? AND {where_order}", [base]).fetchone()
    if row is None or row[0] is None:
        return {}
    recent = recent_commits_sql(con, machine=bool(machine), upto=True, lookback=max(LOOKBACK, window))
    val, smp = (f"list_median({_PAIRED})", _PAIRED) if paired else ("r.value", "r.samples")
    only = " AND len(r.ref_samples) = len(r.samples)" if paired else ""
    sql = (f"SELECT machine, benchmark, param_key, ord, v, lo, hi{env.replace('r.', '')} FROM ("
           f"  SELECT r.machine, r.benchmark, r.param_key, {order} AS ord, median({val}) AS v, "
           f"         median(list_min({smp})) AS lo, median(list_max({smp})) AS hi{env}, "
           f"         row_number() OVER (PARTITION BY r.machine, r.benchmark, r.param_key{env} "
           f"ORDER BY {order} DESC) AS k"
           f"  FROM results r JOIN commits c ON c.hash = r.commit_hash JOIN {recent} w ON w.machine = r.machine"
           f"  WHERE {USABLE}{only} AND {where_order} AND {order} <= ?"
           f"    AND {order} >= w.lo" + (" AND r.machine = ?" if machine else "") +
           f"  GROUP BY r.machine, r.benchmark, r.param_key, {order}{env}) WHERE k <= ? ORDER BY ord")
    args = [row[0]] + ([machine] if machine else []) + [row[0]] + ([machine] if machine else []) + [window]
    out: dict[tuple, list[tuple]] = {}
    for m, bn, pk, _, v, lo, hi, *e in con.execute(sql, args).fetchall():
        out.setdefault((m, bn, pk, *e), []).append((v, lo, hi))
    return out


def _valid(x: Any) -> bool:
    """A time or a rate can only be a finite number above 0."""
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


def carried(con: Any, commit: str, machine: str | None) -> list[tuple[str, str, str]]:
    """The units ``commit`` carries forward (``carried`` table), as (machine, unit, the commit it was
    measured at); :func:`xrt.track.gate.judge` takes their series from that commit."""
    sql = "SELECT machine, unit, from_commit FROM carried WHERE commit_hash = ?" + (
        " AND machine = ?" if machine else "")
    return con.execute(sql, [commit] + ([machine] if machine else [])).fetchall()


def ingest_errors(con: Any, commit: str) -> list[str]:
    """The ingest errors recorded for ``commit``'s result files, one line each."""
    rows = con.execute("SELECT file, kind, reason FROM ingest_errors WHERE starts_with(?, commit_hash) "
                       "OR starts_with(commit_hash, ?)", [commit, commit]).fetchall()
    return [f"ingest error in {f}: {k}: {r}" for f, k, r in rows]


def histories(con: Any, base: str, machine: str | None, several_envs: bool) -> dict[str, dict]:
    """What the noise models learn from, up to ``base``: the series' values (``"value"``) and, for the
    host series, their values against the reference call (``"paired"``); keyed with the environment
    too where a series ran in several (:func:`per_env`)."""
    out = {"value": history_values(con, base, machine), "paired": history_values(con, base, machine, paired=True)}
    if several_envs:
        out["value"].update(history_values(con, base, machine, by_env=True))
        out["paired"].update(history_values(con, base, machine, paired=True, by_env=True))
    out["pool"] = like_series_noise(out)
    return out


def like(key: tuple) -> tuple:
    """The like series of a host series: one machine's series of the same benchmark and parameters but
    the first (the shape), e.g. ``bench_host.Square`` in bfloat16 from Triton, every size."""
    m, bn, pk = key[:3]
    return m, bn, (pk or "").split(", ", 1)[-1]


def like_series_noise(hist: dict[str, dict]) -> dict[tuple, float]:
    """The pooled σ of the host series' like series (:func:`like`), per history kind (``"value"``,
    ``"paired"``) and the run's value it models (``"best"``, ``"median"``: :func:`noise.steadier`)."""
    sigmas: dict[tuple, list[float]] = {}
    for kind in ("value", "paired"):
        for key, rows in hist.get(kind, {}).items():
            if len(key) != 3 or not host_series(key[1]):
                continue
            for stat, model in (("median", noisemod.from_values([t[0] for t in rows])),
                                ("best", noisemod.from_values([noisemod.best(lo, hi, False) for _, lo, hi in rows]))):
                if model is not None:
                    sigmas.setdefault((kind, like(key), stat), []).append(model.sigma)
    return {k: p for k, v in sigmas.items() if (p := noisemod.pooled(v)) is not None}


def host_series(benchmark: str) -> bool:
    """A host-time series (the host or the compiled series of an op suite)."""
    return (series_of(benchmark) or ("",))[0] in ("host", "compiled")
