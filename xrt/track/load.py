"""Series out of the results database, in first-parent commit order, as numpy arrays.

One query (DuckDB aggregates several environments of one commit into one point, pooling their
samples), fetched as Arrow and cut into series without a Python loop over rows. Clock columns
(``results.sm_mhz``, ``results.cycles``) that a run did not record are NULL: treated as not recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from xrt.db.store import Connection
from xrt.track.detect import Series


def order_expr(con: Any) -> tuple[str, str]:
    """(SQL for a commit's place in history, extra WHERE): the first-parent index where the
    database has git history (commits off the chain are left out), else ingest's date order."""
    has_fp = con.execute("SELECT count(first_parent_index) FROM commits").fetchall()[0][0]
    if has_fp:
        return "c.first_parent_index", "c.first_parent_index IS NOT NULL"
    return "c.position", "c.position IS NOT NULL"


# a results row (alias r) the tracker learns from: measured, and a time or rate can only be a finite number > 0
USABLE = "r.status = 'ok' AND r.value > 0 AND isfinite(r.value)"

LOOKBACK = 80  # commits of a machine's history the newest-commit judgement and the gate's noise model read


def recent_commits_sql(con: Any, machine: bool, upto: bool, lookback: int = LOOKBACK) -> str:
    """SQL (a sub-query with columns ``machine``, ``lo``): per machine, the history position of the
    ``lookback``-th newest commit measured there (at or before position ``?`` with ``upto``; of one
    machine ``?`` with ``machine``; parameters in that order). Queries that need only recent history
    bound the results they read by it: at 10M values, reading a series' whole history to judge its
    newest commit took most of a minute."""
    order, where_order = order_expr(con)
    cond = [where_order] + ([f"{order} <= ?"] if upto else []) + (["ru.machine = ?"] if machine else [])
    return (f"(SELECT machine, min(ord) AS lo FROM ("
            f"  SELECT ru.machine, {order} AS ord,"
            f"         row_number() OVER (PARTITION BY ru.machine ORDER BY {order} DESC) AS k"
            f"  FROM (SELECT DISTINCT machine, commit_hash FROM runs) ru JOIN commits c ON c.hash = ru.commit_hash"
            f"  WHERE {' AND '.join(cond)}) WHERE k <= {int(lookback)} GROUP BY machine)")


def _flatten(lists: Any, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A pyarrow list array -> (offsets, flat values, has_data); an empty/null list becomes the
    row's value as its one sample."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    lens = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    src = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(float)
    has = lens > 0
    new_len = np.where(has, lens, 1)
    out_off = np.concatenate([[0], np.cumsum(new_len)])
    src_off = np.concatenate([[0], np.cumsum(lens)])
    out = np.empty(int(out_off[-1]))
    if len(src):
        out[np.arange(len(src)) + np.repeat(out_off[:-1] - src_off[:-1], lens)] = src
    out[out_off[:-1][~has]] = values[~has]
    return out_off, out, has


BATCH_VALUES = 250_000  # results rows a query of iter_series fetches at most (bounded memory)
DUCKDB_MEMORY = "1GB"  # DuckDB's own memory while iter_series reads (its default: 80 % of RAM)


def check_regex(pattern: str, what: str = "--benchmark") -> None:
    """Raise one ValueError naming ``pattern`` when DuckDB's regular expressions (RE2, not Python's
    ``re``) cannot read it; the series queries match benchmark names with it."""
    import duckdb

    try:
        with duckdb.connect() as con:
            con.execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()
    except duckdb.Error as e:
        why = str(e).split("Error: ", 1)[-1].strip().splitlines()[0]
        raise ValueError(f"{what} {pattern!r}: not a regular expression ({why})") from None


def iter_series(con: Connection, machine: str | None = None, benchmark: str | None = None,
                param_key: str | None = None, batch_values: int | None = None) -> Iterator[Series]:
    """Every series (optionally of one machine / benchmark regex / parameter combination), a batch
    at a time: the (machine, benchmark) pairs are packed into batches
    of at most ``batch_values`` results rows (a pair larger than that is a batch of its own), and
    one query a batch builds its series. Memory holds one batch, not the history (at 10M values the
    whole history took 11.6 GB). ``batch_values`` defaults to :data:`BATCH_VALUES`."""
    batch_values = batch_values or BATCH_VALUES
    if benchmark:
        check_regex(benchmark)
    con.execute(f"SET memory_limit = '{DUCKDB_MEMORY}'")  # its cache of the file's pages included
    order, where_order = order_expr(con)
    where = [USABLE]
    args: list[Any] = []
    if machine:
        where.append("r.machine = ?")
        args.append(machine)
    if benchmark:
        where.append("regexp_matches(r.benchmark, ?)")
        args.append(benchmark)
    if param_key is not None:
        where.append("r.param_key = ?")
        args.append(param_key)
    pairs = con.execute(f"SELECT r.machine, r.benchmark, count(*) FROM results r WHERE {' AND '.join(where)} "
                        "GROUP BY ALL ORDER BY 1, 2", args).fetchall()
    sql = f"""
        SELECT r.machine, r.benchmark, r.param_key, any_value(r.params) AS params, r.commit_hash,
               {order} AS ord, median(r.value) AS value,
               flatten(list(r.samples) FILTER (r.samples IS NOT NULL)) AS samples,
               flatten(list(r.cycles) FILTER (r.cycles IS NOT NULL)) AS cycles,
               median(coalesce(r.sm_mhz, ru.sm_clock_mhz)) AS sm, coalesce(any_value(r.unit), any_value(b.unit)) AS unit
        FROM results r JOIN commits c ON c.hash = r.commit_hash
             LEFT JOIN runs ru ON ru.run_id = r.run_id LEFT JOIN benchmarks b ON b.name = r.benchmark
        WHERE {' AND '.join(where + [where_order])}
          AND (r.machine, r.benchmark) IN (SELECT * FROM (VALUES {{pairs}}) v(m, b))
        GROUP BY r.machine, r.benchmark, r.param_key, r.commit_hash, {order}
        ORDER BY r.machine, r.benchmark, r.param_key, ord, r.commit_hash"""
    for batch in _pack(pairs, batch_values):
        values_sql = ", ".join("(?, ?)" for _ in batch)
        flat_args = args + [x for pair in batch for x in pair]
        tbl = con.sql(sql.replace("{pairs}", values_sql), params=flat_args).to_arrow_table()
        yield from _cut(tbl)


def _pack(pairs: list[tuple[str, str, int]], limit: int) -> Iterator[list[tuple[str, str]]]:
    """(machine, benchmark) pairs in order, grouped into batches of at most ``limit`` rows."""
    batch: list[tuple[str, str]] = []
    rows = 0
    for m, b, n in pairs:
        if batch and rows + n > limit:
            yield batch
            batch, rows = [], 0
        batch.append((m, b))
        rows += n
    if batch:
        yield batch


def _cut(tbl: Any) -> list[Series]:
    """One query's rows (ordered by machine, benchmark, parameters, commit order) cut into series."""
    if tbl.num_rows == 0:
        return []
    col = {n: tbl.column(n) for n in tbl.column_names}
    mach = col["machine"].to_numpy()
    bench = col["benchmark"].to_numpy()
    pkey = col["param_key"].to_numpy()
    values = col["value"].to_numpy().astype(float)
    commits = col["commit_hash"].to_pylist()
    params = col["params"].to_pylist()
    units = col["unit"].to_pylist()
    off, flat, _ = _flatten(col["samples"], values)
    smv = col["sm"].to_numpy(zero_copy_only=False).astype(float)
    # cycles: recorded per sample, else time × the run's SM clock, else none
    c_off, c_flat, c_has = _flatten(col["cycles"], values * np.where(np.isfinite(smv), smv, np.nan))
    derived = ~c_has & np.isfinite(smv)
    if derived.any():
        scale = np.repeat(np.where(derived, smv, 1.0), np.diff(off))
        c_off_alt, c_flat_alt = off, flat * scale
    n = len(values)
    brk = np.flatnonzero((mach[1:] != mach[:-1]) | (bench[1:] != bench[:-1]) | (pkey[1:] != pkey[:-1])) + 1
    starts = np.concatenate([[0], brk])
    ends = np.concatenate([brk, [n]])
    out: list[Series] = []
    for a, b in zip(starts, ends):
        s = Series(str(mach[a]), str(bench[a]), str(pkey[a]), list(params[a] or []), units[a], commits[a:b],
                   values[a:b], off[a:b + 1] - off[a], flat[off[a]:off[b]])
        recorded, from_clock = c_has[a:b], derived[a:b]
        if recorded.any() or from_clock.any():
            # per commit: recorded cycles where present, else derived from the clock; NaN where neither
            pieces, lens = [], []
            for i in range(a, b):
                if c_has[i]:
                    p = c_flat[c_off[i]:c_off[i + 1]]
                elif derived[i]:
                    p = c_flat_alt[c_off_alt[i]:c_off_alt[i + 1]]
                else:
                    p = np.empty(0)
                pieces.append(p)
                lens.append(len(p))
            s.cyc_off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            s.cyc_flat = np.concatenate(pieces) if pieces else np.empty(0)
        out.append(s)
    return out
