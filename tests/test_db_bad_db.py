"""xrt.db.store: every command given a --db that is not a usable xrt database says so in one line (exit 2).

Also: a full disk while writing leaves the live database as it was, and a reader in a process that
has the old file open still sees the new one after a swap (DuckDB's instance cache bypassed).
"""

from __future__ import annotations

import errno
import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402
from conftest import rw  # noqa: E402

from xrt.cli import main as xrt_main  # noqa: E402
from xrt.db import schema, store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, str, str]:
    r = tmp_path_factory.mktemp("repo")
    _git(r, "init", "-q")
    _git(r, "commit", "-q", "--allow-empty", "-m", "good")
    good = _git(r, "rev-parse", "HEAD")
    _git(r, "commit", "-q", "--allow-empty", "-m", "bad")
    return r, good, _git(r, "rev-parse", "HEAD")


def _make(kind: str, d: Path) -> tuple[str, str]:
    """A bad --db of this kind: (the path as given, a word the message must contain)."""
    p = d / "x.duckdb"
    if kind == "directory":
        p.mkdir()
        return str(p), "is a directory"
    if kind == "empty-path":
        return "", "empty database path"
    if kind == "dev-null":
        return "/dev/null", "character device"
    if kind == "zero-bytes":
        p.write_bytes(b"")
        return str(p), "0 bytes"
    if kind == "random-bytes":
        p.write_bytes(hashlib.sha256(b"x").digest() * 512)
        return str(p), "not a DuckDB database"
    if kind == "text":
        p.write_text("machine,benchmark,value\nm1,time_x,1.0\n")
        return str(p), "text file"
    if kind == "sqlite":
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE results (value REAL)")
        con.commit()
        con.close()
        return str(p), "SQLite"
    if kind == "empty-duckdb":
        duckdb.connect(str(p)).close()
        assert p.stat().st_size > 0
        return str(p), "no xrt tables"
    if kind == "newer-schema":
        store.write(p, lambda con: con.execute("INSERT INTO schema_version VALUES (99, now()::TIMESTAMP, 'x')"))
        return str(p), f"schema version 99 is newer than this xrt ({schema.LATEST})"
    if kind == "foreign-duckdb":
        con = duckdb.connect(str(p))
        con.execute("CREATE TABLE t (i INTEGER)")
        con.close()
        return str(p), "not an xrt database"
    if kind == "truncated":  # a real xrt database cut short (a copy interrupted, a full disk)
        root = asvgen.make_results(d / "tr-results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
        ingest(root, p, echo=lambda s: None)
        with open(p, "r+b") as f:
            f.truncate(p.stat().st_size // 2)
        return str(p), "truncated DuckDB database"
    if kind == "fifo":
        os.mkfifo(p)
        return str(p), "FIFO"
    if kind == "symlink-loop":
        os.symlink(d / "loop-b", d / "loop-a")
        os.symlink(d / "loop-a", p)
        os.symlink(p, d / "loop-b")
        return str(p), "symbolic links"
    raise AssertionError(kind)


KINDS = ["directory", "empty-path", "dev-null", "zero-bytes", "random-bytes", "text", "sqlite", "empty-duckdb",
         "newer-schema", "foreign-duckdb", "truncated", "fifo", "symlink-loop"]
READ_COMMANDS = ["db query", "db stats", "db export", "regressions", "regressions show", "regressions ack", "gate",
                 "report", "bisect"]


def _argv(cmd: str, db: str, tmp: Path, repo) -> list[str]:
    r, good, bad = repo
    return {
        "db query": ["db", "query", "--db", db, "SELECT 1"],
        "db stats": ["db", "stats", "--db", db],
        "db export": ["db", "export", "--db", db, "--parquet", str(tmp / "pq")],
        "db ingest": ["db", "ingest", str(tmp / "results"), "--db", db],
        "regressions": ["regressions", "--db", db],
        "regressions show": ["regressions", "show", "abc", "--db", db],
        "regressions ack": ["regressions", "ack", "abc", "--db", db],
        "gate": ["gate", "--db", db, "--base", good, "--head", bad],
        "report": ["report", "--db", db, "--base", good, "--head", bad, "--out", str(tmp / "report.md")],
        "bisect": ["bisect", "suite.time_plain", good, bad, "--db", db, "--repo", str(r)],
    }[cmd]


def _one_line(capsys, db: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert (db or store.EMPTY_PATH) in lines[0]
    return lines[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cmd", READ_COMMANDS + ["db ingest"])
def test_bad_db_is_one_line_and_exit_2(kind, cmd, tmp_path, capsys, repo, monkeypatch):
    if cmd == "db ingest" and kind == "empty-duckdb":
        pytest.skip("a writer initialises an empty DuckDB file (test_ingest_initialises_an_empty_duckdb)")
    asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    monkeypatch.chdir(tmp_path)  # '' must not find a database in the current directory either
    db, why = _make(kind, tmp_path)
    if cmd == "regressions ack" and kind == "empty-duckdb":
        pytest.skip("a writer: the empty file is fine for it; xrt regressions says 'no stored regressions yet'")
    before = Path(db).read_bytes() if kind in ("text", "sqlite", "random-bytes", "zero-bytes", "truncated") else None
    assert xrt_main(_argv(cmd, db, tmp_path, repo)) == 2
    line = _one_line(capsys, db)
    assert why in line, line
    if before is not None:
        assert Path(db).read_bytes() == before  # nothing overwrote it
    assert not (tmp_path / "pq").exists()


def test_unreadable_db_is_one_line(tmp_path, capsys, monkeypatch):
    """Tests run as root, for whom chmod 000 does not stop a read: the header read raises EACCES
    here as it would for another user (the error path is what this exercises)."""
    db = tmp_path / "x.duckdb"
    store.write(db, lambda con: None)

    def denied(path):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(store, "_header", denied)
    for argv in (["db", "stats", "--db", str(db)], ["db", "query", "--db", str(db), "SELECT 1"],
                 ["db", "ingest", str(tmp_path), "--db", str(db)]):
        assert xrt_main(argv) == 2
        assert "cannot read: Permission denied" in _one_line(capsys, str(db))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_unreadable_db_for_another_user():
    """The real thing: a chmod 000 file read by an unprivileged user (nobody)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="xrt-unreadable-", dir="/tmp"))
    try:
        d.chmod(0o755)
        _unreadable_as_nobody(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _unreadable_as_nobody(d: Path) -> None:
    db = d / "x.duckdb"
    store.write(db, lambda con: None)
    db.chmod(0)
    code = "import sys; from xrt.cli import main; sys.exit(main(['db', 'stats', '--db', sys.argv[1]]))"
    repo = str(Path(__file__).resolve().parents[1])
    try:
        out = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, user="nobody",
                             env=dict(os.environ, PYTHONPATH=repo, HOME="/tmp"), timeout=120)
    except PermissionError as e:
        pytest.skip(f"cannot run as nobody: {e}")
    if "ModuleNotFoundError" in out.stderr or "PermissionError: [Errno 13] Permission denied: '/" in out.stderr:
        pytest.skip("nobody cannot read the interpreter or the checkout")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [f"xrt: {db}: cannot read: Permission denied"]


def test_ingest_initialises_an_empty_duckdb(tmp_path):
    root = asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    db, _ = _make("empty-duckdb", tmp_path)
    rep = ingest(root, db, echo=lambda s: None)
    assert rep.ingested == 1
    with store.read(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_missing_db_keeps_its_message(tmp_path, capsys):
    db = str(tmp_path / "missing.duckdb")
    assert xrt_main(["db", "stats", "--db", db]) == 2
    assert "no such database (create it with `xrt db ingest RESULTS_DIR --db" in _one_line(capsys, db)
    with pytest.raises(store.DatabaseError):
        with store.read(db):
            pass


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("where", ["copy", "duckdb", "replace"])
def test_full_disk_leaves_the_database_intact(where, tmp_path, capsys, monkeypatch):
    root = asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    db = tmp_path / "x.duckdb"
    ingest(root, db, echo=lambda s: None)
    digest, inode = _digest(db), db.stat().st_ino
    asvgen.write_json(root / "m1" / "00000002-env.json", asvgen.v2_file(asvgen.sha(2)))

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(a[-1]) if a else None)

    if where == "copy":
        monkeypatch.setattr(store.shutil, "copyfile", full)
    elif where == "replace":
        monkeypatch.setattr(store.os, "replace", full)
    else:  # DuckDB's own write of the copy fails (its IOException, not an OSError)
        real = store._write_locked

        def fails_in_duckdb(duck, dbp, fn, *rest):
            def fn2(con):
                fn(con)
                raise duck.IOException('IO Error: Could not write file "x": No space left on device')
            return real(duck, dbp, fn2, *rest)

        monkeypatch.setattr(store, "_write_locked", fails_in_duckdb)
    assert xrt_main(["db", "ingest", str(root), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last == f"xrt: {db}: no space left on device while writing the new copy; the database is unchanged"
    assert [s for s in err.splitlines() if "no space" in s] == [last]
    monkeypatch.undo()
    assert _digest(db) == digest and db.stat().st_ino == inode
    assert not list(tmp_path.glob(".x.duckdb.tmp-*"))
    with store.read(db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_reader_after_a_swap_sees_the_new_file_though_the_old_one_is_open(tmp_path):
    """DuckDB's instance cache: a second duckdb.connect(path, read_only=True) in a process that still
    has the path open returns the OLD inode's instance (stale data, and reads of a file that is gone)."""
    db = tmp_path / "x.duckdb"
    store.write(db, lambda con: con.execute("CREATE TABLE t AS SELECT 1 AS i"))
    with store.read(db) as old:
        assert old.execute("SELECT count(*) FROM t").fetchone()[0] == 1
        store.write(db, lambda con: con.execute("INSERT INTO t SELECT range FROM range(1000)"))
        with store.read(db) as new:
            assert new.execute("SELECT count(*) FROM t").fetchone()[0] == 1001
        assert old.execute("SELECT count(*) FROM t").fetchone()[0] == 1  # the old reader keeps its snapshot


def test_readers_in_the_writers_process_never_fail_nor_go_back(tmp_path):
    """One thread swapping with store.write, three reading (holding connections open across swaps)."""
    db = tmp_path / "x.duckdb"
    store.write(db, lambda con: con.execute("CREATE TABLE t AS SELECT range AS i FROM range(20000)"))
    stop = threading.Event()
    failures: list[str] = []
    stale: list[tuple[int, int]] = []
    reads = [0]
    written = [20000]

    def reader():
        while not stop.is_set():
            try:
                floor = written[0]  # committed and swapped in before this read started
                with store.read(db) as con:
                    n = con.execute("SELECT count(*) FROM t").fetchone()[0]
                    time.sleep(0.005)  # overlap the next swap
                    con.execute("SELECT sum(i) FROM t").fetchone()
                if n < floor:
                    stale.append((n, floor))
                reads[0] += 1
            except Exception as e:  # noqa: BLE001 - every failure counts
                failures.append(repr(e))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            store.write(db, lambda con: con.execute("INSERT INTO t SELECT range FROM range(2000)"))
            written[0] += 2000
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == []
    assert stale == []
    assert reads[0] > 20


@pytest.mark.parametrize("name", ["bob's export", "x' (FORMAT csv); --", 'q"uote $(x) ; DROP TABLE results'])
def test_export_to_any_folder_name_and_regressions_go_too(name, tmp_path, capsys):
    from xrt.track import regressions

    root = asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1)),
                                                 "m2/00000002-env.json": asvgen.v2_file(asvgen.sha(2), machine="m2")},
                          machines=("m1", "m2"))
    db = tmp_path / "x.duckdb"
    ingest(root, db, echo=lambda s: None)
    rec = regressions.Record("abc123def456", "m1", "suite.time_plain", [], "", asvgen.sha(2), asvgen.sha(1),
                             1.0, 2.0, 2.0, 1e-4, 5.0, "regression", "new", "seconds", 10, 10, None, None)
    rw(db, lambda con: regressions.save(con, [rec]))
    rw(db, lambda con: regressions.set_status(con, "abc123", "acknowledged", "known: new allocator"))
    out = tmp_path / "exports" / name
    out.parent.mkdir()
    assert xrt_main(["db", "export", "--db", str(db), "--parquet", str(out)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert sorted(p.name for p in out.parent.iterdir()) == [name]  # nothing written beside it
    assert sorted(p.name for p in (out / "results").iterdir()) == ["machine=m1", "machine=m2"]
    got = duckdb.execute("SELECT count(*), count(DISTINCT machine) FROM read_parquet(?, hive_partitioning = true)",
                         [f"{out}/results/*/*.parquet"]).fetchall()
    with store.read(db) as con:
        assert got == con.execute("SELECT count(*), count(DISTINCT machine) FROM results").fetchall()
    reg = duckdb.execute("SELECT id, status, note FROM read_parquet(?)", [str(out / "regressions.parquet")]).fetchall()
    assert reg == [("abc123def456", "acknowledged", "known: new allocator")]
    assert not list(tmp_path.rglob("*.csv"))
