"""Commits and their order: from a git repository (gitpython) or, without one, from the results' dates."""

from __future__ import annotations

import bisect
import os
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone


@dataclass
class Commit:
    hash: str
    position: int | None
    first_parent_index: int | None
    author_date: datetime | None
    author: str | None
    message: str | None
    parents: list[str]
    source: str  # "git" | "results"


def _git():
    try:
        import git
    except ImportError as e:  # pragma: no cover
        raise ImportError("--repo needs gitpython: pip install 'xpuruntime[bench]'") from e
    return git


def rev_commit(repo_dir: str | os.PathLike, rev: str) -> str | None:
    """The full hash of the commit ``rev`` names in ``repo_dir``, None where it names none.

    The one rule every command that takes a revision follows (``xrt db ingest --rev``, ``xrt gate
    --base/--head``): a revision that starts with ``-`` is refused (ValueError), since git would read
    it as an option (``--output=FILE`` truncates FILE); the rest goes through ``git rev-parse
    --verify REV^{commit}``, which accepts exactly one revision.
    """
    if rev.startswith("-"):
        raise ValueError(f"{rev!r} is not a revision (it starts with '-', git would read it as an option)")
    out = subprocess.run(["git", "-C", os.fspath(repo_dir), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


def from_repo(repo_dir: str, wanted: set[str], rev: str = "HEAD") -> tuple[list[Commit], set[str]]:
    """Facts for the ``wanted`` commits (full or abbreviated hashes) and which of them are unknown.

    ``first_parent_index`` counts from the oldest commit of ``rev``'s first-parent chain (0);
    :func:`assign_positions` turns it into an order.
    """
    git = _git()
    try:
        repo = git.Repo(repo_dir)
    except (git.exc.NoSuchPathError, git.exc.InvalidGitRepositoryError):
        raise ValueError(f"--repo {repo_dir}: not a git repository") from None
    try:
        head = rev_commit(repo_dir, rev)
    except ValueError as e:
        raise ValueError(f"--rev {e}") from None
    if head is None:
        raise ValueError(f"--repo {repo_dir}: --rev {rev!r} names no commit")
    try:
        chain = repo.git.rev_list("--first-parent", "--reverse", head).split()
    except git.exc.GitCommandError as e:
        raise ValueError(f"--repo {repo_dir}: cannot list commits of {rev}: {e.stderr.strip()}") from None
    fp_index = {h: i for i, h in enumerate(chain)}
    found: dict[str, Commit] = {}
    missing: set[str] = set()
    for h in wanted:
        try:
            c = repo.commit(h)
        except Exception:  # BadName, BadObject, ValueError, ...: not in this repository
            missing.add(h)
            continue
        found[h] = Commit(
            hash=c.hexsha, position=None, first_parent_index=fp_index.get(c.hexsha),
            author_date=datetime.fromtimestamp(c.authored_date, tz=timezone.utc).replace(tzinfo=None),
            author=f"{c.author.name} <{c.author.email}>", message=c.message.strip(),
            parents=[p.hexsha for p in c.parents], source="git",
        )
    return list(found.values()), missing


def assign_positions(commits: list[Commit]) -> list[Commit]:
    """Set ``position`` (0, 1, ...) on every commit and return them in that order.

    Commits on the first-parent chain keep the chain's order; every other commit (a merged side
    branch, a PR head, or one known only by its date) goes just after the last chain commit
    authored no later than it. With no chain at all this is plain date order.
    """
    on_chain = sorted((c for c in commits if c.first_parent_index is not None), key=lambda c: c.first_parent_index)
    dates = [c.author_date or datetime.min for c in on_chain]
    keyed = []
    for c in commits:
        d = c.author_date or datetime.min
        if c.first_parent_index is not None:
            keyed.append(((c.first_parent_index, 0, d, c.hash), c))
        else:
            k = bisect.bisect_right(dates, d) - 1
            anchor = on_chain[k].first_parent_index if k >= 0 else -1
            keyed.append(((anchor, 1, d, c.hash), c))
    keyed.sort(key=lambda kc: kc[0])
    for i, (_, c) in enumerate(keyed):
        c.position = i
    return [c for _, c in keyed]


def from_dates(dates: dict[str, datetime | None]) -> list[Commit]:
    """Without a repository: commits known only by the date asv stored with them (the author date)."""
    return [Commit(hash=h, position=None, first_parent_index=None, author_date=d, author=None,
                   message=None, parents=[], source="results") for h, d in dates.items()]
