"""``xrt db export``: the database as Parquet, so other engines can read the history."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from xrt.db import store

# Tables partitioned by machine (they grow with the history); the others are one file each.
# ``regressions`` holds hand-set statuses and notes (acknowledgements): exported like the rest.
PARTITIONED = ("results", "runs")
SINGLE = ("machines", "commits", "benchmarks", "ingest_files", "ingest_errors", "ingests", "schema_version",
          "regressions", "tuning_results")


# Written last into every export (its schema and row counts). The export replaces its folder whole,
# so a folder it may replace holds nothing but what an export writes (:func:`ours`).
MARKER = "xrt-export.json"
MARKER_SCHEMA = "xrt-parquet-export/1"


def ours(folder: Path, name: str) -> bool:
    """Whether ``folder/name`` is something an export writes: the marker, ``<table>.parquet``, or
    ``results/`` / ``runs/`` holding only ``machine=M/`` folders of ``.parquet`` files."""
    p = folder / name
    if p.is_symlink():
        return False
    if name == MARKER or (name.endswith(".parquet") and name[:-8] in SINGLE):
        return p.is_file()
    if name not in PARTITIONED or not p.is_dir():
        return False
    for part in p.iterdir():
        if not (part.name.startswith("machine=") and part.is_dir() and not part.is_symlink()):
            return False
        if not all(f.suffix == ".parquet" and f.is_file() and not f.is_symlink() for f in part.iterdir()):
            return False
    return True


def check_target(db_path: str | os.PathLike, out: Path) -> None:
    """Refuse (ValueError, one line) a target the export would damage: one that holds the database,
    a file, or a folder with anything an export does not write (the export replaces the folder whole)."""
    db = Path(os.path.realpath(db_path))
    where = Path(os.path.realpath(out))
    if where == db or where in db.parents:
        raise ValueError(f"--parquet {out}: holds the database {db_path}; export into another folder")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ValueError(f"--parquet {out}: exists and is not a folder; export into a new or empty folder")
    if not out.is_dir():
        return
    try:
        other = [n for n in sorted(os.listdir(out)) if not ours(out, n)]
    except OSError as e:
        raise ValueError(f"--parquet {out}: cannot list the folder: {e.strerror or e}") from None
    if other:
        more = f" and {len(other) - 3} more" if len(other) > 3 else ""
        raise ValueError(f"--parquet {out}: not empty and not an earlier export ({', '.join(other[:3])}{more}); "
                         "the export replaces its folder whole: give a new or empty folder")


def export_parquet(db_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, int]:
    """Write ``OUT/results/machine=M/*.parquet``, ``OUT/runs/machine=M/...`` and ``OUT/<table>.parquet``.

    The export is built in a temporary folder beside OUT and renamed into place, so a reader of
    OUT never sees half an export. OUT must be new, empty or an earlier export (:func:`check_target`):
    an export never deletes what it did not write. Returns the row count per table.

    The rows go out through Arrow (``pyarrow.parquet`` / ``pyarrow.dataset``): no SQL statement
    contains OUT, so any folder name works (quotes, spaces, ``' (FORMAT csv); --``).
    """
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    out = Path(out_dir)
    store.check_path(db_path)  # a bad --db is named first
    check_target(db_path, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    counts: dict[str, int] = {}
    try:
        with store.read(db_path) as con:
            for t in PARTITIONED + SINGLE:  # every one is there: readers see the latest schema
                table = con.sql(f"SELECT * FROM {t}").to_arrow_table()  # t: one of ours, never user input
                counts[t] = table.num_rows
                if t not in PARTITIONED:
                    pq.write_table(table, tmp / f"{t}.parquet")
                    continue
                (tmp / t).mkdir()
                if table.num_rows:
                    ds.write_dataset(table, tmp / t, format="parquet", partitioning=["machine"],
                                     partitioning_flavor="hive", basename_template="data_{i}.parquet")
        (tmp / MARKER).write_text(json.dumps({"schema": MARKER_SCHEMA, "tables": counts}) + "\n")
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return counts
