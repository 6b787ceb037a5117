"""The orchestration layer's commands: ``xrt bisect``, ``xrt culprit``, ``xrt explain``, and the
measuring step of ``xrt gate --paired``. Each checks out or measures commits (worktrees, the bench
runner, the ingest), which is why they live here and not in :mod:`xrt.track.cli`: the tracker judges
what is stored and imports nothing from this layer. Registration imports nothing heavy.

``xrt gate`` itself is :mod:`xrt.track.cli`'s (it judges stored runs); :func:`register` gives its
parser the measuring step that ``--paired`` runs first (:func:`measure_paired`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xrt.db.store import DEFAULT_DB
from xrt.track import cli as track_cli


def register(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("explain", help="why a benchmark case got slower: NCU, profiler, compiled code and settings, "
                       "base vs head", description="Check out base and head in worktrees and collect, per side, Nsight "
                       "Compute (GPU and ncu only), torch.profiler's kernel list (GPU only), the compiled code and the "
                       "settings in force; rank what changed and store it with the regression (docs/regressions.md).")
    e.add_argument("id", nargs="?", metavar="REGRESSION_ID", help="a stored regression (a unique prefix is enough)")
    e.add_argument("--db", default=None, help=f"the results database [{DEFAULT_DB}]")
    e.add_argument("--repo", type=Path, default=Path("."), help="the git checkout whose commits are explained [.]")
    e.add_argument("--base", metavar="REV", help="without REGRESSION_ID: the fast commit")
    e.add_argument("--head", metavar="REV", help="without REGRESSION_ID: the slow commit")
    e.add_argument("--bench", metavar="BENCHMARK", help="without REGRESSION_ID: e.g. bench_ops.Square.time_op")
    e.add_argument("--params", help="without REGRESSION_ID: shape,dtype,provider,config, "
                   "e.g. 4096,float32,cuda,default")
    e.add_argument("--arch", default=None, help="compiled code for this target (sm_90) [the GPU's, else sm_90]")
    e.add_argument("--no-ncu", action="store_true", help="skip Nsight Compute even where it could run")
    e.add_argument("--no-save", action="store_true", help="do not store the explanation in the database")
    e.add_argument("--out", type=Path, help="also write explain.json, explain.md and each side's raw files here")
    e.add_argument("--json", action="store_true", help="print the payload as JSON instead of Markdown")
    e.set_defaults(func=run_explain)

    b = sub.add_parser("bisect", help="measure commits between a good and a bad one until one is to blame")
    b.add_argument("benchmark", metavar="BENCHMARK", help="asv benchmark name or regex")
    b.add_argument("good", metavar="GOOD", help="a measured commit at the old (fast) level")
    b.add_argument("bad", metavar="BAD", help="a measured later commit at the slow level (an improvement is refused)")
    b.add_argument("--db", default=DEFAULT_DB, help=f"the results database [{DEFAULT_DB}]")
    b.add_argument("--repo", type=Path, default=Path("."), help="the git checkout whose commits are measured [.]")
    b.add_argument("--machine", help="the machine whose series to bisect [the one that moved most]")
    b.add_argument("--results", dest="results", type=Path, default=None,
                   help="keep each step's asv results here, a folder a step [not kept]")
    b.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop before a step would end past this many seconds, with the narrowed range [no limit]")
    b.set_defaults(func=run_bisect)

    c = sub.add_parser("culprit", help="after a failing gate over several commits: bisect each failing group, "
                       "explain the worst", description="Judge HEAD against BASE as `xrt gate` does; for each group "
                       "of series that moved together (one alert), bisect its worst series between BASE and HEAD, "
                       "measuring each candidate beside BASE on the series' own machine, worst group first, within "
                       "--budget; then run `xrt explain` on the worst series' culprit. The culprits and evidence "
                       "are stored on the regressions and written to --summary. Exit 0 when it ran.")
    c.add_argument("--db", default=DEFAULT_DB, help=f"the results database [{DEFAULT_DB}]")
    c.add_argument("--repo", type=Path, default=Path("."), help="the git checkout whose commits are measured [.]")
    c.add_argument("--base", required=True, metavar="REV", help="the gate's base (the good commit)")
    c.add_argument("--head", required=True, metavar="REV", help="the gate's head")
    c.add_argument("--budget", type=float, default=3600.0, metavar="SECONDS",
                   help="time for every bisect and the explanation together; what it leaves is listed [3600]")
    c.add_argument("--no-explain", action="store_true", help="do not run xrt explain on the culprit")
    c.add_argument("--summary", type=Path, help="append markdown here (e.g. $GITHUB_STEP_SUMMARY)")
    c.set_defaults(func=run_culprit)

    # `xrt gate` is xrt.track.cli's, registered before this module (the order of xrt.cli.COMMANDS)
    if "gate" not in sub.choices:
        raise RuntimeError("xrt.orchestrate.cli.register: `xrt gate` is not registered yet (xrt.track.cli first)")
    sub.choices["gate"].set_defaults(measure_paired=measure_paired)


def measure_paired(args: argparse.Namespace, repo: Path, base: str, head: str) -> Path | None:
    """``xrt gate --paired``: measure base and head in interleaved rounds; the database of those runs
    (None: ``--changed-only`` found no op whose sources changed). They go into ``--db`` too, for the
    dashboard's trends."""
    from xrt.bench import sources
    from xrt.bench.runner import BenchError
    from xrt.db.ingest import ingest
    from xrt.orchestrate import paired

    if base == head:
        raise ValueError(f"base and head are the same commit ({head[:10]}): nothing to compare")
    bench = args.bench
    if args.changed_only:
        import subprocess

        diff = subprocess.run(["git", "-C", str(repo), "diff", "--name-only", "--no-renames", base, head],
                              capture_output=True, text=True, check=True).stdout.split()
        units = [u for u in sources.units_matching(bench) if u in sources.affected(diff)]
        if not units:
            return None
        bench = sources.bench_regex(units, bench)
        print(f"xrt gate: --changed-only: measuring {', '.join(units)}", file=sys.stderr)
    out = args.results or repo / "results" / "paired" / f"{base[:12]}-{head[:12]}"
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        p = paired.measure(repo, base, [head], out, rounds=args.rounds, bench=bench, device=args.device,
                           all_gpus=args.all_gpus, quick=args.quick, log=log)
    except BenchError as e:
        raise ValueError(f"paired measurement: {e}") from None
    ingest(p.merged, args.db, repo=str(repo), echo=lambda s: None, tuned=None)
    return p.db


def run_bisect(args: argparse.Namespace) -> int:
    from xrt.db import store
    from xrt.orchestrate import bisect
    from xrt.track import gate

    store.check_path(args.db)  # a bad --db is one line and exit 2 (xrt.cli), before any git or bench work
    good = gate.resolve(args.repo, args.good, None)  # --repo (default .): git resolves
    bad = gate.resolve(args.repo, args.bad, None)
    if args.budget is not None and not args.budget > 0:
        raise ValueError(f"--budget {args.budget!r}: need a number of seconds above 0")
    res = bisect.bisect(args.db, args.repo, args.benchmark, good, bad, results=args.results, machine=args.machine,
                        budget_s=args.budget, log=lambda s: print(s, flush=True))
    for st in res.steps:  # the evidence, one line a measured commit
        print(f"measured {st.commit} {st.value:.6g} vs good {st.good_value:.6g} ({st.ratio:.3f}x, p {st.p_value:.1e}) "
              f"{'bad' if st.bad else 'good'}")
    if res.culprit:
        print(f"culprit {res.culprit} {bisect.subject(args.repo, res.culprit)}")
    return 0 if res.culprit else 1


def run_culprit(args: argparse.Namespace) -> int:
    from xrt.db import store
    from xrt.orchestrate import culprit
    from xrt.track import gate

    store.check_path(args.db)
    if not args.budget > 0:
        raise ValueError(f"--budget {args.budget!r}: need a number of seconds above 0")
    base, head = gate.resolve(args.repo, args.base, None), gate.resolve(args.repo, args.head, None)
    out = culprit.find(args.db, args.repo, base, head, budget_s=args.budget, explain=not args.no_explain,
                       log=lambda s: print(s, file=sys.stderr, flush=True))
    print(culprit.report(out))
    if args.summary:
        with args.summary.open("a") as f:
            f.write(culprit.summary_markdown(out))
    return 0


def run_explain(args: argparse.Namespace) -> int:
    """``xrt explain``: bad input (an unknown regression, a rev that names no commit, a case that is
    not an op suite's) is one line naming it, exit 2 (xrt.cli); nothing is checked out before then."""
    from xrt.bench import worktrees
    from xrt.cli import CLIError
    from xrt.orchestrate import explain_collect
    from xrt.track import explain

    adhoc = [n for n in ("base", "head", "bench", "params") if getattr(args, n)]
    if args.id and adhoc:
        raise CLIError(f"give REGRESSION_ID or --base/--head/--bench/--params, not both (got {args.id!r} and "
                       f"--{', --'.join(adhoc)})")
    if not args.id and len(adhoc) != 4:
        missing = [f"--{n}" for n in ("base", "head", "bench", "params") if not getattr(args, n)]
        raise CLIError("give a REGRESSION_ID, or all of --base, --head, --bench and --params "
                       f"(missing {', '.join(missing)})")
    repo = args.repo
    if not (repo / ".git").exists() and not repo.joinpath("HEAD").is_file():
        raise CLIError(f"--repo {str(repo)!r}: not a git checkout")
    db = track_cli.db_path(args)
    regression = None
    if args.id:
        from xrt.db import store

        _, regression = store.using(db, lambda con: track_cli.find_regression(con, args.id))
        case = explain.make_case(regression["benchmark"], list(regression["params"] or []) or regression["param_key"])
        base_rev, head_rev = regression["previous_commit"], regression["commit"]
    else:
        case = explain.make_case(args.bench, args.params)
        base_rev, head_rev = args.base, args.head
    base, head = worktrees.resolve(repo, base_rev), worktrees.resolve(repo, head_rev)
    print(f"xrt explain: {case.benchmark} [{case.param_key}] base {base[:10]} head {head[:10]}", file=sys.stderr)
    payload = explain_collect.explain(repo, base, head, case, regression=regression, use_ncu=not args.no_ncu,
                                      arch=args.arch, keep=args.out,
                                      log=lambda s: print(s, file=sys.stderr, flush=True))
    md = explain.render_markdown(payload)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "explain.json").write_text(json.dumps(payload, indent=1, default=str))
        (args.out / "explain.md").write_text(md)
    saved = not args.no_save and (args.id is not None or args.db is not None or Path(db).is_file())
    if saved:
        from xrt.db import store

        store.write(db, lambda con: explain.save(con, payload, md))
    print(json.dumps(payload, indent=1, default=str) if args.json else md, end="" if args.json else "")
    if saved:
        print(f"stored in {db} (explanations)", file=sys.stderr)
    return 0
