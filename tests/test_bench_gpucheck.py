"""gpucheck (the one-run kernel table) lives in xrt.bench and times with xrt.bench.timer, nothing else."""

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from xrt.bench import gpucheck, timer


def test_gpucheck_rows_are_timed_by_the_xrt_timer(monkeypatch):
    """Replace the timer: gpucheck's figures must be exactly what it returns (no timer of its own)."""
    seen = []

    def fake_measure(fn, device="cpu", *, flush_l2=True, **rule):
        fn()  # the call it times is the op's
        seen.append(("device", device, flush_l2, rule))
        return timer.Measurement(samples_s=[40e-6, 42e-6, 44e-6])

    def fake_host(fn, device="cpu", **settings):
        fn()
        seen.append(("host", device, settings))
        return timer.Measurement(samples_s=[7e-6, 8e-6, 9e-6])

    monkeypatch.setattr(timer, "measure", fake_measure)
    monkeypatch.setattr(timer, "measure_host", fake_host)
    cache: dict = {}
    row = gpucheck.measure_row("square", "large", (4096,), "float32", "torch", None, copy_tbs=1.0, cache=cache,
                               device="cpu")
    assert row["error"] is None, row.get("traceback")
    assert row["us"] == 42.0 and row["host_us"] == 8.0
    assert row["tbs"] == round(2 * 4096 * 4 / 42e-6 / 1e12, 3) and row["err_vs_torch"] == 0.0
    small = gpucheck.measure_row("square", "small", (4096,), "float32", "torch", None, 1.0, cache, quick=True,
                                 device="cpu")
    assert small["us"] == 42.0
    assert seen[0] == ("device", "cpu", True, {}) and seen[1][0] == "host"
    assert seen[2] == ("device", "cpu", False, gpucheck.QUICK)  # small shapes: no flush; the sweep: shorter
    assert "| square | large | 4096 | float32 | torch | default | 42.0 |" in gpucheck._table([row], "t")


def test_a_failing_provider_is_a_row_not_the_end(monkeypatch):
    row = gpucheck.measure_row("square", "large", (4096,), "float32", "nope", None, 1.0, {}, device="cpu")
    assert row["us"] is None and row["error"]


def test_kernels_do_not_import_the_bench_layer():
    """xrt.kernels sits below xrt.bench: nothing there imports xrt.bench (gpucheck used to)."""
    assert not (ROOT / "xrt" / "kernels" / "gpucheck.py").exists()
    offenders = []
    for path in sorted((ROOT / "xrt" / "kernels").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith("xrt.bench")]
    assert offenders == []


def test_gpucheck_entry_point():
    out = subprocess.run([sys.executable, "-m", "xrt.bench.gpucheck", "--help"], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and "python -m xrt.bench.gpucheck" in out.stdout
    assert "python -m xrt.bench.gpucheck" in Path(ROOT / "docs" / "kernels.md").read_text()
