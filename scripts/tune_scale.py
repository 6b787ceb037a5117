"""Wall time of one tuning search on one GPU against the same search on every GPU of the host.

    python scripts/tune_scale.py --out DIR [--pairs 2] [--shape 4096x4096x4096]

Runs `xrt tune matmul --provider triton --strategy exhaustive` (bf16, the whole pruned space) first
once on every GPU to fill Triton's compile cache (so neither timed side pays for compiling from
scratch), then `--pairs` times one GPU and all GPUs in turns (A B A B), each into its own `--out`
(nothing is skipped from another run's journal). Writes DIR/tune-scale.json and DIR/tune-scale.md
(the table in docs/tuning.md) and prints the table. Each row carries the run's timeline (`xrt tune
--json`, xrt/tune/timeline.py); the table shows where the fixed part went: the tuner's own start
(devices found), its timing workers ready, the first timing, and the time after the last one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(out: Path, shape: str, gpus: str | None, jobs: int) -> dict:
    cmd = [sys.executable, "-m", "xrt.cli", "tune", "matmul", "--provider", "triton", "--shape", shape,
           "--dtype", "bfloat16", "--strategy", "exhaustive", "--timeout", "60", "--top-k", "5",
           "--jobs", str(jobs), "--out", str(out), "--json"]
    if gpus:
        cmd += ["--gpus", gpus]
    t0 = time.monotonic()
    with open(out.with_suffix(".log"), "w") as log:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}; see {out.with_suffix('.log')}")
    res = json.loads(p.stdout)
    recs = [json.loads(ln) for ln in Path(res["journal"]).read_text().splitlines() if ln.strip()]
    at = [r["at"] for r in recs if r.get("phase") == "time"]
    tl = {e["event"]: e["s"] for e in res.get("timeline", [])}
    ready = [s for e, s in tl.items() if e.startswith("time") and e.endswith(" ready")]
    return {"gpus": gpus or "default", "wall_s": round(wall, 2), "counts": res["counts"],
            "time_phase_s": round(max(at) - min(at), 2) if at else None,
            "ran_on": sorted({r.get("ran_on") for r in recs}),
            "best": res["best"][0]["key"] if res["best"] else None,
            "best_us": round(res["best"][0]["median_s"] * 1e6, 2) if res["best"] else None,
            # seconds since the tuner's process started (the wall clock here starts a few ms earlier)
            "tuner_ready_s": tl.get("space built"), "timing_workers_ready_s": max(ready) if ready else None,
            "first_timing_s": tl.get("first config timed"),
            "after_last_timing_s": round(wall - tl["last config timed"], 2) if "last config timed" in tl else None,
            "timeline": res.get("timeline", [])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/tune_scale.py")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--shape", default="4096x4096x4096")
    p.add_argument("--jobs", type=int, default=0,
                   help="compile workers [the cores less one per GPU (its timing worker) and one (the tuner)]")
    a = p.parse_args(argv)
    import os

    import torch

    n = torch.cuda.device_count()
    if n < 2:
        print(f"tune_scale: {n} GPU(s) here; the comparison needs at least 2", file=sys.stderr)
        return 2
    jobs = a.jobs or max(1, len(os.sched_getaffinity(0)) - n - 1)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = [dict(run(a.out / "warm", a.shape, "all", jobs), role="warm-up (fills the compile cache)")]
    print(rows[-1], flush=True)
    for i in range(a.pairs):
        for role, gpus in (("one GPU", None), (f"{n} GPUs", "all")):
            rows.append(dict(run(a.out / f"{'one' if gpus is None else 'all'}{i}", a.shape, gpus, jobs), role=role))
            print(rows[-1], flush=True)
    one = [r["wall_s"] for r in rows if r["role"] == "one GPU"]
    many = [r["wall_s"] for r in rows if r["role"] == f"{n} GPUs"]
    ratio = statistics.median(many) / statistics.median(one)
    name = torch.cuda.get_device_name(0)
    lines = [f"{a.shape} bf16 Triton GEMM space, exhaustive, {name} x {n}, {jobs} compile workers, "
             f"torch {torch.__version__}", "",
             "| run | GPUs | configs | wall s | tuner ready s | timing workers ready s | first timing s "
             "| timing phase s | after last timing s | best |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r['role']} | {', '.join(map(str, r['ran_on']))} | {sum(r['counts'].values())} | "
                     f"{r['wall_s']:.1f} | {r['tuner_ready_s']} | {r['timing_workers_ready_s']} | "
                     f"{r['first_timing_s']} | {r['time_phase_s']} | {r['after_last_timing_s']} | "
                     f"{r['best']} ({r['best_us']} us) |")
    lines += ["", f"median wall, {n} GPUs / one GPU: {statistics.median(many):.1f} / {statistics.median(one):.1f} s "
              f"= {ratio:.3f} (target <= 0.6)", "",
              "tuner ready: its imports, the devices found and the space built; timing workers ready: the "
              "last one's; first timing: the first config timed; all in s since the tuner's process started. "
              "Whole timelines: tune-scale.json."]
    (a.out / "tune-scale.md").write_text("\n".join(lines) + "\n")
    (a.out / "tune-scale.json").write_text(json.dumps({"rows": rows, "ratio": ratio, "gpu": name, "n": n,
                                                       "jobs": jobs}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
