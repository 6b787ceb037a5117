"""``xrt db perf``: the figures in docs/database.md, measured on this machine.

(a) Ingest speed on an asv corpus: ``json.load`` of every result file vs a full ingest into a new
    database vs a re-ingest with nothing new, in process and (when the caller names the ingest
    command, ``ingest_cmd``: ``xrt db perf`` gives ``xrt db ingest``) as a command. Timings are
    interleaved and the best of ``repeat`` is kept, so another process's load spoils one repetition,
    not the figure.
(b) The queries the dashboard and the regression detector run, on a synthetic database of
    ``values`` values, each on a fresh short-lived read-only connection (as the dashboard does).

Timings are benchmarks, not tests: the test suite only checks this runs, on a tiny size.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from xrt.db import result_names, store


def _corpus_dir(corpus: str | None, work: Path) -> Path | None:
    """The corpus as a results folder (a ``.tar.gz`` is unpacked into ``work``); None when none was named."""
    if corpus is None:
        return None
    src = Path(corpus)
    if not src.exists():
        raise ValueError(f"--corpus {corpus}: no such file or directory (an asv results folder or a .tar.gz of one)")
    if src.is_dir():
        return src
    out = work / "corpus"
    if not out.exists():
        with tarfile.open(src) as tf:
            tf.extractall(out, filter="data")
    return out


def _result_files(root: Path) -> list[Path]:
    from xrt.db.ingest import find_root

    root = find_root(root)
    return [f for d in sorted(root.iterdir()) if d.is_dir() for f in sorted(d.iterdir())
            if f.is_file() and result_names.is_result_file(f.name)]


NO_INGEST_CMD = "perf: no ingest command given: the command timings (ingest_cli, reingest_cli) skipped"


def time_corpus(corpus: Path, work: Path, repeat: int = 3, echo: Callable[[str], None] = print,
                ingest_cmd: Sequence[str] | None = None) -> dict[str, Any]:
    """The corpus's timings. ``ingest_cmd``: the command that ingests (this adds ``CORPUS --db DB``), run
    as its own process, as a user would; the caller names it (the database layer does not drive the CLI).
    None: those timings are skipped and ``cli_skipped`` says so."""
    from xrt.db.ingest import ingest

    files = _result_files(corpus)
    t: dict[str, list[float]] = {"json_load_keep": [], "json_load": [], "ingest": [], "reingest": []}
    if ingest_cmd is None:
        echo(NO_INGEST_CMD)
    else:
        t.update(ingest_cli=[], reingest_cli=[])
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    report = None
    for r in range(repeat):
        echo(f"perf: corpus round {r + 1}/{repeat}")
        t0 = time.perf_counter()
        kept = []
        for f in files:
            with open(f, "rb") as fh:
                kept.append(json.load(fh))
        t["json_load_keep"].append(time.perf_counter() - t0)
        del kept
        t0 = time.perf_counter()
        for f in files:
            with open(f, "rb") as fh:
                json.load(fh)
        t["json_load"].append(time.perf_counter() - t0)
        db = work / f"corpus-{r}.duckdb"
        t0 = time.perf_counter()
        report = ingest(corpus, db, echo=lambda s: None)
        t["ingest"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ingest(corpus, db, echo=lambda s: None)
        t["reingest"].append(time.perf_counter() - t0)
        db.unlink()
        if ingest_cmd is None:
            continue
        for key, fresh in (("ingest_cli", True), ("reingest_cli", False)):
            if fresh and db.exists():
                db.unlink()
            t0 = time.perf_counter()
            subprocess.run([*ingest_cmd, str(corpus), "--db", str(db)], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t[key].append(time.perf_counter() - t0)
        db.unlink()
    best = {k: min(v) for k, v in t.items()}
    out = {
        "files": len(files), "bytes": sum(f.stat().st_size for f in files),
        "values": report.values_ok if report else None, "failures": report.failures if report else None,
        "best_s": best, "all_s": t,
        "ratio_ingest_vs_json_load": best["ingest"] / best["json_load"],
        "ratio_ingest_vs_json_load_keep": best["ingest"] / best["json_load_keep"],
    }
    if ingest_cmd is None:
        out["cli_skipped"] = NO_INGEST_CMD
    else:
        out["ratio_cli_vs_json_load"] = best["ingest_cli"] / best["json_load"]
    return out


# ---------------------------------------------------------------- synthetic database

def build_synthetic(db: Path, values: int, machines: int = 4, benchmarks: int = 50, params: int = 5) -> dict:
    """``values`` results: machines x commits x benchmarks x parameter combinations, 10 samples each."""
    per_commit = machines * benchmarks * params
    commits = max(2, values // per_commit)

    def fill(con):
        con.execute("""INSERT INTO commits SELECT md5(i::VARCHAR) || substr(md5((i + 7)::VARCHAR), 1, 8), i, i,
            TIMESTAMP '2024-01-01' + to_hours(i), 'Synthetic <s@example.com>', 'commit ' || i,
            [md5((i - 1)::VARCHAR) || substr(md5((i + 6)::VARCHAR), 1, 8)], 'git' FROM range(?) t(i)""", [commits])
        con.execute("""INSERT INTO runs (run_id, file, content_hash, machine, commit_hash, env_name, commit_date,
                asv_schema, n_values, ingested_at)
            SELECT m * ? + c.position + 1, 'synthetic-' || m || '/' || c.hash[:8] || '.json', c.hash,
                'synthetic-' || m, c.hash, 'virtualenv-py3.11', c.author_date, 2, ?, now()::TIMESTAMP
            FROM range(?) t(m), commits c""", [commits, benchmarks * params, machines])
        con.execute("""INSERT INTO results (run_id, machine, commit_hash, env_name, benchmark, param_index, params,
                param_key, value, status, samples, ci_99_a, ci_99_b, q25, q75, number, repeat, unit, version,
                started_at, duration)
            SELECT r.run_id, r.machine, r.commit_hash, r.env_name, 'ops.Op' || b || '.time_op', p,
                ['''' || (1024 << p) || ''''], '''' || (1024 << p) || '''', v, CASE WHEN v IS NULL THEN 'failed'
                ELSE 'ok' END, CASE WHEN v IS NOT NULL THEN list_transform(range(10), lambda k: v * (0.98 + random()
                * 0.04)) END, v * 0.99, v * 1.01, v * 0.995, v * 1.005, 100, 10, 'seconds', 'v1',
                r.commit_date, 1.0
            FROM runs r, range(?) tb(b), range(?) tp(p),
            LATERAL (SELECT CASE WHEN hash(r.run_id, b, p) % 97 = 0 THEN NULL
                ELSE 1e-5 * (b + 1) * (p + 1) * (1 + 0.02 * random()) END AS v)""", [benchmarks, params])

    if db.exists():
        db.unlink()
    store.write(db, fill, fresh=True)
    return {"values": values, "machines": machines, "benchmarks": benchmarks, "params": params, "commits": commits}


QUERIES: dict[str, str] = {
    "latest run per machine": """
        SELECT r.machine, arg_max(r.commit_hash, c.position) AS latest_commit, max(c.position) AS position,
               count(*) AS runs
        FROM runs r JOIN commits c ON c.hash = r.commit_hash GROUP BY r.machine ORDER BY r.machine""",
    "series of a machine": """
        SELECT benchmark, param_key, any_value(unit) AS unit, count(*) AS n, count(value) AS n_values
        FROM results WHERE machine = $machine GROUP BY benchmark, param_key ORDER BY benchmark, param_key""",
    "one series in commit order (values + samples)": """
        SELECT c.position, r.commit_hash, r.value, r.status, r.samples, r.ci_99_a, r.ci_99_b
        FROM results r JOIN commits c ON c.hash = r.commit_hash
        WHERE r.machine = $machine AND r.benchmark = $benchmark AND r.param_key = $param_key
        ORDER BY c.position""",
    "compare two commits": """
        SELECT a.benchmark, a.param_key, a.value AS before, b.value AS after, b.value / a.value AS ratio
        FROM results a JOIN results b
          ON b.machine = a.machine AND b.benchmark = a.benchmark AND b.param_key = a.param_key
        WHERE a.machine = $machine AND a.commit_hash = $base AND b.commit_hash = $head
        ORDER BY ratio DESC NULLS LAST""",
    "detector: last 20 commits of every series of a machine": """
        WITH w AS (
          SELECT r.benchmark, r.param_key, c.position, r.value FROM results r
          JOIN commits c ON c.hash = r.commit_hash
          WHERE r.machine = $machine AND c.position > (SELECT max(position) FROM commits) - 21)
        SELECT benchmark, param_key, arg_max(value, position) AS latest,
               median(value) FILTER (position < (SELECT max(position) FROM w)) AS baseline
        FROM w GROUP BY benchmark, param_key""",
}


def time_queries(db: Path, repeat: int = 7) -> list[dict[str, Any]]:
    from xrt.db.stats import stats

    with store.read(db) as con:
        machine = con.execute("SELECT min(machine) FROM results").fetchone()[0]
        bench, pkey = con.execute("SELECT benchmark, param_key FROM results WHERE machine = ? "
                                  "ORDER BY benchmark DESC, param_key LIMIT 1", [machine]).fetchone()
        base, head = [r[0] for r in con.execute(
            "SELECT hash FROM commits ORDER BY position DESC LIMIT 2").fetchall()][::-1]
    args = {"machine": machine, "benchmark": bench, "param_key": pkey, "base": base, "head": head}
    out = []
    for name, sql in QUERIES.items():
        used = {k: v for k, v in args.items() if f"${k}" in sql}
        times, rows = [], 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            with store.read(db) as con:
                rows = len(con.execute(sql, used).fetchall())
            times.append(time.perf_counter() - t0)
        out.append({"query": name, "rows": rows, "median_ms": 1e3 * statistics.median(times),
                    "max_ms": 1e3 * max(times)})
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        stats(db)
        times.append(time.perf_counter() - t0)
    out.append({"query": "xrt db stats", "rows": 1, "median_ms": 1e3 * statistics.median(times),
                "max_ms": 1e3 * max(times)})
    return out


def run(corpus: str | None = None, values: int = 1_000_000, repeat: int = 3, workdir: str | None = None,
        echo: Callable[[str], None] = print, ingest_cmd: Sequence[str] | None = None) -> dict[str, Any]:
    """The figures; ``ingest_cmd``: see :func:`time_corpus` (None: no command timings)."""
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="xrt-db-perf-")
        work = Path(tmp)
    else:
        work = Path(workdir)
        work.mkdir(parents=True, exist_ok=True)
    try:
        figures: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                                   f"Python {platform.python_version()}, duckdb {_duckdb_version()}"}
        src = _corpus_dir(corpus, work)
        if src is None:
            echo("perf: no --corpus given: ingest timings skipped")
        else:
            figures["corpus"] = time_corpus(src, work, repeat, echo, ingest_cmd)
        echo(f"perf: building a synthetic database of {values} values")
        db = work / "synthetic.duckdb"
        t0 = time.perf_counter()
        figures["synthetic"] = build_synthetic(db, values)
        figures["synthetic"]["build_s"] = time.perf_counter() - t0
        figures["synthetic"]["file_bytes"] = db.stat().st_size
        figures["queries"] = time_queries(db)
        return figures
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _duckdb_version() -> str:
    import duckdb

    return duckdb.__version__


def markdown(f: dict[str, Any]) -> str:
    lines = [f"Measured on: {f['machine']}", ""]
    c = f.get("corpus")
    if c:
        b = c["best_s"]
        cli = "cli_skipped" not in c
        lines += [
            f"Corpus: {c['files']} result files, {c['bytes'] / 2**20:.0f} MiB, {c['values']} values, "
            f"{c['failures']} failures (best of {len(c['all_s']['ingest'])})", "",
            "| step | seconds | × json.load |", "|---|---:|---:|",
            f"| `json.load` of every result file, each object dropped (the reference) | {b['json_load']:.2f} | "
            "1.00 |",
            f"| (for scale: the same, all objects kept) | {b['json_load_keep']:.2f} | "
            f"{b['json_load_keep'] / b['json_load']:.2f} |",
            f"| full ingest into a new database (in process) | {b['ingest']:.2f} | "
            f"{c['ratio_ingest_vs_json_load']:.2f} |"]
        if cli:
            lines.append(f"| full ingest, `xrt db ingest` command (incl. start-up) | {b['ingest_cli']:.2f} | "
                         f"{c['ratio_cli_vs_json_load']:.2f} |")
        lines.append(f"| re-ingest, nothing new (in process) | {b['reingest']:.2f} | |")
        if cli:
            lines.append(f"| re-ingest, nothing new, `xrt db ingest` command | {b['reingest_cli']:.2f} | |")
        lines += ["", f"Bound: full ingest ≤ 3 × json.load (dropped): in process {c['ratio_ingest_vs_json_load']:.2f}×"
                  + (f", command {c['ratio_cli_vs_json_load']:.2f}×" if cli else f" ({c['cli_skipped']})")
                  + "; re-ingest ≤ 5 s.", ""]
    s = f["synthetic"]
    lines += [f"Synthetic database: {s['values']} values ({s['machines']} machines × {s['commits']} commits × "
              f"{s['benchmarks']} benchmarks × {s['params']} parameter combinations, 10 samples each), "
              f"{s['file_bytes'] / 2**20:.0f} MiB, built in {s['build_s']:.1f} s. Each query opens its own "
              "read-only connection (included in the time).", "",
              "| query | rows | median ms | max ms |", "|---|---:|---:|---:|"]
    for q in f["queries"]:
        lines.append(f"| {q['query']} | {q['rows']} | {q['median_ms']:.1f} | {q['max_ms']:.1f} |")
    return "\n".join(lines) + "\n"
