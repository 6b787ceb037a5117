"""xrt.db and the timing layer's sidecar ``X.xrt`` (``xrt-sidecar/1``): run facts, per-row bytes/cycles."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402

from xrt.db import schema, store  # noqa: E402
from xrt.db.export import export_parquet  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.db.query import query  # noqa: E402
from xrt.db.stats import stats  # noqa: E402

SQ = "bench_ops.Square.time_op"
SQ_PARAMS = [["'4096'", "'65536'"], ["'float32'"], ["'torch'"], ["'default'"]]
BENCHMARKS = {**asvgen.BENCHMARKS, SQ: {"name": SQ, "type": "time", "unit": "seconds", "params": SQ_PARAMS,
                                   "param_names": ["shape", "dtype", "provider", "config"], "version": "v-sq"}}


def q(db, sql, params=None):
    return query(db, sql, params)[1]


def result_file(commit: str) -> dict:
    res = asvgen.v2_results()
    res[SQ] = [[2e-6, 8e-6], SQ_PARAMS, "v-sq", 1_700_000_004_000, 3.0, [1.9e-6, 7.9e-6], [2.1e-6, 8.1e-6],
               [1.95e-6, 7.95e-6], [2.05e-6, 8.05e-6], [1, 1], [3, 3], [[2e-6, 2.1e-6, 1.9e-6], [8e-6, 8.1e-6, 7.9e-6]]]
    return asvgen.v2_file(commit, results=res)


CASES = [
    asvgen.xrt_case(SQ, ["'4096'", "'float32'", "'torch'", "'default'"], [2e-6, 2.1e-6, 1.9e-6], [1980, 1980, 1755],
               nbytes=32768.0, flops=4096.0, reasons=[0, 0, 4]),
    asvgen.xrt_case(SQ, ["'65536'", "'float32'", "'torch'", "'default'"], [8e-6, 8.1e-6, 7.9e-6], [1980, None, 1980],
               nbytes=524288.0, flops=65536.0),
]
NAME = "00000001-virtualenv-py3.11"


@pytest.fixture
def with_sidecar(tmp_path):
    root = asvgen.make_results(tmp_path / "results", {f"m1/{NAME}.json": result_file(asvgen.sha(1))},
                               benchmarks=BENCHMARKS)
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt", asvgen.xrt_sidecar(asvgen.sha(1), f"{NAME}.json", CASES))
    return root, tmp_path / "xrt.duckdb"


def run_ingest(root, db):
    lines: list[str] = []
    return ingest(root, db, echo=lines.append), lines


def test_sidecar_facts_land_in_runs(with_sidecar):
    root, db = with_sidecar
    rep, _ = run_ingest(root, db)
    assert rep.errors == [] and rep.ingested == 1
    row = q(db, "SELECT gpu_model, driver, cuda, torch, triton, sm_clock_mhz, mem_clock_mhz, throttle_share, "
            "peak_gbps, facts->>'$.cpu_load.load1', facts->>'$.sm_count', facts->>'$.schema', "
            "json_exists(facts, '$.cases') FROM runs")
    # sm clock: median over the cases of each case's median (1980, 1980); throttle: mean of (1/3, 0)
    assert row == [("NVIDIA H100 80GB HBM3", "560.35.03", "12.6", "2.5.1", "3.1.0", 1980.0, 2619.0,
                    pytest.approx(1 / 6), None, "0.5", "132", "xrt-sidecar/1", False)]


def test_per_row_bytes_gbps_cycles(with_sidecar):
    root, db = with_sidecar
    run_ingest(root, db)
    rows = q(db, "SELECT param_key, value, bytes, flops, gbps, tflops, pct_sol, sm_mhz, cycles, cycles_median, "
             "throttled_share FROM results WHERE benchmark = $b ORDER BY param_index", {"b": SQ})
    assert [r[0] for r in rows] == ["'4096', 'float32', 'torch', 'default'", "'65536', 'float32', 'torch', 'default'"]
    k0, k1 = rows
    assert k0[2:4] == (32768.0, 4096.0)
    assert k0[4] == pytest.approx(32768 / 2e-6 / 1e9) and k0[5] == pytest.approx(4096 / 2e-6 / 1e12)
    assert k0[6] is None  # no peak known for the run: pct_sol stays NULL
    assert k0[7] == 1980.0 and k0[8] == pytest.approx([2e-6 * 1980e6, 2.1e-6 * 1980e6, 1.9e-6 * 1755e6])
    assert k0[9] == pytest.approx(statistics.median(k0[8])) and k0[10] == pytest.approx(1 / 3)
    assert k1[8][1] is None and k1[9] == pytest.approx((8e-6 + 7.9e-6) / 2 * 1980e6) and k1[10] == 0.0
    assert k1[4] == pytest.approx(524288 / 8e-6 / 1e9)
    # rows without a case keep NULLs; benchmarks.json formulas still apply to them
    assert q(db, "SELECT count(*) FROM results WHERE benchmark <> $b AND (sm_mhz IS NOT NULL OR cycles IS NOT NULL)",
             {"b": SQ}) == [(0,)]
    assert q(db, "SELECT bytes FROM results WHERE benchmark = 'suite.time_param' AND param_index = 0") == [(1e9,)]
    # the view has the new columns
    assert q(db, "SELECT count(*) FROM results_by_commit WHERE cycles IS NOT NULL AND commit_position = 0") == [(2,)]


def test_a_model_steps_items_land_beside_its_time(with_sidecar):
    """A model's case carries the tokens (images) one step processes: stored per row, so throughput
    (items / time) can be read back; a kernel's case and a case with a count but no noun store none."""
    root, db = with_sidecar
    cases = [dict(CASES[0], items=8192, item_unit="tokens"), dict(CASES[1], items=64)]
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt", asvgen.xrt_sidecar(asvgen.sha(1), f"{NAME}.json", cases))
    rep, _ = run_ingest(root, db)
    assert rep.errors == []
    rows = q(db, "SELECT items, item_unit, items / value FROM results WHERE benchmark = $b ORDER BY param_index",
             {"b": SQ})
    assert rows[0][:2] == (8192.0, "tokens") and rows[0][2] == pytest.approx(8192 / 2e-6)
    assert rows[1] == (None, None, None)
    assert q(db, "SELECT count(*) FROM results WHERE items IS NOT NULL") == [(1,)]
    assert q(db, "SELECT count(items) FROM results_by_commit") == [(1,)]  # the view has the new columns


def test_sidecar_change_reingests_the_run(with_sidecar):
    root, db = with_sidecar
    run_ingest(root, db)
    again, _ = run_ingest(root, db)
    assert (again.ingested, again.unchanged, again.wrote) == (0, 1, False)
    cases = [dict(CASES[0], bytes=65536.0), CASES[1]]
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt",
                     asvgen.xrt_sidecar(asvgen.sha(1), f"{NAME}.json", cases, driver="565.57"))
    rep, _ = run_ingest(root, db)
    assert rep.ingested == 1
    assert q(db, "SELECT driver FROM runs") == [("565.57",)]
    assert q(db, "SELECT bytes FROM results WHERE benchmark = $b AND param_index = 0", {"b": SQ}) == [(65536.0,)]
    assert q(db, "SELECT count(*) FROM results") == [(9,)]  # replaced, not added


def test_corrupt_sidecar_is_an_error_and_the_rows_still_ingest(with_sidecar):
    root, db = with_sidecar
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt", '{"schema": "xrt-sidecar/1", "cases": [')
    rep, lines = run_ingest(root, db)
    assert rep.ingested == 1 and rep.values_ok == 6
    assert [(f, k) for f, k, _ in rep.errors] == [(f"m1/{NAME}.json", "bad-sidecar")]
    assert f"{NAME}.xrt" in rep.errors[0][2] and "truncated" in rep.errors[0][2]
    assert any(f"m1/{NAME}.json: sidecar {NAME}.xrt" in s for s in lines)
    assert q(db, "SELECT gpu_model, sm_clock_mhz FROM runs") == [(None, None)]
    assert q(db, "SELECT kind FROM ingest_errors") == [("bad-sidecar",)]
    assert q(db, "SELECT count(*) FROM results WHERE cycles IS NOT NULL") == [(0,)]
    # fixed: the run is re-ingested with its facts, and the error is gone
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt", asvgen.xrt_sidecar(asvgen.sha(1), f"{NAME}.json", CASES))
    rep2, _ = run_ingest(root, db)
    assert rep2.ingested == 1 and rep2.errors == []
    assert q(db, "SELECT count(*) FROM ingest_errors") == [(0,)]
    assert q(db, "SELECT count(*) FROM results WHERE cycles IS NOT NULL") == [(2,)]


def test_malformed_cases_are_reported_the_good_ones_used(with_sidecar):
    root, db = with_sidecar
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt",
                     asvgen.xrt_sidecar(asvgen.sha(1), f"{NAME}.json", [CASES[0], {"params": 3}]))
    rep, _ = run_ingest(root, db)
    assert [k for _, k, _ in rep.errors] == ["bad-sidecar"] and "1 of 2 cases" in rep.errors[0][2]
    assert q(db, "SELECT count(*) FROM results WHERE sm_mhz IS NOT NULL") == [(1,)]
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt", "[1, 2]")
    rep, _ = run_ingest(root, db)
    assert [k for _, k, _ in rep.errors] == ["bad-sidecar"] and "not a JSON object" in rep.errors[0][2]


def test_xrt_wins_over_xrt_json_and_nan_goes_through_json(with_sidecar):
    root, db = with_sidecar
    asvgen.write_json(root / "m1" / f"{NAME}.xrt.json", {"gpu": {"name": "ignored"}})
    # asv writes NaN for a skip: orjson refuses it, json reads it
    (root / "m1" / f"{NAME}.xrt").write_text((root / "m1" / f"{NAME}.xrt").read_text()
                                              .replace('"power_limit_w": 700.0', '"power_limit_w": NaN'))
    rep, _ = run_ingest(root, db)
    assert rep.errors == [] and rep.skips == 1
    assert q(db, "SELECT gpu_model FROM runs") == [("NVIDIA H100 80GB HBM3",)]


def test_export_stats_and_migration_from_version_2(with_sidecar, tmp_path):
    root, db = with_sidecar
    # a database written before migration 3
    con = duckdb.connect(str(db))
    con.execute("BEGIN")
    schema.migrate(con, upto=2)
    con.execute("COMMIT")
    con.close()
    with store.read(db) as c:  # a reader reads a migrated copy; the file stays at 2 until a writer
        assert schema.current_version(c) == schema.LATEST
        assert c.execute("SELECT count(cycles_median) FROM results_by_commit").fetchall() == [(0,)]
    with duckdb.connect(str(db), read_only=True) as raw:
        assert raw.execute("SELECT max(version) FROM schema_version").fetchall() == [(2,)]
    rep, _ = run_ingest(root, db)
    assert rep.ingested == 1
    assert q(db, "SELECT max(version) FROM schema_version") == [(schema.LATEST,)]
    assert q(db, "SELECT count(cycles_median) FROM results_by_commit") == [(2,)]
    counts = export_parquet(db, tmp_path / "pq")
    assert counts["results"] == 9
    got = duckdb.sql(f"SELECT count(*), count(cycles), max(len(cycles)), count(sm_mhz) FROM read_parquet("
                     f"'{tmp_path}/pq/results/*/*.parquet', hive_partitioning = true)").fetchall()
    assert got == [(9, 2, 3, 2)]
    s = stats(db)
    assert s["schema_version"] == schema.LATEST and s["values"] == 6


def test_pandas_works_after_an_ingest(with_sidecar):
    """An ingest in a process that had not imported pandas leaves pandas, pyarrow's and DuckDB's use of
    it working (until issue #20 an ingest kept pandas out with an import hook, which is gone)."""
    import subprocess

    root, db = with_sidecar
    code = ("import sys; from xrt.db.ingest import ingest; ingest(sys.argv[1], sys.argv[2], echo=lambda s: None); "
            "import pandas, duckdb, pyarrow as pa; "
            "assert pa.table({'a': [1]}).to_pandas().a[0] == 1; "
            "con = duckdb.connect(sys.argv[2], read_only=True); "
            "assert con.execute('SELECT count(*) FROM runs').df().iloc[0, 0] == 1")
    subprocess.run([sys.executable, "-c", code, str(root), str(db)], check=True)


def test_samples_filed_under_other_parameters_are_bad(with_sidecar):
    """asv's samples of a combination must be the timer's for those parameters (the sidecar's copy):
    the H100 run of 7d96618 filed other combinations' samples by index, and ingest stored them."""
    root, db = with_sidecar
    swapped = [dict(CASES[0], params=CASES[1]["params"]), dict(CASES[1], params=CASES[0]["params"])]
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt", asvgen.xrt_sidecar(asvgen.sha(1), f"{NAME}.json", swapped))
    rep, lines = run_ingest(root, db)
    assert rep.ingested == 1
    assert q(db, "SELECT param_index, status, value FROM results WHERE benchmark = $b ORDER BY 1", {"b": SQ}) == [
        (0, "bad", None), (1, "bad", None)]
    assert any("asv's samples (3, median 2e-06) are not the timer's for these parameters (3, median 8e-06)" in s
               for s in lines)
    # the timer's own copy agrees: nothing flagged (the fixture's other tests)
    asvgen.write_xrt(root / "m1" / f"{NAME}.xrt", asvgen.xrt_sidecar(asvgen.sha(1), f"{NAME}.json", CASES))
    run_ingest(root, db)
    assert q(db, "SELECT count(*) FROM results WHERE benchmark = $b AND status = 'ok'", {"b": SQ}) == [(2,)]
