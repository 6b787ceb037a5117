"""scripts/series_table.py: an op's three series side by side from an asv result file."""

import json
import subprocess
import sys

from conftest import ROOT


def test_series_table_puts_the_three_series_of_a_combination_in_one_row(tmp_path):
    params = [["'4096'"], ["'float32'"], ["'torch'", "'triton'"], ["'default'"]]
    cols = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
            "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]

    def row(samples):
        return [[1.0, 1.0], params, "v", 0, 0, None, None, None, None, None, None, samples, None]

    results = {"bench_ops.Square.time_op": row([[1e-6, 3e-6, 2e-6], [5e-6]]),
               "bench_host.Square.time_host": row([[10e-6], None]),
               "bench_compiled.Square.time_compiled": row([[100e-6, 300e-6], [40e-6]]),
               "bench_allocator.Other.time_x": row([[9.0], [9.0]])}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "abc-env.json").write_text(json.dumps({"result_columns": cols, "results": results}))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "series_table.py"), str(tmp_path)],
                         capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "| op | shape | dtype | provider | device µs | host µs | compiled µs |"
    assert lines[2:] == ["| Square | 4096 | float32 | torch | 2.0 | 10.0 | 200.0 |",
                         "| Square | 4096 | float32 | triton | 5.0 |  | 40.0 |"]
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "series_table.py"), str(tmp_path / "nope")],
                         capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
    want = f"series_table: RESULTS_DIR {str(tmp_path / 'nope')!r} is not a folder"
    assert bad.returncode == 2 and bad.stderr.strip() == want
