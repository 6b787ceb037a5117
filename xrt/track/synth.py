"""Synthetic asv results for the tracker's tests and examples: real asv files, ingested for real.

:func:`write_run` writes one asv (schema 2) result file for one commit on one machine, with raw
samples, plus the xrt sidecar (GPU facts, SM clock) beside it; :func:`git_history` makes a small
git repository to order the commits.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np

from xrt.db import result_names, sidecar_keys
from xrt.db.asv_files import V2_COLUMNS

COLUMNS = list(V2_COLUMNS[:-1])  # asv's result columns without "profile"
OP = "bench_ops.Square.time_op"
OP_PARAMS = [["'16777216'"], ["'float32'"], ["'triton'"], ["'default'"]]
PLAIN = "bench_ops.Launch.time_launch"
BENCHMARKS = {
    OP: {"name": OP, "type": "time", "unit": "seconds", "params": OP_PARAMS,
         "param_names": ["shape", "dtype", "provider", "config"], "version": "v1"},
    PLAIN: {"name": PLAIN, "type": "time", "unit": "seconds", "params": [], "param_names": [], "version": "v1"},
}


def git_history(path: Path, n: int) -> list[str]:
    """A git repository with ``n`` commits on one branch; their hashes, oldest first."""
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(path), *a], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    git("init", "-q", "-b", "main")
    out = []
    for i in range(n):
        (path / "f.txt").write_text(f"{i}\n")
        git("add", "f.txt")
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"
        git("commit", "-q", "-m", f"commit {i}")
        out.append(git("rev-parse", "HEAD"))
    return out


def samples(rng: np.random.Generator, level: float, n: int = 60, cv: float = 0.02, run_cv: float = 0.002):
    run = level * (1 + rng.normal(0, run_cv))
    return list(run * rng.lognormal(0, cv, n))


def _row(smp: list[float] | None, version: str = "v1") -> list:
    if smp is None:
        return [None, [], version, 1_700_000_000_000, 1.0]
    s = np.sort(smp)
    med = float(np.median(s))
    return [[med], [], version, 1_700_000_000_000, 1.0, [float(s[int(len(s) * 0.1)])], [float(s[int(len(s) * 0.9)])],
            [float(np.percentile(s, 25))], [float(np.percentile(s, 75))], [1], [len(s)], [list(map(float, smp))]]


def write_run(root: Path, machine: str, commit: str, op: list[float] | None, plain: list[float] | None,
              index: int = 0, sm_clock_mhz: float | None = None, torch: str = "2.5.1",
              driver: str = "560.35", cpu_model: str | None = None, kernel: str | None = None,
              version: str = "v1") -> Path:
    """One result file (+ sidecar) under ``root/machine``; ``None`` samples = a failed benchmark."""
    (root / machine).mkdir(parents=True, exist_ok=True)
    _json(root / "benchmarks.json", {**BENCHMARKS, "version": 2})
    _json(root / machine / "machine.json", {"machine": machine, "os": "Linux", "arch": "x86_64", "cpu": "test",
                                            "num_cpu": "2", "ram": "8GB", "version": 1})
    op_row = _row(op, version)
    op_row[1] = OP_PARAMS
    results = {OP: op_row, PLAIN: _row(plain, version)}
    d = {"commit_hash": commit, "env_name": "existing-py", "date": 1_700_000_000_000 + index * 1000,
         "params": {"machine": machine, "python": "3.11"}, "python": "3.11", "requirements": {}, "env_vars": {},
         "result_columns": COLUMNS, "results": results, "durations": {}, "version": 2}
    f = _json(root / machine / result_names.result_file_name(commit, "existing-py"), d)
    if sm_clock_mhz is not None:
        _json(f.with_name(f.stem + sidecar_keys.LEGACY_SUFFIX),
              {"gpu": {"name": "NVIDIA H100 80GB HBM3", "driver": driver, "cuda": "12.6",
                       "sm_clock_mhz": sm_clock_mhz}, "software": {"torch": torch, "triton": "3.1.0"},
               **{k: v for k, v in (("cpu_model", cpu_model), ("kernel", kernel)) if v is not None}})
    return f


def _json(path: Path, d) -> Path:
    path.write_text(json.dumps(d, allow_nan=True))
    return path

