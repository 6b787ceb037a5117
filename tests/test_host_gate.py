"""Planted Python per call fails the gate on the host-time series, end to end on the CPU.

A clone of this repository gets a second commit whose ``xrt.pytorch.ops.square`` busy-waits
``PLANT_S`` before every call (in the clone only: the real tree is never touched). ``xrt bench run``
measures both commits (quick profile, ``Square``'s host series only: the one judged here, as
``xrt demo`` measures on the CPU), ``xrt db ingest`` loads them, and ``xrt gate --base A --head B``
must exit 1 naming ``bench_host.Square.time_host`` for the torch provider.

The plant is the issue's figure, 50 µs (``XRT_TEST_PLANT_US`` overrides it). On the CPU the host
series' samples are the calling thread's CPU time, taken in rounds spread over the run
(``xrt.bench.timer.CPU_CLOCK``, ``xrt.bench.suite.CPU_ROUNDS``): time the scheduler gave other
processes is not in them, which is what moved a call by more than 50 µs between two runs of the
shared 2-core runner when they were wall time taken in one go (50 µs was then caught in 3 of 4 runs,
and this test planted 200 µs). docs/timing.md has the figures.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_bench_suite import clone_repo

PLANT_S = float(os.environ.get("XRT_TEST_PLANT_US", "50")) * 1e-6  # the figure
# Python already in the call at base (0: none). The torch provider's call costs ~5 µs on the CPU,
# so the plant is ~10x it; XRT_TEST_BASE_US=50 judges +50 µs on a ~55 µs call, as the issue had it.
BASE_S = float(os.environ.get("XRT_TEST_BASE_US", "0")) * 1e-6
# What is measured: the host series the test judges. The device and torch.compile series of Square
# (tests/test_bench_suite.py runs them) would add their measuring and torch.compile's build to this
# serial test, and nothing here reads them.
HOST_SQUARE = r"^bench_host\.Square\."


def plant(seconds: float, tag: str) -> str:
    """Code that makes every ``square`` call busy-wait ``seconds`` first (appended to square.py)."""
    return f'''

# --- planted by tests/test_host_gate.py in a throwaway clone: {seconds * 1e6:.0f} µs of Python per call ---
import time as _plant_time

_unplanted_square_{tag} = square


def square(*args, **kwargs):
    end = _plant_time.perf_counter() + {seconds!r}
    while _plant_time.perf_counter() < end:
        pass
    return _unplanted_square_{tag}(*args, **kwargs)
'''


def _run(*cmd: str, cwd: Path, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xrt.cli", *cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
@pytest.mark.serial  # judges a 50 µs plant against the run's noise: never beside a busy worker
def test_planted_python_fails_the_gate_on_the_host_series(tmp_path):
    clone = clone_repo(ROOT, tmp_path / "repo")
    git = lambda *a: subprocess.run(["git", "-C", str(clone), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    square = clone / "xrt" / "pytorch" / "ops" / "square.py"
    if BASE_S:
        square.write_text(square.read_text() + plant(BASE_S, "base"))
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", f"base: {BASE_S * 1e6:g} us of Python")
    base = git("rev-parse", "HEAD")
    square.write_text(square.read_text() + plant(PLANT_S, "head"))
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", f"plant {PLANT_S * 1e6:g} us of Python")
    head = git("rev-parse", "HEAD")

    # asv keeps its machine file in ~; the rounds span what a real CPU run spans (this test judges noise)
    from xrt.bench import suite

    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH="", XRT_CPU_SPAN=str(suite.CPU_SPAN))
    results = tmp_path / "asv"
    out = _run("bench", "run", "--repo", str(clone), "--commits", f"{base},{head}", "--quick", "--results",
               str(results), "--bench", HOST_SQUARE, cwd=clone, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert [c["commit"] for c in summary["commits"]] == [base, head]

    db = tmp_path / "xrt.duckdb"
    ing = _run("db", "ingest", str(results), "--db", str(db), "--repo", str(clone), "--strict", cwd=clone, env=env)
    assert ing.returncode == 0, ing.stdout[-2000:] + ing.stderr[-2000:]

    gate = _run("gate", "--db", str(db), "--repo", str(clone), "--base", base, "--head", head, "--no-history",
                cwd=clone, env=env)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    flagged = [ln for ln in gate.stdout.splitlines() if ln.startswith("REGRESSION ")]
    host = [ln for ln in flagged if "bench_host.Square.time_host" in ln and "'torch'" in ln]
    assert host, gate.stdout
    # The host series carries no clocks: its cycles are stored as nulls (so none are derived from a
    # run's SM clock, and a host slowdown is never read as a clock change), and no bytes.
    q = _run("db", "query", "--db", str(db), "--format", "json",
             "SELECT count(*) AS n, count(*) FILTER (WHERE bytes IS NULL AND cycles IS NOT NULL AND "
             "len(cycles) = len(samples) AND list_count(cycles) = 0) AS clockless FROM results "
             "WHERE benchmark LIKE 'bench_host.%' AND status = 'ok'", cwd=clone, env=env)
    assert q.returncode == 0, q.stderr
    (counts,) = json.loads(q.stdout)
    assert counts["n"] >= 4 and counts["clockless"] == counts["n"], counts
