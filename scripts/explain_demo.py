"""The acceptance of ``xrt explain`` on a GPU host: two regressions planted the way real changes
would make them, found by the gate, explained.

    python3 scripts/explain_demo.py --out "$OUT/explain"       # (scripts/gpu_run.sh explain)

In a throwaway clone of this checkout, on top of its HEAD (``base``):

1. ``clone``: the Triton ``square`` launcher makes a defensive copy of its input (``.clone()``), an
   extra copy kernel per call;
2. ``scalar``: the CUDA C ``square`` tuning default goes from the vectorized kernel (``v2``) to the
   scalar one (``v1``) in xrt/kernels/spaces.py.

For each planted commit: ``xrt bench run`` of ``bench_ops.Square.time_op`` only (full profile,
``--results`` of the demo's own), ``xrt db ingest`` (which judges each series' newest commit and
stores the suspected regressions), ``xrt gate`` (expected: exit 1, summary kept), ``xrt explain`` of
the stored regression of the case named below (else the slowest stored case of the planted
provider; else, when the gate stored none, the named case by ``--base/--head/--bench/--params``,
and the output says so), then the gate summary
again, now with the explanation. Everything lands under ``--out``: logs, the database, the gate
summaries, each explanation's JSON and Markdown and its raw per-side files (NCU CSV, profiler
trace, the compiled code). Nothing outside the temporary clone changes; clocks are never touched.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
XRT = [sys.executable, "-c", "import sys; from xrt.cli import main; sys.exit(main())"]
BENCH = "bench_ops.Square.time_op"
BENCH_RX = r"bench_ops\.Square\.time_op"  # asv --bench (re.search; anchors select nothing there)
# the cases whose explanation is the acceptance: a large (bandwidth-bound, not CUDA-graph) shape
PLANTS = [
    {"name": "clone", "case": "16777216,float32,triton,default",
     "file": "xrt/kernels/triton/square.py", "old": "    x = x.contiguous()\n    y = torch.empty_like(x)\n",
     "new": ("    x = x.contiguous().clone()  # planted by explain_demo: a defensive copy\n"
             "    y = torch.empty_like(x)\n"),
     "message": "square (Triton): copy the input defensively before the launch"},
    {"name": "scalar", "case": "16777216,float32,cuda,default",
     "file": "xrt/kernels/spaces.py", "old": '"square.cuda": {"block": 256, "version": "v2"}',
     "new": '"square.cuda": {"block": 256, "version": "v1"}',
     "message": "square (CUDA C): default to the scalar kernel v1"},
]


def sh(cmd: list[str], log: Path, cwd: Path, env: dict, ok=(0,)) -> int:
    t0 = time.time()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
        f.write(f"-> exit {rc} in {time.time() - t0:.1f} s\n\n")
    print(f"  {' '.join(c if len(c) < 60 else c[:57] + '...' for c in cmd[3:])}: exit {rc} "
          f"({time.time() - t0:.0f} s)", flush=True)
    if rc not in ok:
        print("\n".join(log.read_text().splitlines()[-25:]))
        raise SystemExit(f"explain_demo: {cmd[3:5]} failed (exit {rc}); log {log}")
    return rc


def query(db: Path, sql: str, env: dict) -> list[dict]:
    out = subprocess.run(XRT + ["db", "query", "--db", str(db), "--format", "csv", sql], capture_output=True,
                         text=True, env=env)
    if out.returncode != 0:
        return []
    return list(csv.DictReader(io.StringIO(out.stdout)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--keep", action="store_true", help="keep the temporary clone")
    args = ap.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "explain_demo.log"
    work = Path(tempfile.mkdtemp(prefix="xrt-explain-demo-"))
    repo, results, db = work / "repo", work / "results", out / "explain-demo.duckdb"
    tuned = work / "no-tuned"  # only the default config of each provider: the demo's time is the GPU's
    tuned.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XRT_TUNED_DIR": str(tuned), "PYTHONUNBUFFERED": "1"}
    t0 = time.time()
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
        git = lambda *a: subprocess.run(["git", "-C", str(repo), "-c", "user.name=explain-demo", "-c",  # noqa: E731
                                         "user.email=explain-demo@localhost", *a], check=True, capture_output=True,
                                        text=True).stdout.strip()
        commits = {"base": git("rev-parse", "HEAD")}
        for p in PLANTS:
            f = repo / p["file"]
            text = f.read_text()
            if text.count(p["old"]) != 1:
                raise SystemExit(f"explain_demo: {p['file']} no longer has the line to plant {p['name']} in")
            f.write_text(text.replace(p["old"], p["new"]))
            git("commit", "-qam", p["message"])
            commits[p["name"]] = git("rev-parse", "HEAD")
        (out / "commits.json").write_text(json.dumps(commits, indent=1))
        print(f"explain_demo: base {commits['base'][:10]}, "
              + ", ".join(f"{p['name']} {commits[p['name']][:10]}" for p in PLANTS), flush=True)
        sh(XRT + ["bench", "run", "--repo", str(repo), "--results", str(results), "--commits", commits["base"],
                  "--bench", BENCH_RX], log, repo, env)
        sh(XRT + ["db", "ingest", str(results), "--db", str(db), "--repo", str(repo), "--rev", "HEAD"], log, repo, env)
        prev = commits["base"]
        summary = []
        for p in PLANTS:
            head = commits[p["name"]]
            print(f"== {p['name']}: {p['message']}", flush=True)
            sh(XRT + ["bench", "run", "--repo", str(repo), "--results", str(results), "--commits", head,
                      "--bench", BENCH_RX], log, repo, env)
            sh(XRT + ["db", "ingest", str(results), "--db", str(db), "--repo", str(repo), "--rev", "HEAD"], log,
               repo, env)
            gate_md = out / f"gate-{p['name']}.md"
            rc = sh(XRT + ["gate", "--db", str(db), "--repo", str(repo), "--base", prev, "--head", head,
                           "--summary", str(gate_md)], log, repo, env, ok=(0, 1, 2))
            shape, dtype, provider, config = p["case"].split(",", 3)
            key = f"'{shape}', '{dtype}', '{provider}', '{config}'"
            rows = query(db, "SELECT id, param_key, ratio, suspected FROM regressions WHERE kind = 'regression' AND "
                         f"\"commit\" = '{head}' AND benchmark = '{BENCH}' ORDER BY ratio DESC", env)
            (out / f"regressions-{p['name']}.json").write_text(json.dumps(rows, indent=1))
            # the named case if the gate stored it, else the slowest stored case of the planted provider
            mine = [r for r in rows if r["param_key"] == key] or [r for r in rows if f"'{provider}'" in r["param_key"]]
            dest = out / p["name"]
            if mine:
                rid = mine[0]["id"]
                how = f"stored regression {rid}: {mine[0]['param_key']} ({float(mine[0]['ratio']):.3f}x)"
                cmd = XRT + ["explain", rid, "--db", str(db), "--repo", str(repo), "--out", str(dest)]
            else:
                how = (f"no stored regression for {key} at {head[:10]} (gate exit {rc}; stored: "
                       f"{[(r['param_key'], r['ratio']) for r in rows][:6]}): explained by --base/--head")
                cmd = XRT + ["explain", "--base", prev, "--head", head, "--bench", BENCH, "--params", p["case"],
                             "--db", str(db), "--repo", str(repo), "--out", str(dest)]
            print(f"  {p['name']}: gate exit {rc}; {how}", flush=True)
            sh(cmd, log, repo, env)
            sh(XRT + ["gate", "--db", str(db), "--repo", str(repo), "--base", prev, "--head", head, "--summary",
                      str(out / f"gate-{p['name']}-explained.md")], log, repo, env, ok=(0, 1, 2))
            summary.append(f"## {p['name']}: {p['message']}\n\ngate exit {rc}; {how}\n\n"
                           + (dest / "explain.md").read_text())
            prev = head
        (out / "explain_demo.md").write_text("\n".join(summary))
        print("\n".join(summary))
        print(f"explain_demo: done in {time.time() - t0:.0f} s; files in {out}")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
