"""The gate on the real H100 results committed under results/asv (xrt bench run, 5 commits)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import ROOT

pytest.importorskip("duckdb")

from xrt.cli import main  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402

MACHINE = "vm-nvidia-h100-80gb-hbm3-0"
RESULTS = ROOT / "results" / "asv"


def _suite_version(commit: str) -> str | None:
    """asv's benchmark version of ``bench_ops.Square.time_op`` in the commit's H100 result file."""
    for f in (RESULTS / MACHINE).glob(f"{commit[:8]}-*.json"):
        d = json.loads(f.read_text())
        row = d.get("results", {}).get("bench_ops.Square.time_op")
        if row is not None:
            return row[d["result_columns"].index("version")]
    return None


def _measured() -> list[str]:
    """Commits with H100 results, oldest first (by the side-car's commit, checked against git)."""
    commits = []
    for side in sorted((RESULTS / MACHINE).glob("*.xrt")):
        commit = json.loads(side.read_text())["commit"]
        ok = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
        if ok.returncode == 0:
            commits.append(commit)
    order = subprocess.run(["git", "-C", str(ROOT), "rev-list", "--first-parent", "--reverse", "HEAD"],
                           capture_output=True, text=True).stdout.split()
    return sorted(commits, key=order.index)


@pytest.fixture(scope="module")
def h100_db(tmp_path_factory):
    if not (RESULTS / MACHINE).is_dir():
        pytest.skip("no committed H100 results under results/asv")
    tmp = tmp_path_factory.mktemp("h100")
    shutil.copytree(RESULTS, tmp / "asv", ignore=shutil.ignore_patterns("*-cpu"))
    db = tmp / "h100.duckdb"
    ingest(tmp / "asv", db, repo=str(ROOT))
    commits = _measured()
    if len(commits) < 2:
        pytest.skip("fewer than two measured commits reachable in this clone's history")
    return db, commits


def test_h100_results_are_real_and_complete(h100_db):
    from xrt.db import query

    db, commits = h100_db
    assert len(commits) >= 5
    _, rows = query.query(db, "SELECT DISTINCT gpu_model, driver, torch FROM runs WHERE machine = ?", [MACHINE])
    assert rows and rows[0][0] == "NVIDIA H100 80GB HBM3"
    _, rows = query.query(db, "SELECT count(*), count(sm_mhz), min(gbps), max(gbps) FROM results "
                              "WHERE machine = ? AND status = 'ok' AND benchmark LIKE '%.time_op'", [MACHINE])
    n, with_clock, lo, hi = rows[0]
    assert n >= 100 and with_clock == n  # every device-time value carries its SM clock
    assert 0 < lo < hi < 3500  # GB/s below the H100's ~3.35 TB/s HBM3 peak


def test_gate_passes_between_two_measured_h100_commits(h100_db, capsys):
    """The newest two commits measured by the same suite version (same code path for the kernels)."""
    db, commits = h100_db
    pairs = [(a, b) for a, b in zip(commits, commits[1:]) if _suite_version(a) == _suite_version(b)]
    base, head = pairs[-1]
    rc = main(["gate", "--db", str(db), "--repo", str(ROOT), "--base", base, "--head", head,
               "--machine", MACHINE])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "24 series compared" in out


def test_gate_refuses_to_compare_across_the_suite_version_change(h100_db, capsys):
    """7d96618 was measured by the single-process suite (asv version xrt-suite-2), which times CUDA C
    small shapes about 18 x slower: the gate must say it cannot judge, not call them regressions."""
    db, commits = h100_db
    pairs = [(a, b) for a, b in zip(commits, commits[1:]) if _suite_version(a) != _suite_version(b)]
    if not pairs:
        pytest.skip("no suite version change among the committed H100 results")
    base, head = pairs[-1]
    rc = main(["gate", "--db", str(db), "--repo", str(ROOT), "--base", base, "--head", head,
               "--machine", MACHINE, "--no-history"])
    out = capsys.readouterr().out
    assert rc == 2, out
    assert "benchmark version changed between base and head" in out and "Square.time_op" in out


def test_gate_cannot_judge_a_head_never_measured(h100_db, capsys):
    db, commits = h100_db
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head in commits:
        pytest.skip("HEAD itself was measured")
    # On the H100's machine: HEAD may have been measured elsewhere (the committed H200 results).
    rc = main(["gate", "--db", str(db), "--repo", str(ROOT), "--base", commits[-1], "--head", "HEAD",
               "--machine", MACHINE])
    out = capsys.readouterr().out
    assert rc == 2 and f"has no results on {MACHINE} (never measured)" in out, out
