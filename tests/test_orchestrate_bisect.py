"""xrt bisect's halving, with a fake runner that writes asv results instead of using a GPU."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.db.ingest import ingest  # noqa: E402
from xrt.orchestrate.bisect import bisect  # noqa: E402
from xrt.track import synth  # noqa: E402


@pytest.mark.parametrize("culprit", [1, 7, 16])
def test_bisect_finds_the_first_slow_commit(tmp_path, culprit):
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, 17)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    rng = np.random.default_rng(culprit)

    def level(i):
        return 50e-6 * (1.08 if i >= culprit else 1.0)

    for i in (0, 16):  # only GOOD and BAD are measured
        synth.write_run(root, "h100", commits[i], synth.samples(rng, level(i)), synth.samples(rng, 5e-6), i)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    calls = []

    def fake_runner(repo_, commit, results, bench):
        calls.append(commit)
        i = commits.index(commit)
        assert bench == synth.OP and results == root
        synth.write_run(results, "h100", commit, synth.samples(rng, level(i)), synth.samples(rng, 5e-6), i)

    res = bisect(db, repo, "Square", commits[0], commits[16], results=root, runner=fake_runner, log=lambda s: None)
    assert res.culprit == commits[culprit]
    assert len(calls) == 4 and len(set(calls)) == 4  # 16 candidates: log2(16) measurements, none twice
    assert res.measured == calls


def test_bisect_refuses_a_bad_that_is_not_after_good(tmp_path):
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, 3)
    with pytest.raises(ValueError):
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
                 "--results", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and "an improvement" in err and "not a slowdown" in err and "0.4" in err
    assert "first bad commit" not in err
    assert sorted(p.name for p in (root / "h100").glob("*-existing-py.json")) == sorted(
        f"{commits[i][:8]}-existing-py.json" for i in (0, 4))  # nothing measured
