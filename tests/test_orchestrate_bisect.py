"""xrt bisect's halving, with a fake runner that writes asv results instead of using a GPU."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.db.ingest import ingest  # noqa: E402
from xrt.orchestrate.bisect import bisect  # noqa: E402
from xrt.track import synth  # noqa: E402


def _history(tmp_path, n, level, seed):
    """A git history of ``n`` commits whose first and last are measured (stored) at ``level(i)``,
    and a fake runner that "measures" the commits it is given at the same levels: (commits, db, calls, runner)."""
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, n)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    rng = np.random.default_rng(seed)
    for i in (0, n - 1):  # only GOOD and BAD are measured
        synth.write_run(root, "h100", commits[i], synth.samples(rng, level(i)), synth.samples(rng, 5e-6), i)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    calls = []

    def fake_runner(repo_, pair, results, bench, machine, profile):
        calls.append(list(pair))
        assert re.search(bench, synth.OP) and not re.search(bench, synth.OP + "2") and machine == "h100"
        for commit in pair:  # the good commit and the candidate, in one job
            i = commits.index(commit)
            synth.write_run(results, "h100", commit, synth.samples(rng, level(i)), synth.samples(rng, 5e-6), i)

    return repo, commits, db, calls, fake_runner


@pytest.mark.parametrize("culprit", [1, 7, 16])
def test_bisect_finds_the_first_slow_commit(tmp_path, culprit):
    repo, commits, db, calls, fake_runner = _history(tmp_path, 17, lambda i: 50e-6 * (1.08 if i >= culprit else 1.0),
                                                     culprit)
    res = bisect(db, repo, "Square", commits[0], commits[16], runner=fake_runner, log=lambda s: None)
    assert res.culprit == commits[culprit] and res.status == "found"
    # 16 candidates: log2(16) steps, each measuring GOOD beside a candidate never measured before
    assert len(calls) == 4 and all(c[0] == commits[0] for c in calls) and len({c[1] for c in calls}) == 4
    assert res.measured == [c[1] for c in calls]
    # the evidence: each step's verdict agrees with where the slowdown was planted
    assert [s.bad for s in res.steps] == [commits.index(s.commit) >= culprit for s in res.steps]
    assert all((s.ratio > 1.04) == s.bad for s in res.steps)


def test_bisect_stops_at_its_budget_with_the_narrowed_range(tmp_path):
    repo, commits, db, calls, fake_runner = _history(tmp_path, 17, lambda i: 50e-6 * (1.08 if i >= 5 else 1.0), 3)
    res = bisect(db, repo, "Square", commits[0], commits[16], runner=fake_runner, budget_s=1e-9, log=lambda s: None)
    assert res.culprit is None and res.status == "budget" and len(calls) == 1  # the first step always runs
    assert (res.last_good, res.first_bad) == (commits[0], commits[8])  # chain[7] = commits[8] was bad


def test_bisect_says_when_nothing_moved_and_measures_nothing(tmp_path):
    repo, commits, db, calls, fake_runner = _history(tmp_path, 5, lambda i: 50e-6, 4)
    lines = []
    res = bisect(db, repo, "Square", commits[0], commits[4], runner=fake_runner, log=lines.append)
    assert res.culprit is None and res.status == "nothing moved" and calls == []
    assert any("nothing moved" in ln for ln in lines), lines


def test_bisect_refuses_a_bad_that_is_not_after_good(tmp_path):
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, 3)
    with pytest.raises(ValueError, match="not a first-parent descendant"):
        bisect(tmp_path / "db.duckdb", repo, "x", commits[2], commits[0], runner=lambda *a: None, log=lambda s: None)


def test_bisect_refuses_an_improvement_with_exit_2(tmp_path, capsys):
    """GOOD..BAD 0.48x faster: nothing to blame; `xrt bisect` says why and measures nothing."""
    from xrt.cli import main

    repo = tmp_path / "repo"
    commits = synth.git_history(repo, 5)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    rng = np.random.default_rng(2)
    for i, lv in ((0, 50e-6), (4, 0.479 * 50e-6)):
        synth.write_run(root, "h100", commits[i], synth.samples(rng, lv), synth.samples(rng, 5e-6), i)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code = main(["bisect", "Square", commits[0], commits[4], "--db", str(db), "--repo", str(repo),
                 "--results", str(tmp_path / "steps")])
    err = capsys.readouterr().err
    assert code == 2 and "an improvement" in err and "not a slowdown" in err and "0.4" in err
    assert "first bad commit" not in err
    assert not (tmp_path / "steps").exists()  # nothing measured
