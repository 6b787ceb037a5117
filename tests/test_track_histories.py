"""Real asv histories judged as a team expects, on fixtures in the shape of real asv result files
(as django's published asv history writes them: schema 2, machine facts in ``params``, asv's
``python``, ``env_name`` and ``requirements``, a benchmarks.json of the current suite only)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.cli import main  # noqa: E402
from xrt.db import result_names, store  # noqa: E402
from xrt.track import synth  # noqa: E402
from xrt.track.detect import Series, detect  # noqa: E402

MACHINE = "ubuntu-latest"
TIMES = [f"query_benchmarks.Q{i}.time_q{i}" for i in range(3)]
MEM = "model_benchmarks.Mem.mem_empty_cache"  # a memory benchmark: 0 bytes at every commit
GONE = "old_benchmarks.Gone.time_gone"  # removed from the suite: in old results, not in benchmarks.json
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b", "stats_q_25",
           "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]
MACHINE_FACTS = {"arch": "x86_64", "cpu": "AMD EPYC 7763 64-Core Processor", "machine": MACHINE, "num_cpu": "4",
                 "os": "Linux 6.5.0-1025-azure", "ram": "16365268"}


def _benchmarks(root: Path) -> None:
    d = {n: {"name": n, "type": "time", "unit": "seconds", "params": [], "param_names": [], "version": "a" * 64,
             "number": 0, "repeat": 0, "rounds": 2, "min_run_count": 2, "sample_time": 0.01, "warmup_time": -1}
         for n in TIMES}
    d[MEM] = {"name": MEM, "type": "memory", "unit": "bytes", "params": [], "param_names": [], "version": "b" * 64}
    (root / "benchmarks.json").write_text(json.dumps({**d, "version": 2}))


def _write(root: Path, commit: str, i: int, values: dict, python: str = "3.10",
           requirements: dict | None = None) -> None:
    """One asv result file: ``values`` maps a benchmark to its samples (a time) or its one value."""
    (root / MACHINE).mkdir(parents=True, exist_ok=True)
    _benchmarks(root)
    (root / MACHINE / "machine.json").write_text(json.dumps({**MACHINE_FACTS, "version": 1}))
    results = {}
    for name, v in values.items():
        if isinstance(v, list):
            s = np.sort(v)
            results[name] = [[float(np.median(s))], [], "a" * 64, 1_661_819_663_292 + i, 2.8, [float(s[0])],
                             [float(s[-1])], [float(np.percentile(s, 25))], [float(np.percentile(s, 75))], [1],
                             [len(s)], [list(map(float, v))]]
        else:
            results[name] = [[v], [], "b" * 64, 1_661_819_663_292 + i, 0.1]
    env = f"virtualenv-py{python}"
    d = {"commit_hash": commit, "env_name": env, "date": 1_654_254_299_000 + 1000 * i,
         "params": {**MACHINE_FACTS, "python": python}, "python": python, "requirements": requirements or {},
         "env_vars": {}, "result_columns": COLUMNS, "results": results, "durations": {}, "version": 2}
    (root / MACHINE / result_names.result_file_name(commit, env)).write_text(json.dumps(d))


def _ingest(root: Path, db: Path, repo: Path, *extra: str) -> int:
    return main(["db", "ingest", str(root), "--db", str(db), "--repo", str(repo), *extra])


def _gate(capsys, db: Path, base: str, head: str, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["gate", "--db", str(db), "--base", base, "--head", head, *extra])
    return code, capsys.readouterr().out


def _rows(db: Path, sql: str, args: list | None = None) -> list[tuple]:
    with store.read(db) as con:
        return con.execute(sql, args or []).fetchall()


def _world(tmp_path: Path, n: int):
    repo = tmp_path / "repo"
    return repo, synth.git_history(repo, n), tmp_path / "results", tmp_path / "xrt.duckdb"


# --- a series that is 0 at every commit ---------------------------------------------------------------

def test_a_series_at_zero_is_judged_equal_at_every_pair_of_commits(tmp_path, capsys):
    repo, commits, root, db = _world(tmp_path, 8)
    rng = np.random.default_rng(1)
    for i, c in enumerate(commits):
        _write(root, c, i, {TIMES[0]: synth.samples(rng, 1e-3, n=10, cv=0.01), MEM: 0})
    assert _ingest(root, db, repo) == 0
    for base, head in ((commits[0], commits[1]), (commits[3], commits[4]), (commits[-2], commits[-1])):
        for extra in ([], ["--no-history"]):
            code, out = _gate(capsys, db, base, head, *extra)
            assert code == 0, out
            assert "invalid" not in out and "cannot judge" not in out and "2 series compared" in out
    verdicts = dict(_rows(db, "SELECT benchmark, verdict FROM newest_judgements"))
    assert verdicts[MEM] == "ok"
    # 0 bytes against some bytes is not "equal": the gate still refuses to pass it
    _write(root, commits[-1], len(commits) - 1, {TIMES[0]: synth.samples(rng, 1e-3, n=10, cv=0.01), MEM: 4096})
    assert _ingest(root, db, repo) == 0
    code, out = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 2 and MEM in out, out


# --- a benchmark removed from the suite ------------------------------------------------------------------

def test_a_removed_benchmark_keeps_its_history_and_is_no_error(tmp_path, capsys):
    repo, commits, root, db = _world(tmp_path, 8)
    rng = np.random.default_rng(2)
    for i, c in enumerate(commits):
        values = {t: synth.samples(rng, 1e-3, n=10, cv=0.01) for t in TIMES}
        if i < 5:  # removed after the fifth commit: benchmarks.json no longer knows it
            values[GONE] = synth.samples(rng, 2e-3, n=10, cv=0.01)
        _write(root, c, i, values)
    capsys.readouterr()
    assert _ingest(root, db, repo, "--strict") == 0
    err = capsys.readouterr().err
    assert "1 benchmark of 5 result files not in benchmarks.json (removed from the suite)" in err and GONE in err
    assert _rows(db, "SELECT count(*) FROM ingest_errors") == [(0,)]
    assert _rows(db, "SELECT count(value) FROM results WHERE benchmark = ?", [GONE]) == [(5,)]
    code, out = _gate(capsys, db, commits[2], commits[3])
    assert code == 0 and "ingest error" not in out, out


# --- a dependency or Python change recorded by asv ------------------------------------------------------

@pytest.mark.parametrize("change", ["requirements", "python"])
def test_a_recorded_dependency_change_is_an_environment_change(tmp_path, capsys, change):
    """One upgrade moves every series at once: one environment change, not a code regression each."""
    n, k = 16, 10
    repo, commits, root, db = _world(tmp_path, n)
    rng = np.random.default_rng(3)

    def write(i: int) -> None:
        after = i >= k
        env = ({"requirements": {"sqlparse": "0.5.1" if after else "0.4.4"}} if change == "requirements" else
               {"python": "3.11" if after else "3.10"})
        _write(root, commits[i], i, {t: synth.samples(rng, 1e-3 * (1.2 if after else 1.0), n=10, cv=0.01)
                                     for t in TIMES}, **env)

    want = ("requirement sqlparse: 0.4.4 → 0.5.1" if change == "requirements" else "python: 3.10 → 3.11")
    for i in range(k + 1):  # the upgrade is the newest commit: judged at ingest
        write(i)
    capsys.readouterr()
    assert _ingest(root, db, repo) == 0
    assert "0 suspected regressions" in capsys.readouterr().err
    verdicts = _rows(db, "SELECT benchmark, verdict FROM newest_judgements ORDER BY 1")
    assert verdicts == [(t, "machine changed") for t in TIMES]
    assert _rows(db, "SELECT count(*) FROM regressions") == [(0,)]
    code, out = _gate(capsys, db, commits[k - 1], commits[k], "--no-history")
    assert code == 2 and f"machine changed on {MACHINE}" in out and want in out, out
    assert "REGRESSION" not in out and out.count("slower on a changed machine") == len(TIMES)
    for i in range(k + 1, n):
        write(i)
    assert _ingest(root, db, repo) == 0
    capsys.readouterr()
    assert main(["regressions", "--db", str(db), "--format", "json", "--kind", "all"]) == 0
    alerts = json.loads(capsys.readouterr().out)
    assert [(a["commit"], a["cause"], a["env_changes"], a["counts"]) for a in alerts] == [
        (commits[k], "environment", [want] if change == "requirements" else
         [want, "env_name: virtualenv-py3.10 → virtualenv-py3.11"], {"regression": len(TIMES)})]
    # the steady part of the same history: asv's facts are the same, the machine under them unknown
    code, out = _gate(capsys, db, commits[2], commits[3], "--no-history")
    assert code == 0 and "no machine environment recorded" in out, out


# --- one-commit spikes beside a sustained step ---------------------------------------------------------

SPIKES = [5, 12, 30]
STEP = 20


def _levels() -> np.ndarray:
    lv = np.where(np.arange(40) >= STEP, 1.076, 1.0) * 1e-3  # a sustained +7.6 % step
    lv[SPIKES] *= 1.3  # three one-commit spikes
    return lv


def test_spikes_beside_a_step_do_not_hide_it(tmp_path, capsys):
    levels = _levels()
    repo, commits, root, db = _world(tmp_path, len(levels))
    rng = np.random.default_rng(0)
    for i, (c, lv) in enumerate(zip(commits, levels)):
        _write(root, c, i, {TIMES[0]: synth.samples(rng, lv, n=10, cv=0.01, run_cv=0.015)})
    assert _ingest(root, db, repo) == 0
    capsys.readouterr()
    assert main(["regressions", "--db", str(db), "--format", "json", "--flat", "--no-save"]) == 0
    got = [(r["commit"], r["kind"]) for r in json.loads(capsys.readouterr().out)]
    assert got == [(commits[STEP], "regression")]


def _series(levels: np.ndarray, seed: int) -> Series:
    rng = np.random.default_rng(seed)
    smp = [np.asarray(synth.samples(rng, lv, n=10, cv=0.01, run_cv=0.015)) for lv in levels]
    off = np.arange(len(levels) + 1) * 10
    return Series(MACHINE, TIMES[0], "", [], "seconds", [f"c{i}" for i in range(len(levels))],
                  np.array([np.median(s) for s in smp]), off, np.concatenate(smp))


def test_spikes_beside_a_step_shuffled_report_nothing():
    """The same history with its commits shuffled: no step, no false alarm (the spikes are not steps)."""
    found = [len(detect(_series(_levels(), seed))) for seed in range(10)]
    assert sum(f > 0 for f in found) >= 6  # in order: the step is there
    shuffled = [detect(_series(np.random.default_rng(100 + s).permutation(_levels()), s)) for s in range(30)]
    assert [st for st in shuffled if st] == []
