"""xrt db ingest: one bad entry never aborts an ingest; a bad file is recorded once; a renamed machine
folder is not ingested twice."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402

from xrt.cli import main as xrt_main  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.db.query import query  # noqa: E402


def q(db, sql, params=None):
    return query(db, sql, params)[1]


def _results(tmp_path, n=3, machines=("m1",)):
    files = {f"{m}/{i:08d}-env.json": asvgen.v2_file(asvgen.sha(i + 10 * k), machine=m, date_ms=1_700_000_000_000 + i)
             for k, m in enumerate(machines) for i in range(1, n + 1)}
    return asvgen.make_results(tmp_path / "results", files, machines=machines)


def run(root, db):
    lines: list[str] = []
    rep = ingest(root, db, echo=lines.append)
    return rep, lines


def _errors(db):
    return {(f, k) for f, k, _ in q(db, "SELECT file, kind, reason FROM ingest_errors")}


# ---------------------------------------------------------------- 1. one bad entry, the rest ingested

def _loops(root: Path) -> set[str]:
    os.symlink("loop-b", root / "loop-a")  # a machine "folder" that is a loop
    os.symlink("loop-a", root / "loop-b")
    os.symlink("x-env.json", root / "m1" / "y-env.json")  # result files that are a loop
    os.symlink("y-env.json", root / "m1" / "x-env.json")
    os.symlink("nowhere.json", root / "m1" / "dangling-env.json")
    os.mkfifo(root / "m1" / "fifo-env.json")  # would block a plain open()
    return {"loop-a/", "loop-b/", "m1/x-env.json", "m1/y-env.json", "m1/dangling-env.json", "m1/fifo-env.json"}


def test_symlink_loops_dangling_links_and_fifos_are_named_and_the_rest_ingested(tmp_path, capsys):
    root = _results(tmp_path)
    bad = _loops(root)
    db = tmp_path / "x.duckdb"
    rep, lines = run(root, db)
    assert rep.ingested == 3
    assert {f for f, _, _ in rep.errors} == bad
    assert _errors(db) == {(f, "unreadable") for f in bad}
    for f in bad:
        assert sum(1 for s in lines if f in s) == 1
    assert any("Too many levels of symbolic links" in s for s in lines)
    assert q(db, "SELECT count(*) FROM runs") == [(3,)]
    # the CLI: exit 0 (errors are reported, not fatal) unless --strict; never a traceback
    assert xrt_main(["db", "ingest", str(root), "--db", str(tmp_path / "y.duckdb")]) == 0
    assert xrt_main(["db", "ingest", str(root), "--db", str(tmp_path / "z.duckdb"), "--strict"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    # and again: nothing changed, nothing written, the errors are not doubled
    ino = db.stat().st_ino
    rep2, _ = run(root, db)
    assert not rep2.wrote and db.stat().st_ino == ino
    assert q(db, "SELECT count(*) FROM ingest_errors") == [(len(bad),)]


def test_unlistable_machine_folder(tmp_path, monkeypatch):
    """Root reads every folder, so the listing's PermissionError is raised the way os.scandir raises it
    for another user (what is exercised: the ingest's handling of it)."""
    root = _results(tmp_path, machines=("m1", "m2"))
    real = os.scandir

    def scandir(path="."):
        if Path(path).name == "m2":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)  # the os module xrt.db.ingest lists folders with
    db = tmp_path / "x.duckdb"
    rep, lines = run(root, db)
    assert rep.ingested == 3 and q(db, "SELECT DISTINCT machine FROM runs") == [("m1",)]
    assert rep.errors == [("m2/", "unreadable", "cannot list the folder: Permission denied")]
    assert _errors(db) == {("m2/", "unreadable")}


@pytest.mark.parametrize("which", ["benchmarks.json", "m1/machine.json"])
def test_unreadable_benchmarks_or_machine_json(which, tmp_path, monkeypatch):
    """As root, chmod 000 does not stop a read: the read raises EACCES as it would for another user."""
    root = _results(tmp_path)
    real = Path.read_bytes

    def read_bytes(self):
        if self.as_posix().endswith(which):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    db = tmp_path / "x.duckdb"
    rep, lines = run(root, db)
    assert rep.ingested == 3 and q(db, "SELECT count(*) FROM runs") == [(3,)]
    assert rep.errors == [(which, "unreadable", "cannot read: Permission denied")]
    assert [s for s in lines if which in s] == [f"xrt db ingest: {which}: cannot read: Permission denied"]
    assert _errors(db) == {(which, "unreadable")}


@pytest.mark.parametrize("which", ["benchmarks.json", "m1/machine.json", "m1/00000002-env.json"])
def test_a_directory_where_a_file_should_be(which, tmp_path):
    root = _results(tmp_path)
    p = root / which
    p.unlink()
    p.mkdir()
    db = tmp_path / "x.duckdb"
    rep, _ = run(root, db)
    assert (which, "unreadable", "a directory, not a file") in rep.errors
    assert rep.ingested == (2 if which.endswith("env.json") else 3)


# ---------------------------------------------------------------- 3. a bad file is recorded once

@pytest.mark.parametrize("which", ["m1/machine.json", "benchmarks.json"])
def test_bad_meta_file_does_not_rewrite_the_database_each_time(which, tmp_path):
    root = _results(tmp_path)
    (root / which).write_text("{not json")
    db = tmp_path / "x.duckdb"
    rep1, _ = run(root, db)
    assert rep1.wrote and rep1.ingested == 3 and (which, "corrupt") in {(f, k) for f, k, _ in rep1.errors}
    st = db.stat()
    for _ in range(2):
        rep, _ = run(root, db)
        assert not rep.wrote and rep.ingested == 0
    assert (db.stat().st_ino, db.stat().st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert q(db, "SELECT count(*) FROM ingests") == [(1,)]
    assert q(db, "SELECT count(*) FROM ingest_errors WHERE file = ?", [which]) == [(1,)]
    # fixed: recorded as ok, its error gone
    asvgen.make_results(root, {})
    rep, _ = run(root, db)
    assert rep.wrote and q(db, "SELECT status FROM ingest_files WHERE file = ?", [which]) == [("ok",)]
    assert q(db, "SELECT count(*) FROM ingest_errors WHERE file = ?", [which]) == [(0,)]


# ---------------------------------------------------------------- 4. a renamed machine folder

def test_renamed_machine_folder_is_named_and_not_ingested_twice(tmp_path):
    root = _results(tmp_path)
    db = tmp_path / "x.duckdb"
    run(root, db)
    before = q(db, "SELECT count(*), sum(value) FROM results")
    (root / "m1").rename(root / "m1-renamed")
    rep, lines = run(root, db)
    assert rep.ingested == 0
    assert q(db, "SELECT count(*), sum(value) FROM results") == before  # not doubled
    assert q(db, "SELECT count(*) FROM runs") == [(3,)]
    dup = [s for s in lines if "same content" in s]
    assert dup == ["xrt db ingest: m1-renamed/: 3 result file(s) with the same content as files of m1/ already "
                   "ingested (machine folder renamed or copied?); not ingested again, named in ingest_errors "
                   "(kind duplicate)"]
    errs = q(db, "SELECT file, kind, reason FROM ingest_errors WHERE kind = 'duplicate' ORDER BY file")
    assert [(f, k) for f, k, _ in errs] == [(f"m1-renamed/{i:08d}-env.json", "duplicate") for i in (1, 2, 3)]
    assert "same content as m1/00000001-env.json" in errs[0][2]
    # the next ingest: the same, written once
    ino = db.stat().st_ino
    rep2, _ = run(root, db)
    assert not rep2.wrote and db.stat().st_ino == ino
    # a new file in the renamed folder is ingested as usual
    asvgen.write_json(root / "m1-renamed" / "00000009-env.json",
                      asvgen.v2_file(asvgen.sha(9), date_ms=1_700_000_000_009))
    rep3, _ = run(root, db)
    assert rep3.ingested == 1 and q(db, "SELECT count(*) FROM runs") == [(4,)]


def test_copies_within_one_ingest_are_ingested_once(tmp_path):
    root = _results(tmp_path)
    (root / "m1-copy").mkdir()
    for p in (root / "m1").iterdir():
        (root / "m1-copy" / p.name).write_bytes(p.read_bytes())
    db = tmp_path / "x.duckdb"
    rep, lines = run(root, db)
    assert rep.ingested == 3 and q(db, "SELECT count(*) FROM runs") == [(3,)]
    assert sum("m1-copy/: 3 result file(s)" in s for s in lines) == 1
