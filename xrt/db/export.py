"""``xrt db export``: the database as Parquet, so other engines can read the history."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from xrt.db import store

# Tables partitioned by machine (they grow with the history); the others are one file each.
PARTITIONED = ("results", "runs")
SINGLE = ("machines", "commits", "benchmarks", "ingest_files", "ingest_errors", "ingests", "schema_version")


def export_parquet(db_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, int]:
    """Write ``OUT/results/machine=M/*.parquet``, ``OUT/runs/machine=M/...`` and ``OUT/<table>.parquet``.

    The export is built in a temporary folder beside OUT and renamed into place, so a reader of
    OUT never sees half an export. Returns the row count per table.
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    counts: dict[str, int] = {}
    try:
        with store.read(db_path) as con:
            have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
            for t in PARTITIONED + SINGLE:
                if t not in have:
                    continue
                counts[t] = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                target = str(tmp / t) if t in PARTITIONED else str(tmp / f"{t}.parquet")
                opts = "FORMAT parquet, PARTITION_BY (machine)" if t in PARTITIONED else "FORMAT parquet"
                if t in PARTITIONED and counts[t] == 0:
                    (tmp / t).mkdir()
                    continue
                con.execute(f"COPY (SELECT * FROM {t}) TO '{target}' ({opts})")
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return counts
