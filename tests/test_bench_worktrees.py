"""xrt.bench.worktrees: the commit checkouts that `xrt bench run` and `xrt explain` share."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from xrt.bench import worktrees


def _repo(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("config", "user.email", "t@t")
    run("config", "user.name", "t")
    hashes = []
    for i in range(2):
        (repo / "f.txt").write_text(f"v{i}\n")
        run("add", "f.txt")
        run("commit", "-qm", f"c{i}")
        hashes.append(subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                                     text=True).stdout.strip())
    return repo, hashes


def test_checkout_gives_the_commits_tree_and_removes_it(tmp_path):
    repo, (a, b) = _repo(tmp_path)
    where = tmp_path / "wt-a"
    with worktrees.checkout(repo, a, where) as wt:
        assert (wt / "f.txt").read_text() == "v0\n"
        assert (repo / "f.txt").read_text() == "v1\n"  # the caller's checkout is untouched
    assert not where.exists()
    assert str(where) not in worktrees.git(repo, "worktree", "list")


def test_checkout_removes_the_worktree_when_the_body_fails(tmp_path):
    repo, (a, _) = _repo(tmp_path)
    where = tmp_path / "wt"
    with pytest.raises(KeyError), worktrees.checkout(repo, a, where):
        raise KeyError("boom")
    assert not where.exists()


def test_resolve_names_a_bad_rev_in_one_line(tmp_path):
    repo, (a, b) = _repo(tmp_path)
    assert worktrees.resolve(repo, "HEAD~1") == a
    with pytest.raises(worktrees.GitError, match=r"^'nope' names no commit in .*repo$"):
        worktrees.resolve(repo, "nope")
