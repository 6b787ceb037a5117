"""Ingest errors are keyed by commit (ingest_errors.commit_hash, migration 10), and the gate finds a
commit's errors by that column, not by its hash in file names; asv's result-file naming has one home."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402

from xrt.db import asv_files, result_names, schema, store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.db.query import query  # noqa: E402
from xrt.track import gate  # noqa: E402

A, B, C = "a1" * 20, "b2" * 20, "c3" * 20


def _results(tmp_path: Path) -> Path:
    # a negative time (a bad value: rows kept, one error); a removed benchmark is no error
    renamed = asvgen.v2_file(A, results={**asvgen.v2_results(), "suite.time_plain": [[-1.0], [], "v", 1, 1.0]})
    root = asvgen.make_results(tmp_path / "results", {
        "m1/renamed-run.json": renamed,  # its name does not carry its commit
        f"m1/{C[:8]}-env.json": asvgen.v2_file(C),
    })
    (root / "m1" / f"{B[:8]}-env.json").write_text('{"commit_hash": "' + B + '", ')  # truncated: the name gives B[:8]
    (root / "m1" / f"{C}.carried").write_text("not json")
    return root


def test_ingest_errors_carry_the_commit_they_are_about(tmp_path):
    db = tmp_path / "x.duckdb"
    rep = ingest(_results(tmp_path), db, echo=lambda s: None)
    assert sorted((f, k) for f, k, _ in rep.errors) == [
        ("m1/b2b2b2b2-env.json", "truncated"), (f"m1/{C}.carried", "bad-carried"),
        ("m1/renamed-run.json", "bad-value")]
    got = query(db, "SELECT file, commit_hash FROM ingest_errors ORDER BY file")[1]
    assert got == [("m1/b2b2b2b2-env.json", B[:8]), (f"m1/{C}.carried", C), ("m1/renamed-run.json", A)]


def test_the_gate_finds_a_commits_errors_by_commit(tmp_path):
    db = tmp_path / "x.duckdb"
    ingest(_results(tmp_path), db, echo=lambda s: None)
    with store.read(db) as con:
        found = {c: gate._errors(con, c) for c in (A, B, C, "d4" * 20)}
    assert [e.split(":")[0] for e in found[A]] == ["ingest error in m1/renamed-run.json"]  # a name match misses it
    assert [e.split(":")[0] for e in found[B]] == ["ingest error in m1/b2b2b2b2-env.json"]
    assert [e.split(":")[0] for e in found[C]] == [f"ingest error in m1/{C}.carried"]
    assert found["d4" * 20] == []


def test_migration_10_fills_in_the_commit_of_older_errors(tmp_path):
    import duckdb

    p = tmp_path / "v9.duckdb"
    con = duckdb.connect(str(p))
    con.execute("BEGIN")
    schema.migrate(con, upto=9)
    con.execute("INSERT INTO runs (run_id, file, commit_hash) VALUES (1, 'm1/renamed-run.json', ?)", [A])
    con.execute("INSERT INTO ingest_files (file, kind, status, run_id) VALUES ('m1/renamed-run.json', 'results', "
                "'ok', 1)")
    for f in ("m1/renamed-run.json", f"m1/{B[:8]}-env.json", f"m1/{C}.carried", "benchmarks.json"):
        con.execute("INSERT INTO ingest_errors VALUES (?, 'k', 'r', 1, now()::TIMESTAMP)", [f])
    con.execute("COMMIT")
    con.close()
    store.write(p, lambda c: None)  # a writer migrates
    assert query(p, "SELECT file, commit_hash FROM ingest_errors ORDER BY file")[1] == [
        ("benchmarks.json", None), ("m1/b2b2b2b2-env.json", B[:8]), (f"m1/{C}.carried", C),
        ("m1/renamed-run.json", A)]


def test_an_older_database_is_read_with_the_commit_its_migration_fills_in(tmp_path):
    """A file at version 9 (no ingest_errors.commit_hash): a reader reads its migrated copy, where
    migration 10 filled the column from asv's file name, so the gate finds the error by commit."""
    import duckdb

    from xrt.db import store

    p = tmp_path / "v9.duckdb"
    con = duckdb.connect(str(p))
    con.execute("BEGIN")
    schema.migrate(con, upto=9)
    con.execute("INSERT INTO ingest_errors VALUES (?, 'truncated', 'r', 1, now()::TIMESTAMP)", [f"m1/{B[:8]}-e.json"])
    con.execute("COMMIT")
    con.close()
    with store.read(p) as con:
        assert gate._errors(con, B) == [f"ingest error in m1/{B[:8]}-e.json: truncated: r"]
        assert gate._errors(con, A) == []


def test_result_files_are_asvs_own():
    """asv's result files only: not its machine.json / benchmarks.json, nor an xrt sidecar beside them."""
    name = result_names.result_file_name(A, "existing-py")
    assert result_names.is_result_file(name) and result_names.is_result_file_of(name, A)
    for other in ("machine.json", "benchmarks.json", name[:-len(".json")] + ".xrt.json",
                  name[:-len(".json")] + ".xrt", f"{A}.carried"):
        assert not result_names.is_result_file(other) and not result_names.is_result_file_of(other, A), other


def test_classify_is_asvs_reading_of_a_value():
    assert [asv_files.classify(v) for v in (None, math.nan, math.inf, -math.inf, 0, 1.5, -2.0, True, "x")] == [
        "failed", "skipped", "failed", "failed", "ok", "ok", "ok", "ok", "ok"]


def test_result_file_naming_is_asvs():
    results = pytest.importorskip("asv.results")
    for env in ("virtualenv-py3.11", "conda-py3.8-numpy", "x" * 200):
        name = Path(results.get_filename("m1", A, env)).name
        assert result_names.is_result_file_of(name, A) and not result_names.is_result_file_of(name, B)
        assert result_names.commit_of_name(f"m1/{name}") == result_names.result_file_prefix(A) == A[:8]
        assert result_names.result_file_name(A, env) == name
    assert result_names.commit_of_name("m1/machine.json") is None
    assert result_names.commit_of_name("benchmarks.json") is None


def test_schema_1_reads_as_asvs_own_update_to_schema_2():
    """asv_files reads a schema-1 file itself (asv.results.Results.update_to_2 rounds stats to 5 digits,
    needs date/python/requirements and costs importing asv); the rows are those of asv's update."""
    import copy
    import json

    results = pytest.importorskip("asv.results")
    v1 = asvgen.v1_file(A)
    v2 = {**results.Results.update_to_2(copy.deepcopy(v1)), "version": 2}
    known = asv_files.parse_benchmarks(json.dumps(asvgen.BENCHMARKS).encode())

    def rows(d):
        run = asv_files.parse_result(json.dumps(d).encode(), "m1", known)
        return sorted(zip(*(run.columns[c] for c in asv_files.VALUE_COLUMNS)), key=repr)

    assert len(rows(v1)) == 6 and rows(v1) == rows(v2)
