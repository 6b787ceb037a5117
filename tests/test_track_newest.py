"""The newest commit of every series, judged at ingest (xrt.track.newest): suspected, then confirmed
or withdrawn by the detector; its checklist stored when first seen."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from conftest import rw

from xrt.cli import main  # noqa: E402
from xrt.db import store  # noqa: E402
from xrt.track import newest, synth  # noqa: E402

LEVEL = 50e-6


def _world(tmp_path, levels, plain=True):
    """One machine, one commit per level (the op's level; the plain benchmark stays put)."""
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, len(levels))
    root = tmp_path / "results"
    rng = np.random.default_rng(3)
    for i, (c, lv) in enumerate(zip(commits, levels)):
        synth.write_run(root, "cpu-vm", c, synth.samples(rng, lv), synth.samples(rng, 5e-6) if plain else None, i)
    return repo, commits, root, tmp_path / "xrt.duckdb"


def _ingest(root, db, repo):
    assert main(["db", "ingest", str(root), "--db", str(db), "--repo", str(repo)]) == 0


def _rows(db, sql):
    with store.read(db) as con:
        return con.execute(sql).fetchall()


def test_three_commits_slowdown_at_newest_is_stored_with_checklist_and_survives_detection(tmp_path, capsys):
    repo, commits, root, db = _world(tmp_path, [LEVEL, LEVEL, 1.31 * LEVEL])
    _ingest(root, db, repo)
    assert "1 suspected regression" in capsys.readouterr().err
    regs = _rows(db, 'SELECT benchmark, "commit", previous_commit, status, suspected, ratio, diag FROM regressions')
    assert len(regs) == 1
    bn, c, prev, status, suspected, ratio, diag = regs[0]
    assert (bn, c, prev, status, suspected) == (synth.OP, commits[-1], commits[-2], "new", True)
    assert 1.25 < ratio < 1.38
    assert '"op checks"' not in diag and "xrt diag square" in diag  # the op's own checks, not "not an xrt op"
    # the gate reports the same series at the same commit
    code = main(["gate", "--db", str(db), "--base", commits[-2], "--head", commits[-1], "--no-history"])
    assert code == 1 and synth.OP in capsys.readouterr().out
    # the detector cannot see the newest commits: its run must not drop the suspected row
    assert main(["regressions", "--db", str(db)]) == 0
    assert _rows(db, "SELECT suspected, status FROM regressions") == [(True, "new")]
    verdicts = dict(_rows(db, "SELECT benchmark, verdict FROM newest_judgements"))
    assert verdicts == {synth.OP: "regression", synth.PLAIN: "ok"}


def test_xrt_regressions_lists_the_suspected_rows_the_front_page_shows(tmp_path, capsys):
    """One list: the suspected newest-commit regression is in `xrt regressions`, marked as suspected."""
    import json

    repo, commits, root, db = _world(tmp_path, [LEVEL, LEVEL, 1.31 * LEVEL])
    _ingest(root, db, repo)
    capsys.readouterr()
    for extra in ([], ["--no-save"], ["--status", "new"], ["--status", "open"], ["--kind", "all"],
                  ["--machine", "cpu-vm"], ["--benchmark", "Square"]):
        assert main(["regressions", "--db", str(db), "--format", "json", "--flat", *extra]) == 0
        got = json.loads(capsys.readouterr().out)
        assert [(r["benchmark"], r["commit"], r["status"], r["suspected"]) for r in got] == [
            (synth.OP, commits[-1], "new", True)], extra
    assert main(["regressions", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "new (suspected)" in out and "(1 alert, 1 step)" in out
    for extra in (["--kind", "improvement"], ["--status", "fixed"], ["--machine", "other"], ["--benchmark", "Launch"]):
        assert main(["regressions", "--db", str(db), "--format", "json", "--flat", *extra]) == 0
        assert json.loads(capsys.readouterr().out) == [], extra


def test_a_series_with_one_commit_says_why_it_is_not_judged(tmp_path):
    repo, commits, root, db = _world(tmp_path, [LEVEL])
    _ingest(root, db, repo)
    rows = _rows(db, "SELECT verdict, reason FROM newest_judgements")
    assert rows and all(v == "not judged" and "first commit" in r for v, r in rows)
    assert _rows(db, "SELECT count(*) FROM regressions") == [(0,)]


def test_too_few_samples_and_history_is_not_judged_with_the_reason(tmp_path):
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, 2)
    root = tmp_path / "results"
    rng = np.random.default_rng(4)
    for i, c in enumerate(commits):
        synth.write_run(root, "cpu-vm", c, synth.samples(rng, LEVEL * (1 + i), n=3), None, i)
    db = tmp_path / "xrt.duckdb"
    _ingest(root, db, repo)
    (reason,) = _rows(db, f"SELECT reason FROM newest_judgements WHERE benchmark = '{synth.OP}'")[0]
    assert "too few samples" in reason and "need 5" in reason


def _ingest_first(tmp_path, root, commits, n, db, repo):
    """Ingest the results of the first ``n`` commits only (as if the later ones had not run yet)."""
    sub = tmp_path / f"first{n}"
    (sub / "cpu-vm").mkdir(parents=True)
    for f in (root / "cpu-vm").iterdir():
        if f.name == "machine.json" or any(f.name.startswith(c[:8]) for c in commits[:n]):
            (sub / "cpu-vm" / f.name).write_bytes(f.read_bytes())
    (sub / "benchmarks.json").write_bytes((root / "benchmarks.json").read_bytes())
    _ingest(sub, db, repo)


@pytest.mark.parametrize("after,expect", [(1.3, "confirmed"), (1.0, "withdrawn")])
def test_detector_confirms_a_lasting_step_and_withdraws_a_blip(tmp_path, after, expect):
    # commit 4 is 1.3x slower; suspected when it is the newest, then 6 more commits arrive
    repo, commits, root, db = _world(tmp_path, [LEVEL] * 4 + [1.3 * LEVEL] + [after * LEVEL] * 6)
    _ingest_first(tmp_path, root, commits, 5, db, repo)
    assert _rows(db, 'SELECT "commit", suspected FROM regressions') == [(commits[4], True)]
    _ingest(root, db, repo)
    assert main(["regressions", "--db", str(db)]) == 0
    rows = _rows(db, 'SELECT "commit", suspected, status FROM regressions WHERE kind = \'regression\'')
    if expect == "confirmed":
        assert rows == [(commits[4], False, "new")]  # the detector's step is the same row, no longer suspected
    else:
        assert rows == []


def test_diag_recognises_host_series():
    from xrt.track.diag import op_params

    p = op_params("bench_host.LayernormBwd.time_host", ["'1024x1024'", "'float32'", "'torch'", "'default'"])
    assert p["op"] == "layernorm_bwd" and p["provider"] == "torch"
    assert newest.REGRESSION == "regression"


def test_store_judgements_replaces_the_scope_withdraws_what_is_no_longer_suspected_and_keeps_confirmed(tmp_path):
    """The two bulk statements of store_judgements: every judgement replaces the last ones; a suspected row
    still ``new`` whose series is judged again at the same commit without a slowdown goes; a confirmed row
    (no longer suspected) and a row of another commit stay."""
    db = tmp_path / "xrt.duckdb"
    store.write(db, lambda con: None, fresh=True)

    def j(bench, commit, verdict):
        return newest.Judgement("m1", bench, "", [], "seconds", commit, "c0", verdict, "why", ratio=1.4, z=9.0,
                                p_value=1e-4, before=1.0, after=1.4, n_before=10, n_after=10)

    first = [j("a", "c1", newest.REGRESSION), j("b", "c1", newest.REGRESSION), j("c", "c1", newest.REGRESSION),
             j("d", "c1", newest.OK)]
    s = rw(db, lambda con: newest.store_judgements(con, first, diag_for=lambda rs: [None] * len(rs)))
    assert (s["series"], s["added"], s["withdrawn"]) == (4, 3, 0)
    store.write(db, lambda con: con.execute("UPDATE regressions SET suspected = false WHERE benchmark = 'b'"))
    again = [j("a", "c1", newest.OK), j("b", "c1", newest.OK), j("c", "c2", newest.OK), j("d", "c1", newest.OK)]
    s = rw(db, lambda con: newest.store_judgements(con, again, diag_for=lambda rs: [None] * len(rs)))
    assert (s["series"], s["added"], s["withdrawn"]) == (4, 0, 1)
    # a withdrawn; b confirmed, kept; c judged at another commit: its c1 row is not this judgement's to take back
    assert _rows(db, "SELECT benchmark, suspected FROM regressions ORDER BY 1") == [("b", False), ("c", True)]
    assert _rows(db, "SELECT benchmark, \"commit\", verdict, ratio, reason FROM newest_judgements ORDER BY 1") == [
        ("a", "c1", "ok", 1.4, "why"), ("b", "c1", "ok", 1.4, "why"), ("c", "c2", "ok", 1.4, "why"),
        ("d", "c1", "ok", 1.4, "why")]
    assert _rows(db, "SELECT count(*) FROM newest_judgements WHERE judged_at IS NULL") == [(0,)]
