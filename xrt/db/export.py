"""``xrt db export``: the database as Parquet, so other engines can read the history."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from xrt.db import store

# Tables partitioned by machine (they grow with the history); the others are one file each.
# ``regressions`` holds hand-set statuses and notes (acknowledgements): exported like the rest.
PARTITIONED = ("results", "runs")
SINGLE = ("machines", "commits", "benchmarks", "ingest_files", "ingest_errors", "ingests", "schema_version",
          "regressions", "tuning_results")


def export_parquet(db_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, int]:
    """Write ``OUT/results/machine=M/*.parquet``, ``OUT/runs/machine=M/...`` and ``OUT/<table>.parquet``.

    The export is built in a temporary folder beside OUT and renamed into place, so a reader of
    OUT never sees half an export. Returns the row count per table.

    The rows go out through Arrow (``pyarrow.parquet`` / ``pyarrow.dataset``): no SQL statement
    contains OUT, so any folder name works (quotes, spaces, ``' (FORMAT csv); --``).
    """
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    counts: dict[str, int] = {}
    try:
        with store.read(db_path) as con:
            have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() "
                                              "WHERE database_name = current_database()").fetchall()}
            for t in PARTITIONED + SINGLE:
                if t not in have:
                    continue
                table = con.sql(f"SELECT * FROM {t}").to_arrow_table()  # t: one of ours, never user input
                counts[t] = table.num_rows
                if t not in PARTITIONED:
                    pq.write_table(table, tmp / f"{t}.parquet")
                    continue
                (tmp / t).mkdir()
                if table.num_rows:
                    ds.write_dataset(table, tmp / t, format="parquet", partitioning=["machine"],
                                     partitioning_flavor="hive", basename_template="data_{i}.parquet")
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return counts
