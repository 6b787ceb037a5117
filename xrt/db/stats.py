"""``xrt db stats``: what the database holds, in one screen."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from xrt.db import schema, store


def stats(db_path: str | os.PathLike) -> dict[str, Any]:
    with store.read(db_path) as con:
        version = schema.current_version(con)
        out: dict[str, Any] = {"schema_version": version}
        if version == 0:
            return out
        one = lambda q: con.execute(q).fetchone()[0]  # noqa: E731
        out["machines"] = one("SELECT count(DISTINCT machine) FROM runs")
        out["commits"] = one("SELECT count(*) FROM commits")
        out["benchmarks"] = one("SELECT count(DISTINCT benchmark) FROM results")
        out["runs"] = one("SELECT count(*) FROM runs")
        out["values"] = one("SELECT count(value) FROM results")
        out["failures"] = one("SELECT count(*) FROM results WHERE status = 'failed'")
        out["skips"] = one("SELECT count(*) FROM results WHERE status = 'skipped'")
        out["ingest_errors"] = one("SELECT count(*) FROM ingest_errors")
        out["last_ingest"] = one("SELECT max(started_at) FROM ingests")
        out["commit_order"] = one("SELECT CASE WHEN count(*) FILTER (source = 'git') > 0 THEN 'git first-parent' "
                                  "WHEN count(*) > 0 THEN 'results dates' END FROM commits")
    out["file_bytes"] = Path(db_path).stat().st_size
    return out


def format_stats(s: dict[str, Any]) -> str:
    if s.get("schema_version") == 0:
        return "empty database (no schema)\n"
    size = s["file_bytes"]
    human = f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"
    rows = [("machines", s["machines"]), ("commits", f"{s['commits']} (order: {s['commit_order']})"),
            ("benchmarks", s["benchmarks"]), ("runs (result files)", s["runs"]), ("values", s["values"]),
            ("failures", s["failures"]), ("skips", s["skips"]), ("ingest errors", s["ingest_errors"]),
            ("last ingest", s["last_ingest"]), ("schema version", s["schema_version"]),
            ("file size", f"{human} ({size} bytes)")]
    return "".join(f"{k:<20} {v}\n" for k, v in rows)
