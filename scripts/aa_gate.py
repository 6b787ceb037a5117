"""A/A and planted runs of the gate on this machine: how often does identical code fail it, and does a
real 2x slowdown fail it every time? (docs/regressions.md, "The gate on a noisy runner").

In a throwaway clone of this repository:

1. ``--warmup`` + ``--pairs`` commits that change no code (a text file each) on ``main``: the
   first-parent chain c0 .. cN. Every commit is measured by ``xrt bench run`` in its own asv
   processes, so two neighbours are two runs of the same code: an A/A pair.
2. For each of the last ``--pairs`` commits c_k, a sibling p_k = c_{k-1} + a plant that calls every
   ``xp.ops.square`` twice (2x device and host time), measured the same way.
3. ``xrt db ingest``, then ``xrt gate --base c_{k-1} --head c_k`` (A/A) and ``--head p_k`` (planted),
   each with c_0 .. c_{k-1} as the history its noise model learns from.

Prints one row per pair and the totals; ``--json FILE`` keeps every gate's output.

    python scripts/aa_gate.py --pairs 10 --bench Square --work /tmp/aa
    python scripts/aa_gate.py --rejudge /tmp/aa     # the same measurements, this checkout's gate (~15 s)

The gates run this checkout's ``xrt`` (``PYTHONPATH``), not the clone's, so ``--rejudge`` compares
judges on one set of measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLANT = '''

# --- planted by scripts/aa_gate.py in a throwaway clone: every call does the work twice ---
_unplanted_square = square


def square(*args, **kwargs):
    _unplanted_square(*args, **kwargs)
    return _unplanted_square(*args, **kwargs)
'''


def _git(repo: Path, *a: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=aa", "-c", "user.email=aa@x", *a], check=True,
                          capture_output=True, text=True).stdout.strip()


def _xrt(*a: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xrt.cli", *a], capture_output=True, text=True, env=env, cwd=cwd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10, help="A/A pairs, and as many planted ones [10]")
    ap.add_argument("--warmup", type=int, default=5, help="commits of history before the first pair [5]")
    ap.add_argument("--bench", default=None, help="asv --bench regex [every suite of the quick profile]")
    ap.add_argument("--work", type=Path, default=None, help="folder to keep the clone and results in [a temp dir]")
    ap.add_argument("--json", type=Path, help="write every gate's output here")
    ap.add_argument("--rejudge", type=Path, metavar="WORK",
                    help="measure nothing: gate again the commits of an earlier run's --work folder with this "
                         "checkout's gate (to compare judges on the same measurements)")
    args = ap.parse_args(argv)
    if args.pairs < 1 or args.warmup < 1:
        ap.error("--pairs and --warmup must be at least 1")
    if args.rejudge:
        return _judge_all(args.rejudge, *_chain_of(args.rejudge), 0.0, "(rejudged)", args.json)

    work = args.work or Path(tempfile.mkdtemp(prefix="xrt-aa-"))
    work.mkdir(parents=True, exist_ok=True)
    clone = work / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    _git(clone, "checkout", "-q", "-B", "main")
    chain = []
    for i in range(args.warmup + args.pairs):
        (clone / "AA.txt").write_text(f"{i}\n")
        _git(clone, "add", "AA.txt")
        _git(clone, "commit", "-qm", f"A/A {i}: no code change")
        chain.append(_git(clone, "rev-parse", "HEAD"))
    planted = {}
    square = clone / "xrt" / "pytorch" / "ops" / "square.py"
    for k in range(args.warmup, len(chain)):
        _git(clone, "checkout", "-q", "--detach", chain[k - 1])
        square.write_text(square.read_text() + PLANT)
        _git(clone, "commit", "-qam", f"plant: square twice, on top of A/A {k - 1}")
        planted[chain[k]] = _git(clone, "rev-parse", "HEAD")
    _git(clone, "checkout", "-q", "main")

    env = dict(os.environ, HOME=str(work), PYTHONPATH="")  # asv keeps its machine file in ~
    results, db = work / "asv", work / "xrt.duckdb"
    t0 = time.monotonic()
    todo = chain + list(planted.values())
    print(f"aa_gate: measuring {len(todo)} commits ({len(chain)} A/A, {len(planted)} planted) in {work}", flush=True)
    run = _xrt("bench", "run", "--repo", str(clone), "--commits", ",".join(todo), "--quick", "--results",
               str(results), *(["--bench", args.bench] if args.bench else []), env=env, cwd=clone)
    if run.returncode != 0:
        print(run.stdout[-3000:] + run.stderr[-3000:], file=sys.stderr)
        return 2
    bench_s = time.monotonic() - t0
    ing = _xrt("db", "ingest", str(results), "--db", str(db), "--repo", str(clone), env=env, cwd=clone)
    if ing.returncode != 0:
        print(ing.stdout[-2000:] + ing.stderr[-2000:], file=sys.stderr)
        return 2

    return _judge_all(work, chain[:args.warmup], chain[args.warmup:], planted, bench_s, args.bench, args.json)


def _chain_of(work: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """(warm-up commits, judged commits, {judged: planted sibling}) of an earlier run, from its database
    (the planted commits are detached in the clone; the database keeps their parents)."""
    from xrt.db.query import query

    _, rows = query(work / "xrt.duckdb", "SELECT hash, first_parent_index, parents FROM commits")
    chain = [h for h, i, _ in sorted((r for r in rows if r[1] is not None), key=lambda r: r[1])]
    on_chain = set(chain)
    by_parent = {list(p)[0]: h for h, i, p in rows if h not in on_chain and p}
    planted = {chain[k]: by_parent[chain[k - 1]] for k in range(1, len(chain)) if chain[k - 1] in by_parent}
    first = min(chain.index(c) for c in planted)
    return chain[:first], chain[first:], planted


def _judge_all(work: Path, warm: list[str], judged: list[str], planted: dict[str, str], bench_s: float,
               bench: str | None, json_out: Path | None) -> int:
    env = dict(os.environ, HOME=str(work), PYTHONPATH=str(ROOT))  # this checkout's gate
    db, chain = work / "xrt.duckdb", warm + judged
    rows, out = [], []
    for k in range(len(warm), len(chain)):
        row = {"pair": k}
        for kind, head in (("aa", chain[k]), ("planted", planted[chain[k]])):
            g = _xrt("gate", "--db", str(db), "--base", chain[k - 1], "--head", head, "--no-history", env=env,
                     cwd=ROOT)
            row[kind] = g.returncode
            row[kind + "_flagged"] = sum(ln.startswith("REGRESSION ") for ln in g.stdout.splitlines())
            row[kind + "_within_noise"] = sum(ln.startswith("within noise") for ln in g.stdout.splitlines())
            out.append({"pair": k, "kind": kind, "code": g.returncode, "stdout": g.stdout, "stderr": g.stderr})
        rows.append(row)
        print(f"pair {k:2d}: A/A exit {row['aa']} ({row['aa_flagged']} flagged, {row['aa_within_noise']} within "
              f"noise); planted exit {row['planted']} ({row['planted_flagged']} flagged)", flush=True)
    aa_fail = sum(r["aa"] == 1 for r in rows)
    aa_cj = sum(r["aa"] == 2 for r in rows)
    caught = sum(r["planted"] == 1 for r in rows)
    print(f"aa_gate: {len(rows)} A/A gates: {aa_fail} failed (exit 1), {aa_cj} cannot judge; planted 2x: "
          f"{caught}/{len(rows)} failed; {len(chain) + len(planted)} commits measured in {bench_s:.0f} s "
          f"(--bench {bench or 'all'})")
    if json_out:
        json_out.write_text(json.dumps({"rows": rows, "gates": out, "bench_seconds": bench_s, "bench": bench},
                                       indent=1))
    return 0

if __name__ == "__main__":
    sys.exit(main())
