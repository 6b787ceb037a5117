"""xrt bisect's halving, with a fake runner that writes asv results instead of using a GPU."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from conftest import ro

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


def _two_machines(tmp_path, culprit=3, n=9):
    """Square slower from commit ``culprit`` on two machines (h200 more): two groups for the gate."""
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, n)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    rng = np.random.default_rng(11)
    slow = {"h100": 1.10, "h200": 1.30}

    def level(m, i):
        return 50e-6 * (slow[m] if i >= culprit else 1.0)

    for m in slow:
        for i in (0, n - 1):
            synth.write_run(root, m, commits[i], synth.samples(rng, level(m, i)), synth.samples(rng, 5e-6), i)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    calls = []

    def runner(repo_, pair, results, bench, machine, profile):
        calls.append((machine, pair[1]))
        for c in pair:
            i = commits.index(c)
            synth.write_run(results, machine, c, synth.samples(rng, level(machine, i)), synth.samples(rng, 5e-6), i)

    return repo, commits, db, calls, runner


def _explainer(repo, base, head, case, *, regression, log):
    from dataclasses import asdict

    rows = [{"group": "settings", "what": "block <b>x</b> | y", "kernel": "", "base": "128", "head": "256",
             "change": ""}] * 7
    return {"schema": "xrt-explain/1", "case": asdict(case), "param_key": case.param_key,
            "regression_id": regression["id"], "machine": regression["machine"], "ratio": regression["ratio"],
            "base": base, "head": head, "host": "h", "ncu": {"clock_control": "none"}, "sides": {}, "changes": rows}


def test_culprit_bisects_each_failing_group_worst_first_explains_and_stores(tmp_path):
    from xrt.orchestrate import culprit
    from xrt.track import explain, regressions

    repo, commits, db, calls, runner = _two_machines(tmp_path)
    out = culprit.find(db, repo, commits[0], commits[8], runner=runner, explainer=_explainer, log=lambda s: None)
    assert [g.machine for g in out.groups] == ["h200", "h100"]  # one bisect per group, the worst group first
    assert all(g.bisection.culprit == commits[3] for g in out.groups)
    assert {m for m, _ in calls} == {"h100", "h200"} and len(calls) == 6  # 8 candidates: 3 steps a group
    md = culprit.summary_markdown(out)
    assert md.count(f"### culprit `{commits[3][:12]}` commit 3") == 2, md
    # the explanation's first rows, escaped: no HTML and no table cell break from its text
    assert "block &#60;b&#62;x&#60;/b&#62; \\| y" in md and "<b>" not in md
    assert md.count("| settings |") == culprit.EXPLAIN_ROWS and "first 5 of 7 rows" in md
    assert "Not bisected" not in md
    assert culprit.report(out).splitlines()[0].startswith(f"culprit {commits[3]} commit 3")
    stored = {r["machine"]: r for r in regressions.stored(ro(db)).values()}
    assert stored["h200"]["culprit"] == stored["h100"]["culprit"] == commits[3]
    ev = json.loads(stored["h200"]["bisection"])
    assert [s["commit"] for s in ev["steps"]] == [c for m, c in calls if m == "h200"]
    assert len(ev["explanation"]["rows"]) == culprit.EXPLAIN_ROWS
    assert [e["head_commit"] for e in explain.stored(ro(db))] == [commits[3]]  # only the worst series' culprit


def test_culprit_within_its_budget_says_what_was_not_bisected(tmp_path):
    from xrt.orchestrate import culprit

    repo, commits, db, calls, runner = _two_machines(tmp_path)
    out = culprit.find(db, repo, commits[0], commits[8], budget_s=1e-9, runner=runner, explainer=_explainer,
                       log=lambda s: None)
    assert calls == [] and all(g.bisection is None for g in out.groups)
    md = culprit.summary_markdown(out)
    assert "Not bisected:" in md and md.count("time budget of 1e-09 s spent") == 2, md
    assert md.count(f"`{synth.OP}` \\['16777216', 'float32', 'triton', 'default'\\]") == 2, md


def test_summary_text_from_git_is_literal_markdown():
    from xrt.orchestrate.culprit import code, md

    assert md("fix <img src=x> *now* [x](y) | `z` a_b") == (
        "fix &#60;img src=x&#62; \\*now\\* \\[x\\](y) \\| \\`z\\` a\\_b")
    assert md("two\nlines") == "two lines"
    assert code("a`b|c") == "`` a`b\\|c ``" and code("plain") == "`plain`"


def test_culprit_over_one_commit_or_a_passing_gate_bisects_nothing(tmp_path):
    from xrt.orchestrate import culprit

    repo, commits, db, calls, runner = _two_machines(tmp_path, culprit=1, n=2)
    out = culprit.find(db, repo, commits[0], commits[1], runner=runner, log=lambda s: None)
    assert calls == [] and "one commit" in out.note and "nothing to bisect" in culprit.summary_markdown(out)
    out = culprit.find(db, repo, commits[0], commits[0], runner=runner, log=lambda s: None)
    assert calls == [] and "no regression" in out.note
