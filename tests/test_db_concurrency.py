"""xrt.db: readers never fail because of a writer, and kill -9 mid-ingest loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402

from xrt.db import store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))

READER = r"""
import json, sys, time
from pathlib import Path
from xrt.db.query import query
db, stop = sys.argv[1], Path(sys.argv[2])
ok, failures, seen = 0, [], []
while not stop.exists():
    try:
        n = query(db, "SELECT count(DISTINCT run_id) FROM results")[1][0][0]
        ok += 1
        if not seen or seen[-1] != n:
            seen.append(n)
    except Exception as e:
        failures.append(repr(e))
print(json.dumps({"ok": ok, "failures": failures, "seen": seen}))
"""


def _results(root: Path, n: int) -> None:
    for i in range(n):
        asvgen.write_json(root / "m1" / f"{asvgen.sha(i)[-8:]}-env.json",
                          asvgen.v2_file(asvgen.sha(i), date_ms=1_700_000_000_000 + i))


def test_reader_never_fails_while_ingest_loops(tmp_path):
    root = asvgen.make_results(tmp_path / "results", {})
    _results(root, 1)
    db = tmp_path / "x.duckdb"
    ingest(root, db, echo=lambda s: None)
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(db), str(stop)], env=ENV,
                              stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)  # the reader is querying before the first write
        rounds = 12
        for k in range(2, rounds + 2):
            _results(root, k)  # one new result file per round
            rep = ingest(root, db, echo=lambda s: None)
            assert rep.ingested == 1 and rep.wrote
            with store.read(db) as con:  # new data visible as soon as ingest returns
                assert con.execute("SELECT count(DISTINCT run_id) FROM results").fetchone()[0] == k
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    got = json.loads(out)
    assert got["failures"] == []
    assert got["ok"] > rounds
    assert got["seen"] == sorted(got["seen"]) and got["seen"][-1] == rounds + 1
    assert len(got["seen"]) >= 3  # the reader did see the database change under it


def test_kill_9_mid_ingest_leaves_the_old_database_and_the_next_ingest_completes(tmp_path):
    root = asvgen.make_results(tmp_path / "results", {})
    _results(root, 3)
    db = tmp_path / "x.duckdb"
    ingest(root, db, echo=lambda s: None)
    with store.read(db) as con:
        before = con.execute("SELECT count(*), sum(value) FROM results").fetchall()
    _results(root, 6)
    env = dict(ENV, **{store.SLEEP_ENV: "60"})
    p = subprocess.Popen([sys.executable, "-m", "xrt.cli", "db", "ingest", str(root), "--db", str(db)], env=env,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        for line in p.stderr:  # the hook says when the rows are written but not committed
            if "test hook" in line or time.monotonic() > deadline:
                break
        tmp = list(tmp_path.glob(".x.duckdb.tmp-*"))
        assert tmp, "the writer should be working on its private copy"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL
    with store.read(db) as con:  # the old database, intact and readable
        assert con.execute("SELECT count(*), sum(value) FROM results").fetchall() == before
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 3
    rep = ingest(root, db, echo=lambda s: None)
    assert (rep.ingested, rep.unchanged, rep.errors) == (3, 3, [])
    with store.read(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 6
    assert not list(tmp_path.glob(".x.duckdb.tmp-*"))  # the dead writer's copy is cleaned up


def test_writers_serialise(tmp_path):
    db = tmp_path / "x.duckdb"
    store.write(db, lambda con: con.execute("CREATE TABLE t (i INTEGER)"))
    with store.lock(db):
        with pytest.raises(RuntimeError, match="another writer"):
            store.write(db, lambda con: None, lock_timeout=0.2)
    store.write(db, lambda con: con.execute("INSERT INTO t VALUES (1)"))
    with store.read(db) as con:
        assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 1
