"""Temporary git worktrees of one commit: how ``xrt bench run`` and ``xrt explain`` check out the
commits they measure, without touching the caller's checkout.

A detached worktree per commit, under a folder of the caller's; :func:`checkout` removes it again
(and prunes git's record of it) whatever happens inside. The commit's own ``xrt`` and ``kernels``
load from there with ``PYTHONPATH`` pointing at the worktree; nothing is installed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class GitError(RuntimeError):
    """A git command failed: the message names the command, the repository and git's own words."""


def git(repo: str | Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise GitError(f"git {' '.join(args)} in {repo}: {out.stderr.strip()}")
    return out.stdout.strip()


def resolve(repo: str | Path, rev: str) -> str:
    """The full hash of ``rev`` in ``repo``; a rev that names no commit is a one-line GitError."""
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise GitError(f"{rev!r} names no commit in {repo}")
    return out.stdout.strip()


def add(repo: str | Path, commit: str, where: Path) -> Path:
    """A detached worktree of ``commit`` at ``where`` (``--force``: a stale record of it is replaced)."""
    git(repo, "worktree", "add", "--detach", "--force", str(where), commit)
    return where


def remove(repo: str | Path, where: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(where)], capture_output=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


@contextmanager
def checkout(repo: str | Path, commit: str, where: Path) -> Iterator[Path]:
    """``with checkout(repo, commit, folder) as wt:`` the commit's tree at ``wt``, removed afterwards."""
    add(repo, commit, where)
    try:
        yield where
    finally:
        remove(repo, where)
