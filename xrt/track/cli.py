"""``xrt regressions``, ``xrt gate`` and ``xrt report``: commands that judge what the database holds.
Registration imports nothing heavy.

``xrt bisect``, ``xrt culprit``, ``xrt explain`` and the measuring of ``xrt gate --paired`` check out
and measure commits: they are :mod:`xrt.orchestrate.cli`'s, above this layer, which imports nothing
from there (tests/test_layering.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from xrt.db.store import DEFAULT_DB
from xrt.track import labels


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("regressions", help="list, show and acknowledge detected regressions",
                       description="Change points of every series (docs/regressions.md). Without a sub-command: "
                       "detect, store (lifecycle) and list.")
    _common(r, argparse.SUPPRESS)
    r.add_argument("--machine", help="only this machine")
    r.add_argument("--benchmark", help="only benchmarks matching this regex")
    r.add_argument("--since", metavar="REV", help="only steps at or after this commit (hash or prefix)")
    r.add_argument("--format", choices=("json", "table", "markdown"), default="table", help="output format [table]")
    r.add_argument("--kind", choices=(*labels.KINDS, "all"), default="regression",
                   help="which steps to list [regression]; improvements and clock changes are listed separately")
    r.add_argument("--status", choices=(*labels.STATUSES, "open", "all"), default="all",
                   help="open = new or acknowledged [all]")
    # parsed by _config, not argparse: NaN, infinity or a negative value is one line naming it
    r.add_argument("--min-effect", default=None, help="smallest reported change, a fraction at least 0 [0.02]; "
                   "with it (or --effects) the list is not stored")
    r.add_argument("--effects", type=Path, help="JSON or TOML {regex: min_effect} per benchmark")
    r.add_argument("--no-save", action="store_true", help="do not update the stored regressions table")
    r.add_argument("--flat", action="store_true",
                   help="one row per step [default: one alert per machine and commit, with its cause]")
    r.set_defaults(func=run_regressions)
    rsub = r.add_subparsers(dest="reg_command", metavar="SUBCOMMAND")
    a = rsub.add_parser("ack", help="acknowledge (or ignore, or reopen) a stored regression")
    a.add_argument("id", metavar="ID", help="the regression's id (a unique prefix is enough)")
    a.add_argument("--note", help="why (kept with the regression)")
    a.add_argument("--status", dest="new_status", choices=labels.SETTABLE, default="acknowledged",
                   help="the status to set [acknowledged]; new reopens it")
    _common(a, argparse.SUPPRESS)
    a.set_defaults(func=run_ack)
    s = rsub.add_parser("show", help="one regression with its --diag checklist of likely causes")
    s.add_argument("id", metavar="ID", help="the regression's id (a unique prefix is enough)")
    s.add_argument("--json", action="store_true", help="print the regression and its checklist as JSON")
    _common(s, argparse.SUPPRESS)
    s.set_defaults(func=run_show)

    g = sub.add_parser("gate", help="the nightly regression gate (exit 0 pass / 1 regression / 2 cannot judge)")
    _gate_args(g)
    g.add_argument("--summary", type=Path, help="append markdown here (e.g. $GITHUB_STEP_SUMMARY)")
    pg = g.add_argument_group("paired mode", "measure base and head now, on this machine, interleaved round by "
                              "round, and judge those runs alone (docs/regressions.md, 'Paired mode')")
    pg.add_argument("--paired", action="store_true", help="measure both commits here first (needs --repo or .)")
    pg.add_argument("--rounds", type=int, default=2, help="rounds of base and head, A B then B A ... [2]")
    pg.add_argument("--bench", help="asv --bench regex of what to measure [every suite]")
    pg.add_argument("--results", type=Path, help="where the rounds go [REPO/results/paired/BASE-HEAD]")
    pg.add_argument("--device", help="cuda:N, xpu:N or cpu [the default device]")
    pg.add_argument("--all-gpus", action="store_true", help="one process per GPU, in parallel")
    pg.add_argument("--quick", action="store_true", help="the CI profile: tiny shapes (implied on the CPU)")
    pg.add_argument("--changed-only", action="store_true",
                    help="measure only the ops whose sources changed between base and head (xrt/bench/sources.py)")
    # measure_paired: the measuring step of --paired, set by xrt.orchestrate.cli (the layer that measures)
    g.set_defaults(func=run_gate, measure_paired=None)

    rp = sub.add_parser("report", help="a static HTML page comparing two commits (the gate's verdict and every series)",
                        description="Judge HEAD against BASE as `xrt gate` does and write one self-contained HTML "
                        "page: the verdict, its alerts, and every series of both commits. Exit 0 when written "
                        "(whatever the verdict), 2 when it cannot judge or write.")
    _gate_args(rp)
    rp.add_argument("--out", type=Path, required=True, help="the HTML file to write")
    rp.set_defaults(func=run_report)


def _gate_args(p: argparse.ArgumentParser) -> None:
    """The arguments `xrt gate` and `xrt report` share (one judgement, two ways of telling it)."""
    p.add_argument("--db", default=DEFAULT_DB, help=f"the results database [{DEFAULT_DB}]")
    p.add_argument("--repo", type=Path, default=None, 
                   help="git checkout to resolve REVs [hashes in the DB, else the checkout here: .]")
    p.add_argument("--base", required=True, metavar="REV", help="the commit to compare against (hash, prefix; "
                   "a branch or tag with --repo)")
    p.add_argument("--head", required=True, metavar="REV", help="the commit judged")
    # parsed by run_gate, not argparse: a bad value is one "cannot judge" line and exit 2, like every other input
    p.add_argument("--threshold", default="0.05",
                   help="slowdown that fails: a fraction in (0, 1) such as 0.05, or a ratio above 1 (1.05) [0.05]")
    p.add_argument("--alpha", default="0.002", help="Mann-Whitney p-value bar, in (0, 1) [0.002]")
    p.add_argument("--min-samples", default="5",
                   help="samples needed on each side, at least 2; more where alpha needs them (8 at 0.002) [5]")
    p.add_argument("--machine", help="only this machine")
    p.add_argument("--no-history", action="store_true", help="skip the detector's view of base..head")
    p.add_argument("--noise-db", help="learn each series' run-to-run noise from this database's history "
                   "up to base [--db]")


def _common(p: argparse.ArgumentParser, default) -> None:
    p.add_argument("--db", default=default, help=f"the results database [{DEFAULT_DB}]")


def db_path(args: argparse.Namespace) -> str:
    """The database a command's ``--db`` names, the default when it was not given."""
    db = getattr(args, "db", None)  # only an absent --db means the default: "" is a bad path, named as such
    return DEFAULT_DB if db is None else db


def _config(args: argparse.Namespace):
    """The detector's settings from --min-effect and --effects, each value checked (one line naming it)."""
    from xrt.track.detect import DetectConfig, parse_effect

    cfg = DetectConfig()
    if args.min_effect is not None:
        cfg.min_effect = parse_effect(args.min_effect)
    if args.effects:
        text = args.effects.read_text()
        try:
            if args.effects.suffix == ".toml":
                import tomllib

                table = tomllib.loads(text)
            else:
                table = json.loads(text)
        except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
            raise ValueError(f"--effects {str(args.effects)!r}: not valid {args.effects.suffix.lstrip('.') or 'JSON'}"
                             f" ({str(e).splitlines()[0]})") from None
        if not isinstance(table, dict):
            raise ValueError(f"--effects {str(args.effects)!r}: expected a table {{regex: min_effect}}")
        cfg.effects = []
        for k, v in table.items():
            try:
                re.compile(str(k))  # DetectConfig.effect_for matches with Python's re
            except re.error as e:
                raise ValueError(f"--effects {str(args.effects)!r}: {str(k)!r} is not a regular expression ({e})") \
                    from None
            cfg.effects.append((str(k), parse_effect(v, f"--effects {str(args.effects)!r}: {str(k)!r}:")))
    return cfg


def run_regressions(args: argparse.Namespace) -> int:
    """Detect, store and list. Every input is checked before anything is stored; the table is written
    only by a run of the default detection over every benchmark: --min-effect, --effects and
    --benchmark change what this run sees, not what is stored."""
    from xrt.db import store

    cfg = _config(args)
    custom = args.min_effect is not None or args.effects is not None
    saving = not args.no_save and args.benchmark is None and not custom
    # one connection: a write when the table is stored (detected on the copy that is swapped in)
    text = store.using(db_path(args), lambda con: _regressions(con, args, cfg, saving), write=saving)
    sys.stdout.write(text)
    return 0


def _regressions(con: Any, args: argparse.Namespace, cfg: Any, saving: bool) -> str:
    """``xrt regressions``'s work on its connection: detect, store when ``saving``, render."""
    from xrt.track import diag, regressions

    since = None
    if args.since:
        order = regressions.commit_order(con)
        since = order.get(full := regressions.resolve_in_db(con, args.since))
        if since is None:
            raise ValueError(f"--since {args.since!r}: commit {full[:10]} is off the history the steps are "
                             "ordered by (not on the first-parent chain)")
    with _quiet_numbers():
        recs = regressions.detect_db(con, cfg, machine=args.machine, benchmark=args.benchmark)
    regressions.apply_lifecycle(recs, regressions.stored(con))
    if saving:
        regressions.save(con, recs, scope_machine=args.machine,
                         diag_for=lambda rs: [diag.as_json(c) for c in diag.checklists(con, rs)])
    recs = regressions.with_suspected(recs, con, args.machine, args.benchmark)
    if since is not None:
        recs = [r for r in recs if order.get(r.commit, -1) >= since]
    if args.kind != "all":
        recs = [r for r in recs if r.kind == args.kind]
    if args.status == "open":
        recs = [r for r in recs if r.status in labels.OPEN]
    elif args.status != "all":
        recs = [r for r in recs if r.status == args.status]
    return (regressions.render(recs, args.format) if args.flat
            else regressions.render_alerts(regressions.alerts(con, recs), args.format))


def find_regression(con: Any, rid: str) -> tuple[Any, dict[str, Any]]:
    """The stored regression whose id starts with ``rid``, as a Record and as its stored row; a prefix
    that matches none or several is a ValueError naming it."""
    from xrt.track import regressions

    rows = [row for k, row in regressions.stored(con).items() if k.startswith(rid)]
    if len(rows) != 1:
        raise ValueError(f"regression {rid!r}: {len(rows)} stored regressions match (run `xrt regressions` first)")
    row = rows[0]
    fields = regressions.Record.__dataclass_fields__
    return regressions.Record(**{k: row.get(k) for k in fields}), row


def run_ack(args: argparse.Namespace) -> int:
    from xrt.db import store
    from xrt.track import regressions

    if args.new_status not in labels.STATUSES:  # bad input named before the database is copied
        raise ValueError(f"status {args.new_status!r}: expected one of {', '.join(labels.STATUSES)}")
    out = store.using(db_path(args), lambda con: regressions.set_status(con, args.id, args.new_status, args.note),
                      write=True)
    print(f"{out['id']}: {out['status']}" + (f" ({out['note']})" if out.get("note") else ""))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from xrt.db import store
    from xrt.track import diag
    from xrt.track.units import fmt_ratio

    rec, checks = store.using(db_path(args), lambda con: _show(con, args.id))
    if args.json:
        print(json.dumps({**rec.as_json(), "diag": diag.as_json(checks)}, indent=1, default=str))
        return 0
    print(f"{rec.id}  {rec.kind}  status {rec.status}" + (f"  note: {rec.note}" if rec.note else ""))
    print(f"  {rec.benchmark} [{rec.param_key or '-'}] on {rec.machine}")
    print(f"  {rec.previous_commit} -> {rec.commit}: {rec.before:.4g} -> {rec.after:.4g} {rec.unit or ''} "
          f"({fmt_ratio(rec.ratio)}x, p={rec.p_value:.1e})" + (f"; fixed by {rec.fixed_by}" if rec.fixed_by else ""))
    print(diag.render(checks))
    return 0


def _show(con: Any, rid: str) -> tuple[Any, list]:
    from xrt.track import diag

    rec, _ = find_regression(con, rid)
    return rec, diag.checklist(con, rec)


def run_gate(args: argparse.Namespace) -> int:
    """Exit 0 pass, 1 regression, 2 cannot judge. Whatever goes wrong (bad input, a database that
    cannot be read, a --summary that cannot be written, a bug) is one line and exit 2: CI reads
    exit 1 as a regression, so nothing but a judged slowdown may give it."""
    from xrt.db import store
    from xrt.db.store import DatabaseError
    from xrt.track import gate, markdown

    summary_ok = True

    def cannot_judge(msg: str, stream=sys.stdout) -> int:
        msg = (msg.strip().splitlines() or ["(no message)"])[0]  # one line: the verdict, not a dump
        if args.summary and summary_ok:
            try:
                with args.summary.open("a") as f:
                    f.write(f"## xrt gate: ⚠️ cannot judge\n\n{markdown.lit(msg, None)}\n")
            except OSError as e:
                msg += f" (and --summary {str(args.summary)!r} could not be written: {e.strerror or e})"
        print(f"xrt gate: cannot judge: {msg}", file=stream)
        return gate.CANNOT_JUDGE

    if args.summary:  # checked first: a summary that cannot be written is found before the work, not after
        try:
            with args.summary.open("a"):
                pass
        except OSError as e:
            summary_ok = False
            return cannot_judge(f"--summary {str(args.summary)!r}: {e.strerror or e}", sys.stderr)
    try:  # fail closed: whatever goes wrong, nothing was judged, and that is exit 2 (never 0, never 1)
        cfg = gate.Settings.from_text(args.threshold, args.alpha, args.min_samples)
        repo = args.repo if args.repo is not None or not args.paired else Path(".")
        with contextlib.ExitStack() as stack:  # each database opened once, read-only
            main = stack.enter_context(store.read(args.db)) if not args.paired or Path(args.db).is_file() else None
            base, head = gate.resolve(repo, args.base, main), gate.resolve(repo, args.head, main)
            db = _paired(args)(args, repo, base, head) if args.paired else None
            if args.paired and db is None:
                msg = "no op's sources changed between base and head (--changed-only): nothing to measure or judge"
                print(f"xrt gate: pass: {msg}")
                if args.summary:
                    with args.summary.open("a") as f:
                        f.write(f"## xrt gate: ✅ pass\n\n{msg}\n")
                return gate.PASS
            con = stack.enter_context(store.read(db)) if args.paired else main
            noise = main if args.paired else _open_noise(stack, args.noise_db)
            with _quiet_numbers():
                v = gate.judge(con, base, head, threshold=cfg.threshold, alpha=cfg.alpha,
                               min_samples=cfg.min_samples, machine=args.machine,
                               history=not (args.no_history or args.paired), noise=noise)
            if args.paired:
                v.notes.insert(0, f"paired mode: base and head measured here in {args.rounds} interleaved "
                                  f"round(s) ({db.parent}); these runs alone were judged")
            text = gate.report(v)
            md = gate.summary_markdown(v, explanations=_explanations(main, v)) if args.summary else ""
    except DatabaseError as e:  # a bad --db is bad input, on stderr like every command's
        return cannot_judge(str(e), sys.stderr)
    except (ValueError, OSError) as e:
        return cannot_judge(str(e))
    except Exception as e:  # a gate that crashed has judged nothing, and must not read as a regression
        return cannot_judge(f"internal error: {type(e).__name__}: {e}")
    print(text)
    if args.summary:
        try:
            with args.summary.open("a") as f:
                f.write(md)
        except OSError as e:
            summary_ok = False
            return cannot_judge(f"--summary {str(args.summary)!r}: {e.strerror or e}", sys.stderr)
    return v.code


def _open_noise(stack: contextlib.ExitStack, path: str | None) -> Any:
    """A read-only connection to ``--noise-db`` where it names a file (None otherwise: the judged
    database's own history is used)."""
    from xrt.db import store

    return stack.enter_context(store.read(path)) if path and Path(path).is_file() else None


def _paired(args: argparse.Namespace):
    """The measuring step of ``--paired``: (args, repo, base, head) -> the database of the rounds, or None
    when ``--changed-only`` finds nothing to measure."""
    measure = getattr(args, "measure_paired", None)
    if measure is None:  # a parser built without the orchestration layer's commands
        raise ValueError("--paired: measuring needs xrt.orchestrate's commands (run it as `xrt gate --paired`)")
    return measure


def run_report(args: argparse.Namespace) -> int:
    from xrt.db import store
    from xrt.db.store import DatabaseError
    from xrt.track import gate, report

    try:
        report.check_out(args.out)
        cfg = gate.Settings.from_text(args.threshold, args.alpha, args.min_samples)
        with contextlib.ExitStack() as stack, _quiet_numbers():
            con = stack.enter_context(store.read(args.db))
            base, head = gate.resolve(args.repo, args.base, con), gate.resolve(args.repo, args.head, con)
            v = report.write(con, base, head, args.out, cfg, machine=args.machine,
                             history=not args.no_history, noise=_open_noise(stack, args.noise_db))
    except (DatabaseError, ValueError, OSError) as e:
        print(f"xrt report: {(str(e).strip().splitlines() or ['(no message)'])[0]}", file=sys.stderr)
        return 2
    except Exception as e:  # a bug: one line and exit 2, like the gate's
        print(f"xrt report: internal error: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}",
              file=sys.stderr)
        return 2
    word = {gate.PASS: "pass", gate.REGRESSION: "regression", gate.CANNOT_JUDGE: "cannot judge"}[v.code]
    print(f"xrt report: wrote {args.out} (gate: {word}, {v.compared} series compared, "
          f"{len(v.regressions)} regression(s))")
    return 0


def _quiet_numbers():
    """numpy's floating-point warnings off: a value near 1e308 over a small one overflows the ratio,
    which the outputs show as "∞" (xrt.track.units.fmt_ratio); the warning would only be noise."""
    import numpy as np

    return np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore")


def _explanations(con: Any, v) -> list[str]:
    """The stored `xrt explain` results of the gate's slower series at head (none when reading fails:
    they are context, never part of the verdict)."""
    if not v.regressions or con is None:
        return []
    try:
        from xrt.track import explain

        return explain.for_gate(con, v.head, v.regressions)
    except Exception:
        return []
