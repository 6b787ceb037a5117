"""The per-series run-to-run noise model from history, as the gate uses it (issue #19)."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.cli import main  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import noise, synth  # noqa: E402

N = 14


def _world(tmp_path, *, run_cv: float, n_samples: int, head_factor: float, history: int = N - 1, seed: int = 2):
    """``history`` commits at one level (runs moving by ``run_cv``), then head ``head_factor`` slower."""
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, N)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    rng = np.random.default_rng(seed)
    for i in range(N - 1 - history, N):
        f = head_factor if i == N - 1 else 1.0
        synth.write_run(root, "h100", commits[i], synth.samples(rng, 50e-6 * f, n=n_samples, cv=0.01, run_cv=run_cv),
                        synth.samples(rng, 5e-6, n=n_samples, cv=0.01, run_cv=run_cv), i, 1980)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    return commits, db


def _gate(db, commits, capsys):
    code = main(["gate", "--db", str(db), "--base", commits[-2], "--head", commits[-1], "--no-history"])
    return code, capsys.readouterr().out


def test_model_from_values():
    rng = np.random.default_rng(0)
    quiet = 50e-6 * np.exp(rng.normal(0, 0.002, 20))
    noisy = 50e-6 * np.exp(rng.normal(0, 0.10, 20))
    mq, mn = noise.from_values(quiet), noise.from_values(noisy)
    assert 0.001 < mq.sigma < 0.004 and 0.05 < mn.sigma < 0.2 and mq.n == mn.n == 20
    assert math.isclose(mq.level, math.log(50e-6), abs_tol=0.01)
    assert mn.z_pair(math.log(1.2)) < noise.Z < mq.z_pair(math.log(1.2))
    assert noise.from_values(quiet[:4]) is None  # too little history
    assert noise.from_values([1.0, float("nan"), -1.0, 0.0, 1.0, 1.0]) is None  # only 3 valid values
    assert noise.from_values(np.arange(1.0, 100.0)).n == noise.WINDOW


def test_a_run_offset_within_the_series_noise_is_not_a_regression(tmp_path, capsys):
    """Samples within a run agree (1 %), whole runs move by 10 %: a 15 % slower run is not news here."""
    commits, db = _world(tmp_path, run_cv=0.10, n_samples=30, head_factor=1.15)
    code, out = _gate(db, commits, capsys)
    assert code == 0, out
    assert f"within noise (not failing): {synth.OP}" in out and "a run over 13 commits" in out


def test_the_same_slowdown_on_a_quiet_series_fails(tmp_path, capsys):
    commits, db = _world(tmp_path, run_cv=0.002, n_samples=30, head_factor=1.15)
    code, out = _gate(db, commits, capsys)
    assert code == 1 and f"REGRESSION {synth.OP}" in out and "within noise" not in out, out


def test_one_value_a_run_is_judged_against_history(tmp_path, capsys):
    """asv ``track_``-style series (one value per run) used to be 'too few samples' forever (exit 2)."""
    commits, db = _world(tmp_path, run_cv=0.01, n_samples=1, head_factor=1.0)
    code, out = _gate(db, commits, capsys)
    assert code == 0 and "2 series compared (2 against history)" in out, out


def test_one_value_a_run_slower_than_its_history_fails(tmp_path, capsys):
    commits, db = _world(tmp_path, run_cv=0.01, n_samples=1, head_factor=1.3)
    code, out = _gate(db, commits, capsys)
    assert code == 1, out
    line = next(ln for ln in out.splitlines() if ln.startswith(f"REGRESSION {synth.OP}"))
    assert "against history" in line and "z=" in line


def test_one_value_a_run_without_history_still_cannot_be_judged(tmp_path, capsys):
    commits, db = _world(tmp_path, run_cv=0.01, n_samples=1, head_factor=1.3, history=3)
    code, out = _gate(db, commits, capsys)
    assert code == 2 and "too little history to judge it otherwise" in out, out


def _loaded(rng, level: float, load: float, n: int = 40) -> list[float]:
    """One run on a loaded CPU: a share ``load`` of the samples slowed 1.5-4x; the others at the level."""
    s = level * rng.lognormal(0, 0.01, n)
    slow = rng.random(n) < load
    s[slow] *= rng.uniform(1.5, 4.0, slow.sum())
    return list(s)


@pytest.mark.parametrize("planted", [False, True])
def test_a_loaded_runner_moves_medians_not_best_samples(tmp_path, capsys, planted):
    """The run's value for the model is its best sample: load (a random share of slow samples in each run)
    moves every run's median, so a median model would call a planted 2x 'within noise'; the fastest
    sample stays near what the code costs. An A/A head on a heavily loaded run passes, a 2x head fails."""
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, N)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    rng = np.random.default_rng(4)
    loads = rng.uniform(0.0, 0.6, N)
    loads[-2], loads[-1] = 0.05, 0.55  # a quiet base, a loaded head: its median ~1.5x slower
    for i, c in enumerate(commits):
        f = 2.0 if planted and i == N - 1 else 1.0
        synth.write_run(root, "ci-cpu", c, _loaded(rng, 50e-6 * f, loads[i]), _loaded(rng, 5e-6 * f, loads[i]), i,
                        1980)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    meds = [float(np.median(_loaded(np.random.default_rng(k), 1.0, ld))) for k, ld in enumerate(loads[:-1])]
    assert np.std(np.log(meds)) > 0.1  # the medians of the history move by more than 10 % a run
    code, out = _gate(db, commits, capsys)
    if planted:
        assert code == 1 and f"REGRESSION {synth.OP}" in out and f"REGRESSION {synth.PLAIN}" in out, out
    else:
        assert code == 0 and "REGRESSION" not in out, out


def test_the_model_keeps_the_median_where_the_best_sample_is_the_jumpier():
    rng = np.random.default_rng(1)
    med = 50e-6 * np.exp(rng.normal(0, 0.002, 12))
    steady = [(m, 0.98 * m, 1.1 * m) for m in med]  # the best sample follows the median
    model, stat = noise.steadier(steady, higher_is_better=False)
    assert stat == "best" and model.sigma < 0.004
    jumpy = [(m, m * (0.98 if i % 2 else 0.90), 1.1 * m) for i, m in enumerate(med)]  # a rare fast outlier
    model, stat = noise.steadier(jumpy, higher_is_better=False)
    assert stat == "median" and model.sigma < 0.004
    # a rate: its best sample is the largest
    assert noise.steadier([(m, 0.5 * m, 1.02 * m) for m in med], higher_is_better=True)[1] == "best"
    assert noise.steadier(steady[:3], higher_is_better=False) == (None, "median")  # too little history
