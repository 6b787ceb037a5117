"""Run named steps of a GitHub Actions workflow here, as the runner would run their ``run:`` scripts.

For checking a workflow's own commands on a host (scripts/nightly_culprit.sh): each step's script
runs in bash (``set -eo pipefail``, as Actions does) in ``--cwd``, with the job's and the step's
``env``, ``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY`` files, and ``${{ ... }}`` expressions of the
kinds the workflows here use (``steps.X.outputs.Y``, ``steps.X.outcome``, ``github.event.inputs.Y``,
``github.run_id``) filled in. A step's ``if:`` is evaluated the same way (``always()``,
``failure()``, ``success()``, ``==``, ``!=``, ``&&``, ``||``); ``uses:`` steps are not run.

    python scripts/workflow_steps.py .github/workflows/nightly.yml --cwd CLONE --input base=abc123 \
        --sub '--all-gpus=--all-gpus --bench ^bench_ops\\.VectorAdd\\.' \
        "choose commits" "xrt bench run" "xrt db ingest" "xrt gate --paired" "xrt culprit"

``--sub OLD=NEW`` replaces text in every script run (to narrow what a step measures); exit 1 when
any step failed, as the job would.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def value(expr: str, ctx: dict) -> str:
    """One context reference (``steps.range.outputs.base``) as text ('' when unknown)."""
    parts = expr.split(".")
    if parts[0] == "steps" and len(parts) >= 3:
        step = ctx["steps"].get(parts[1], {})
        return step.get("outputs", {}).get(parts[3], "") if parts[2] == "outputs" and len(parts) == 4 \
            else step.get(parts[2], "")
    if parts[:3] == ["github", "event", "inputs"] and len(parts) == 4:
        return ctx["inputs"].get(parts[3], "")
    if expr == "github.run_id":
        return ctx["run_id"]
    return ""


def fill(text: str, ctx: dict) -> str:
    return EXPR.sub(lambda m: value(m.group(1), ctx), text)


def condition(cond: str | None, ctx: dict) -> bool:
    """A step's ``if:`` (without one: ``success()``)."""
    if not cond:
        return not ctx["failed"]
    expr = EXPR.sub(lambda m: m.group(1), str(cond))
    py = re.sub(r"\b(steps|github)(\.[A-Za-z0-9_-]+)+", lambda m: repr(value(m.group(0), ctx)), expr)
    py = (py.replace("&&", " and ").replace("||", " or ").replace("always()", "True")
          .replace("failure()", repr(ctx["failed"])).replace("success()", repr(not ctx["failed"])))
    py = re.sub(r"!(?!=)", " not ", py)
    return bool(eval(py, {"__builtins__": {}}, {}))  # noqa: S307 - the repository's own workflow file


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workflow", type=Path)
    ap.add_argument("steps", nargs="+", help="step names, in the order to run them")
    ap.add_argument("--job", default=None, help="the job [the only one]")
    ap.add_argument("--cwd", type=Path, default=Path("."))
    ap.add_argument("--input", action="append", default=[], metavar="NAME=VALUE", help="workflow_dispatch inputs")
    ap.add_argument("--sub", action="append", default=[], metavar="OLD=NEW", help="replace text in every script")
    ap.add_argument("--summary", type=Path, help="GITHUB_STEP_SUMMARY [a temporary file, printed at the end]")
    args = ap.parse_args(argv)
    wf = yaml.safe_load(args.workflow.read_text())
    jobs = wf["jobs"]
    job = jobs[args.job] if args.job else next(iter(jobs.values()))
    by_name = {s.get("name"): s for s in job["steps"] if s.get("name")}
    missing = [n for n in args.steps if n not in by_name]
    if missing:
        print(f"workflow_steps: {args.workflow}: no step named {', '.join(map(repr, missing))}", file=sys.stderr)
        return 2
    subs = [tuple(s.split("=", 1)) for s in args.sub]
    work = Path(tempfile.mkdtemp(prefix="workflow-steps-"))
    summary = args.summary or work / "summary.md"
    ctx = {"steps": {}, "inputs": dict(i.split("=", 1) for i in args.input), "run_id": str(os.getpid()),
           "failed": False}
    for name in args.steps:
        step = by_name[name]
        if "run" not in step:
            print(f"== {name}: a `uses:` step, not run here")
            continue
        if not condition(step.get("if"), ctx):
            print(f"== {name}: skipped (if: {step.get('if')})")
            if step.get("id"):
                ctx["steps"][step["id"]] = {"outcome": "skipped", "outputs": {}}
            continue
        script = fill(step["run"], ctx)
        for old, new in subs:
            script = script.replace(old, new)
        out = work / f"output-{len(ctx['steps'])}"
        out.write_text("")
        env = {**os.environ, **{k: fill(str(v), ctx) for k, v in (job.get("env") or {}).items()},
               **{k: fill(str(v), ctx) for k, v in (step.get("env") or {}).items()},
               "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)}
        print(f"== {name}\n{script.rstrip()}", flush=True)
        rc = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=args.cwd, env=env).returncode
        outputs = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
        ctx["steps"][step.get("id") or f"_{name}"] = {"outcome": "success" if rc == 0 else "failure",
                                                      "outputs": outputs}
        print(f"== {name}: exit {rc}", flush=True)
        if rc != 0:
            ctx["failed"] = True
    if not args.summary:
        print("== the step summary\n" + summary.read_text())
    return 1 if ctx["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
