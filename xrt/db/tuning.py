"""The tuner's journals into ``tuning_results``: one row per evaluation, incrementally.

``xrt tune`` appends every evaluation to ``<tuned>/journal/<machine>/<space>-<dtype>-<shape>.jsonl``
(``results/tuned`` by default). ``xrt db ingest`` loads them (:func:`changes`): a journal whose content
hash the database holds (``ingest_files``, kind ``tuning-journal``) is skipped; a changed one has its
rows replaced; a file that is not a journal is named in ``ingest_errors`` and skipped. Torn lines
(a tuner killed mid-write) are skipped and counted, as the tuner does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xrt.db import schema, store

KIND = "tuning-journal"
_NAME = re.compile(r"(?P<space>[A-Za-z0-9_]+\.[A-Za-z0-9_]+)-(?P<dtype>[a-z0-9]+)-(?P<shape>\d+(?:x\d+)*)\.jsonl")
COLUMNS = ("op", "device", "shape", "dtype", "provider", "config", "median_s", "gbps", "machine", "space",
           "space_hash", "config_key", "is_default", "status", "error", "max_rel_err", "rel_noise", "n", "ran_on",
           "strategy", "seed", "eval", "evaluated_at", "file")


def find_tuned(results_dir: str | Path) -> Path | None:
    """The tuner's folder next to an asv results folder: ``X/tuned`` or ``X/../tuned`` holding ``journal/``."""
    p = Path(results_dir)
    for cand in (p / "tuned", p.parent / "tuned"):
        if (cand / "journal").is_dir():
            return cand
    return None


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None  # NaN: no value


def parse(rel: str, data: bytes) -> tuple[list[tuple], str | None]:
    """(rows, a problem to report or None) of one journal's bytes; ``rel`` is ``journal/<machine>/<name>``."""
    parts = rel.split("/")
    m = _NAME.fullmatch(parts[-1])
    if m is None or len(parts) < 3:
        return [], "not a tuner journal name (<space>-<dtype>-<shape>.jsonl under journal/<machine>/)"
    machine = parts[-2]
    space, dtype, shape = m["space"], m["dtype"], m["shape"]
    op, provider = space.split(".", 1)
    rows, torn, n = [], 0, 0
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            torn += 1
            continue
        if not isinstance(rec, dict) or "key" not in rec or "status" not in rec:
            torn += 1
            continue
        cfg = rec.get("config") if isinstance(rec.get("config"), dict) else None
        at = _num(rec.get("at"))
        rows.append((
            rec.get("op") or op, rec.get("device") or machine, shape, dtype, rec.get("provider") or provider,
            json.dumps(cfg, sort_keys=True) if cfg is not None else None,
            _num(rec.get("median_s")) if rec["status"] == "timed" else None, None, machine, space,
            rec.get("space_hash"), str(rec["key"]), rec.get("default"), str(rec["status"]),
            None if rec.get("error") is None else str(rec["error"])[:2000], _num(rec.get("max_rel_err")),
            _num(rec.get("rel_noise")), None if rec.get("n") is None else int(rec["n"]), rec.get("ran_on"),
            rec.get("strategy"), rec.get("seed"), rec.get("eval", n),
            datetime.fromtimestamp(at, tz=timezone.utc).replace(tzinfo=None) if at is not None else None, rel))
        n += 1
    # older journals name no default: the record whose config is the space's default
    if rows and all(r[12] is None for r in rows):
        from xrt.kernels import spaces

        try:
            d = json.dumps(spaces.default(space), sort_keys=True)
        except KeyError:  # a space this xrt does not know
            d = None
        rows = [r[:12] + (r[5] == d,) + r[13:] for r in rows]
    problem = f"{torn} torn or unreadable line(s) skipped (rows kept)" if torn else None
    if not rows and torn:
        problem = f"no readable record ({torn} torn or unreadable line(s))"
    return rows, problem


@dataclass
class Journals:
    """What loading the journals changes: the counts :func:`sync` reports, and ``write`` (None when
    nothing changed) for the caller's write transaction."""

    loaded: int
    unchanged: int
    rows: int
    write: Callable[[Any], None] | None


def changes(tuned: Path, con: Any | None, echo: Callable[[str], None]) -> Journals:
    """The changed journals under ``tuned/journal``, against the database open on ``con`` (None: no
    database yet), parsed; their rows are written by the returned ``write``."""
    root = tuned / "journal"
    if not root.is_dir():
        raise FileNotFoundError(f"--tuned {tuned}: no journal/ folder in it (xrt tune writes <out>/journal/)")
    found: dict[str, bytes] = {}
    for p in sorted(root.rglob("*.jsonl")):
        if p.is_file():
            found["journal/" + p.relative_to(root).as_posix()] = p.read_bytes()
    hashes = {rel: hashlib.sha256(b).hexdigest() for rel, b in found.items()}
    prev: dict[str, str] = {}
    if con is not None:
        prev = dict(con.execute("SELECT file, content_hash FROM ingest_files WHERE kind = ?", [KIND]).fetchall())
    todo = [rel for rel in found if prev.get(rel) != hashes[rel]]
    if not todo:
        return Journals(0, len(found), 0, None)
    rows: list[tuple] = []
    errors: list[tuple[str, str]] = []
    ok: list[str] = []
    for rel in todo:
        r, problem = parse(rel, found[rel])
        if problem:
            errors.append((rel, problem))
            echo(f"xrt db ingest: {tuned}/{rel}: {problem}")
        if r:
            ok.append(rel)
            rows += r

    def write(con) -> None:
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        con.execute("DELETE FROM tuning_results WHERE file IN (SELECT unnest(?))", [todo])
        con.execute("DELETE FROM ingest_errors WHERE kind = ? AND file IN (SELECT unnest(?))", [KIND, todo])
        con.execute("DELETE FROM ingest_files WHERE file IN (SELECT unnest(?))", [todo])
        if rows:  # through Arrow: DuckDB's executemany is slow
            import pyarrow as pa

            con.register("xrt_tuning", pa.table({c: list(v) for c, v in zip(COLUMNS, zip(*rows))}))
            try:
                con.execute(f"INSERT INTO tuning_results ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} "
                            "FROM xrt_tuning")
            finally:
                con.unregister("xrt_tuning")
        con.executemany("INSERT INTO ingest_files VALUES (?, ?, ?, ?, NULL, NULL, ?)",
                        [(rel, KIND, hashes[rel], "ok" if rel in ok else "error", now) for rel in todo])
        if errors:
            con.executemany("INSERT INTO ingest_errors (file, kind, reason, recorded_at) VALUES (?, ?, ?, ?)",
                            [(rel, KIND, why, now) for rel, why in errors])

    return Journals(len(ok), len(found) - len(todo), len(rows), write)


def sync(tuned: Path, db_path: str | Path, echo: Callable[[str], None]) -> tuple[int, int, int, bool]:
    """Load the changed journals under ``tuned/journal`` into the database file (a path: for callers
    outside an ingest); returns (journals loaded, unchanged, rows, wrote). ``xrt db ingest`` uses
    :func:`changes` in its own write."""
    db = Path(db_path)
    if db.exists():
        with store.read(db, empty_ok=True) as con:
            j = changes(tuned, con if schema.current_version(con) else None, echo)
    else:
        j = changes(tuned, None, echo)
    if j.write is not None:
        store.write(db, j.write, fresh=not db.exists())
    return j.loaded, j.unchanged, j.rows, j.write is not None
