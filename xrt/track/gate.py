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
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xrt.bench.sources import unit_of_benchmark
from xrt.bench.suite import series_of
from xrt.db import git, result_names, store
from xrt.track import env as envmod
from xrt.track import explain, regressions, stats
from xrt.track import noise as noisemod
from xrt.track.detect import higher_is_better
from xrt.track.load import LOOKBACK, USABLE, columns, order_expr, recent_commits_sql
from xrt.track.markdown import lit
from xrt.track.units import fmt_ratio, fmt_value

PASS, REGRESSION, CANNOT_JUDGE = 0, 1, 2


@dataclass(frozen=True)
class Outcome:
    """How one series was judged: the words the report uses, and whether it stops a pass."""

    name: str
    text: str
    blocks: bool


COMPARED = Outcome("compared", "compared", False)
NEW_AT_HEAD = Outcome("new", "new at head (no baseline yet; judged from the next commit on)", False)
SKIPPED_BOTH = Outcome("skipped", "skipped at base and head (asv skip: not applicable)", False)
FAILED_AT_BASE = Outcome("failed-base", "failed at base: nothing to compare head with", True)
FAILED_AT_HEAD = Outcome("failed-head", "failed at head", True)
MISSING_AT_HEAD = Outcome("missing-head", "missing at head (ran at base)", True)
SKIPPED_AT_HEAD = Outcome("skipped-head", "skipped at head (ran at base)", True)
HISTORY = Outcome("history", "judged against its history (too few samples to test: one value a run)", False)
INVALID = Outcome("invalid", "invalid samples", True)
TOO_FEW = Outcome("too-few", "too few samples", True)
# `xrt bench run --changed-only` did not run the series' op at head (its sources had not changed) and
# recorded which commit's measurement head carries (xrt.bench.sources): judged on that commit's
# samples, compared with base unless that commit is base itself. A carried series whose measurement
# failed is "failed at head"; one carried from a commit with no results for it cannot be judged.
CARRIED = Outcome("carried", "carried forward at head (sources unchanged since the commit it was measured at)",
                  False)
# asv's benchmark version differs between base and head: the suite measures the series another way
# now (the single-process suite, version xrt-suite-2, times CUDA C small shapes at 71 us where the one
# before gave 3.9 us), so the two sides are not comparable; measure base again with this suite.
VERSION_CHANGED = Outcome("version-changed", "benchmark version changed between base and head (measured "
                          "another way: not comparable; measure base again with this suite)", True)
# Two result files for one commit, one machine and one environment (a copied ``X (1).json``): their
# samples are never pooled into one series (a slower copy would hide in the other's samples); the
# series is not judged, and the files are named. (Files of different environments are judged per
# environment: :func:`per_env`.)
SEVERAL_RUNS = Outcome("several-runs", "several result files for one commit in one environment on one machine "
                       "(a copy?): their samples are not pooled, so it is not judged", True)
OUTCOMES = (COMPARED, HISTORY, CARRIED, NEW_AT_HEAD, SKIPPED_BOTH, FAILED_AT_BASE, FAILED_AT_HEAD, MISSING_AT_HEAD,
            SKIPPED_AT_HEAD, INVALID, TOO_FEW, VERSION_CHANGED, SEVERAL_RUNS)


@dataclass
class Verdict:
    code: int = PASS
    base: str = ""
    head: str = ""
    regressions: list[dict] = field(default_factory=list)
    clock: list[dict] = field(default_factory=list)
    changed_machine: list[dict] = field(default_factory=list)  # slower, on a machine whose environment changed
    within_noise: list[dict] = field(default_factory=list)  # slower by the samples, within the run-to-run noise
    drift: dict = field(default_factory=dict)  # machine -> (reference head / base, series): the host moved
    with_machine: list[dict] = field(default_factory=list)  # slower in µs, not against the reference: drift
    problems: list[str] = field(default_factory=list)
    compared: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # Outcome.name -> series
    carried_from: dict[str, int] = field(default_factory=dict)  # commit carried series were measured at -> count
    carried_compared: int = 0  # carried series compared with base (on the carrying commit's samples)
    notes: list[str] = field(default_factory=list)  # what was not judged and does not block
    history: list[Any] = field(default_factory=list)  # detector steps between base and head
    envs: dict = field(default_factory=dict)  # (machine, commit) -> recorded environment (alerts' cause)


@dataclass(frozen=True)
class Settings:
    """The gate's knobs, validated: a bad value is a ``ValueError`` naming the option and the value."""

    threshold: float = 0.05  # a fraction: 0.05 = 5 % slower fails
    alpha: float = 0.002
    min_samples: int = 5

    def __post_init__(self) -> None:
        for option, value in (("--threshold", self.threshold), ("--alpha", self.alpha),
                              ("--min-samples", self.min_samples)):
            if (why := _knob_problem(option, value)) is not None:
                raise ValueError(f"{option} {value!r}: {why}")

    @classmethod
    def from_text(cls, threshold: str, alpha: str, min_samples: str) -> Settings:
        """The command line's words; an error quotes the word as the user typed it."""
        thr = parse_threshold(threshold)
        out = []
        for option, text, kind in (("--alpha", alpha, float), ("--min-samples", min_samples, int)):
            try:
                value = kind(text)
            except (TypeError, ValueError):
                raise ValueError(f"{option} {text!r}: not a{'' if kind is float else ' whole'} number") from None
            if (why := _knob_problem(option, value)) is not None:
                raise ValueError(f"{option} {text!r}: {why}")
            out.append(value)
        return cls(thr, *out)

    @property
    def samples_needed(self) -> int:
        """Per side: ``min_samples``, and enough for Mann-Whitney to reach ``alpha`` at all."""
        return max(self.min_samples, stats.samples_needed(self.alpha))


def _knob_problem(option: str, value: float | int) -> str | None:
    """Why ``value`` cannot be ``option`` (None: it can). A knob that would pass anything is refused."""
    if option == "--threshold" and not (isinstance(value, float | int) and math.isfinite(value) and 0 < value <= 9):
        return "need a slowdown fraction in (0, 9] (0.05 = 5 %; 9 is a 10x ratio)"
    if option == "--alpha" and not (isinstance(value, float | int) and math.isfinite(value) and 0 < value < 1):
        return "need a p-value bar in (0, 1), such as 0.002"
    if option == "--min-samples" and not (isinstance(value, int) and value >= 2):
        return "need a whole number >= 2"
    return None


def parse_threshold(text: str) -> float:
    """``--threshold``: a fraction (``0.05``) or a ratio (``1.05``), as a fraction.

    ``1`` is refused as ambiguous (a ratio of 1 fails on any noise); the range is :func:`_knob_problem`'s.
    """
    try:
        t = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"--threshold {text!r}: not a number (a fraction such as 0.05 or a ratio such as 1.05)") \
            from None
    if t == 1:
        raise ValueError(f"--threshold {text!r}: ambiguous (a ratio of 1 would fail on any noise); give a "
                         "fraction such as 0.05 or a ratio such as 1.05")
    frac = t - 1 if t > 1 else t  # NaN and inf stay what they are, and are refused below
    if (why := _knob_problem("--threshold", frac)) is not None:
        raise ValueError(f"--threshold {text!r}: {why}; or a ratio above 1, such as 1.05")
    return frac


def resolve(repo: str | os.PathLike | None, rev: str, db: str | os.PathLike) -> str:
    """A full hash: ``git rev-parse`` in REPO when given; else a unique prefix in the database, or
    failing that a name (``HEAD~1``, a branch, a tag) of the git checkout in the current directory,
    as ``xrt explain`` reads its ``--repo .``."""
    if repo is not None:
        full = _rev_parse(repo, rev)
        if full is None:
            raise ValueError(f"{rev!r} is not a commit of {repo}")
        return full
    try:
        return regressions.resolve_in_db(db, rev)
    except ValueError as e:
        full = _rev_parse(".", rev)
        if full is None:
            raise ValueError(f"{e}, and it is not a commit of the git checkout here (.)") from None
        return full


def _rev_parse(repo: str | os.PathLike, rev: str) -> str | None:
    """The commit ``rev`` names in ``repo`` (a rev that reads as an option is refused: None)."""
    return git.rev_commit(repo, rev)


def _rows(con: Any, commit: str, machine: str | None) -> dict[tuple, dict]:
    """Every result row of ``commit`` (on ``machine``), pooled per series: statuses, samples, cycles."""
    return rows_of(con, [(commit, machine)])[commit, machine]


def rows_of(con: Any, wanted: list[tuple[str, str | None]]) -> dict[tuple[str, str | None], dict[tuple, dict]]:
    """:func:`_rows` of several (commit, machine or None) pairs, read in one scan of ``results``."""
    rc, runc = columns(con, "results"), columns(con, "runs")
    cyc = "r.cycles" if "cycles" in rc else "NULL::DOUBLE[]"
    sm = [x for x, ok in (("r.sm_mhz", "sm_mhz" in rc), ("ru.sm_clock_mhz", "sm_clock_mhz" in runc)) if ok]
    sm_sql = f"coalesce({', '.join(sm)})" if sm else "NULL::DOUBLE"
    ver = "r.version" if "version" in rc else "NULL::VARCHAR"
    ref = "r.ref_samples" if "ref_samples" in rc else "NULL::DOUBLE[]"
    out: dict[tuple[str, str | None], dict[tuple, dict]] = {w: {} for w in wanted}
    if not wanted:
        return out
    commits = sorted({c for c, _ in wanted})
    sql = (f"SELECT r.commit_hash, r.machine, r.benchmark, r.param_key, r.params, r.status, r.value, r.samples, "
           f"{cyc}, {sm_sql}, coalesce(r.unit, b.unit), {ver}, {ref}, "
           f"coalesce(try_cast(regexp_extract(ru.file, '{result_names.ROUND_RE}', 1) AS INTEGER), 0), r.run_id, "
           "ru.file, ru.env_name FROM results r "
           "LEFT JOIN benchmarks b ON b.name = r.benchmark LEFT JOIN runs ru ON ru.run_id = r.run_id "
           f"WHERE r.commit_hash IN ({', '.join('?' * len(commits))})")  # an IN list: filters pushed down
    for (commit, m, bn, pk, params, status, value, samples, cycles, clock, unit, version, refs, rnd,
         run_id, file, env) in con.execute(sql, commits).fetchall():
        for key in ((commit, m), (commit, None)):  # asked for on this machine, or on any
            series = out.get(key)
            if series is not None:
                d = series.setdefault((m, bn, pk), _entry(params, unit))
                d["files"][file] = env
                _pool(d, status, value, samples, cycles, clock, version, refs, (rnd, run_id or 0))
                e = d["by_env"].setdefault(env, _entry(params, unit))  # each environment apart as well
                e["files"][file] = env
                _pool(e, status, value, samples, cycles, clock, version, refs, (rnd, run_id or 0))
    return out


def _entry(params: Any, unit: Any) -> dict:
    return {"params": params, "unit": unit, "status": set(), "samples": [], "cycles": [], "versions": set(),
            "paired": [], "refs": [], "runs": [], "files": {}, "by_env": {}}



def per_env(b: dict | None, h: dict | None) -> list[tuple[str | None, dict | None, dict | None]]:
    """What to judge of one series: ``[(None, b, h)]`` where base and head ran it in one environment
    (the same), else one ``(environment, base's rows there, head's rows there)`` per environment
    either side ran: asv keeps one file per environment, and their samples are never pooled (one
    slower environment would hide in the others' samples)."""
    envs_b, envs_h = set((b or {}).get("by_env") or ()), set((h or {}).get("by_env") or ())
    if len(envs_b) <= 1 and len(envs_h) <= 1:  # one a side: the same, or one that changed (an upgrade's
        return [(None, b, h)]                   # new name), which the environment-change class takes

    out = []
    for env in sorted(envs_b | envs_h, key=str):
        sides = []
        for d in (b, h):
            sub = ((d or {}).get("by_env") or {}).get(env)
            if sub is not None and d.get("carried_from"):
                sub = {**sub, "carried_from": d["carried_from"]}
            sides.append(sub)
        out.append((env, *sides))
    return out
    return out


def _pool(d: dict, status: Any, value: Any, samples: Any, cycles: Any, clock: Any, version: Any,
          refs: Any = None, order: tuple = (0, 0)) -> None:
    """Add one result row to its series' pooled entry (``rows_of``).

    ``paired`` gets sample / reference where the row has the host series' reference call beside each
    sample (``refs``); a row without it leaves the series unpaired (``paired`` None). ``runs`` keeps
    each run's medians: what the verdict compares round by round (:func:`round_ratios`)."""
    ok = status == "ok" and value is not None
    if ok and version:
        d["versions"].add(version)
    d["status"].add("ok" if ok else ("skipped" if status == "skipped" else "failed"))
    if ok:
        smp = list(samples) if samples else [value]
        if samples and not _valid(value):
            smp.append(value)  # an impossible summary value spoils the run like an impossible sample
        d["samples"] += smp
        # cycles per sample where recorded, else time x the run's SM clock
        d["cycles"] += list(cycles) if cycles else ([x * clock for x in smp] if clock else [])
        paired = None
        if d["paired"] is not None and refs and len(refs) == len(smp) and all(map(_valid, refs)):
            paired = [x / r for x, r in zip(smp, refs)]
            d["paired"] += paired
            d["refs"] += list(refs)
        else:
            d["paired"] = None
        meds = [float(np.median(x)) if x and all(map(_valid, x)) else None for x in (smp, paired)]
        d["runs"].append((order, *meds))  # ((round, run), median, paired median)


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
    if "ref_samples" not in columns(con, "results") and paired:
        return {}
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


def identical(xs: np.ndarray, ys: np.ndarray) -> bool:
    """Every value at base and head is one and the same finite number >= 0: a deterministic series (a
    memory benchmark at 0 bytes, a count), unchanged. Equal is equal: it is compared, and did not move,
    even at 0 (which no time or rate can be) and with one value a side."""
    v = np.concatenate([xs, ys])
    return len(xs) > 0 and len(ys) > 0 and bool(np.isfinite(v[0]) and v[0] >= 0 and (v == v[0]).all())


def _valid(x: Any) -> bool:
    """A time or a rate can only be a finite number above 0."""
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


def _carry(con: Any, rows: dict[tuple, dict], commit: str, machine: str | None, side: str) -> list[str]:
    """Add to ``rows`` the series ``commit`` carries forward (``carried`` table), from the commit each
    was measured at; a series ``commit`` measured itself keeps its own rows. Returns problems."""
    if "from_commit" not in columns(con, "carried"):
        return []  # an older database: nothing was ever carried
    sql = "SELECT machine, unit, from_commit FROM carried WHERE commit_hash = ?" + (
        " AND machine = ?" if machine else "")
    problems = []
    for m, unit, frm in con.execute(sql, [commit] + ([machine] if machine else [])).fetchall():
        got = {k: v for k, v in _rows(con, frm, m).items() if unit_of_benchmark(k[1]) == unit}
        if not got:
            problems.append(f"{m} {unit}: carried forward at {side} {commit[:10]} from {frm[:10]}, which has no "
                            f"results for it on {m} (measure {commit[:10]} without --changed-only)")
        for k, v in got.items():
            if k not in rows:
                rows[k] = {**v, "carried_from": frm}
    return problems


def _errors(con: Any, commit: str) -> list[str]:
    if "commit_hash" in columns(con, "ingest_errors"):  # by the commit ingest recorded (schema 10)
        rows = con.execute("SELECT file, kind, reason FROM ingest_errors WHERE starts_with(?, commit_hash) "
                           "OR starts_with(commit_hash, ?)", [commit, commit]).fetchall()
    else:  # a database not written since: by asv's file name
        rows = con.execute("SELECT file, kind, reason FROM ingest_errors WHERE contains(file, ?)",
                           [f"/{result_names.result_file_prefix(commit)}"]).fetchall()
    return [f"ingest error in {f}: {k}: {r}" for f, k, r in rows]


def outcome(b: dict | None, h: dict | None) -> Outcome | None:
    """The outcome decided by the statuses alone; ``None``: both sides ran, look at the samples."""
    bs, hs = (b or {}).get("status", set()), (h or {}).get("status", set())
    if "ok" in bs:
        if "ok" in hs:
            return None
        return FAILED_AT_HEAD if "failed" in hs else (SKIPPED_AT_HEAD if "skipped" in hs else MISSING_AT_HEAD)
    if "failed" in bs:
        return FAILED_AT_BASE
    if "failed" in hs:  # skipped or absent at base, broken at head
        return FAILED_AT_HEAD
    return NEW_AT_HEAD if "ok" in hs else SKIPPED_BOTH


def several_runs(b: dict | None, h: dict | None) -> str | None:
    """Where base or head has rows of more than one result file for the series: the files (and their
    environments) in words, else None (:data:`SEVERAL_RUNS`). The rounds of a paired measurement
    (``-round<k>`` files, one a round) are several runs by design."""
    said = []
    for side, d in (("base", b), ("head", h)):
        files = (d or {}).get("files") or {}
        rounds = [m[1] if (m := re.search(result_names.ROUND_RE, f or "")) else None for f in files]
        if len(files) > 1 and len(set(rounds)) < len(rounds):
            said.append(f"{len(files)} at {side}: " + ", ".join(f"{f} [{e}]" for f, e in sorted(files.items(),
                                                                                            key=str)))
    return "; ".join(said) or None


# Over the complexity bound (pyproject.toml, C901): being split into named steps separately.
def judge(db: str | os.PathLike, base: str, head: str, *, threshold: float = 0.05, alpha: float = 0.002,  # noqa: C901
          min_samples: int = 5, machine: str | None = None, history: bool = True,
          noise_db: str | os.PathLike | None = None) -> Verdict:
    """Judge every series of ``base`` and ``head`` (full hashes) on ``machine`` (default: all).

    ``noise_db``: where each series' run-to-run noise is learnt from (its history up to ``base``),
    when not ``db`` itself (a paired measurement's database holds only its own runs)."""
    cfg = Settings(threshold, alpha, min_samples)
    v = Verdict(base=base, head=head, counts={o.name: 0 for o in OUTCOMES})
    where = f" on {machine}" if machine else ""
    if base == head:
        v.problems.append(f"base and head are the same commit ({head[:10]}): nothing new to judge "
                          "(identical results on both sides are not evidence of anything)")
        v.code = CANNOT_JUDGE
        return v
    with store.read(db) as con:
        b_rows, h_rows = _rows(con, base, machine), _rows(con, head, machine)
        v.problems += _carry(con, b_rows, base, machine, "base") + _carry(con, h_rows, head, machine, "head")
        for c in (base, head):
            v.problems += _errors(con, c)
        envs = v.envs = envmod.environments(con, machine, commits=[base, head])
        several_envs = any(len(per_env(b_rows.get(k), h_rows.get(k))) > 1 for k in set(b_rows) | set(h_rows))
        if noise_db is None:
            hist = _histories(con, base, machine, several_envs)
    if noise_db is not None:
        hist = {}
        if Path(noise_db).is_file():
            with store.read(noise_db) as con:
                hist = _histories(con, base, machine, several_envs)
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
        diff = envmod.changes(envs.get((m, base)), envs.get((m, head)))
        if diff:
            changed.add(m)
            v.problems.append(f"machine changed on {m} between base and head ({'; '.join(diff)}): a slowdown "
                              "there cannot be told from the change; measure base again on this environment")
        elif diff is None:
            v.notes.append(f"{m}: no machine environment recorded at base or head, so a slowdown cannot be told "
                           "from a machine change")
    eff = np.log1p(cfg.threshold)
    v.drift = machine_drift(b_rows, h_rows, eff)
    for m, (d, n) in sorted(v.drift.items()):
        v.notes.append(f"machine drift on {m}: the reference call took {d:.2f}x its base time at head "
                       f"({n} host series); host series are judged against it (op / reference), so the "
                       "drift is not blamed on code")
    for key in sorted(set(b_rows) | set(h_rows), key=lambda k: tuple(str(x) for x in k)):
        m, bn, pk = key
        if m not in b_machines or m not in h_machines:
            continue  # the whole machine is missing on one side: one problem line above
        for env, b, h in per_env(b_rows.get(key), h_rows.get(key)):
            _judge_series(v, cfg, eff, key, env, b, h, base, hist, changed)
    v.compared = v.counts[COMPARED.name] + v.counts[HISTORY.name] + v.carried_compared
    for o in (NEW_AT_HEAD, SKIPPED_BOTH):
        if v.counts[o.name]:
            v.notes.append(f"{v.counts[o.name]} series {o.text}")
    if v.counts[CARRIED.name]:
        origin = ", ".join(f"{n} from {c[:10]}" + (" (base)" if c == base else "")
                           for c, n in sorted(v.carried_from.items()))
        v.notes.append(f"{v.counts[CARRIED.name]} series {CARRIED.text}: {origin}; "
                       f"{v.carried_compared} of them compared with base on those samples")
    if b_rows and h_rows and not v.compared and not v.counts[CARRIED.name] and not v.problems:
        v.problems.append("no series was compared (nothing ran at both base and head)")
    if history and b_rows and h_rows:
        v.history = _history(db, base, head, machine)
    v.code = REGRESSION if v.regressions else (CANNOT_JUDGE if v.problems else PASS)
    return v


def _histories(con: Any, base: str, machine: str | None, several_envs: bool) -> dict[str, dict]:
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
            if len(key) != 3 or not _host_series(key[1]):
                continue
            for stat, model in (("median", noisemod.from_values([t[0] for t in rows])),
                                ("best", noisemod.from_values([noisemod.best(lo, hi, False) for _, lo, hi in rows]))):
                if model is not None:
                    sigmas.setdefault((kind, like(key), stat), []).append(model.sigma)
    return {k: p for k, v in sigmas.items() if (p := noisemod.pooled(v)) is not None}


def _judge_series(v: Verdict, cfg: Settings, eff: float, key: tuple, env: str | None, b: dict | None,
                  h: dict | None, base: str, hist: dict[str, dict], changed: set) -> None:
    """One series (in one environment where ``env`` is given: :func:`per_env`) into ``v``."""
    m, bn, pk = key
    need = cfg.samples_needed
    label = f"{m} {bn} [{pk or '-'}]" + (f" (environment {env})" if env is not None else "")
    hkey = key if env is None else (*key, env)
    values = hist.get("value", {})
    marks = [len(x) for x in (v.regressions, v.within_noise, v.clock, v.changed_machine, v.with_machine)]
    out = outcome(b, h)
    several = several_runs(b, h)
    if several:
        out = SEVERAL_RUNS
        v.problems.append(f"{label}: result files of one commit ({several}): not pooled, not judged; keep "
                          "one file per commit and environment (remove the copy)")
    carried = (h or {}).get("carried_from")
    if carried:
        if out is not None and out.blocks and out is not SEVERAL_RUNS:
            out = Outcome(out.name, f"{out.text} (carried forward from {carried[:10]})", True)
    if out is SEVERAL_RUNS:
        pass
    elif out is None and carried == base:
        out = CARRIED  # measured at base itself, sources unchanged since: nothing to compare
    elif out is None and b["versions"] and h["versions"] and not b["versions"] & h["versions"]:
        out = VERSION_CHANGED
        v.problems.append(f"{label}: {out.text} ({', '.join(sorted(b['versions']))[:24]} at base, "
                          f"{', '.join(sorted(h['versions']))[:24]} at head)")
    elif out is None:
        xs, ys = np.asarray(b["samples"], float), np.asarray(h["samples"], float)
        same = identical(xs, ys)
        bad = [] if same else [f"{n} at {side}" for a, side in ((xs, "base"), (ys, "head"))
                               if (n := int((~(np.isfinite(a) & (a > 0))).sum()))]
        if same:
            out = COMPARED  # equal is equal: nothing moved, whatever the sample count
        elif bad:
            out = INVALID
            v.problems.append(f"{label}: invalid samples (negative, zero or not finite: {', '.join(bad)})")
        elif len(xs) < need or len(ys) < need:
            model = noisemod.from_values([t[0] for t in values.get(hkey, [])])
            if model is not None:
                out = HISTORY
                against_history(v, eff, key, b, ys, model, m in changed)
            else:
                out = TOO_FEW
                why = f"need {need}" + (f": p <= {cfg.alpha:g} is out of reach with fewer"
                                        if need > cfg.min_samples else "")
                v.problems.append(f"{label}: too few samples ({len(xs)} at base, {len(ys)} at head; {why}) "
                                  f"and too little history to judge it otherwise (fewer than "
                                  f"{noisemod.MIN_HISTORY} commits)")
        elif b["paired"] and h["paired"] and min(len(b["paired"]), len(h["paired"])) >= need:
            out = COMPARED  # host series with their reference call: judged op / reference
            compare(v, cfg, eff, key, b, h, np.asarray(b["paired"], float), np.asarray(h["paired"], float),
                    m in changed, *_noise(hist, "paired", hkey, b, h, True), paired=True)
        else:
            out = COMPARED
            compare(v, cfg, eff, key, b, h, xs, ys, m in changed, *_noise(hist, "value", hkey, b, h, False),
                    drift=v.drift.get(m, (None,))[0] if _host_series(bn) else None)
        if carried and out in (COMPARED, HISTORY):
            v.carried_compared += 1
            out = CARRIED
    elif out.blocks:
        v.problems.append(f"{label}: {out.text}")
    if out is CARRIED:
        v.carried_from[carried] = v.carried_from.get(carried, 0) + 1
    v.counts[out.name] += 1
    for lst, n in zip((v.regressions, v.within_noise, v.clock, v.changed_machine, v.with_machine), marks):
        for item in lst[n:]:
            item["env"] = env  # which environment slowed down, where they are judged apart


def _noise(hist: dict[str, dict], kind: str, hkey: tuple, b: dict, h: dict,
           paired: bool) -> tuple[noisemod.Noise | None, str]:
    """The run-to-run noise model of a series and the run's value it models (:func:`noise.steadier`).
    A host series measured in one process a side has its σ raised toward its like series' pooled σ
    (:func:`noise.floored`): its own few commits often miss how far a whole process moves. Several
    runs a side are judged round by round instead (:func:`compare`)."""
    model, stat = noisemod.steadier(hist.get(kind, {}).get(hkey, []), higher_is_better(b["unit"]))
    if _host_series(hkey[1]) and round_ratios(b, h, paired) is None:
        model = noisemod.floored(model, hist.get("pool", {}).get((kind, like(hkey), stat)))
    return model, stat


def against_history(v: Verdict, eff: float, key: tuple, b: dict, ys: np.ndarray, model: noisemod.Noise,
                     machine_changed: bool) -> None:
    """A series with too few samples to test: head's value against the level of its recent history."""
    m, bn, pk = key
    y = float(np.log(np.median(ys)))
    ratio = float(np.exp(y - model.level))
    worse = np.log(ratio) * (-1 if higher_is_better(b["unit"]) else 1)
    z = model.z_head(y)
    if worse < eff or z < noisemod.Z:
        return
    item = {"machine": m, "benchmark": bn, "params": b["params"], "param_key": pk, "ratio": ratio,
            "p_value": None, "z": z, "judged": f"against history ({model.describe()})",
            "before": float(np.exp(model.level)), "after": float(np.median(ys)), "unit": b["unit"]}
    (v.changed_machine if machine_changed else v.regressions).append(item)


def machine_drift(b_rows: dict, h_rows: dict, eff: float) -> dict[str, tuple[float, int]]:
    """Per machine, how much slower (or faster) the host series' reference call ran at head than at
    base, where that moved by the threshold or more: ``{machine: (median ratio, series)}``.

    Every host sample is taken in turn with the same reference call (a plain torch op, which no
    commit of xrt changes), so when the references of a machine's series moved together, the host
    moved, not the code."""
    per: dict[str, list[float]] = {}
    for key, b in b_rows.items():
        h = h_rows.get(key)
        if h and b.get("refs") and h.get("refs"):
            per.setdefault(key[0], []).append(float(np.median(h["refs"]) / np.median(b["refs"])))
    out = {}
    for m, ratios in per.items():
        d = float(np.median(ratios))
        if abs(np.log(d)) >= eff:
            out[m] = (d, len(ratios))
    return out


def _host_series(benchmark: str) -> bool:
    """A host-time series (the host or the compiled series of an op suite)."""
    return (series_of(benchmark) or ("",))[0] in ("host", "compiled")


def round_ratios(b: dict, h: dict, paired: bool) -> list[float] | None:
    """Head / base per round, where a side was measured in several runs (``xrt bench compare``'s
    rounds, or a commit measured twice): the k-th run of head against the k-th of base, by round
    (``xrt.orchestrate.paired`` names each round's files ``-round<k>``), else in ingest order;
    every pair where the counts differ. None: one run a side."""
    col = 2 if paired else 1
    bs = [r[col] for r in sorted(b.get("runs") or []) if r[col]]
    hs = [r[col] for r in sorted(h.get("runs") or []) if r[col]]
    if not bs or not hs or (len(bs) < 2 and len(hs) < 2):
        return None
    pairs = zip(bs, hs) if len(bs) == len(hs) else ((x, y) for x in bs for y in hs)
    return [y / x for x, y in pairs]


def run_gap(b: dict, h: dict, paired: bool, sign: int) -> float | None:
    """The log gap between head's best run and base's worst run (positive: every head run is worse
    than every base run), where base has several runs; None otherwise. Base's runs of one commit
    measure how far a whole process moves (Pinpoint's inter-task noise): a series that flips between
    two levels from one process to the next (seen for a compiled CUDA C call: 1.65 or 1.9-2.1 times
    its reference) moves that far in an A/A pair too, and is not a regression unless head's runs all
    lie beyond base's."""
    col = 2 if paired else 1
    bs = [np.log(r[col]) * sign for r in b.get("runs") or [] if r[col]]
    hs = [np.log(r[col]) * sign for r in h.get("runs") or [] if r[col]]
    if len(bs) < 2 or not hs:
        return None
    return float(min(hs) - max(bs))


def compare(v: Verdict, cfg: Settings, eff: float, key: tuple, b: dict, h: dict, xs: np.ndarray,
             ys: np.ndarray, machine_changed: bool = False, model: noisemod.Noise | None = None,
             stat: str = "median", paired: bool = False, drift: float | None = None) -> None:
    """One series with enough valid samples on both sides: a regression, a clock change, a slowdown
    within the series' run-to-run noise (``model``, from its history) or not seen in every round, a
    slowdown of the whole host (``drift``: the machine's reference moved, and this series has no
    reference of its own to be judged against), or nothing.

    ``paired``: ``xs`` and ``ys`` are op / reference (host series); the item still shows µs."""
    m, bn, pk = key
    ratio = float(np.median(ys) / np.median(xs))
    worse = np.log(ratio) * (-1 if higher_is_better(b["unit"]) else 1)
    if worse < eff:
        if paired and np.log(np.median(h["samples"]) / np.median(b["samples"])) >= eff:
            v.with_machine.append({"machine": m, "benchmark": bn, "param_key": pk, "ratio": ratio,
                                   "abs_ratio": float(np.median(h["samples"]) / np.median(b["samples"]))})
        return
    p, _ = stats.mannwhitney(xs, ys)
    if p > cfg.alpha:
        return
    item = {"machine": m, "benchmark": bn, "params": b["params"], "param_key": pk, "ratio": ratio,
            "p_value": p, "before": float(np.median(xs)), "after": float(np.median(ys)), "judged": "on samples",
            "unit": b["unit"]}
    if paired:
        item.update(before=float(np.median(b["samples"])), after=float(np.median(h["samples"])),
                    judged="against the reference call (op / reference, sample by sample)")
    rounds = round_ratios(b, h, paired)
    if rounds is not None:
        sign = -1 if higher_is_better(b["unit"]) else 1
        item["rounds"] = rounds
        apart = run_gap(b, h, paired, sign)
        if min(sign * np.log(r) for r in rounds) < eff / 2:
            item["judged"] = ("not slower in every round (head / base per round: "
                              + ", ".join(f"{r:.3f}" for r in rounds) + ")")
            v.within_noise.append(item)
            return
        if apart is not None and apart < eff / 2:
            item["judged"] = (f"within base's own run-to-run spread (head's best run is {np.expm1(apart):+.1%} from "
                              "base's worst)")
            v.within_noise.append(item)
            return
    if drift is not None and worse <= np.log(drift) + eff:
        item["judged"] = f"within the machine's drift ({drift:.2f}x; no reference call recorded for it)"
        v.with_machine.append(item)
        return
    if model is not None:
        hib = higher_is_better(b["unit"])  # the run's value the model was learnt on (noise.steadier)
        lr = float(np.log(ratio)) if stat == "median" else float(np.log(
            noisemod.best(ys.min(), ys.max(), hib) / noisemod.best(xs.min(), xs.max(), hib)))
        item["z"] = model.z_pair(lr) if (lr < 0 if hib else lr > 0) else 0.0  # not worse by that value: 0
        if item["z"] < noisemod.Z:
            item["judged"] = (f"within run-to-run noise ({model.describe()} of the run's {stat}, z {item['z']:.1f} < "
                              f"{noisemod.Z:g})")
            v.within_noise.append(item)
            return
    bc = [c for c in b["cycles"] or [] if c is not None]  # None: no SM clock recorded (CPU, no NVML)
    hc = [c for c in h["cycles"] or [] if c is not None]
    if len(bc) >= cfg.min_samples and len(hc) >= cfg.min_samples:
        item["cycles_ratio"] = float(np.median(hc) / np.median(bc))
        if abs(np.log(item["cycles_ratio"])) < eff / 2:
            v.clock.append(item)
            return
    (v.changed_machine if machine_changed else v.regressions).append(item)


def _history(db: str | os.PathLike, base: str, head: str, machine: str | None) -> list[Any]:
    """The detector's regressions whose first slow commit lies in (base, head]: context for the summary."""
    order = regressions.commit_order(db)
    lo, hi = order.get(base), order.get(head)
    if lo is None or hi is None:
        return []
    return [r for r in regressions.detect_db(db, machine=machine)
            if r.kind == "regression" and lo < order.get(r.commit, -1) <= hi]


def report(v: Verdict) -> str:
    """stdout: one line per slow benchmark (``benchmark params ratio``), then the verdict."""
    lines = []
    for a, items in alerts_of(v, v.regressions):  # one heading per (machine, commit), as `xrt regressions`
        lines.append(f"alert: {a.headline()}")
        lines += [f"REGRESSION {r['benchmark']} [{r['param_key'] or '-'}] {fmt_ratio(r['ratio'])} "
                  f"({_on(r)}, {evidence(r)})" for r in items]
    lines += [f"clock change (not failing): {r['benchmark']} [{r['param_key'] or '-'}] time {fmt_ratio(r['ratio'])}, "
              f"cycles {fmt_ratio(r['cycles_ratio'])} ({_on(r)})" for r in v.clock]
    lines += [f"slower on a changed machine (not judged as a regression): {r['benchmark']} [{r['param_key'] or '-'}] "
              f"{fmt_ratio(r['ratio'])} ({_on(r)})" for r in v.changed_machine]
    lines += [f"within noise (not failing): {r['benchmark']} [{r['param_key'] or '-'}] {fmt_ratio(r['ratio'])} "
              f"({_on(r)}, {r['judged']})" for r in v.within_noise]
    lines += [f"moved with the machine (not failing): {r['benchmark']} [{r['param_key'] or '-'}] "
              f"{fmt_ratio(r.get('abs_ratio', r['ratio']))} in µs, {fmt_ratio(r['ratio'])} against the reference "
              f"call ({_on(r)})" for r in v.with_machine]
    lines += [f"cannot judge: {p}" for p in v.problems]
    lines += [f"not judged (does not block): {n}" for n in v.notes]
    word = {PASS: "pass", REGRESSION: "REGRESSION", CANNOT_JUDGE: "CANNOT JUDGE"}[v.code]
    lines.append(f"xrt gate: {word}: head {v.head[:10]} vs base {v.base[:10]}: {v.compared} series compared"
                 + (f" ({v.counts.get(HISTORY.name, 0)} against history)" if v.counts.get(HISTORY.name) else "") + ", "
                 f"{len(v.regressions)} regression(s), {len(v.problems)} problem(s) (exit {v.code})")
    return "\n".join(lines)


def _on(r: dict) -> str:
    """Where a listed series ran: its machine, and its environment where environments are judged apart."""
    return f"machine {r['machine']}" + (f", environment {r['env']}" if r.get("env") else "")


def alerts_of(v: Verdict, items: list[dict]) -> list[tuple[Any, list[dict]]]:
    """``items`` grouped into alerts by ``xrt.track.regressions.group`` (the one grouping, with its
    cause from ``v.envs``): (alert, its items in the alert's order)."""
    return [(a, [items[int(rec.note)] for rec in a.records])
            for a in regressions.group(regressions.gate_records(v.base, v.head, items), v.envs)]


def evidence(r: dict) -> str:
    return f"p={r['p_value']:.1e}" if r.get("p_value") is not None else f"z={r['z']:.1f} {r['judged']}"


def _explain_hint(v: Verdict) -> str | None:
    """The ``xrt explain`` command for the slowest op-suite case, or None (no such case)."""
    for r in sorted(v.regressions, key=lambda r: -(r.get("ratio") or 0)):
        try:
            case = explain.make_case(r["benchmark"], list(r.get("params") or []) or r["param_key"])
        except ValueError:
            continue
        cmd = f"xrt explain --base {v.base[:12]} --head {v.head[:12]} --bench {case.benchmark} --params " \
              f"{','.join(case.params)}"
        return f"Why the slowest case got slower, on a GPU host: {lit(cmd, None, code=True)} (stored, it shows here)."
    return None


def _case(r: dict) -> str:
    """One slower series in a Markdown list: machine, benchmark and parameters, escaped."""
    return f"{lit(r['machine'])} {lit(r['benchmark'], code=True)} [{lit(r['param_key'] or '-')}]"


def summary_markdown(v: Verdict, explanations: list[str] | None = None) -> str:
    """The gate's Markdown; ``explanations``: stored ``xrt explain`` results (Markdown) of its slower
    series, shown after their tables. Every name and message goes through :func:`xrt.track.markdown.lit`."""
    icon = {PASS: "✅ pass", REGRESSION: "❌ regression", CANNOT_JUDGE: "⚠️ cannot judge"}[v.code]
    out = [f"## xrt gate: {icon}", "",
           f"head `{v.head[:12]}` vs base `{v.base[:12]}`: {v.compared} series compared (exit {v.code}).", ""]
    for a, items in alerts_of(v, v.regressions):  # one alert per (machine, commit), as `xrt regressions`
        out += [f"#### {a.headline(lit)}", "", "| machine | benchmark | params | before | after | ratio | p |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {lit(r['machine'], cell=True)} | {lit(r['benchmark'], code=True, cell=True)} | "
                f"{lit(r['param_key'] or '-', cell=True)} | "
                f"{fmt_value(r['before'], r.get('unit'))} | {fmt_value(r['after'], r.get('unit'))} | "
                f"**{fmt_ratio(r['ratio'])}** | {evidence(r)} |" for r in items]
        out.append("")
    for md in explanations or []:
        out += ["<details><summary>What changed (xrt explain)</summary>", "", md.replace("### ", "##### ", 1), "",
                "</details>", ""]
    hint = _explain_hint(v) if v.regressions and not explanations else None
    if hint:
        out += [hint, ""]
    if v.clock:
        out += ["Clock changes (time moved, cycles did not; not failing):", ""]
        out += [f"- {_case(r)}: time {fmt_ratio(r['ratio'])}, cycles {fmt_ratio(r['cycles_ratio'])}"
                for r in v.clock] + [""]
    if v.within_noise:
        out += ["Slower, but within the series' run-to-run noise (not failing):", ""]
        out += [f"- {_case(r)}: {fmt_ratio(r['ratio'])}, {r['judged']}" for r in v.within_noise] + [""]
    if v.drift or v.with_machine:
        out += ["Machine drift (the host moved, not the code; not failing):", ""]
        out += [f"- {lit(m, None)}: the reference call took {d:.2f}x its base time ({n} host series)"
                for m, (d, n) in sorted(v.drift.items())]
        out += [f"- {_case(r)}: {fmt_ratio(r.get('abs_ratio', r['ratio']))} in µs, {fmt_ratio(r['ratio'])} against "
                "the reference call" for r in v.with_machine[:50]] + [""]
    if v.changed_machine:
        out += ["Slower on a machine whose environment changed (not judged as regressions):", ""]
        for a, items in alerts_of(v, v.changed_machine):
            out += [f"- {a.headline(lit)}"] + [f"  - {lit(r['benchmark'], code=True)} [{lit(r['param_key'] or '-')}]: "
                                                f"{fmt_ratio(r['ratio'])}" for r in items]
        out.append("")
    if v.problems:
        out += ["Cannot judge:", ""] + [f"- {lit(p, None)}" for p in v.problems[:50]]
        if len(v.problems) > 50:
            out.append(f"- … and {len(v.problems) - 50} more")
        out.append("")
    if v.notes:
        out += ["Not judged (does not block):", ""] + [f"- {lit(n, None)}" for n in v.notes] + [""]
    if v.history:
        out += ["Steps the detector found between base and head (`xrt regressions show ID`):", ""]
        out += [f"- {lit(r.id, code=True)} {lit(r.machine)} {lit(r.benchmark, code=True)} [{lit(r.param_key or '-')}] "
                f"{fmt_ratio(r.ratio)} at `{r.commit[:10]}`" for r in v.history] + [""]
    return "\n".join(out) + "\n"
