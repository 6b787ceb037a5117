"""``xrt demo``: the main job on this machine's default device (the CPU when there is no GPU).

It grows with the pipeline: each stage runs when its layer is built, and says what it did.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job on this machine's default device, end to end")
    p.add_argument("--no-serve", action="store_true", help="do not start the dashboard at the end")
    p.add_argument("--repo", type=Path, default=Path("."), help="the xpuruntime checkout [.]")
    p.add_argument("--db", type=Path, default=None,
                   help="database [REPO/results/demo/xrt.duckdb, made anew each run]")
    p.add_argument("--port", type=int, default=8501, help="the dashboard's port [8501]")
    p.set_defaults(func=run)


def _say(msg: str) -> None:
    print(f"[xrt demo] {msg}", flush=True)


def stage_device():
    from xrt.device import default_device

    dev = default_device()
    _say(f"device: {dev.summary()}")
    return dev


def stage_square(dev) -> None:
    """Every provider of ``square`` that runs here: correct against float64, and a quick timing."""
    import torch

    import xrt.pytorch as xp

    n = 1 << 20 if dev.kind == "cpu" else 1 << 26
    x = torch.randn(n, device=dev.torch_device)
    ref = x.double() ** 2
    _say(f"square on {n:,} float32 elements, each provider that runs here:")
    print(f"  {'provider':9} {'max rel err':>12} {'median':>12} {'GB/s':>8}")
    for name, prov in xp.ops.providers("square").items():
        why = prov.missing(x)
        if why is not None:
            print(f"  {name:9} skipped: {why}")
            continue
        if name == "triton" and dev.kind == "cpu":
            x_small = x[:4096]  # the Triton interpreter is slow: check it on a slice, time nothing
            err = ((xp.ops.square(x_small, provider=name).double() - ref[:4096]).abs() / ref[:4096]).max()
            print(f"  {name:9} {err.item():12.2e} {'(interpreter: not timed)':>21}")
            continue
        y = xp.ops.square(x, provider=name)
        err = ((y.double() - ref).abs() / ref.clamp_min(1e-30)).max().item()
        times = []
        for _ in range(10):
            if dev.kind == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            xp.ops.square(x, provider=name)
            if dev.kind == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        print(f"  {name:9} {err:12.2e} {med * 1e6:10.1f}us {2 * x.numel() * 4 / med / 1e9:8.1f}")


def _xrt(*args: str, check: bool = True) -> int:
    """One stage as its own ``xrt`` process, its output shown as it comes."""
    cmd = [sys.executable, "-m", "xrt.cli", *args]
    _say("$ xrt " + " ".join(args))
    rc = subprocess.call(cmd)
    if check and rc != 0:
        raise RuntimeError(f"`xrt {' '.join(args)}` exited {rc}")
    return rc


# The demo's slowdown: about 50 µs of Python in front of every eager ``square`` call, planted in a
# throwaway commit of a temporary clone (the user's checkout is never changed).
PLANT_US = 50
SQUARE_RETURN = '    return _call("square", chosen, _square_op, _eager, x)\n'  # the line the plant goes before
PLANT = (f"    _t0 = __import__('time').perf_counter()  # planted by xrt demo: ~{PLANT_US} us of Python a call\n"
         f"    while __import__('time').perf_counter() - _t0 < {PLANT_US}e-6:\n        pass\n")
# What the demo measures: square, where the slowdown is planted. On the CPU its host series alone: there
# the device series is the same call's CPU time again, which moves ~10 % from process to process, and
# another op's host series read up to 1.08x in a CPU A/A pair (scripts/gate_protocol.py, on a GPU host,
# checks that a planted op names nothing of another op).
DEMO_BENCH = {"cpu": r"^bench_host\.Square\.", "gpu": r"^bench_(ops|host)\.Square\."}
DEMO_DB = "xrt.duckdb"  # under results/demo/
ROUNDS = 3  # A B C, C B A, A B C: base has three runs, so one slow process cannot fail the A/A pair


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), "-c", "user.name=xrt demo", "-c", "user.email=demo@localhost",
                          *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo}: {out.stderr.strip()}")
    return out.stdout.strip()


def stage_clone(repo: Path, work: Path) -> tuple[Path, list[str]]:
    """A temporary clone of ``repo`` at its HEAD with two commits on top: a comment only (an A/A
    pair with HEAD), then the planted slowdown. Returns the clone and [base, A/A head, planted]."""
    import shutil

    clone = work / "repo"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    _git(clone, "checkout", "-q", "-B", "demo")
    base = _git(clone, "rev-parse", "HEAD")
    spaces = clone / "xrt" / "kernels" / "spaces.py"
    spaces.write_text(spaces.read_text() + "\n# xrt demo: a comment, so this commit changes no code.\n")
    _git(clone, "commit", "-qam", "demo: a comment only (the gate must pass)")
    aa = _git(clone, "rev-parse", "HEAD")
    op = clone / "xrt" / "pytorch" / "ops" / "square.py"
    text = op.read_text()
    if SQUARE_RETURN not in text:
        raise RuntimeError(f"{op}: cannot plant the demo's slowdown (the line it goes before is gone)")
    op.write_text(text.replace(SQUARE_RETURN, PLANT + SQUARE_RETURN, 1))
    _git(clone, "commit", "-qam", f"demo: square spends {PLANT_US} us in Python first (a planted slowdown)")
    return clone, [base, aa, _git(clone, "rev-parse", "HEAD")]


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("TRITON_INTERPRET", "1" if not _has_gpu() else "0")
    repo = args.repo.resolve()
    work = repo / "results" / "demo"  # ignored by git: the demo changes no tracked file
    # A database of its own, made anew: each run's clone has new commits beside the last run's, and
    # in one database the last run's planted commit would be as new as this one's.
    db = (args.db or work / DEMO_DB).resolve()
    if args.db is None:
        for f in (db, db.with_name(db.name + ".wal")):
            f.unlink(missing_ok=True)
    t0 = time.time()
    dev = stage_device()
    stage_square(dev)
    clone, (base, aa, planted) = stage_clone(repo, work)
    _say(f"in a temporary clone ({clone}): {base[:10]} (this checkout's HEAD), {aa[:10]} (a comment only), "
         f"{planted[:10]} (square gets {PLANT_US} us slower a call)")
    bench = DEMO_BENCH["cpu" if dev.kind == "cpu" else "gpu"]
    _say(f"measuring the three on {dev.torch_device}, in {ROUNDS} interleaved rounds (one xrt bench run each, "
         f"A B C, then C B A, ...): {bench}")
    from xrt.orchestrate import paired

    p = paired.measure(clone, base, [aa, planted], work / "measured", rounds=ROUNDS, bench=bench,
                       device=None if dev.kind != "cpu" else "cpu", quick=dev.kind == "cpu",
                       log=lambda m: _say(m) if m.startswith(("[paired", "[1/1]")) else None)
    if (repo / "results" / "asv").is_dir():  # the committed GPU results, for the dashboard's other pages
        _xrt("db", "ingest", str(repo / "results" / "asv"), "--db", str(db), "--repo", str(repo))
    _xrt("db", "ingest", str(p.merged), "--db", str(db), "--repo", str(clone))
    _say("the gate on the A/A pair (a comment only): it must pass")
    rc_aa = _xrt("gate", "--db", str(p.db), "--repo", str(clone), "--base", base, "--head", aa,
                 "--noise-db", str(db), "--no-history", check=False)
    _say("the gate on the planted slowdown: it must fail, naming square's series")
    rc_plant = _xrt("gate", "--db", str(p.db), "--repo", str(clone), "--base", aa, "--head", planted,
                    "--noise-db", str(db), "--no-history", check=False)
    _xrt("regressions", "--db", str(db), "--since", planted, "--format", "table", check=False)
    rid = _first_regression(db, planted)
    if rid:
        _say("its checklist of likely causes (`xrt regressions show`), then what `xrt explain` finds"
             + (" without a GPU: no kernel profile or compiled code of a torch call, but the sources that changed"
                if dev.kind == "cpu" else ""))
        _xrt("regressions", "show", rid, "--db", str(db), check=False)
        _xrt("explain", rid, "--db", str(db), "--repo", str(clone), "--no-ncu", check=False)
    ok = rc_aa == 0 and rc_plant == 1 and rid is not None
    _say(("the tracker was right: the A/A pair passed and the planted slowdown failed the gate"
          if ok else f"unexpected: A/A gate exit {rc_aa} (want 0), planted gate exit {rc_plant} (want 1)")
         + f"; {time.time() - t0:.0f} s so far")
    _say("on the dashboard: the front page lists the planted step as new (suspected); its Regression page "
         f"shows the series, the checklist and the explanation. The database: {db} (`xrt regressions --db` it)")
    if args.no_serve:
        _say("done.")
        return 0 if ok else 1
    _say(f"serving the dashboard on http://127.0.0.1:{args.port} (Ctrl-C stops it)")
    return _xrt("dashboard", "--db", str(db), "--port", str(args.port), check=False)


def _first_regression(db: Path, commit: str) -> str | None:
    """The id of the worst regression ``xrt regressions`` lists at ``commit`` (None: none listed)."""
    out = subprocess.run([sys.executable, "-m", "xrt.cli", "regressions", "--db", str(db), "--since", commit,
                          "--format", "json", "--no-save"], capture_output=True, text=True)
    try:
        records = [r for alert in json.loads(out.stdout) for r in alert["records"] if r["commit"] == commit]
    except (ValueError, KeyError, TypeError):
        return None
    return max(records, key=lambda r: r["ratio"])["id"] if records else None


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(run(argparse.Namespace(no_serve=True, repo=Path("."), db=None, port=8501)))
