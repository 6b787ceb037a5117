"""What the dashboard reads (and its one write): the database layer only, no torch/pycuda/triton.

Every read is one parameterized, read-only statement through :func:`xrt.db.query.query`, which
opens a short-lived ``read_only=True`` connection and closes it: the dashboard never holds the
file open, so an ingest (which swaps a new file in, see ``xrt.db.store``) is never blocked. Results
are cached with :func:`st.cache_data` under a key that includes the file's inode, mtime and size,
so a swapped-in database is read at the next rerun. The only write, acknowledging a regression,
goes through ``xrt.track.regressions.set_status`` in one ``xrt.db.store.write`` (a copy, then a swap).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from xrt.db.query import query
from xrt.db.store import DB_ENV, DEFAULT_DB
from xrt.track.detect import higher_is_better  # noqa: F401  (the pages read the unit's direction through dashdata)
from xrt.track.labels import OPEN
from xrt.track.units import fmt_value  # noqa: F401  (the pages format values through dashdata)

_OPEN_SQL = ", ".join(f"'{s}'" for s in OPEN)  # OPEN as an SQL list


def db_path() -> Path:
    return Path(os.environ.get(DB_ENV) or DEFAULT_DB)


@st.cache_data(ttl=900, max_entries=512, show_spinner=False)
def _frame(db: str, stamp: tuple, sql: str, params: Any) -> pd.DataFrame:
    names, rows = query(db, sql, params)
    return pd.DataFrame.from_records(rows, columns=names)


@dataclass(frozen=True)
class Reader:
    """The database file as it is now; ``stamp`` changes whenever a writer swaps a new file in."""

    path: str
    stamp: tuple

    @classmethod
    def open(cls, path: str | os.PathLike | None = None) -> Reader | None:
        p = Path(path) if path else db_path()
        try:
            s = p.stat()
        except OSError:
            return None
        return cls(str(p), (s.st_ino, s.st_mtime_ns, s.st_size))

    def df(self, sql: str, params: dict | None = None) -> pd.DataFrame:
        return _frame(self.path, self.stamp, sql, params)

    def scalar(self, sql: str, params: dict | None = None) -> Any:
        d = self.df(sql, params)
        return d.iat[0, 0] if len(d) else None

    # ------------------------------------------------------------------ the file
    # Every reader sees the latest schema (xrt.db.store.read migrates a copy of an older file), so no
    # query asks which tables or columns the file has.

    def n_results(self) -> int:
        return int(self.scalar("SELECT count(*) FROM (SELECT 1 FROM results LIMIT 1)") or 0)

    def order(self) -> str:
        """The commit order the detector uses: first-parent index with git history, else ingest's."""
        n = self.scalar("SELECT count(first_parent_index) FROM commits")
        return "first_parent_index" if n else "position"

    # ------------------------------------------------------------------ overview

    def machines(self) -> pd.DataFrame:
        """Per machine, its last run (by when it ran, then commit order) and what it found."""
        return self.df("""
            WITH last AS (
                SELECT u.machine, arg_max(u.run_id, (coalesce(u.started_at, u.commit_date, u.ingested_at),
                                                     c.position)) AS run_id, count(*) AS runs
                FROM runs u LEFT JOIN commits c ON c.hash = u.commit_hash GROUP BY u.machine)
            SELECT u.machine, coalesce(u.gpu_model, m.gpu_model) AS gpu, u.commit_hash, c.message, c.author_date,
                   coalesce(u.started_at, u.commit_date) AS ran_at, u.n_ok, u.n_failed, u.n_skipped,
                   u.throttle_share, last.runs
            FROM last JOIN runs u ON u.run_id = last.run_id LEFT JOIN commits c ON c.hash = u.commit_hash
            LEFT JOIN machines m ON m.machine = u.machine
            ORDER BY u.machine""")

    def has_regressions(self) -> bool:
        """Whether `xrt regressions` has stored its results here (an empty table is not that: the
        schema creates it), or the ingest judged the newest commits (xrt.track.newest)."""
        if self.scalar("SELECT count(*) FROM (SELECT 1 FROM newest_judgements LIMIT 1)"):
            return True
        return bool(self.df("SELECT count(*) AS n FROM detection_runs")["n"].iloc[0])

    def regressions(self, statuses: list[str], kinds: list[str], machines: list[str] | None = None) -> pd.DataFrame:
        """Stored steps (``xrt regressions``), newest first slow commit first."""
        where = ["list_contains($statuses, g.status)", "list_contains($kinds, g.kind)"]
        args: dict[str, Any] = {"statuses": list(statuses), "kinds": list(kinds)}
        if machines:
            where.append("list_contains($machines, g.machine)")
            args["machines"] = list(machines)
        return self.df(f"""
            SELECT g.id, g.status, g.kind, coalesce(g.suspected, false) AS suspected, g.machine, g.benchmark,
                   g.param_key, g.ratio, g.before, g.after,
                   g.unit, g.p_value, g."commit", g.previous_commit, g.fixed_by, g.note, g.detected_at,
                   c.author_date AS commit_date, c.message, c.position
            FROM regressions g LEFT JOIN commits c ON c.hash = g."commit"
            WHERE {' AND '.join(where)}
            ORDER BY c.position DESC NULLS LAST, g.ratio DESC, g.id""", args)

    def regression(self, rid: str) -> dict | None:
        d = self.df("SELECT * FROM regressions WHERE starts_with(id, $id) LIMIT 2", {"id": rid})
        if len(d) != 1:
            return None
        row = d.iloc[0].to_dict()
        try:
            row["diag"] = json.loads(row["diag"]) if row.get("diag") else []
        except (TypeError, ValueError):
            row["diag"] = []
        return row

    def explanation(self, rec: dict) -> dict | None:
        """The newest stored ``xrt explain`` result of a regression: by its id, else of its case at
        its commit (an explanation made with --base/--head/--bench/--params); None without one."""
        d = self.df("""SELECT regression_id, machine, benchmark, param_key, base_commit, head_commit, created_at,
                              host, payload FROM explanations
                       WHERE regression_id = $id OR (benchmark = $b AND param_key = $p AND head_commit = $c)
                       ORDER BY (regression_id = $id) DESC NULLS LAST, created_at DESC LIMIT 1""",
                    {"id": rec["id"], "b": rec["benchmark"], "p": rec["param_key"], "c": rec["commit"]})
        if not len(d):
            return None
        row = d.iloc[0].to_dict()
        try:
            row["payload"] = json.loads(row["payload"]) if row.get("payload") else {}
        except (TypeError, ValueError):
            row["payload"] = {}
        return row

    def commits_between(self, previous: str, commit: str) -> pd.DataFrame:
        """The commits after ``previous`` up to and including ``commit``, in history order."""
        o = self.order()
        return self.df(f"""
            SELECT hash, author_date, author, message FROM commits
            WHERE {o} > (SELECT {o} FROM commits WHERE hash = $a) AND {o} <= (SELECT {o} FROM commits WHERE hash = $b)
            ORDER BY {o} LIMIT 50""", {"a": previous, "b": commit})

    # ------------------------------------------------------------------ every benchmark at a glance

    def grid(self, last: int = 20) -> pd.DataFrame:
        """Every series (machine x benchmark x parameters): its ok per-commit values among its machine's
        last ``last`` commits (oldest first, for a sparkline), the latest and the first of them, its
        unit, its open regressions and the ingest's judgement of its newest commit (``newest_judgements``);
        for a model's step, its latest throughput (``latest_per_s`` ``item_unit``/s: the tokens or images
        a step processes, ``results.items``, over its time)."""
        o = self.order()
        judged = ("LEFT JOIN newest_judgements j ON j.machine = meta.machine AND j.benchmark = meta.benchmark "
                  "AND j.param_key = meta.param_key")
        jcols = "j.verdict, j.reason"
        regs = (f"""LEFT JOIN (SELECT machine, benchmark, param_key, count(*) AS open_regressions,
                           max(ratio) AS worst, arg_max("commit", ratio) AS worst_commit,
                           bool_and(coalesce(g.suspected, false)) AS all_suspected
                           FROM regressions g WHERE status IN ({_OPEN_SQL}) AND kind = 'regression'
                           GROUP BY ALL) g ON g.machine = meta.machine AND g.benchmark = meta.benchmark
                       AND g.param_key = meta.param_key""")
        gcols = "g.open_regressions, g.worst, g.worst_commit, g.all_suspected"
        # Only each machine's last N commits are read (one pass over 1M values, grouped by commit,
        # took 2 s; this takes 0.1 s): a series not measured in them has no sparkline and says so.
        return self.df(f"""
            WITH mc AS (
                SELECT u.machine, u.commit_hash, c.{o} AS ord,
                       row_number() OVER (PARTITION BY u.machine ORDER BY c.{o} DESC) AS k
                FROM (SELECT DISTINCT machine, commit_hash FROM runs) u JOIN commits c ON c.hash = u.commit_hash
                WHERE c.{o} IS NOT NULL),
            pc AS (
                SELECT r.machine, r.benchmark, r.param_key, mc.ord, median(r.value) AS v,
                       median(r.items / r.value) AS tp
                FROM results r JOIN mc ON mc.machine = r.machine AND mc.commit_hash = r.commit_hash AND mc.k <= $n
                WHERE r.status = 'ok' AND r.value IS NOT NULL GROUP BY ALL),
            s AS (SELECT machine, benchmark, param_key, list(v ORDER BY ord) AS spark, arg_max(v, ord) AS latest,
                         arg_min(v, ord) AS earlier, count(*) AS commits, arg_max(tp, ord) AS latest_per_s
                  FROM pc GROUP BY ALL),
            meta AS (SELECT machine, benchmark, param_key, any_value(params) AS params, any_value(unit) AS unit,
                            any_value(item_unit) AS item_unit
                     FROM results GROUP BY ALL)
            SELECT meta.machine, meta.benchmark, meta.param_key, meta.params, meta.unit, s.spark, s.latest,
                   s.earlier, coalesce(s.commits, 0) AS commits, s.latest_per_s, meta.item_unit, {jcols}, {gcols}
            FROM meta LEFT JOIN s USING (machine, benchmark, param_key) {judged} {regs}
            ORDER BY meta.benchmark, meta.param_key, meta.machine""", {"n": int(last)})

    # ------------------------------------------------------------------ series

    def series(self, machine: str, benchmark: str, param_key: str, samples: bool = True) -> pd.DataFrame:
        """One series, one row per commit (environments pooled, as the detector does)."""
        o = self.order()
        smp = "flatten(list(r.samples) FILTER (r.samples IS NOT NULL))" if samples else "NULL"
        return self.df(f"""
            SELECT c.{o} AS ord, r.commit_hash, any_value(c.author_date) AS commit_date,
                   any_value(c.message) AS message, median(r.value) AS value, {smp} AS samples,
                   median(r.gbps) AS gbps, median(r.tflops) AS tflops, median(r.pct_sol) AS pct_sol,
                   median(r.items / r.value) AS per_s, any_value(r.unit) AS unit
            FROM results r JOIN commits c ON c.hash = r.commit_hash
            WHERE r.machine = $m AND r.benchmark = $b AND r.param_key = $p AND r.status = 'ok'
              AND c.{o} IS NOT NULL
            GROUP BY c.{o}, r.commit_hash ORDER BY ord""", {"m": machine, "b": benchmark, "p": param_key})

    def catalog(self) -> pd.DataFrame:
        """Every series: machine, benchmark, param_key, params, unit, its ok values, and what a step
        processes (``item_unit``: tokens, images) where it is a model's (one row each)."""
        return self.df("""SELECT machine, benchmark, param_key, any_value(params) AS params, any_value(unit) AS unit,
                                 count(value) AS n, any_value(item_unit) AS item_unit
                          FROM results GROUP BY ALL ORDER BY benchmark, param_key, machine""")

    def param_names(self) -> dict[str, list[str]]:
        d = self.df("SELECT name, param_names FROM benchmarks WHERE len(param_names) > 0")
        return {n: list(p) for n, p in zip(d["name"], d["param_names"])} if len(d) else {}

    def many_series(self, machines: list[str], benchmark: str, param_keys: list[str]) -> pd.DataFrame:
        o = self.order()
        return self.df(f"""
            SELECT r.machine, r.param_key, c.{o} AS ord, r.commit_hash, any_value(c.author_date) AS commit_date,
                   any_value(c.message) AS message, median(r.value) AS value, median(r.gbps) AS gbps,
                   median(r.tflops) AS tflops, median(r.pct_sol) AS pct_sol, any_value(r.unit) AS unit,
                   median(r.items / r.value) AS per_s, any_value(r.item_unit) AS item_unit,
                   median(r.q25) AS q25, median(r.q75) AS q75, median(r.ci_99_a) AS ci_a, median(r.ci_99_b) AS ci_b
            FROM results r JOIN commits c ON c.hash = r.commit_hash
            WHERE list_contains($m, r.machine) AND r.benchmark = $b AND list_contains($p, r.param_key)
              AND r.status = 'ok' AND c.{o} IS NOT NULL
            GROUP BY r.machine, r.param_key, c.{o}, r.commit_hash ORDER BY r.machine, r.param_key, ord""",
                       {"m": list(machines), "b": benchmark, "p": list(param_keys)})

    # ------------------------------------------------------------------ compare

    def commits_of(self, machine: str, limit: int = 2000) -> pd.DataFrame:
        return self.df("""
            SELECT c.hash, c.position, c.author_date, c.message FROM commits c
            WHERE c.hash IN (SELECT commit_hash FROM runs WHERE machine = $m)
            ORDER BY c.position DESC LIMIT $n""", {"m": machine, "n": limit})

    def compare(self, ma: str, ca: str, mb: str, cb: str) -> pd.DataFrame:
        return self.df("""
            WITH s AS (
                SELECT machine, commit_hash, benchmark, param_key, any_value(unit) AS unit,
                       median(value) FILTER (status = 'ok') AS value, bool_or(status = 'ok') AS ok,
                       CASE WHEN bool_or(status = 'ok' AND value IS NOT NULL) THEN 'ok'
                            WHEN bool_or(status = 'skipped') AND NOT bool_or(status = 'failed') THEN 'skipped'
                            ELSE 'failed' END AS st,
                       flatten(list(samples) FILTER (samples IS NOT NULL)) AS samples
                FROM results
                WHERE (machine = $ma AND commit_hash = $ca) OR (machine = $mb AND commit_hash = $cb)
                GROUP BY ALL)
            SELECT coalesce(a.benchmark, b.benchmark) AS benchmark, coalesce(a.param_key, b.param_key) AS param_key,
                   coalesce(a.unit, b.unit) AS unit, a.value AS a_value, b.value AS b_value,
                   a.st AS a_status, b.st AS b_status,
                   a.samples AS a_samples, b.samples AS b_samples
            FROM (SELECT * FROM s WHERE machine = $ma AND commit_hash = $ca) a
            FULL JOIN (SELECT * FROM s WHERE machine = $mb AND commit_hash = $cb) b
              ON a.benchmark = b.benchmark AND a.param_key = b.param_key
            ORDER BY benchmark, param_key""", {"ma": ma, "ca": ca, "mb": mb, "cb": cb})

    # ------------------------------------------------------------------ tuning

    def tuning_table(self) -> pd.DataFrame:
        """The tuner's evaluations: one row per config tried (rows from before version 8 of the
        schema have no status: timed where they have a time)."""
        return self.df("""SELECT op, device::VARCHAR AS device, shape::VARCHAR AS shape, dtype::VARCHAR AS dtype,
                                 provider::VARCHAR AS provider, config::VARCHAR AS config, median_s, gbps,
                                 coalesce(status, CASE WHEN median_s IS NOT NULL THEN 'timed' END)::VARCHAR AS status,
                                 error, eval, is_default, space_hash, strategy FROM tuning_results""")

    def tuned_from_results(self, benchmarks: list[str]) -> pd.DataFrame:
        """The latest value of every series of these benchmarks (configs tried by the suites)."""
        return self.df("""
            SELECT r.machine, r.benchmark, r.params, arg_max(r.value, c.position) AS value,
                   arg_max(r.gbps, c.position) AS gbps, any_value(r.unit) AS unit
            FROM results r JOIN commits c ON c.hash = r.commit_hash
            WHERE list_contains($b, r.benchmark) AND r.status = 'ok'
            GROUP BY r.machine, r.benchmark, r.param_key, r.params""", {"b": list(benchmarks)})


# ---------------------------------------------------------------------- helpers (pure)

def op_of(benchmark: str) -> str:
    """The op a benchmark measures: the class part of asv's name (``bench_ops.Square.time_op`` ->
    ``Square``), or the module part for a function benchmark (``mod.time_x`` -> ``mod``)."""
    parts = benchmark.split(".")
    return parts[-2] if len(parts) >= 2 else parts[0]


def unquote(p: str) -> str:
    return p[1:-1] if len(p) >= 2 and p[0] == p[-1] and p[0] in "'\"" else p


def parse_config(cfg: Any) -> dict[str, Any]:
    """A tuning config as a dict: JSON (``{"BLOCK": 128}``) or xrt's key (``BLOCK=128,num_warps=4``)."""
    if isinstance(cfg, dict):
        return cfg
    s = str(cfg or "").strip()
    if not s or s == "default":
        return {}
    if s.startswith("{"):
        try:
            d = json.loads(s)
            return d if isinstance(d, dict) else {}
        except ValueError:
            return {}
    out: dict[str, Any] = {}
    for item in s.split(","):
        k, _, v = item.partition("=")
        out[k.strip()] = int(v) if v.strip().lstrip("-").isdigit() else v.strip()
    return out


def time_scale(unit: str | None, values: pd.Series) -> tuple[float, str]:
    """A factor and label so times read as µs / ms / s."""
    if unit != "seconds" or values.dropna().empty:
        return 1.0, unit or "value"
    med = float(values.dropna().abs().median())
    for f, lab in ((1e9, "ns"), (1e6, "µs"), (1e3, "ms")):
        if med * f < 1000:
            return f, lab
    return 1.0, "s"


def fmt_rate(v: Any, item_unit: Any) -> str:
    """A model's throughput: ``v`` tokens (images, ...) per second, as "1,234,567 tokens/s"; "—"
    where there is none (a kernel's series, or no ok value)."""
    if v is None or isinstance(v, bool) or not isinstance(v, int | float) or v != v or not isinstance(item_unit, str):
        return "—"
    return f"{v:,.0f} {item_unit}/s" if abs(v) >= 100 else f"{v:.3g} {item_unit}/s"


def short(h: Any, n: int = 10) -> str:
    return str(h)[:n] if h is not None else ""


def first_line(s: Any, n: int = 80) -> str:
    line = str(s or "").strip().splitlines()[0] if str(s or "").strip() else ""
    return line if len(line) <= n else line[: n - 1] + "…"


def param_of(params: Any, names: list[str], name: str) -> str | None:
    """The value (unquoted) of the parameter ``name`` in one series' params, or None."""
    if name not in names or params is None:
        return None
    p = list(params)
    i = names.index(name)
    return unquote(str(p[i])) if i < len(p) else None
