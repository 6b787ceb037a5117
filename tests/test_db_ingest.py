"""xrt.db: parsing both asv schemas, ingest (with and without git), bad input, idempotence, migrations, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402

from xrt.cli import main as xrt_main  # noqa: E402
from xrt.db import schema, store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.db.query import query  # noqa: E402


def q(db, sql, params=None):
    return query(db, sql, params)[1]


def run_ingest(results, db, repo=None):
    lines: list[str] = []
    rep = ingest(results, db, repo, echo=lines.append)
    return rep, lines


@pytest.fixture
def two_schemas(tmp_path):
    root = asvgen.make_results(tmp_path / "results", {
        "m1/00000001-virtualenv-py3.11.json": asvgen.v2_file(asvgen.sha(1), date_ms=1_700_000_000_000),
        "m1/00000002-virtualenv-py3.8.json": asvgen.v1_file(asvgen.sha(2), date_ms=1_600_000_000_000),
    })
    return root, tmp_path / "xrt.duckdb"


def test_schema2_and_schema1_values_failures_skips(two_schemas):
    root, db = two_schemas
    rep, lines = run_ingest(root, db)
    assert rep.errors == []
    assert (rep.values_ok, rep.failures, rep.skips) == (4 + 3, 2 + 2, 1 + 1)
    assert any("no --repo" in s for s in lines) and sum("no --repo" in s for s in lines) == 1
    rows = q(db, "SELECT r.asv_schema, v.status, count(*) FROM results v JOIN runs r USING (run_id) "
             "GROUP BY ALL ORDER BY ALL")
    assert rows == [(1, "failed", 2), (1, "ok", 3), (1, "skipped", 1), (2, "failed", 2), (2, "ok", 4),
                    (2, "skipped", 1)]
    # value is NULL exactly when the status is not ok
    assert q(db, "SELECT count(*) FROM results WHERE (value IS NULL) <> (status <> 'ok')") == [(0,)]


def test_parameterized_rows_stats_samples_and_derived(two_schemas):
    root, db = two_schemas
    run_ingest(root, db)
    rows = q(db, """SELECT param_index, params, param_key, value, status, samples, ci_99_a, ci_99_b, q25, q75,
                    number, repeat, unit, gbps, tflops FROM results
                    WHERE benchmark = 'suite.time_param' AND commit_hash = ? ORDER BY param_index""", [asvgen.sha(1)])
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    assert rows[0][1] == ["'a'", "1"] and rows[3][2] == "'b', 2"
    assert [r[4] for r in rows] == ["ok", "failed", "skipped", "ok"]
    assert rows[0][3] == 1.0 and rows[1][3] is None and rows[2][3] is None
    assert rows[0][5] == [1.0, 1.1] and rows[1][5] is None
    assert rows[3][6:12] == (3.9, 4.1, 3.95, 4.05, 1.0, 5.0)
    assert rows[0][12] == "seconds"
    assert rows[0][13] == pytest.approx(1e9 / 1.0 / 1e9) and rows[3][13] == pytest.approx(4e9 / 4.0 / 1e9)
    assert rows[3][14] == pytest.approx(2e12 / 4.0 / 1e12)
    assert rows[1][13] is None  # no value, no rate
    plain = q(db, "SELECT value, samples, ci_99_a, number, repeat, unit, gbps FROM results "
              "WHERE benchmark = 'suite.time_plain' AND commit_hash = ?", [asvgen.sha(1)])
    assert plain == [(0.5, [0.5, 0.49, 0.51], 0.49, 10.0, 10.0, "seconds", None)]
    track = q(db, "SELECT value, unit, samples FROM results WHERE benchmark = 'suite.track_count'")
    assert track == [(42.0, "items", None)]
    v1 = q(db, "SELECT value, ci_99_a, ci_99_b, q25, number, samples FROM results WHERE commit_hash = ? "
           "AND benchmark = 'suite.time_param' AND param_index = 0", [asvgen.sha(2)])
    assert v1 == [(1.1, 1.0, 1.2, 1.05, 5.0, [1.1, 1.2])]


def test_without_repo_commit_order_by_dates(two_schemas):
    root, db = two_schemas
    run_ingest(root, db)
    # the schema-1 file's commit is older by date, so it comes first
    assert q(db, "SELECT hash, position, source FROM commits ORDER BY position") == [
        (asvgen.sha(2), 0, "results"), (asvgen.sha(1), 1, "results")]


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="Ada", GIT_AUTHOR_EMAIL="ada@example.com", GIT_COMMITTER_NAME="Ada",
               GIT_COMMITTER_EMAIL="ada@example.com")
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture
def git_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    hashes = []
    for i, day in enumerate(("2024-01-01", "2024-01-02", "2024-01-03")):
        (repo / "f.txt").write_text(str(i))
        _git(repo, "add", "f.txt")
        _git(repo, "commit", "-q", "-m", f"change {i}\n\nbody {i}", date=f"{day}T12:00:00+00:00")
        hashes.append(_git(repo, "rev-parse", "HEAD"))
    return repo, hashes


def test_with_repo_first_parent_order_and_facts(tmp_path, git_repo):
    repo, h = git_repo
    # dates in the files deliberately disagree with git: git's order must win
    root = asvgen.make_results(tmp_path / "results", {
        f"m1/{h[2][:8]}-env.json": asvgen.v2_file(h[2], date_ms=1_000),
        f"m1/{h[0][:8]}-env.json": asvgen.v2_file(h[0], date_ms=9_000),
    })
    db = tmp_path / "x.duckdb"
    rep, lines = run_ingest(root, db, repo=str(repo))
    assert rep.errors == [] and not any("no --repo" in s for s in lines)
    rows = q(db, "SELECT hash, position, first_parent_index, author, message, parents, source, "
             "strftime(author_date, '%Y-%m-%d') FROM commits ORDER BY position")
    assert [r[0] for r in rows] == [h[0], h[2]]
    assert [r[2] for r in rows] == [0, 2]
    assert rows[1][3] == "Ada <ada@example.com>" and rows[1][4] == "change 2\n\nbody 2"
    assert rows[1][5] == [h[1]] and rows[0][5] == [] and rows[0][6] == "git" and rows[1][7] == "2024-01-03"


def test_commit_not_in_repository(tmp_path, git_repo):
    repo, h = git_repo
    root = asvgen.make_results(tmp_path / "results", {
        f"m1/{h[1][:8]}-env.json": asvgen.v2_file(h[1]),
        "m1/deadbeef-env.json": asvgen.v2_file("deadbeef" * 5),
    })
    db = tmp_path / "x.duckdb"
    rep, lines = run_ingest(root, db, repo=str(repo))
    assert [(f, k) for f, k, _ in rep.errors] == [("m1/deadbeef-env.json", "unknown-commit")]
    assert [s for s in lines if "deadbeef-env.json" in s][0].count("\n") == 0
    assert "not in the repository" in lines[-1] or any("not in the repository" in s for s in lines)
    assert q(db, "SELECT DISTINCT commit_hash FROM results") == [(h[1],)]
    assert q(db, "SELECT file, kind FROM ingest_errors") == [("m1/deadbeef-env.json", "unknown-commit")]


BAD = {
    "truncated": lambda good: good[: len(good) // 2],
    "corrupt": lambda good: b"\xff\xfe\x00garbage" + good[10:],
    "not-asv": lambda good: b'{"hello": "world"}',
    "version-9": lambda good: good.replace(b'"version": 2}', b'"version": 9}'),
    "half-bad": lambda good: good.replace(b'"suite.track_count": [[42]', b'"suite.track_count": [[42, 43]'),
}


def test_every_bad_input_is_reported_and_the_rest_ingested(tmp_path):
    files = {f"m1/{asvgen.sha(i)[-8:]}-env.json": asvgen.v2_file(asvgen.sha(i), date_ms=1_700_000_000_000 + i)
             for i in range(7)}
    files["m1/unknownb-env.json"] = asvgen.v2_file(asvgen.sha(99), results={
        **asvgen.v2_results(), "suite.time_gone": [[3.0], [], "v-gone"]})
    root = asvgen.make_results(tmp_path / "results", files)
    good = (root / "m1" / f"{asvgen.sha(0)[-8:]}-env.json").read_bytes()
    bad_names = {}
    for i, (kind, make) in enumerate(BAD.items(), start=1):
        p = root / "m1" / f"{asvgen.sha(i)[-8:]}-env.json"
        p.write_bytes(make(p.read_bytes()))
        bad_names[p.relative_to(root).as_posix()] = kind
    assert good  # sanity
    db = tmp_path / "x.duckdb"
    rep, lines = run_ingest(root, db)
    errs = {f: (k, r) for f, k, r in rep.errors}
    # a benchmark removed from the suite (not in benchmarks.json) is history: a notice, not an error
    assert set(errs) == set(bad_names)
    assert [s for s in lines if "not in benchmarks.json" in s and "suite.time_gone" in s and "rows kept" in s]
    kinds = {bad_names[f]: errs[f][0] for f in bad_names}
    assert kinds == {"truncated": "truncated", "corrupt": "corrupt", "not-asv": "unknown-format",
                     "version-9": "unknown-format", "half-bad": "unknown-format"}
    assert "version 9" in errs[[f for f, k in bad_names.items() if k == "version-9"][0]][1]
    for f in errs:  # one line per error, naming the file
        assert sum(1 for s in lines if f in s) == 1
    # good files: 2 of 7 + the unknown-benchmark file (rows kept, the unknown one included)
    assert q(db, "SELECT count(DISTINCT run_id) FROM results") == [(3,)]
    assert q(db, "SELECT count(*) FROM results WHERE benchmark = 'suite.time_gone' AND unit IS NULL") == [(1,)]
    # never half a file: the half-bad file's good benchmarks are not there either
    half = [f for f, k in bad_names.items() if k == "half-bad"][0]
    assert q(db, "SELECT count(*) FROM runs WHERE file = ?", [half]) == [(0,)]
    assert q(db, "SELECT count(*) FROM ingest_errors") == [(len(errs),)]
    # --strict: the same input is a failure; without it, success
    assert xrt_main(["db", "ingest", str(root), "--db", str(tmp_path / "y.duckdb")]) == 0
    assert xrt_main(["db", "ingest", str(root), "--db", str(tmp_path / "z.duckdb"), "--strict"]) == 1


def test_idempotent_and_changed_file_replaces_its_rows(two_schemas):
    root, db = two_schemas
    rep1, _ = run_ingest(root, db)
    inode = db.stat().st_ino
    rep2, _ = run_ingest(root, db)
    assert rep1.ingested == 2 and (rep2.ingested, rep2.unchanged, rep2.wrote) == (0, 2, False)
    assert db.stat().st_ino == inode  # nothing new: the file was not even rewritten
    before = q(db, "SELECT count(*), sum(value) FROM results")
    f = root / "m1" / "00000001-virtualenv-py3.11.json"
    f.write_text(json.dumps(asvgen.v2_file(asvgen.sha(1), results=asvgen.v2_results(scale=10.0))))
    rep3, _ = run_ingest(root, db)
    assert (rep3.ingested, rep3.unchanged) == (1, 1)
    after = q(db, "SELECT count(*), sum(value) FROM results")
    assert after[0][0] == before[0][0] and after[0][1] != before[0][1]
    assert q(db, "SELECT value FROM results WHERE commit_hash = ? AND benchmark = 'suite.time_plain'",
             [asvgen.sha(1)]) == [(5.0,)]
    assert q(db, "SELECT count(*) FROM runs") == [(2,)]
    # a new file is added without touching the others
    asvgen.write_json(root / "m1" / "00000003-env.json", asvgen.v2_file(asvgen.sha(3), date_ms=1_800_000_000_000))
    rep4, _ = run_ingest(root, db)
    assert (rep4.ingested, rep4.unchanged) == (1, 2)
    assert q(db, "SELECT hash FROM commits ORDER BY position DESC LIMIT 1") == [(asvgen.sha(3),)]


def test_gpu_facts_from_sidecar_and_machine_json(tmp_path):
    root = asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    asvgen.write_json(root / "m1" / "00000001-env.xrt.json", {
        "gpu": {"name": "NVIDIA H100 80GB HBM3", "driver": "560.35", "cuda": "12.6", "sm_clock_mhz": 1980,
                "peak_gbps": 3350.0, "weird_fact": [1, 2]},
        "software": {"torch": "2.5.1", "triton": "3.1.0"}, "throttle_share": 0.02,
        "benchmarks": {"suite.time_plain": {"bytes": 5e8, "sol_s": 0.25}}})
    db = tmp_path / "x.duckdb"
    rep, _ = run_ingest(root, db)
    assert rep.errors == []
    r = q(db, "SELECT gpu_model, driver, cuda, torch, triton, sm_clock_mhz, throttle_share, peak_gbps, "
          "facts->>'$.gpu.weird_fact' FROM runs")
    assert r == [("NVIDIA H100 80GB HBM3", "560.35", "12.6", "2.5.1", "3.1.0", 1980.0, 0.02, 3350.0, "[1,2]")]
    v = q(db, "SELECT gbps, pct_sol FROM results WHERE benchmark = 'suite.time_plain'")
    assert v == [(pytest.approx(1.0), pytest.approx(50.0))]
    # a changed sidecar is a changed run
    asvgen.write_json(root / "m1" / "00000001-env.xrt.json", {"gpu": {"name": "NVIDIA A100"}})
    rep2, _ = run_ingest(root, db)
    assert rep2.ingested == 1 and q(db, "SELECT gpu_model FROM runs") == [("NVIDIA A100",)]


def test_migration_keeps_an_old_database_usable(tmp_path, two_schemas):
    root, db = two_schemas
    con = duckdb.connect(str(db))
    con.execute("BEGIN")
    schema.migrate(con, upto=1)
    con.execute("INSERT INTO results (run_id, machine, commit_hash, benchmark, param_key, value, status) "
                "VALUES (1000, 'old', 'abc', 'legacy.time_x', '', 3.5, 'ok')")
    con.execute("COMMIT")
    con.close()
    with store.read(db) as c:
        assert schema.current_version(c) == schema.LATEST  # readers read a migrated copy...
        assert c.execute("SELECT value, ref_samples FROM results").fetchall() == [(3.5, None)]
    with duckdb.connect(str(db), read_only=True) as raw:  # ...and leave the file at its version
        assert raw.execute("SELECT max(version) FROM schema_version").fetchall() == [(1,)]
    run_ingest(root, db)
    assert q(db, "SELECT max(version) FROM schema_version") == [(schema.LATEST,)]
    assert q(db, "SELECT value FROM results WHERE machine = 'old'") == [(3.5,)]
    assert q(db, "SELECT count(*) FROM series WHERE machine = 'm1'")[0][0] > 0
    # a database from a newer xrt is refused by writers, with the reason
    store.write(db, lambda c: c.execute("INSERT INTO schema_version VALUES (999, now()::TIMESTAMP, 'future')"))
    with pytest.raises(RuntimeError, match="newer"):
        store.write(db, lambda c: None)


def test_cli_query_formats_and_refusals(two_schemas, capsys):
    root, db = two_schemas
    assert xrt_main(["db", "ingest", str(root), "--db", str(db)]) == 0
    capsys.readouterr()
    sql = "SELECT status, count(*) AS n FROM results GROUP BY status ORDER BY status"
    assert xrt_main(["db", "query", "--db", str(db), sql, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["status,n", "failed,4", "ok,7", "skipped,2"]
    assert xrt_main(["db", "query", "--db", str(db), sql, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[1] == {"status": "ok", "n": 7}
    assert xrt_main(["db", "query", "--db", str(db), sql]) == 0
    assert "skipped" in capsys.readouterr().out
    for bad, why in (("DELETE FROM results", "read-only"), ("SELECT 1; SELECT 2", "one SQL statement"),
                     ("SELEC nonsense", "parse"), ("SELECT * FROM no_such_table", "no_such_table")):
        assert xrt_main(["db", "query", "--db", str(db), bad]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1
    assert q(db, "SELECT count(*) FROM results") == [(13,)]  # the DELETE did nothing
    assert xrt_main(["db", "query", "--db", str(db.parent / "missing.duckdb"), "SELECT 1"]) == 2
    assert "missing.duckdb" in capsys.readouterr().err


def test_cli_export_and_stats(two_schemas, tmp_path, capsys):
    root, db = two_schemas
    asvgen.write_json(root / "m2" / "00000005-env.json", asvgen.v2_file(asvgen.sha(5), machine="m2"))
    assert xrt_main(["db", "ingest", str(root), "--db", str(db)]) == 0
    out = tmp_path / "parquet"
    assert xrt_main(["db", "export", "--db", str(db), "--parquet", str(out)]) == 0
    assert sorted(p.name for p in (out / "results").iterdir()) == ["machine=m1", "machine=m2"]
    n = duckdb.sql(f"SELECT count(*), count(DISTINCT machine) FROM read_parquet('{out}/results/*/*.parquet', "
                   "hive_partitioning = true)").fetchall()
    assert n == q(db, "SELECT count(*), count(DISTINCT machine) FROM results")
    assert (out / "commits.parquet").exists()
    capsys.readouterr()
    assert xrt_main(["db", "stats", "--db", str(db), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["machines"], s["commits"], s["benchmarks"], s["values"], s["failures"], s["skips"],
            s["ingest_errors"]) == (2, 3, 4, 11, 6, 3, 0)
    assert s["file_bytes"] == db.stat().st_size
    assert xrt_main(["db", "stats", "--db", str(db)]) == 0
    assert "failures" in capsys.readouterr().out


def test_missing_results_dir_is_a_clear_error(tmp_path, capsys):
    assert xrt_main(["db", "ingest", str(tmp_path / "nope"), "--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "no such results directory" in err


def test_a_ctrl_c_in_the_judgement_commits_nothing(tmp_path, monkeypatch, capsys, signal_defaults):
    """DuckDB reports a Ctrl-C in a query as RuntimeError "Query interrupted", which the ingest's
    judgement of the newest commits takes for a failed judgement: the write still commits nothing."""
    import signal

    from xrt.track import newest

    root = asvgen.make_results(tmp_path / "results", {
        f"m1/{asvgen.sha(i)[:8]}-env.json": asvgen.v2_file(asvgen.sha(i), date_ms=1_700_000_000_000 + i)
        for i in range(1, 4)})
    db = tmp_path / "x.duckdb"

    def interrupted(con, echo):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            raise RuntimeError("Query interrupted") from None

    monkeypatch.setattr(newest, "after_ingest", interrupted)
    assert xrt_main(["db", "ingest", str(root), "--db", str(db)]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "xrt: interrupted"
    assert not db.exists()  # nothing committed: the file was never made
