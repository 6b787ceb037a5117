"""xrt.db ingest: values that are no measurement (booleans, strings, negative times, NaN/inf/negative or
non-numeric samples) are stored with status 'bad' and no value, and named in ingest_errors; the rest is kept."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402
from conftest import ro

from xrt.db.ingest import ingest  # noqa: E402
from xrt.db.query import query  # noqa: E402

NAN, INF = math.nan, math.inf
BENCH = {
    **asvgen.BENCHMARKS,
    "suite.time_a": {"type": "time", "unit": "seconds", "params": [], "param_names": []},
    "suite.time_b": {"type": "time", "unit": "seconds", "params": [], "param_names": []},
    "suite.track_neg": {"type": "track", "unit": "items", "params": [], "param_names": []},
    "suite.track_bool": {"type": "track", "unit": "items", "params": [], "param_names": []},
}


def plain(v, samples=None):
    return [[v], [], "v", 1_700_000_000_000, 1.0, None, None, None, None, None, None,
            None if samples is None else [samples]]


def q(db, sql, params=None):
    return query(db, sql, params)[1]


def _ingest(tmp_path, results: dict, benchmarks=BENCH):
    root = asvgen.make_results(tmp_path / "results",
                               {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1), results=results)},
                               benchmarks=benchmarks)
    db = tmp_path / "x.duckdb"
    lines: list[str] = []
    rep = ingest(root, db, echo=lines.append)
    return db, rep, lines


# (benchmark, row, what the reason must say); every file also has one good plain value
CASES = {
    "json-true": ("suite.time_a", plain(True), "value true is a boolean"),
    "negative-time": ("suite.time_a", plain(-0.5), "value -0.5 is negative"),
    "string": ("suite.time_a", plain("fast"), 'value "fast" is not a number'),
    "nan-sample": ("suite.time_a", plain(0.5, [0.5, NAN, 0.4]), "sample NaN is not finite"),
    "inf-sample": ("suite.time_a", plain(0.5, [0.5, INF]), "sample Infinity is not finite"),
    "negative-sample": ("suite.time_a", plain(0.5, [0.5, -0.1]), "sample -0.1 is negative"),
    "string-sample": ("suite.time_a", plain(0.5, [0.5, "x"]), 'sample "x" is not a number'),
    "bool-sample": ("suite.time_a", plain(0.5, [0.5, False]), "sample false is not a number"),
    "track-bool": ("suite.track_bool", plain(True), "value true is a boolean"),
}


@pytest.mark.parametrize("with_benchmarks_json", [True, False])
@pytest.mark.parametrize("case", list(CASES))
def test_bad_value_is_named_and_never_a_measurement(case, with_benchmarks_json, tmp_path):
    name, row, why = CASES[case]
    results = {name: row, "suite.time_b": plain(0.25, [0.25, 0.26])}
    db, rep, lines = _ingest(tmp_path, results, BENCH if with_benchmarks_json else {})
    assert rep.ingested == 1
    assert q(db, "SELECT status, value, samples FROM results WHERE benchmark = ?", [name]) == [("bad", None, None)]
    assert q(db, "SELECT status, value FROM results WHERE benchmark = 'suite.time_b'") == [("ok", 0.25)]
    errs = q(db, "SELECT file, kind, reason FROM ingest_errors WHERE kind = 'bad-value'")
    assert len(errs) == 1 and errs[0][0] == "m1/00000001-env.json"
    assert name in errs[0][2] and why in errs[0][2], errs
    assert sum(1 for s in lines if name in s and why in s) == 1
    assert q(db, "SELECT n_values, n_ok, n_failed, n_skipped FROM runs") == [(2, 1, 0, 0)]
    # nothing the judge or the detector reads: no ok value, no sample below zero or not finite
    assert q(db, "SELECT count(*) FROM results WHERE status = 'ok' AND (value < 0 OR NOT isfinite(value) OR "
             "list_min(samples) < 0 OR NOT list_bool_and(list_transform(samples, lambda x: isfinite(x))))") == [(0,)]


def test_parameterized_bad_value_names_its_parameters(tmp_path):
    row = [[1.0, True, -2.0, 4.0], asvgen.PARAMS, "v", 1_700_000_000_000, 1.0, None, None, None, None, None, None,
           [[1.0], [1.0], [1.0], [4.0, NAN]]]
    db, rep, _ = _ingest(tmp_path, {"suite.time_param": row})
    got = q(db, "SELECT param_key, status, value FROM results ORDER BY param_index")
    assert got == [("'a', 1", "ok", 1.0), ("'a', 2", "bad", None), ("'b', 1", "bad", None), ("'b', 2", "bad", None)]
    reasons = sorted(r for (r,) in q(db, "SELECT reason FROM ingest_errors WHERE kind = 'bad-value'"))
    assert len(reasons) == 3
    assert any("suite.time_param ['a', 2]: value true" in r for r in reasons)
    assert any("suite.time_param ['b', 1]: value -2.0 is negative" in r for r in reasons)
    assert any("suite.time_param ['b', 2]: sample NaN" in r for r in reasons)


def test_negative_track_values_and_asv_failures_and_skips_stay_as_they_were(tmp_path):
    db, rep, _ = _ingest(tmp_path, {"suite.track_neg": plain(-3), "suite.time_a": plain(NAN),
                                    "suite.time_b": plain(None)})
    assert rep.errors == []
    assert q(db, "SELECT benchmark, status, value FROM results ORDER BY benchmark") == [
        ("suite.time_a", "skipped", None), ("suite.time_b", "failed", None), ("suite.track_neg", "ok", -3.0)]


def test_many_bad_values_are_counted_not_listed_one_by_one(tmp_path):
    results = {f"suite.time_{i:03d}": plain(-1.0) for i in range(50)}
    db, rep, _ = _ingest(tmp_path, results, {})
    assert q(db, "SELECT count(*) FROM results WHERE status = 'bad'") == [(50,)]
    errs = q(db, "SELECT reason FROM ingest_errors WHERE kind = 'bad-value'")
    assert len(errs) == 21 and "more bad values" in errs[-1][0]


@pytest.mark.parametrize("head_row", [plain(-0.5, [-0.5] * 6), plain(0.5, [0.5, NAN, 0.5, 0.5, 0.5, 0.5]),
                                      plain(True, [1.0] * 6)], ids=["negative", "nan-sample", "bool"])
def test_the_gate_never_judges_a_bad_value(head_row, tmp_path):
    """What the gate saw before: ratio -1.000 (negative times), ratio nan (a NaN sample), 1.0 for true."""
    from xrt.track import gate

    root = asvgen.make_results(tmp_path / "results", {
        "m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1), date_ms=1_700_000_000_000,
                                          results={"suite.time_a": plain(0.5, [0.5] * 6)}),
        "m1/00000002-env.json": asvgen.v2_file(asvgen.sha(2), date_ms=1_700_000_001_000,
                                          results={"suite.time_a": head_row})}, benchmarks=BENCH)
    db = tmp_path / "x.duckdb"
    ingest(root, db, echo=lambda s: None)
    v = gate.judge(ro(db), asvgen.sha(1), asvgen.sha(2), history=False)
    ratios = [r["ratio"] for r in v.regressions + v.clock]
    assert ratios == [] and v.compared == 0
    assert v.code == gate.CANNOT_JUDGE  # fails closed: the head value is no measurement
    assert any("suite.time_a" in p for p in v.problems)


def test_real_zero_and_one_samples_and_negative_track_samples_stay_ok(tmp_path):
    """Arrow reads JSON true/false as 1.0/0.0, so files with those samples are parsed again row by row:
    real numbers 0.0 and 1.0 (and a track benchmark's negative samples) stay ok."""
    results = {"suite.time_a": plain(1.0, [1.0, 0.0, 1.0]), "suite.track_neg": plain(-3, [-3, -2]),
               "suite.time_b": plain(0.25, [0.25, 0.26])}
    db, rep, _ = _ingest(tmp_path, results)
    assert rep.errors == []
    assert q(db, "SELECT benchmark, status, value, samples FROM results ORDER BY benchmark") == [
        ("suite.time_a", "ok", 1.0, [1.0, 0.0, 1.0]), ("suite.time_b", "ok", 0.25, [0.25, 0.26]),
        ("suite.track_neg", "ok", -3.0, [-3.0, -2.0])]
