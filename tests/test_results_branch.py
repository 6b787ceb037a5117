"""The nightly's durable history: scripts/results_branch.sh keeps asv results on a branch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "results_branch.sh"


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _sh(*args, cwd):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def clones(tmp_path):
    remote = tmp_path / "remote.git"
    _git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    a = tmp_path / "a"
    _git("init", "-q", "-b", "main", str(a), cwd=tmp_path)
    (a / "README").write_text("x\n")
    _git("add", "README", cwd=a)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init", cwd=a)
    _git("remote", "add", "origin", str(remote), cwd=a)
    _git("push", "-q", "origin", "main", cwd=a)
    b = tmp_path / "b"
    _git("clone", "-q", str(remote), str(b), cwd=tmp_path)
    return a, b


def test_results_survive_a_lost_cache_and_accumulate(clones):
    a, b = clones
    first = _sh("pull", "results/asv", cwd=a)  # no branch yet: said, nothing changed
    assert first.returncode == 0 and "no branch bench-results yet" in first.stdout
    res = a / "results" / "asv" / "h100"
    res.mkdir(parents=True)
    (res / "c1.json").write_text('{"commit": 1}')
    (res / "c1.xrt").write_text("{}")
    out = _sh("push", "results/asv", "results of c1", cwd=a)
    assert out.returncode == 0, out.stderr
    assert _git("status", "--porcelain", cwd=a).strip() == "?? results/"  # the checkout untouched
    # another runner, its cache gone: the history comes back from the branch
    got = _sh("pull", "results/asv", cwd=b)
    assert got.returncode == 0 and "restored 2 file(s)" in got.stdout, got.stderr
    assert (b / "results" / "asv" / "h100" / "c1.json").read_text() == '{"commit": 1}'
    # the next night adds a file; nothing already kept is lost, and an unchanged push says so
    (b / "results" / "asv" / "h100" / "c2.json").write_text('{"commit": 2}')
    assert _sh("push", "results/asv", "results of c2", cwd=b).returncode == 0
    (res / "c1.json").unlink()  # a runner that lost a file does not delete it from the history
    again = _sh("push", "results/asv", "nothing", cwd=a)
    assert again.returncode == 0 and "nothing new" in again.stdout
    fresh = _sh("pull", "results/asv", cwd=a)
    assert "restored 3 file(s)" in fresh.stdout and (res / "c1.json").exists() and (res / "c2.json").exists()
    heads = _git("ls-remote", "--heads", "origin", cwd=a)
    assert "refs/heads/bench-results" in heads and "refs/heads/main" in heads
    bad = _sh("push", "no/such/dir", "x", cwd=a)
    assert bad.returncode == 2 and "no/such/dir: no such folder" in bad.stderr
