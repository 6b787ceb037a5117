"""The detector on synthetic series, the evaluation harness's targets, and the statistics."""

from __future__ import annotations

import numpy as np
import pytest

from xrt.track import evaluate, stats
from xrt.track.detect import DetectConfig, Series, detect


def _series(levels, unit="seconds", seed=0, n=60, cv=0.02, run_cv=0.002, clocks=None):
    rng = np.random.default_rng(seed)
    times, cycles = [], []
    for i, lv in enumerate(levels):
        run = lv * (1 + rng.normal(0, run_cv))
        s = run * rng.lognormal(0, cv, n)
        mhz = 1980.0 if clocks is None else clocks[i]
        cycles.append(s * 1980.0)
        times.append(s * 1980.0 / mhz)
    off = np.arange(len(levels) + 1) * n
    flat = np.concatenate(times)
    s = Series("m", "b.time_x", "", [], unit, [f"c{i}" for i in range(len(levels))],
               np.array([np.median(t) for t in times]), off, flat)
    if clocks is not None:
        s.cyc_off, s.cyc_flat = off.copy(), np.concatenate(cycles)
    return s


def test_mannwhitney_matches_hand_computed_values():
    # no overlap, 10 v 10: U = 0, z = (50 - 0.5) / sqrt(175) -> p = 0.000182 (scipy's asymptotic value)
    p, eff = stats.mannwhitney(np.arange(10), np.arange(10) + 100)
    assert p == pytest.approx(1.8267e-4, rel=1e-3) and eff == 1.0
    assert stats.mannwhitney(np.ones(20), np.ones(20))[0] == 1.0  # all tied
    p, _ = stats.mannwhitney([1, 2, 2, 3], [2, 3, 3, 4])
    assert 0.1 < p < 0.5


def test_step_fixed_later_is_reported_with_its_fix():
    lv = np.where((np.arange(60) >= 20) & (np.arange(60) < 30), 1.05, 1.0)
    steps = detect(_series(lv))
    assert [(s.index, s.kind) for s in steps] == [(20, "regression"), (30, "improvement")]
    assert steps[0].fixed_by == 30 and 1.03 < steps[0].ratio < 1.07 and steps[0].p_value < 1e-3


def test_throughput_units_drop_is_a_regression():
    lv = np.where(np.arange(50) >= 25, 0.9, 1.0)
    steps = detect(_series(lv, unit="GB/s"))
    assert [(s.index, s.kind) for s in steps] == [(25, "regression")]


def test_spikes_bimodal_and_small_changes_are_not_steps():
    lv = np.ones(60)
    lv[[10, 30, 31]] = 1.3
    assert detect(_series(lv)) == []
    rng = np.random.default_rng(5)
    assert detect(_series(np.where(rng.random(80) < 0.5, 1.08, 1.0), seed=5)) == []
    # a real 1 % step is below the 2 % bar, but above a 0.5 % one set for this benchmark by regex
    small = np.where(np.arange(60) >= 30, 1.01, 1.0)
    assert detect(_series(small, cv=0.005)) == []
    # the bar's slack (one standard error) with z >= 4 never reaches below 4/5 of the bar: a 1.5 %
    # step is not reported against a 2 % bar at any noise; a 1.9 % one, within one standard error
    # of it, is (and is not without the slack)
    for run_cv in (0.0005, 0.002, 0.004, 0.006):
        assert detect(_series(np.where(np.arange(60) >= 30, 1.015, 1.0), cv=0.005, run_cv=run_cv)) == []
    near = _series(np.where(np.arange(60) >= 30, 1.019, 1.0), cv=0.005, run_cv=0.004, seed=3)
    assert [s.index for s in detect(near)] == [30]
    assert detect(near, DetectConfig(effect_se=0.0)) == []
    cfg = DetectConfig(effects=[(r"time_x$", 0.005)])
    assert [s.index for s in detect(_series(small, cv=0.005), cfg)] == [30]


def test_clock_drop_is_a_clock_change():
    clocks = np.where(np.arange(50) >= 25, 1980 * 0.9, 1980.0)
    steps = detect(_series(np.ones(50), clocks=clocks))
    assert [(s.index, s.kind) for s in steps] == [(25, "clock")]
    assert abs(steps[0].cycles_ratio - 1) < 0.01 and steps[0].ratio > 1.08
    # a code regression with clocks recorded stays a regression
    steps = detect(_series(np.where(np.arange(50) >= 25, 1.1, 1.0), clocks=np.full(50, 1980.0)))
    assert [s.kind for s in steps] == ["regression"]


def test_harness_meets_the_targets_and_beats_asv():
    pytest.importorskip("asv")
    # The noise is pinned to the H100 results committed in the repository (or, in a checkout without
    # them, the H100 summary figures), so the test does not move with whatever results/ holds.
    from conftest import ROOT

    res = evaluate.evaluate(per_group=60, length=80, seed=0, noise_root=ROOT / "results" / "asv")
    x, asv = res["xrt"], res["asv_detect_regressions"]
    # The targets.
    assert x["precision"] >= 0.95
    for size in ("5%", "10%", "25%"):
        assert x["recall_by"][size] >= 0.95, (size, x["recall_by"])
    # small sustained steps: >= 0.6 at each of 2 % and 3 % (a 2 % step sits on the 2 % bar; the
    # bar's slack of one standard error is what lifts it from about half)
    for size in ("2%", "3%"):
        assert x["recall_by"][size] >= 0.6, (size, x["recall_by"])
    assert x["f1"] >= asv["f1"] + 0.1
    # Beyond the targets, with room for sampling (on other seeds 1 clock series in 60 and 2 bimodal
    # series in 60 have gone wrong; 0.98 of fixed slowdowns are marked fixed on 100 series a group).
    assert x["recall_by"]["fixed"] >= 0.9
    assert res["clock"]["reported_as_regression"] <= 0.05 * res["clock"]["series"]
    assert all(n <= 3 for n in res["false_by_group"].values()), res["false_by_group"]
    assert res["xrt_improvements"]["precision"] >= 0.95 and res["xrt_improvements"]["recall"] >= 0.9
    assert "noise" in res and res["noise"]


def test_noise_profiles_from_real_results(tmp_path):
    d = tmp_path / "h100-nvidia-h100-80gb"
    d.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        smp = list(50e-6 * (1 + rng.normal(0, 0.01)) * rng.lognormal(0, 0.03, 100))
        (d / f"{i:08x}-env.json").write_text(__import__("json").dumps(
            {"result_columns": ["result", "params", "samples"], "results": {"a.time_b": [[1.0], [], [smp]]}}))
    prof, source = evaluate.noise_profiles(tmp_path)
    assert "real H100 samples" in source and 0.02 < prof["a.time_b[0]"]["sample_cv"] < 0.04
    assert "H100 measurements" in evaluate.noise_profiles(tmp_path / "none")[1]


def test_noise_profiles_count_result_files_only(tmp_path):
    """Sidecars of the older form (``X.xrt.json``) and machine.json lie beside the result files: the
    profiles come from, and the source counts, the result files only (result_names.is_result_file)."""
    import json

    d = tmp_path / "h100-nvidia-h100-80gb"
    d.mkdir()
    (d / "machine.json").write_text(json.dumps({"machine": d.name}))
    rng = np.random.default_rng(0)
    for i in range(3):
        smp = list(50e-6 * rng.lognormal(0, 0.03, 100))
        (d / f"{i:08x}-env.json").write_text(json.dumps(
            {"result_columns": ["result", "params", "samples"], "results": {"a.time_b": [[1.0], [], [smp]]}}))
        (d / f"{i:08x}-env.xrt.json").write_text(json.dumps({"gpu": {"sm_clock_mhz": 1980}}))
    prof, source = evaluate.noise_profiles(tmp_path)
    assert set(prof) == {"a.time_b[0]"} and f"real H100 samples: 3 result files under {tmp_path}" == source


def test_noise_profiles_keep_benchmark_versions_and_parameters_apart(tmp_path):
    """Runs of another suite version (which measured 10 x slower) or another parameter order must
    not become run-to-run noise of this one."""
    import json

    d = tmp_path / "h100-nvidia-h100-80gb"
    d.mkdir()
    rng = np.random.default_rng(1)
    cols = ["result", "params", "version", "samples"]
    for i in range(4):  # four runs of version v1: params (a, b) in this order
        s1, s2 = (list(t * rng.lognormal(0, 0.01, 50)) for t in (50e-6, 80e-6))
        (d / f"{i:08x}-env.json").write_text(json.dumps(
            {"result_columns": cols, "results": {"m.time_b": [[1, 1], [["'a'", "'b'"]], "v1", [s1, s2]]}}))
    s1, s2 = (list(t * rng.lognormal(0, 0.01, 50)) for t in (800e-6, 500e-6))  # v2: reordered, 10 x
    (d / "99999999-env.json").write_text(json.dumps(
        {"result_columns": cols, "results": {"m.time_b": [[1, 1], [["'b'", "'a'"]], "v2", [s1, s2]]}}))
    prof, _ = evaluate.noise_profiles(tmp_path)
    assert set(prof) == {"m.time_b['a']@v1", "m.time_b['b']@v1"}  # v2 has one run: no profile
    assert prof["m.time_b['a']@v1"]["run_cv"] < 0.05 and abs(prof["m.time_b['a']@v1"]["level"] - 50e-6) < 5e-6
