"""xrt.db.schema: regressions and tuning_results are migrations; files made before them migrate cleanly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402
from conftest import ro, rw  # noqa: E402

from xrt.db import schema, store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402

# What xrt.track.regressions created (CREATE TABLE IF NOT EXISTS) before migration 4 existed.
OLD_REGRESSIONS = """CREATE TABLE IF NOT EXISTS regressions (
    id VARCHAR PRIMARY KEY, machine VARCHAR, benchmark VARCHAR, param_key VARCHAR, params VARCHAR[],
    kind VARCHAR, "commit" VARCHAR, previous_commit VARCHAR, before DOUBLE, after DOUBLE, ratio DOUBLE,
    p_value DOUBLE, z DOUBLE, cycles_ratio DOUBLE, unit VARCHAR, n_before INTEGER, n_after INTEGER,
    fixed_by VARCHAR, status VARCHAR, note VARCHAR, detected_at TIMESTAMP, updated_at TIMESTAMP,
    still_detected BOOLEAN, diag JSON)"""
OLD_TUNING = ("CREATE TABLE tuning_results (op VARCHAR, device VARCHAR, shape VARCHAR, dtype VARCHAR, "
              "provider VARCHAR, config JSON, median_s DOUBLE, gbps DOUBLE)")


def _tables(db) -> set[str]:
    with store.read(db) as con:
        return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() "
                                          "WHERE database_name = current_database()").fetchall()}


def test_a_new_database_has_regressions_and_tuning_results(tmp_path):
    db = tmp_path / "x.duckdb"
    store.write(db, lambda con: None)
    assert {"regressions", "tuning_results"} <= _tables(db)
    with store.read(db) as con:
        assert schema.current_version(con) == schema.LATEST >= 4
        cols = [r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = "
                                          "'regressions' ORDER BY column_index").fetchall()]
    assert cols[:3] == ["id", "machine", "benchmark"] and cols[-6:] == ["updated_at", "still_detected", "diag",
                                                                         "suspected", "culprit", "bisection"]


def test_version_3_file_with_both_tables_already_migrates_and_keeps_their_rows(tmp_path):
    root = asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    db = tmp_path / "x.duckdb"
    con = duckdb.connect(str(db))
    con.execute("BEGIN")
    schema.migrate(con, upto=3)
    con.execute(OLD_REGRESSIONS)
    con.execute("INSERT INTO regressions (id, machine, status, note) VALUES ('abc', 'm1', 'acknowledged', 'known')")
    con.execute(OLD_TUNING)
    con.execute("INSERT INTO tuning_results (op, median_s) VALUES ('square', 1e-5)")
    con.execute("COMMIT")
    con.close()
    rep = ingest(root, db, echo=lambda s: None)
    assert rep.ingested == 1 and rep.errors == []
    with store.read(db) as con:
        assert schema.current_version(con) == schema.LATEST
        assert con.execute("SELECT id, status, note FROM regressions").fetchall() == [("abc", "acknowledged",
                                                                                        "known")]
        assert con.execute("SELECT op, median_s FROM tuning_results").fetchall() == [("square", 1e-5)]
        assert con.execute("SELECT version FROM schema_version ORDER BY version").fetchall() == [
            (v,) for v in range(1, schema.LATEST + 1) if v not in schema.RESERVED]


def test_version_3_file_without_them_gets_them(tmp_path):
    db = tmp_path / "x.duckdb"
    con = duckdb.connect(str(db))
    con.execute("BEGIN")
    schema.migrate(con, upto=3)
    con.execute("COMMIT")
    con.close()
    assert {"regressions", "tuning_results"} <= _tables(db)  # a reader reads a migrated copy...
    assert _file_version(db) == 3  # ...and leaves the file as it was
    from xrt.cli import main

    assert main(["db", "migrate", "--db", str(db)]) == 0
    assert _file_version(db) == schema.LATEST
    assert {"regressions", "tuning_results"} <= _tables(db)


def _file_version(db) -> int:
    con = duckdb.connect(":memory:")
    try:
        con.execute("ATTACH ? AS f (READ_ONLY)", [str(db)])
        return con.execute("SELECT max(version) FROM f.schema_version").fetchone()[0]
    finally:
        con.close()


def test_the_oldest_version_is_read_at_the_latest_schema_and_the_file_left_alone(tmp_path):
    """A file of version 1 (the oldest) with results in it: readers rely on the version the file records
    and see every column of the latest schema (NULL where the old file had none); the file stays at 1."""
    from xrt.track import gate, regressions

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("BEGIN")
    schema.migrate(con, upto=1)
    con.execute("INSERT INTO commits (hash, position) VALUES ('a' || repeat('0', 39), 1), ('b' || repeat('0', 39), 2)")
    con.execute("INSERT INTO runs (run_id, file, machine, commit_hash, env_name) VALUES "
                "(1, 'm/a.json', 'm', 'a' || repeat('0', 39), 'e'), (2, 'm/b.json', 'm', 'b' || repeat('0', 39), 'e')")
    con.execute("INSERT INTO results (run_id, machine, commit_hash, env_name, benchmark, param_key, value, status, "
                "samples, unit) VALUES (1, 'm', 'a' || repeat('0', 39), 'e', 'b.T.time_x', '', 1.0, 'ok', "
                "[1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.03, 0.97], 'seconds'), (2, 'm', 'b' || repeat('0', 39), 'e', "
                "'b.T.time_x', '', 2.0, 'ok', [2.0, 2.02, 1.98, 2.04, 1.96, 2.0, 2.06, 1.94], 'seconds')")
    con.execute("COMMIT")
    con.close()
    base, head = "a" + "0" * 39, "b" + "0" * 39
    with store.read(db) as con:
        assert schema.current_version(con) == schema.LATEST
        assert regressions.stored(con) == {}  # a table version 1 did not have
        assert regressions.resolve_in_db(con, "b000") == head  # `carried` (version 6) is read without a probe
        v = gate.judge(con, base, head, history=False)
        (side,) = gate.rows(con, head, "m").values()
    assert [r["benchmark"] for r in v.regressions] == ["b.T.time_x"], v.problems
    assert side.samples == [2.0, 2.02, 1.98, 2.04, 1.96, 2.0, 2.06, 1.94]
    assert side.paired is None  # ref_samples (version 11): NULL, not probed
    assert _file_version(db) == 1


def test_a_file_of_a_newer_version_is_refused_in_one_line(tmp_path, capsys):
    from xrt.cli import main

    db = tmp_path / "new.duckdb"
    store.write(db, lambda con: con.execute("INSERT INTO schema_version VALUES (?, now()::TIMESTAMP, 'future')",
                                            [schema.LATEST + 1]))
    with pytest.raises(store.DatabaseError, match=rf"schema version {schema.LATEST + 1} is newer than this xrt"):
        with store.read(db):
            pass
    with pytest.raises(store.DatabaseError, match="newer than this xrt"):
        store.write(db, lambda con: None)
    capsys.readouterr()
    assert main(["regressions", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "newer than this xrt" in err and "Traceback" not in err


def test_regressions_save_and_ack_need_no_create_of_their_own(tmp_path):
    from xrt.track import regressions

    db = tmp_path / "x.duckdb"
    store.write(db, lambda con: None)
    rec = regressions.Record("abc123def456", "m1", "b", [], "", "c2", "c1", 1.0, 2.0, 2.0, 1e-4, 5.0, "regression",
                             "new", "seconds", 10, 10, None, None)
    rw(db, lambda con: regressions.save(con, [rec]))
    assert rw(db, lambda con: regressions.set_status(con, "abc", "ignored", "noise"))["status"] == "ignored"
    assert regressions.stored(ro(db))["abc123def456"]["note"] == "noise"
    assert not hasattr(regressions, "TABLE")  # one definition: the migration


def test_released_migrations_are_unchanged():
    """Append only: the statements of versions 1-3 as released (a digest of their text)."""
    import hashlib

    got = {v: hashlib.sha256("\n".join(st).encode()).hexdigest()[:16] for v, _, st in schema.MIGRATIONS if v <= 3}
    assert [v for v, _, _ in schema.MIGRATIONS] == [v for v in range(1, schema.LATEST + 1) if v not in schema.RESERVED]
    assert got == RELEASED


def test_explanations_table_comes_after_version_7(tmp_path):
    """Migration 9 brings a version-7 file to the latest version with an empty explanations table."""
    import duckdb

    p = tmp_path / "v7.duckdb"
    con = duckdb.connect(str(p))
    con.execute("BEGIN")
    schema.migrate(con, upto=7)
    con.execute("COMMIT")
    con.close()
    store.write(p, lambda c: None)
    with store.read(p) as con:
        cols = [r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = "
                                          "'explanations' ORDER BY column_index").fetchall()]
        assert cols[:6] == ["regression_id", "machine", "benchmark", "param_key", "base_commit", "head_commit"]
        assert {"payload", "markdown"} <= set(cols)
        assert con.execute("SELECT count(*) FROM explanations").fetchone()[0] == 0
        assert schema.current_version(con) == schema.LATEST


def test_a_migration_numbered_below_the_files_version_still_applies(tmp_path, monkeypatch):
    """A file at 9 made before migration 8 was merged gets 8 (tuning_results rebuilt, its rows kept),
    each migration applied exactly once."""
    import duckdb

    p = tmp_path / "v9.duckdb"
    with monkeypatch.context() as m:  # the schema as it was before 8 was merged
        m.setattr(schema, "MIGRATIONS", [x for x in schema.MIGRATIONS if x[0] <= 9 and x[0] != 8])
        store.write(p, lambda c: c.execute("INSERT INTO tuning_results VALUES ('sq', 'g', '64', 'f32', 'triton', "
                                           "'{}', 1e-5, 1.0)"))
    con = duckdb.connect(str(p))
    assert [v for (v,) in con.execute("SELECT version FROM schema_version ORDER BY version").fetchall()] == \
        [1, 2, 3, 4, 5, 6, 7, 9]
    con.execute("BEGIN")
    assert schema.migrate(con) == 9
    schema.migrate(con)  # idempotent: nothing applies twice
    con.execute("COMMIT")
    assert con.execute("SELECT op, median_s, status, space_hash FROM tuning_results").fetchall() == [
        ("sq", 1e-5, "timed", None)]
    assert [v for (v,) in con.execute("SELECT version FROM schema_version ORDER BY version").fetchall()] == \
        list(range(1, schema.LATEST + 1))
    con.close()


RELEASED = {1: '38213623bc9cb80a', 2: '6c99e16daa0ee071', 3: '88d5c858ad3e9d5d'}


def test_detection_runs_mark_a_detection_that_found_nothing(tmp_path):
    """Since migration 4 the regressions table always exists: a run is recorded on its own (migration 5)."""
    from xrt.track import regressions

    db = tmp_path / "x.duckdb"
    store.write(db, lambda con: None)
    with store.read(db) as con:
        assert con.execute("SELECT count(*) FROM detection_runs").fetchone()[0] == 0
    rw(db, lambda con: regressions.save(con, []))
    with store.read(db) as con:
        assert con.execute("SELECT machine, steps FROM detection_runs").fetchall() == [(None, 0)]


def test_migration_5_seeds_detection_runs_from_stored_steps():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    schema.migrate(con, upto=4)
    con.execute("INSERT INTO regressions (id, status, updated_at) VALUES ('a', 'new', TIMESTAMP '2026-01-02')")
    schema.migrate(con)
    assert con.execute("SELECT run_at, steps FROM detection_runs").fetchall()[0][1] == 1
    fresh = duckdb.connect()
    schema.migrate(fresh)
    assert fresh.execute("SELECT count(*) FROM detection_runs").fetchone()[0] == 0
