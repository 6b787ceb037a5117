"""Series out of the database a batch at a time: the same series, whatever the batch size."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("duckdb")

from conftest import ro

from xrt.db.perf import build_synthetic  # noqa: E402
from xrt.track import load  # noqa: E402
from xrt.track.regressions import detect_db  # noqa: E402


def _key(s):
    return (s.machine, s.benchmark, s.param_key, tuple(s.commits), tuple(np.round(s.values, 15)),
            tuple(s.off), tuple(np.round(s.flat, 15)))


def test_batches_give_the_series_one_query_gives(tmp_path):
    db = tmp_path / "x.duckdb"
    build_synthetic(db, 6000, machines=2, benchmarks=6, params=5)  # 60 series of 100 commits
    whole = list(load.iter_series(ro(db), batch_values=10**9))
    assert len(whole) == 60 and all(len(s.commits) >= 90 for s in whole)  # ~1 % failed values left out
    for batch in (1, 150, 700):  # one pair a batch (a pair bigger than the batch), several, many
        parts = list(load.iter_series(ro(db), batch_values=batch))
        assert [_key(s) for s in parts] == [_key(s) for s in whole]
    one = list(load.iter_series(ro(db), machine="synthetic-1", benchmark=r"Op3\.", batch_values=100))
    assert {(s.machine, s.benchmark) for s in one} == {("synthetic-1", "ops.Op3.time_op")} and len(one) == 5
    assert list(load._pack([("a", "x", 5), ("a", "y", 5), ("b", "x", 20), ("b", "y", 1)], 10)) == [
        [("a", "x"), ("a", "y")], [("b", "x")], [("b", "y")]]



def test_the_detector_finds_the_same_steps_batch_by_batch(tmp_path, monkeypatch):
    import duckdb

    db = tmp_path / "x.duckdb"
    build_synthetic(db, 6000, machines=2, benchmarks=6, params=5)
    with duckdb.connect(str(db)) as con:  # a 30 % step in two series
        con.execute("""UPDATE results SET value = value * 1.3, samples = list_transform(samples, lambda x: x * 1.3)
                       WHERE benchmark IN ('ops.Op2.time_op', 'ops.Op4.time_op') AND param_index = 1
                       AND commit_hash IN (SELECT hash FROM commits WHERE position >= 50)""")
    monkeypatch.setattr(load, "BATCH_VALUES", 10**9)
    whole = detect_db(ro(db))
    monkeypatch.setattr(load, "BATCH_VALUES", 120)
    batched = detect_db(ro(db))
    assert {(r.machine, r.benchmark) for r in whole if r.kind == "regression"} == {
        (m, f"ops.Op{b}.time_op") for m in ("synthetic-0", "synthetic-1") for b in (2, 4)}
    assert batched == whole
