"""Paired A/B measurement: base and head measured in one job, interleaved round by round.

A verdict that compares today's head with yesterday's base compares two states of the host too: on
a shared GPU host the same commit, measured in a second process, moved by 2x in host time. Here
both commits are measured on this machine now, in ``rounds`` rounds of one ``xrt bench run`` each,
in the order A B, B A, A B, ... (A B C, C B A with several heads), so a host that drifts
steadily moves both sides alike, as Chromium's Pinpoint and asv's ``--interleave-processes``
do. The rounds are ingested into a database of their own, which the gate then judges: only these
runs, round by round (:func:`xrt.track.gate.round_ratios`), host series against their reference
call.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xrt.bench import runner
from xrt.db import result_names, sidecar_keys
from xrt.db.ingest import ingest

ROUNDS = 2  # A B B A: the fewest that cancel a steady drift, and a second process a side


@dataclass
class Paired:
    """Where a paired measurement left its results: one folder per round, and the database of them."""

    folders: list[Path]  # one per round, as xrt bench run wrote it
    merged: Path  # every round's files, renamed per round: what was ingested
    db: Path


def order(commits: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, commit) in the order they are measured: A B C, C B A, A B C, ..."""
    if rounds < 1:
        raise ValueError(f"--rounds {rounds}: need at least 1")
    out = []
    for k in range(rounds):
        out += [(k + 1, c) for c in (commits if k % 2 == 0 else commits[::-1])]
    return out


def measure(repo: Path, base: str, heads: list[str], out: Path, *, rounds: int = ROUNDS, bench: str | None = None,
            device: str | None = None, all_gpus: bool = False, quick: bool = False,
            log: Callable[[str], None] = print) -> Paired:
    """Measure ``base`` and ``heads`` in ``rounds`` interleaved rounds under ``out`` (emptied first), and
    ingest them into ``out/paired.duckdb``. Raises :class:`runner.BenchError` when a commit measured
    nothing (a verdict on a missing side would be no verdict)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    steps = order([base, *heads], rounds)
    folders = [out / f"round-{k}" for k in range(1, rounds + 1)]
    for i, (k, commit) in enumerate(steps, 1):
        log(f"[paired {i}/{len(steps)}] round {k}: {commit[:10]} ({'base' if commit == base else 'head'})")
        # one process a round: the rounds are the processes, each judged as a run of its own
        summary = runner.run(repo, [commit], folders[k - 1], all_gpus=all_gpus, device=device, quick=quick,
                             bench=bench, processes=1, log=log)
        states = [m.get("status", "") for c in summary["commits"] for m in c.get("machines", {}).values()]
        if not states or not any(s in ("ok", "benchmark failures") for s in states):
            raise runner.BenchError(f"round {k}: {commit[:10]} measured nothing ({', '.join(states) or 'no run'})")
    return combine(repo, folders, out)


def combine(repo: Path, folders: list[Path], out: Path) -> Paired:
    """Ingest rounds (folders of ``xrt bench run``) as one paired measurement: ``out/rounds`` and
    ``out/paired.duckdb``, made anew."""
    merged, db = out / "rounds", out / "paired.duckdb"
    shutil.rmtree(merged, ignore_errors=True)
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    for k, folder in enumerate(folders, 1):
        merge_round(folder, merged, k)
    ingest(merged, db, repo=str(repo), echo=lambda s: None, tuned=None)
    return Paired(folders, merged, db)


def merge_round(folder: Path, merged: Path, k: int) -> None:
    """Copy round ``k``'s files into ``merged``, each result file and its sidecar renamed
    ``<name>-round<k>``: one results folder in which every round is a run of its own (ingest keys a
    run by its file's path)."""
    for f in sorted(folder.rglob("*")):
        if not f.is_file():
            continue
        rel = f.relative_to(folder)
        dest = merged / rel
        if len(rel.parts) == 2 and result_names.is_result_file(f.name):
            dest = dest.with_name(result_names.round_name(f.name, k))
        elif len(rel.parts) == 2 and f.name.endswith(sidecar_keys.SUFFIX):
            dest = dest.with_name(result_names.round_name(f.name, k, sidecar_keys.SUFFIX))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest)
