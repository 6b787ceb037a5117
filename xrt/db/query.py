"""Read-only queries: ``xrt db query`` and the helper the dashboard and detector use."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any

from xrt.db import store

_READ_TYPES = ("SELECT", "EXPLAIN", "PRAGMA")


def check_one_read(con: Any, sql: str) -> None:
    """Refuse anything but one read-only statement, with a message that says why."""
    import duckdb

    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise ValueError(f"cannot parse the query: {str(e).splitlines()[0]}") from None
    if len(statements) != 1:
        raise ValueError(f"expected one SQL statement, got {len(statements)}")
    kind = str(statements[0].type).rsplit(".", 1)[-1].upper()
    if kind not in _READ_TYPES:
        raise ValueError(f"only read-only statements are allowed (SELECT, WITH ... SELECT), not {kind}")


def query(db_path: str | os.PathLike, sql: str, params: list | dict | None = None) -> tuple[list[str], list[tuple]]:
    """Run one read-only statement on a short-lived read-only connection: (column names, rows)."""
    import duckdb

    with store.read(db_path) as con:
        check_one_read(con, sql)
        con.execute("SET enable_external_access = false")
        try:
            cur = con.execute(sql, params) if params is not None else con.execute(sql)
            rows = cur.fetchall()
        except duckdb.Error as e:
            raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
        names = [d[0] for d in cur.description] if cur.description else []
    return names, rows


def _plain(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def format_rows(names: list[str], rows: list[tuple], fmt: str = "table") -> str:
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(names)
        for r in rows:
            w.writerow(["" if v is None else json.dumps(_plain(v)) if isinstance(v, (list, dict)) else v
                        for v in r])
        return buf.getvalue()
    if fmt == "json":
        return json.dumps([dict(zip(names, (_plain(v) for v in r))) for r in rows], indent=1) + "\n"
    if fmt != "table":
        raise ValueError(f"--format {fmt!r}: expected csv, json or table")
    cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
    widths = [max([len(n)] + [min(len(c[i]), 60) for c in cells]) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths)),
             "  ".join("-" * w for w in widths)]
    for c in cells:
        lines.append("  ".join((v if len(v) <= 60 else v[:57] + "...").ljust(w) for v, w in zip(c, widths)))
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"
