"""A red nightly names its culprit, end to end on the CPU.

A clone of this repository gets four more commits c1..c4 (a branch per test); one of them makes
every ``vector_add`` call busy-wait 0.3 ms first (in the clone only). ``xrt bench run`` measures c0
and c4 (the quick profile, the VectorAdd host series: what a nightly that measured only the ends
would have; one run for every test's branch, c0 once), ``xrt db ingest`` loads them, and then:

- ``xrt culprit`` (the nightly's step after a failing gate) names c2, with the evidence and ``xrt
  explain``'s rows, in its step summary and on the stored regression;
- ``xrt bisect`` names c1 and c4 when the plant is there.

Each bisect step measures c0 beside the candidate in one ``xrt bench run``; ``XRT_CPU_SPAN`` is small
(the plant is ~60x the call, noise is not what is tested here).

These tests run beside others (make test's first phase), not alone: a bad step must be both flagged
by the gate and at least halfway (in log) to the stored 60x, so ~8x; a busy neighbour moves the host
series' CPU-time samples by far less than that, and the 60x plant by far less than half.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_bench_suite import clone_repo

pytest.importorskip("duckdb")
pytest.importorskip("asv")

PLANT_S = 0.3e-3  # the figure
BENCH = r"^bench_host\.VectorAdd\."
SERIES = "bench_host.VectorAdd.time_host"

PLANT = f'''

# --- planted by tests/test_culprit.py in a throwaway clone: {PLANT_S * 1e3:g} ms of Python per call ---
import time as _plant_time

_unplanted_vector_add = vector_add


def vector_add(*args, **kwargs):
    end = _plant_time.perf_counter() + {PLANT_S!r}
    while _plant_time.perf_counter() < end:
        pass
    return _unplanted_vector_add(*args, **kwargs)
'''


def _xrt(*cmd: str, cwd: Path, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xrt.cli", *cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _git(repo: Path, *a: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *a], check=True,
                          capture_output=True, text=True).stdout.strip()


def _env(home: Path) -> dict:
    return dict(os.environ, HOME=str(home), PYTHONPATH="", XRT_CPU_SPAN="0.3")  # asv keeps its machine file in ~


PLANTED_AT = (1, 2, 4)  # the tests' histories: one branch each


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, dict[int, list[str]], Path]:
    """A clone with a branch ``plant-N`` per position N in PLANTED_AT: c1..c4 on top of c0 (its HEAD), the
    plant at cN. c0 and each branch's c4 measured in one ``xrt bench run`` (c0 once, not once a history):
    (clone, commits c0..c4 by plant position, asv results)."""
    tmp = tmp_path_factory.mktemp("culprit")
    clone = clone_repo(ROOT, tmp / "repo")
    c0 = _git(clone, "rev-parse", "HEAD")
    op = clone / "xrt" / "pytorch" / "ops" / "vector_add.py"
    plain = op.read_text()
    commits = {}
    for planted_at in PLANTED_AT:
        _git(clone, "checkout", "-q", "-b", f"plant-{planted_at}", c0)
        commits[planted_at] = [c0]
        for i in range(1, 5):
            if i == planted_at:
                op.write_text(plain + PLANT)
                _git(clone, "commit", "-qam", f"c{i}: vector_add <checks> | {PLANT_S * 1e3:g} ms of *Python*")
            else:
                (clone / "NOTES.txt").write_text(f"c{i}\n")
                _git(clone, "add", "NOTES.txt")
                _git(clone, "commit", "-qm", f"c{i}: notes")
            commits[planted_at].append(_git(clone, "rev-parse", "HEAD"))
    results = tmp / "asv"
    heads = ",".join([c0] + [commits[k][4] for k in PLANTED_AT])
    out = _xrt("bench", "run", "--repo", str(clone), "--commits", heads, "--quick", "--results", str(results),
               "--bench", BENCH, cwd=clone, env=_env(tmp))
    assert out.returncode == 0, out.stderr[-3000:]
    return clone, commits, results


def history(tmp: Path, planted_at: int, measured: tuple[Path, dict[int, list[str]], Path]
            ) -> tuple[Path, list[str], Path, dict]:
    """c0..c4 in a clone of its own, the plant at ``c{planted_at}``; c0 and c4 measured (``measured``'s
    results of these two commits) and ingested: (clone, commits, database, env)."""
    shared, by_plant, measured_results = measured
    commits = by_plant[planted_at]
    clone = clone_repo(shared, tmp / "repo")
    _git(clone, "checkout", "-q", f"plant-{planted_at}")
    others = tuple(by_plant[k][4][:8] for k in PLANTED_AT if k != planted_at)
    results, db = tmp / "asv", tmp / "xrt.duckdb"
    shutil.copytree(measured_results, results, ignore=lambda d, names: [n for n in names if n.startswith(others)])
    env = _env(tmp)
    ing = _xrt("db", "ingest", str(results), "--db", str(db), "--repo", str(clone), "--strict", cwd=clone, env=env)
    assert ing.returncode == 0, ing.stdout[-2000:] + ing.stderr[-2000:]
    return clone, commits, db, env


@pytest.mark.slow
def test_a_failing_gate_over_four_commits_names_c2_and_explains_it(tmp_path, measured):
    clone, commits, db, env = history(tmp_path, 2, measured)
    gate = _xrt("gate", "--db", str(db), "--repo", str(clone), "--base", commits[0], "--head", commits[4],
                "--no-history", cwd=clone, env=env)
    assert gate.returncode == 1, gate.stdout + gate.stderr  # the gate can only say "between c0 and c4"
    summary = tmp_path / "summary.md"
    out = _xrt("culprit", "--db", str(db), "--repo", str(clone), "--base", commits[0], "--head", commits[4],
               "--budget", "600", "--summary", str(summary), cwd=clone, env=env)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert f"culprit {commits[2]} c2: vector_add" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "step 1/" in out.stderr and "beside good" in out.stderr  # progress
    md = summary.read_text()
    # the subject is git's text: escaped, so its <, | and * are no markup in the summary
    assert f"### culprit `{commits[2][:12]}` c2: vector\\_add &#60;checks&#62; \\| 0.3 ms of \\*Python\\*" in md, md
    rows = [ln for ln in md.splitlines() if ln.startswith("| `")]
    measured = [ln.split("`")[1] for ln in rows]
    assert measured == [commits[2][:12], commits[1][:12]], md  # c2 bad, then c1 good
    assert "**bad**" in rows[0] and "| good |" in rows[1]
    assert "xrt explain" in md, md
    # stored on the regression, with the measured commits
    q = _xrt("db", "query", "--db", str(db), "--format", "json",
             "SELECT benchmark, param_key, culprit, bisection FROM regressions WHERE culprit IS NOT NULL",
             cwd=clone, env=env)
    assert q.returncode == 0, q.stderr
    stored = json.loads(q.stdout)
    assert stored and all(r["culprit"] == commits[2] for r in stored)
    assert any(r["benchmark"] == SERIES for r in stored)
    ev = json.loads(stored[0]["bisection"])
    assert [s["commit"] for s in ev["steps"]] == [commits[2], commits[1]] and ev["steps"][0]["bad"]
    assert ev["explanation"] and ("rows" in ev["explanation"] or "error" in ev["explanation"])


@pytest.mark.slow
@pytest.mark.parametrize("planted_at", [1, 4])
def test_xrt_bisect_names_the_first_and_the_last_commit(tmp_path, measured, planted_at):
    clone, commits, db, env = history(tmp_path, planted_at, measured)
    out = _xrt("bisect", SERIES, commits[0], commits[4], "--db", str(db), "--repo", str(clone), "--budget", "600",
               cwd=clone, env=env)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert f"culprit {commits[planted_at]} c{planted_at}:" in out.stdout, out.stdout
    verdicts = {ln.split()[1]: ln.split()[-1] for ln in out.stdout.splitlines() if ln.startswith("measured ")}
    assert verdicts == {commits[i]: ("bad" if i >= planted_at else "good")
                        for i in ((2, 1) if planted_at == 1 else (2, 3))}, out.stdout
