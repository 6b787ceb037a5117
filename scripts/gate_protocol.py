r"""The gate's A/A and planted protocol: does an unchanged commit pass, and does each kind of real
slowdown fail alone? (docs/regressions.md, "A/A and planted: the protocol").

In a throwaway clone of this repository, at its HEAD (the base), it commits siblings of the base:

- ``aa``: a comment added to ``xrt/kernels/spaces.py`` (every op's sources change, no code does);
- ``tuning``: a tuning default changed so that a few shapes get slower (on a GPU the Triton softmax's
  ``num_warps`` from ``auto`` to 4; on the CPU the Triton square's ``BLOCK_SIZE`` from 1024 to 256);
- ``host``: about 10 µs of Python per call in ``xrt.pytorch.ops.square`` (eager calls only);
- ``compiled``: ``square`` called twice inside a ``torch.compile``'d function (the eager path unchanged).

First ``--history`` commits that change no code (the base is the last of them) are measured once each,
the history the gate learns each series' run-to-run noise from, as a nightly's database has it.
Then it measures the base and the heads in ``--rounds`` rounds, one ``xrt bench run`` (its own
processes) per commit and round, in the order base, heads..., then reversed (``xrt gate --paired``'s
``xrt.orchestrate.paired.measure``), and judges each head against the base two ways:

- **history**: each round alone, ingested into a database of its own and judged by ``xrt gate`` as the
  nightly does (one run a side, measured in separate processes): each round is one repeat;
- **paired**: ``--paired-rounds`` consecutive rounds together (two: 1+2, 3+4, ...), as ``xrt gate
  --paired`` judges them.

``--modes paired`` gives the paired verdicts alone (``tests/test_gate_protocol.py`` on the CPU).

With ``--processes N`` (N > 1) it measures the nightly's way instead: in each of ``--rounds`` repeats, one
``xrt bench run --processes N`` of the base and the heads (the host and compiled series in N processes
a commit, each kept as a run of its own), and judges each head against the base in history mode two
ways, from the same measurement: **processes** (every process a side) and **one process** (only the
first process a side, as a nightly of one process each). No paired rounds are measured.

Each verdict is checked against what it should be (``EXPECT``); the script prints one row per verdict and
exits 1 when any check fails.

    python scripts/gate_protocol.py --rounds 4 --heads aa --json aa.json
    python scripts/gate_protocol.py --rounds 2 --heads aa,tuning,host,compiled --md table.md
    python scripts/gate_protocol.py --rounds 2 --history 0 --modes paired --device cpu
    python scripts/gate_protocol.py --processes 3 --history 0 --rounds 1 --heads aa,host \
        --bench '^bench_(ops|host|compiled)\.(Square|VectorAdd)\.'
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
sys.path.insert(0, str(ROOT))
from xrt.commands.demo import SQUARE_RETURN  # noqa: E402  (the line of square.py a plant goes before)

BENCH = r"^bench_(ops|host|compiled)\.(Square|Softmax|VectorAdd)\."
# The CPU's: square (every plant's op) in all three series, and vector_add's device and host series as the
# other op that no plant may name. vector_add's compiled series would add a torch.compile a commit and no check.
QUICK_BENCH = r"^bench_(ops|host)\.(Square|VectorAdd)\.|^bench_compiled\.Square\."

# head -> {device kind or "any": [(file, old text, new text)]}
PLANTS = {
    "aa": {"any": [("xrt/kernels/spaces.py", None, "\n# A comment: an unchanged commit for the gate's A/A check.\n")]},
    "tuning": {
        "cuda": [("xrt/kernels/spaces.py", '"softmax.triton": {"num_warps": "auto"}',
                  '"softmax.triton": {"num_warps": 4}')],
        "cpu": [("xrt/kernels/spaces.py", '"square.triton": {"BLOCK_SIZE": 1024, "num_warps": 4}',
                 '"square.triton": {"BLOCK_SIZE": 256, "num_warps": 4}')],
    },
    "host": {"any": [("xrt/pytorch/ops/square.py", SQUARE_RETURN,
                      "    if not torch.compiler.is_compiling():  # planted: ~10 us of Python per eager call\n"
                      "        _t0 = __import__('time').perf_counter()\n"
                      "        while __import__('time').perf_counter() - _t0 < 10e-6:\n"
                      "            pass\n" + SQUARE_RETURN)]},
    # square(sqrt(square(x))) == square(x): the same result, two op calls and a sqrt in the compiled graph
    "compiled": {"any": [("xrt/pytorch/ops/square.py", SQUARE_RETURN,
                          "    if torch.compiler.is_compiling():  # planted: the compiled path calls the op twice\n"
                          "        x = dispatch.call('square', chosen, _square_op, _eager, x).sqrt()\n"
                          + SQUARE_RETURN)]},
}
# What each head's verdict must name (benchmark-name prefixes and a parameter substring), per device. On the
# CPU a call runs its kernel before it returns (the Triton interpreter), so the tuning plant slows square's
# Triton call in all three series: they are its own series there, not others.
EXPECT = {
    "tuning": {"cuda": ("bench_ops.Softmax.", "triton"),
               "cpu": (("bench_ops.Square.", "bench_host.Square.", "bench_compiled.Square."), "'triton'")},
    "host": {"any": ("bench_host.Square.", "")},
    "compiled": {"any": ("bench_compiled.Square.", "")},
}
MAX_OTHERS = {"tuning": 2}  # series named beyond the expected ones; host/compiled: none of another op
AA_MAX = 1  # false-alarm series allowed in one A/A verdict


# Fixed dates: the same base gives the same history and plant commits, so a history measured once can
# be used again (--reuse-history).
_DATES = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def _git(repo: Path, *a: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=protocol", "-c", "user.email=protocol@localhost",
                           *a], check=True, capture_output=True, text=True, env={**os.environ, **_DATES}).stdout.strip()


def plant(clone: Path, base: str, head: str, kind: str) -> str:
    """Commit the plant ``head`` on top of ``base`` (a branch of its own); its hash."""
    edits = PLANTS[head].get(kind) or PLANTS[head].get("any") or PLANTS[head]["cpu"]
    _git(clone, "checkout", "-q", "-B", f"protocol-{head}", base)
    for rel, old, new in edits:
        path = clone / rel
        text = path.read_text()
        if old is None:
            text += new
        elif old not in text:
            raise SystemExit(f"plant {head}: {rel} has no {old.strip()!r}; update scripts/gate_protocol.py")
        else:
            text = text.replace(old, new, 1)
        path.write_text(text)
    _git(clone, "commit", "-qam", f"protocol: {head}")
    sha = _git(clone, "rev-parse", "HEAD")
    _git(clone, "checkout", "-q", base)
    return sha


def judge(db: Path, clone: Path, base: str, head: str, noise: Path | None = None) -> dict:
    """``xrt gate`` of ``head`` against ``base`` in ``db`` (the noise learnt from ``noise``'s history):
    exit code and the series it named."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "xrt.cli", "gate", "--db", str(db), "--repo", str(clone),
                          "--base", base, "--head", head, "--no-history",
                          *(["--noise-db", str(noise)] if noise else [])], capture_output=True, text=True, env=env)
    named = [ln for ln in out.stdout.splitlines() if ln.startswith("REGRESSION ")]
    last = (out.stdout.strip().splitlines() or [out.stderr.strip()])[-1]
    return {"exit": out.returncode, "named": named, "verdict": last,
            "drift": [ln for ln in out.stdout.splitlines() if "machine drift" in ln],
            "passed": [ln for ln in out.stdout.splitlines() if "(not failing): " in ln]}


def check(head: str, kind: str, v: dict) -> tuple[bool, str]:
    """Whether a verdict is what the protocol expects of ``head``, and why not."""
    named = v["named"]
    if head == "aa":
        ok = v["exit"] == 0 and len(named) <= AA_MAX
        return ok, "" if ok else f"A/A: exit {v['exit']}, {len(named)} series named"
    prefix, sub = EXPECT[head].get(kind) or EXPECT[head]["any"]
    prefixes = (prefix,) if isinstance(prefix, str) else prefix
    hits = [n for n in named if n.split()[1].startswith(prefixes) and sub in n]
    if v["exit"] != 1 or not hits:
        return False, f"exit {v['exit']}, expected series not named ({'|'.join(prefixes)}*{sub})"
    others = [n for n in named if n not in hits]
    if head in MAX_OTHERS:
        ok = len(others) <= MAX_OTHERS[head]
        return ok, "" if ok else f"{len(others)} other series named"
    op = prefixes[0].split(".")[1]
    foreign = [n for n in others if f".{op}." not in n.split()[1]]
    return not foreign, "" if not foreign else f"{len(foreign)} series of other ops named"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", default="aa,tuning,host,compiled", help="which heads to plant [all four]")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of base and heads [2]")
    ap.add_argument("--history", type=int, default=4,
                    help="commits of history before the base, measured once each: what each series' run-to-run "
                         "noise is learnt from, as a nightly's history [4; the noise model needs 5 with the base]")
    ap.add_argument("--bench", help=f"asv --bench regex [{BENCH}; the CPU: {QUICK_BENCH}]")
    ap.add_argument("--reuse-history", type=Path, metavar="DIR",
                    help="the history's results from an earlier run of this script on the same base (its WORK/history)")
    ap.add_argument("--processes", type=int, default=1,
                    help="N > 1: history mode as a nightly of `xrt bench run --processes N` judges it (no paired "
                         "rounds); each repeat judged with every process and with the first alone [1]")
    ap.add_argument("--paired-rounds", type=int, default=2, metavar="K",
                    help="rounds each paired verdict judges together: rounds 1..K, K+1..2K, ... [2]")
    ap.add_argument("--modes", default="history,paired",
                    help="which verdicts of the rounds: history (each round alone), paired (--paired-rounds rounds "
                         "together), or both [history,paired]")
    ap.add_argument("--device", help="cuda:N or cpu [the default device]")
    ap.add_argument("--work", type=Path, help="folder for the clone and the results [a temp dir]")
    ap.add_argument("--json", type=Path, help="write every verdict here")
    ap.add_argument("--md", type=Path, help="write the table here (Markdown)")
    args = ap.parse_args(argv)
    heads = [h.strip() for h in args.heads.split(",") if h.strip()]
    unknown = [h for h in heads if h not in PLANTS]
    if unknown or not heads:
        ap.error(f"--heads {args.heads!r}: choose from {', '.join(PLANTS)}")
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: need at least 1")
    if args.processes < 1:
        ap.error(f"--processes {args.processes}: need at least 1")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("history", "paired") for m in modes):
        ap.error(f"--modes {args.modes!r}: choose history, paired or both")
    if args.paired_rounds < 2:
        ap.error(f"--paired-rounds {args.paired_rounds}: a paired verdict needs at least 2 rounds")
    if modes == ["paired"] and args.rounds < args.paired_rounds:
        ap.error(f"--rounds {args.rounds}: paired verdicts of {args.paired_rounds} rounds need at least that many")

    from xrt.bench.machine import machine_name
    from xrt.device import default_device
    from xrt.orchestrate import paired

    if args.device:
        os.environ["XRT_DEVICE"] = args.device
    dev = default_device()
    kind = "cuda" if dev.kind == "cuda" else "cpu"
    bench = args.bench or (BENCH if kind == "cuda" else QUICK_BENCH)
    work = args.work or Path(tempfile.mkdtemp(prefix="xrt-protocol-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XRT_TUNED_DIR", str(work / "no-tuned"))  # the default configs only, every commit
    (work / "no-tuned").mkdir(exist_ok=True)
    clone = work / "repo"
    if clone.exists():
        subprocess.run(["rm", "-rf", str(clone)], check=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    _git(clone, "checkout", "-q", "-B", "main")
    chain = [_git(clone, "rev-parse", "HEAD")]
    for i in range(args.history):  # commits that change no code: the history the noise model learns from
        (clone / "PROTOCOL.txt").write_text(f"{i}\n")
        _git(clone, "add", "PROTOCOL.txt")
        _git(clone, "commit", "-qm", f"protocol: history {i + 1}")
        chain.append(_git(clone, "rev-parse", "HEAD"))
    base = chain[-1]
    shas = {h: plant(clone, base, h, kind) for h in heads}
    print(f"protocol on {machine_name(dev)} ({kind}): base {base[:10]}, heads "
          + ", ".join(f"{h} {s[:10]}" for h, s in shas.items()) + f"; {args.rounds} round(s) of {bench}", flush=True)

    t0 = time.time()
    log = lambda m: print(m, flush=True) if m.startswith("[paired") else None  # noqa: E731
    history = work / "history"
    if args.reuse_history:
        import shutil

        shutil.rmtree(history, ignore_errors=True)
        shutil.copytree(args.reuse_history, history)
        have = {f.name[:8] for f in history.glob("*/*.json")}
        missing = [c[:10] for c in chain[:-1] if c[:8] not in have]
        if missing:
            raise SystemExit(f"--reuse-history {args.reuse_history}: no results of "
                             f"{', '.join(missing)} (another base?)")
        print(f"[history] {args.history} commit(s) before the base, from {args.reuse_history}", flush=True)
    elif args.history:
        from xrt.bench import runner

        print(f"[history] {args.history} commit(s) before the base, one xrt bench run", flush=True)
        runner.run(clone, chain[:-1], history, device=args.device, bench=bench, log=lambda m: None)
    from xrt.db.ingest import ingest

    if args.processes > 1:
        rows = by_processes(clone, work, history if args.history else None, base, shas, bench, args)
        return report(rows, kind, heads, args, dev, base, shas, bench, time.time() - t0)
    p = paired.measure(clone, base, list(shas.values()), work / "measured", rounds=args.rounds, bench=bench,
                       device=args.device, log=log)
    measured_s = time.time() - t0
    rows = []

    def round_db(k: int) -> Path:
        """Round ``k`` alone (after the history), as the nightly's database has it."""
        db = work / f"history-{k}.duckdb"
        db.unlink(missing_ok=True)
        for f in ([history] if args.history else []) + [p.folders[k - 1]]:
            ingest(f, db, repo=str(clone), echo=lambda s: None, tuned=None)
        return db

    if "history" in modes:  # each round alone, as the nightly sees it
        for k in range(1, len(p.folders) + 1):
            db = round_db(k)
            rows += [{"mode": "history", "repeat": k, "head": h, **judge(db, clone, base, s)} for h, s in shas.items()]
    if "paired" in modes:  # rounds k+1 .. k+K, the noise from history + round k+1
        K = args.paired_rounds
        for k in range(0, len(p.folders) - K + 1, K):
            pp = paired.combine(clone, p.folders[k:k + K], work / f"paired-{k // K + 1}")
            noise = work / f"history-{k + 1}.duckdb" if "history" in modes else None
            if noise is None and args.history:  # without history there is nothing to learn the noise from
                noise = round_db(k + 1)
            rows += [{"mode": "paired", "repeat": k // K + 1, "head": h, **judge(pp.db, clone, base, s, noise)}
                     for h, s in shas.items()]
    return report(rows, kind, heads, args, dev, base, shas, bench, measured_s)


def by_processes(clone: Path, work: Path, history: Path | None, base: str, shas: dict[str, str], bench: str,
                 args: argparse.Namespace) -> list[dict]:
    """``--processes N``: each repeat one ``xrt bench run --processes N`` of the base and the heads (in
    turn, reversed every other repeat), judged in history mode with every process a side and with the
    first alone."""
    import shutil

    from xrt.bench import runner
    from xrt.db import result_names
    from xrt.db.ingest import ingest

    rows = []
    commits = [base, *shas.values()]
    one = (result_names.process_name(".json", 1), result_names.process_name(".xrt", 1, ".xrt"))  # process 1's files
    for k in range(1, args.rounds + 1):
        folder = work / f"processes-{k}"
        shutil.rmtree(folder, ignore_errors=True)
        t = time.time()
        runner.run(clone, commits if k % 2 else commits[::-1], folder, device=args.device, bench=bench,
                   processes=args.processes, log=lambda m: print(m, flush=True) if m.startswith("[") else None)
        print(f"[processes {k}/{args.rounds}] {len(commits)} commits x {args.processes} processes in "
              f"{time.time() - t:.0f} s", flush=True)
        first = work / f"first-process-{k}"  # the same measurement, the first process a side alone
        shutil.rmtree(first, ignore_errors=True)
        shutil.copytree(folder, first,
                        ignore=lambda d, names: [n for n in names if "-proc" in n and not n.endswith(one)])
        for mode, f in (("processes", folder), ("one process", first)):
            db = work / f"{mode.replace(' ', '-')}-{k}.duckdb"
            db.unlink(missing_ok=True)
            for src in ([history] if history else []) + [f]:
                ingest(src, db, repo=str(clone), echo=lambda s: None, tuned=None)
            rows += [{"mode": mode, "repeat": k, "head": h, **judge(db, clone, base, s)} for h, s in shas.items()]
    return rows


def report(rows: list[dict], kind: str, heads: list[str], args: argparse.Namespace, dev, base: str,
           shas: dict[str, str], bench: str, measured_s: float) -> int:
    """Check each verdict, print the table (and write it), exit 1 when any check failed."""
    from xrt.bench.machine import machine_name

    failed = 0
    table = ["| mode | repeat | head | exit | series named | check |", "|---|---:|---|---:|---:|---|"]
    for r in rows:
        ok, why = check(r["head"], kind, r)
        r["ok"], r["why"] = ok, why
        failed += not ok
        table.append(f"| {r['mode']} | {r['repeat']} | {r['head']} | {r['exit']} | {len(r['named'])} | "
                     f"{'ok' if ok else 'FAILED: ' + why} |")
        print(f"{r['mode']:8} {r['repeat']} {r['head']:9} exit {r['exit']} named {len(r['named']):3} "
              f"{'ok' if ok else 'FAILED: ' + why}  {r['verdict']}", flush=True)
        for n in r["named"][:8]:
            print(f"    {n}")
        for n in ([] if ok else r.get("passed", []) + r.get("drift", []))[:8]:  # why a plant passed
            print(f"    {n}")
    summary = (f"{len(rows) - failed} of {len(rows)} verdicts as expected; measuring took {measured_s:.0f} s "
               f"({len(heads) + 1} commits x {args.rounds} rounds"
               + (f", {args.processes} processes a commit)" if args.processes > 1 else ")"))
    print(summary)
    info = {"machine": machine_name(dev), "kind": kind, "base": base, "heads": shas, "bench": bench,
            "rounds": args.rounds, "processes": args.processes, "measured_s": round(measured_s, 1), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(info, indent=1))
    if args.md:
        args.md.write_text("\n".join(table) + f"\n\n{summary}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
