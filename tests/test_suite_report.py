"""scripts/suite_report.py: the table of a suite run (cold and warm) is rebuilt from the run's folder."""

from __future__ import annotations

import json
import statistics
import sys

import pytest
from conftest import ROOT

from xrt.track import synth

sys.path.insert(0, str(ROOT / "scripts"))
import suite_report  # noqa: E402


def test_table_from_two_runs(tmp_path):
    commit = "ab" * 20
    cold = [50e-6 + i * 1e-9 for i in range(20)]
    warm = [50.5e-6 + i * 1e-9 for i in range(20)]
    synth.write_run(tmp_path / "cold", "h100", commit, cold, [5e-6] * 20, 0, 1980)
    synth.write_run(tmp_path / "warm", "h100", commit, warm, [5.1e-6] * 20, 0, 1980)
    with pytest.raises(SystemExit, match="no runs.json"):
        suite_report.table(tmp_path)
    (tmp_path / "runs.json").write_text(json.dumps({"commit": commit, "device": "cuda:0", "profile": "full", "runs": {
        "cold": {"wall_s": 10.0, "exit": 0}, "warm": {"wall_s": 4.0, "exit": 0}}}))
    r = suite_report.table(tmp_path)
    assert r["runs"]["cold"] == {"wall_s": 10.0, "exit": 0, "combinations": 2, "measured": 2, "s_per_combination": 5.0}
    assert r["runs"]["warm"]["s_per_combination"] == 2.0
    cv = r["cv_of_medians"]
    # only the device-time case of >= 20 us: the 5 us one and the non-time_op series are left out
    a, b = statistics.median(cold), statistics.median(warm)
    assert cv["cases"] == 1 and cv["max"] == pytest.approx(statistics.stdev([a, b]) / ((a + b) / 2))
    assert cv["over_0.5%"] == 1 and cv["worst"][0]["case"].startswith(synth.OP)
    md = (tmp_path / "suite.md").read_text()
    assert "| cold Triton cache | 10.0 | 2 | 2 | 5.000 | 0 |" in md and "1 over 0.5 %" in md
    assert json.loads((tmp_path / "suite.json").read_text()) == r
