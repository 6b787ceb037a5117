"""The suite's cost and repeatability for one commit: the full profile twice, cold then warm.

    python scripts/suite_report.py run --out DIR [--commit HEAD] [--device cuda:0] [--quick] [--bench REGEX]
    python scripts/suite_report.py table DIR

``run`` runs ``xrt bench run`` for one commit twice into ``DIR/cold`` and ``DIR/warm``: first with
``TRITON_CACHE_DIR`` a fresh (empty) folder, so every Triton kernel compiles, then again with the
same folder, now warm. It times each run (wall, the whole command) and writes ``DIR/runs.json``,
then the table. ``table`` rebuilds the table from ``DIR`` alone (``runs.json`` and the asv result
files under ``DIR/cold`` and ``DIR/warm``):

* per run: wall seconds, combinations (every benchmark x parameter combination asv ran, skips
  included; and how many were measured), seconds per combination;
* across the two runs, per device-time case (``bench_ops.*.time_op``) whose median is at least
  20 µs in both: the coefficient of variation of the two medians (standard deviation / mean);
  the table gives their count, median, 90th percentile and maximum, and the worst cases.

Writes ``DIR/suite.json`` and ``DIR/suite.md``. Nothing here is made up: a figure missing from the
results is reported missing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from xrt import device_env
from xrt.db import result_names

MIN_US = 20.0


def _results(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*/*.json") if result_names.is_result_file(p.name))


def load_cases(folder: Path) -> dict[tuple[str, str, str], list[float] | None]:
    """(machine, benchmark, params) -> samples (None: skipped or failed), from asv's result files."""
    out: dict[tuple[str, str, str], list[float] | None] = {}
    for f in _results(folder):
        d = json.loads(f.read_text())
        if "result_columns" not in d or "results" not in d:
            continue  # not an asv result file
        cols = d["result_columns"]
        for name, row in d["results"].items():
            row = row + [None] * (len(cols) - len(row))
            values, params = row[cols.index("result")], row[cols.index("params")]
            samples = row[cols.index("samples")] if "samples" in cols else None
            combos = _product(params) if params else [()]
            values = values if isinstance(values, list) else [values]
            for i, combo in enumerate(combos):
                s = samples[i] if samples and i < len(samples) else None
                v = values[i] if i < len(values) else None
                ok = v is not None and not (isinstance(v, float) and math.isnan(v))
                out[(f.parent.name, name, ",".join(combo))] = (s or [v]) if ok else None
    return out


def _product(params: list[list[str]]) -> list[tuple[str, ...]]:
    import itertools

    return list(itertools.product(*params))


def table(out: Path) -> dict:
    runs_path = out / "runs.json"
    if not runs_path.is_file():
        raise SystemExit(f"suite_report: {runs_path}: no runs.json (run `suite_report.py run --out {out}` first)")
    runs = json.loads(runs_path.read_text())
    report: dict = {"commit": runs.get("commit"), "device": runs.get("device"), "profile": runs.get("profile"),
                    "runs": {}}
    cases = {}
    for label in ("cold", "warm"):
        r = runs["runs"].get(label)
        if r is None:
            report["runs"][label] = None
            continue
        c = load_cases(out / label)
        cases[label] = c
        n, ok = len(c), sum(v is not None for v in c.values())
        report["runs"][label] = {"wall_s": r["wall_s"], "exit": r["exit"], "combinations": n, "measured": ok,
                                 "s_per_combination": r["wall_s"] / n if n else None}
    cvs = []
    if len(cases) == 2:
        for key, a in cases["cold"].items():
            b = cases["warm"].get(key)
            if not key[1].endswith(".time_op") or not a or not b:
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            if min(ma, mb) * 1e6 < MIN_US:
                continue
            mean = (ma + mb) / 2
            cvs.append({"case": f"{key[1]} [{key[2]}]", "machine": key[0], "cold_us": ma * 1e6, "warm_us": mb * 1e6,
                        "cv": statistics.stdev([ma, mb]) / mean})
    cvs.sort(key=lambda x: -x["cv"])
    vals = sorted(x["cv"] for x in cvs)
    report["cv_of_medians"] = {
        "min_median_us": MIN_US, "cases": len(vals),
        "median": statistics.median(vals) if vals else None,
        "p90": vals[min(len(vals) - 1, math.ceil(0.9 * len(vals)) - 1)] if vals else None,
        "max": vals[-1] if vals else None,
        "over_0.5%": sum(v > 0.005 for v in vals), "worst": cvs[:10]}
    (out / "suite.json").write_text(json.dumps(report, indent=1))
    (out / "suite.md").write_text(markdown(report))
    return report


def _f(x, fmt: str) -> str:
    return "missing" if x is None else format(x, fmt)


def markdown(r: dict) -> str:
    lines = [f"## Suite cost, commit `{(r.get('commit') or '?')[:10]}` on {r.get('device') or '?'} "
             f"({r.get('profile') or '?'} profile)", "",
             "| run | wall (s) | combinations | measured | s per combination | exit |",
             "|---|---:|---:|---:|---:|---:|"]
    for label in ("cold", "warm"):
        x = r["runs"].get(label)
        if x is None:
            lines.append(f"| {label} Triton cache | missing | | | | |")
            continue
        lines.append(f"| {label} Triton cache | {x['wall_s']:.1f} | {x['combinations']} | {x['measured']} | "
                     f"{_f(x['s_per_combination'], '.3f')} | {x['exit']} |")
    c = r["cv_of_medians"]
    pct = {k: _f(None if c[k] is None else c[k] * 100, ".3f") for k in ("median", "p90", "max")}
    lines += ["", "CV of the medians across the two runs, device-time cases with a median ≥ "
              f"{c['min_median_us']:g} µs in both: {c['cases']} cases, median {pct['median']} %, "
              f"p90 {pct['p90']} %, max {pct['max']} %, "
              f"{c['over_0.5%']} over 0.5 %.", ""]
    if c["worst"]:
        lines += ["| case (worst first) | cold (µs) | warm (µs) | CV |", "|---|---:|---:|---:|"]
        lines += [f"| `{w['case']}` | {w['cold_us']:.2f} | {w['warm_us']:.2f} | {w['cv'] * 100:.3f} % |"
                  for w in c["worst"]]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "triton-cache"
    if cache.exists() and any(cache.iterdir()):
        raise SystemExit(f"suite_report: {cache} is not empty: give a fresh --out for a cold first run")
    cache.mkdir(exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", args.commit], capture_output=True, text=True,
                            check=True).stdout.strip()
    runs: dict = {"commit": commit, "device": args.device or device_env.requested() or "default",
                  "profile": "quick" if args.quick else "full", "runs": {}}
    for label in ("cold", "warm"):
        cmd = [sys.executable, "-m", "xrt.cli", "bench", "run", "--commits", commit, "--results", str(out / label)]
        cmd += (["--device", args.device] if args.device else []) + (["--quick"] if args.quick else [])
        cmd += ["--bench", args.bench] if args.bench else []
        print(f"suite_report: {label} Triton cache ({cache}): {' '.join(cmd)}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        with open(out / f"{label}.log", "w") as log:
            rc = subprocess.run(cmd, env={**os.environ, "TRITON_CACHE_DIR": str(cache)}, stdout=log,
                                stderr=subprocess.STDOUT).returncode
        wall = time.perf_counter() - t0
        runs["runs"][label] = {"wall_s": wall, "exit": rc}
        print(f"suite_report: {label}: {wall:.1f} s, exit {rc} (log {out / f'{label}.log'})", file=sys.stderr,
              flush=True)
        (out / "runs.json").write_text(json.dumps(runs, indent=1))
    report = table(out)
    print(markdown(report))
    return 0 if all(r and r["exit"] == 0 for r in report["runs"].values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the suite twice (cold, then warm Triton cache), timed; then the table")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--commit", default="HEAD")
    r.add_argument("--device")
    r.add_argument("--quick", action="store_true", help="the CPU quick profile (default: full)")
    r.add_argument("--bench", help="asv --bench regex (default: every suite)")
    t = sub.add_parser("table", help="rebuild suite.json / suite.md from a run's folder")
    t.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        return run(args)
    print(markdown(table(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
