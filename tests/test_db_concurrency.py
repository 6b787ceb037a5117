"""xrt.db: readers never fail because of a writer, and kill -9 mid-ingest loses nothing."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
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
from conftest import ro  # noqa: E402

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


# ------------------------------------------------ several ingests at once, and ingests killed anywhere

class Forker:
    """Real ``xrt`` processes, forked from one warm interpreter (tests/db_fixtures/forker.py)."""

    def __init__(self, log: Path):
        self.log = open(log, "w")
        self.p = subprocess.Popen([sys.executable, str(Path(__file__).parent / "db_fixtures" / "forker.py")],
                                  env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def start(self, *argvs: list[str]) -> list[int]:
        self.p.stdin.write(json.dumps([list(a) for a in argvs]) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())["pids"]

    def wait(self) -> list[int]:
        return json.loads(self.p.stdout.readline())["codes"]

    def run(self, *argvs: list[str]) -> list[int]:
        self.start(*argvs)
        return self.wait()

    def close(self) -> None:
        self.p.stdin.write("\n")
        self.p.stdin.close()
        self.p.wait(timeout=30)
        self.log.close()


@pytest.fixture
def forker(tmp_path):
    f = Forker(tmp_path / "forker.log")
    yield f
    f.close()


def _write_files(root: Path, machine: str, commits: range, slow_at: int | None = None) -> None:
    asvgen.make_results(root, {}, machines=())
    asvgen.write_json(root / machine / "machine.json", {"machine": machine, "os": "Linux", "arch": "x86_64",
                                                        "cpu": "test", "num_cpu": "2", "ram": "8GB", "version": 1})
    for i in commits:
        scale = (1.0 + 0.01 * (i % 3)) * (1.5 if i == slow_at else 1.0)
        asvgen.write_json(root / machine / f"{asvgen.sha(i)[-8:]}-env.json",
                          asvgen.v2_file(asvgen.sha(i), machine=machine, date_ms=1_700_000_000_000 + i * 1000,
                                         results=asvgen.v2_results(scale)))


PRIMARY = {  # written in the ingest's one transaction
    "runs": "SELECT file, content_hash, machine, commit_hash, env_name, n_values, n_ok, n_failed, n_skipped FROM runs",
    "results": "SELECT ru.file, r.machine, r.commit_hash, r.benchmark, r.param_key, r.value, r.status, r.samples, "
               "r.unit, r.gbps FROM results r JOIN runs ru USING (run_id)",
    "ingest_files": "SELECT file, kind, content_hash, status FROM ingest_files",
    "ingest_errors": "SELECT file, kind, reason, commit_hash FROM ingest_errors",
    "machines": "SELECT machine, file, facts FROM machines",
    "benchmarks": "SELECT name, unit FROM benchmarks",
    "commits": "SELECT hash, position, source FROM commits",
}
DERIVED = {  # written after it: the carried table and the newest commits' judgement
    "carried": "SELECT * FROM carried",
    "newest_judgements": 'SELECT machine, benchmark, param_key, "commit", previous_commit, verdict, reason, ratio '
                         "FROM newest_judgements",
    "regressions": "SELECT id, machine, benchmark, param_key, \"commit\", status, suspected FROM regressions",
}


def _state(db: Path, tables: dict[str, str]) -> dict[str, list] | None:
    if not db.exists():
        return None
    with store.read(db) as con:
        return {t: sorted(map(repr, con.execute(sql).fetchall())) for t, sql in tables.items()}


def _ingest_argv(root: Path, db: Path) -> list[str]:
    return ["db", "ingest", str(root), "--db", str(db), "--jobs", "1"]


def test_ingests_at_once_equal_one_ingest_of_the_union(tmp_path, forker):
    """Two or three ingests at once, of the same folder or of different folders, into a new database
    or an existing one: whatever the interleaving, the database ends as one ingest of the union of
    the folders leaves it (judgements included). Before, what was new was decided before the lock:
    duplicated runs into an existing database, one folder lost in a new one."""
    parts = [tmp_path / f"part{k}" for k in range(3)]
    for k, part in enumerate(parts):
        _write_files(part, f"m{k}", range(3), slow_at=2 if k == 0 else None)
    unions = {}
    for n in (2, 3):
        unions[n] = tmp_path / f"union{n}"
        for k in range(n):
            _write_files(unions[n], f"m{k}", range(3), slow_at=2 if k == 0 else None)
    base_root = tmp_path / "base"
    _write_files(base_root, "m0", range(2))
    base = tmp_path / "base.duckdb"
    assert forker.run(_ingest_argv(base_root, base)) == [0]
    expected = {}
    for n in (2, 3):
        for existing in (False, True):
            ref = tmp_path / f"ref-{n}-{existing}.duckdb"
            if existing:
                shutil.copyfile(base, ref)
            assert forker.run(_ingest_argv(unions[n], ref)) == [0]
            expected[n, existing] = _state(ref, {**PRIMARY, **DERIVED})
            assert len(expected[n, existing]["newest_judgements"]) > n
    # every combination once, then the two that lost data before once more
    cases = [(n, existing, same) for n in (2, 3) for existing in (False, True) for same in (True, False)]
    cases += [(3, False, False), (2, True, True)]
    for k, (n, existing, same) in enumerate(cases):
        db = tmp_path / f"run{k}.duckdb"
        if existing:
            shutil.copyfile(base, db)
        folders = [unions[n]] * n if same else parts[:n]
        assert forker.run(*[_ingest_argv(f, db) for f in folders]) == [0] * n
        got = _state(db, {**PRIMARY, **DERIVED})
        for t in got:
            assert got[t] == expected[n, existing][t], (n, existing, same, t)
    assert len(cases) >= 10


def test_ingest_killed_at_random_points_leaves_old_or_new_and_the_next_completes(tmp_path, forker):
    """SIGKILL an ingest (with its carried table and judgement) after a random delay, 20 seeds: the
    database holds the old or the new results, never a mix, and the next ingest completes every
    derived table (before, a kill between the results and the judgement left newest_judgements
    stale for good: every later ingest had "nothing to write")."""
    import random

    root = tmp_path / "results"
    _write_files(root, "m0", range(3), slow_at=2)
    _write_files(root, "m1", range(3))
    asvgen.write_json(root / "m1" / f"{asvgen.sha(2)}.carried", {
        "commit": asvgen.sha(2), "machine": "m1", "carried": {"square": {"from": asvgen.sha(1)}}})
    base_root = tmp_path / "base"
    _write_files(base_root, "m0", range(2))
    base = tmp_path / "base.duckdb"
    assert forker.run(_ingest_argv(base_root, base)) == [0]
    old = _state(base, PRIMARY)
    ref = tmp_path / "ref.duckdb"
    shutil.copyfile(base, ref)
    t0 = time.monotonic()
    assert forker.run(_ingest_argv(root, ref)) == [0]
    took = time.monotonic() - t0
    new, full = _state(ref, PRIMARY), _state(ref, {**PRIMARY, **DERIVED})
    assert new != old and full["carried"] and full["newest_judgements"]
    outcomes = {"old": 0, "new": 0}
    for seed in range(20):
        d = tmp_path / f"s{seed}"
        d.mkdir()
        db = d / "x.duckdb"
        shutil.copyfile(base, db)
        (pid,) = forker.start(_ingest_argv(root, db))
        # The one write is the ingest's last act, so "after the commit" is the end of the run: the
        # delays reach past the reference run's time (a slower run under load still ends in it).
        time.sleep(random.Random(seed).uniform(0, 1.6 * took))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        forker.wait()
        got = _state(db, PRIMARY)
        assert got in (old, new), seed
        outcomes["old" if got == old else "new"] += 1
        assert forker.run(_ingest_argv(root, db)) == [0]
        assert _state(db, {**PRIMARY, **DERIVED}) == full, seed
        assert not list(d.glob(".x.duckdb.tmp-*"))
    assert outcomes["old"] and outcomes["new"], outcomes  # the kills landed before and after the commit


def test_the_next_ingest_judges_what_an_interrupted_one_left(tmp_path, capsys):
    """The results committed, the judgement never ran (a kill between them; --no-judge alike): the
    next ingest has nothing new to write and still judges every series' newest commit."""
    from xrt.cli import main as xrt_main
    from xrt.track import newest

    root = tmp_path / "results"
    _write_files(root, "m0", range(3))
    db = tmp_path / "x.duckdb"
    assert xrt_main(_ingest_argv(root, db)) == 0
    judged = _state(db, DERIVED)["newest_judgements"]
    _write_files(root, "m0", range(4))
    assert xrt_main(_ingest_argv(root, db) + ["--no-judge"]) == 0  # stands for a kill before the judgement
    assert _state(db, DERIVED)["newest_judgements"] == judged
    capsys.readouterr()
    assert xrt_main(_ingest_argv(root, db)) == 0
    err = capsys.readouterr().err
    assert "(nothing to write)" in err and "newest commits judged" in err
    with store.read(db) as con:
        assert con.execute('SELECT DISTINCT "commit" FROM newest_judgements').fetchall() == [(asvgen.sha(3),)]
    assert not newest.pending(ro(db))
    assert xrt_main(_ingest_argv(root, db)) == 0  # judged: not judged again
    assert "newest commits judged" not in capsys.readouterr().err


def test_one_ingest_is_one_write_and_a_crash_in_it_leaves_the_old_file(tmp_path, monkeypatch, capsys):
    """`xrt db ingest` with new results, a carried-forward unit and a slowdown at the newest commit: the
    results, the carried table, the newest commits' judgement and the suspected regression go in one
    copy-and-swap write. A crash in its last step (the judgement) leaves the old file byte for byte."""
    from xrt.cli import main as xrt_main
    from xrt.db.ingest import Then

    root = tmp_path / "results"
    _write_files(root, "m0", range(2))
    db = tmp_path / "x.duckdb"
    assert xrt_main(_ingest_argv(root, db)) == 0
    _write_files(root, "m0", range(12), slow_at=11)
    _write_files(root, "m1", range(3))
    asvgen.write_json(root / "m1" / f"{asvgen.sha(2)}.carried", {
        "commit": asvgen.sha(2), "machine": "m1", "carried": {"square": {"from": asvgen.sha(1)}}})
    old_bytes, old = db.read_bytes(), _state(db, {**PRIMARY, **DERIVED})

    def boom(con, rep):
        raise KeyboardInterrupt  # stands for a crash after every row was written, before the commit

    with pytest.raises(KeyboardInterrupt):
        ingest(root, db, then=Then(due=lambda con: True, run=boom), echo=lambda s: None)
    assert db.read_bytes() == old_bytes and _state(db, {**PRIMARY, **DERIVED}) == old

    writes = []
    real = store._write_locked

    def counted(*a, **k):
        writes.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(store, "_write_locked", counted)
    capsys.readouterr()
    assert xrt_main(_ingest_argv(root, db)) == 0
    assert "newest commits judged" in capsys.readouterr().err
    assert writes == [db]
    got = _state(db, {**PRIMARY, **DERIVED})
    assert got["carried"] and got["newest_judgements"] and got != old
    with store.read(db) as con:
        assert con.execute("SELECT count(*) FROM regressions WHERE suspected AND \"commit\" = ?",
                           [asvgen.sha(11)]).fetchone()[0] > 0
