"""``xrt db``: ingest, query, export, stats, perf. Registration imports nothing heavy (no DuckDB)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xrt.db.store import DEFAULT_DB


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", help="the results database: ingest, query, export, stats, migrate",
                       description="The results database (DuckDB): asv results and git history.")
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])
    dsub = p.add_subparsers(dest="db_command", metavar="SUBCOMMAND")

    i = dsub.add_parser("ingest", help="ingest an asv results directory (incremental, atomic)")
    i.add_argument("results_dir", metavar="RESULTS_DIR", help="asv's results/ (or the folder holding it)")
    i.add_argument("--db", default=DEFAULT_DB, help=f"the database file, created if missing [{DEFAULT_DB}]")
    i.add_argument("--repo", metavar="GIT_DIR", help="git repository for commit order and facts")
    i.add_argument("--rev", default="HEAD", help="branch whose first-parent chain orders commits (HEAD)")
    i.add_argument("--strict", action="store_true", help="exit 1 if any file was refused or had errors")
    i.add_argument("--jobs", type=int, default=None, help="parsing processes (default: half the CPUs)")
    i.add_argument("--tuned", default="auto", metavar="DIR",
                   help="the tuner's folder whose journal/ to load into tuning_results (auto: a tuned/ next to "
                        "or inside RESULTS_DIR, e.g. results/tuned for results/asv; none: skip)")
    i.add_argument("--no-judge", action="store_true",
                   help="do not judge each series' newest commit (suspected regressions) after ingesting")
    i.set_defaults(func=run_ingest)

    q = dsub.add_parser("query", help="run one read-only SQL statement")
    q.add_argument("--db", default=DEFAULT_DB, help=f"the database file [{DEFAULT_DB}]")
    q.add_argument("sql", metavar="SQL", help="one read-only statement, e.g. \"SELECT * FROM series LIMIT 5\"")
    q.add_argument("--format", choices=("csv", "json", "table"), default="table", help="output format [table]")
    q.set_defaults(func=run_query)

    e = dsub.add_parser("export", help="export to Parquet, partitioned by machine")
    e.add_argument("--db", default=DEFAULT_DB, help=f"the database file [{DEFAULT_DB}]")
    e.add_argument("--parquet", required=True, metavar="DIR",
                   help="the folder to write: results and runs partitioned by machine, other tables a file each")
    e.set_defaults(func=run_export)

    s = dsub.add_parser("stats", help="machines, commits, benchmarks, values, failures, errors, size")
    s.add_argument("--db", default=DEFAULT_DB, help=f"the database file [{DEFAULT_DB}]")
    s.add_argument("--json", action="store_true", help="print the figures as JSON")
    s.set_defaults(func=run_stats)

    m = dsub.add_parser("migrate", help="bring the database file to this xrt's schema version (one write)")
    m.add_argument("--db", default=DEFAULT_DB, help=f"the database file [{DEFAULT_DB}]")
    m.set_defaults(func=run_migrate)

    f = dsub.add_parser("perf", help="measure ingest speed and the dashboard's queries (prints Markdown)")
    f.add_argument("--corpus", help="asv results dir or .tar.gz of one, for the ingest timings "
                   "(e.g. a public project's asv results; without it only the query timings run)")
    f.add_argument("--values", type=int, default=1_000_000, help="values in the synthetic database")
    f.add_argument("--repeat", type=int, default=3, help="repetitions of each timing (the best is kept)")
    f.add_argument("--workdir", help="scratch folder (default: a temporary one)")
    f.add_argument("--json", action="store_true", help="print the figures as JSON instead of Markdown")
    f.set_defaults(func=run_perf)


def run_ingest(args: argparse.Namespace) -> int:
    from xrt.db.ingest import ingest

    tuned = None if args.tuned == "none" else args.tuned
    if tuned not in (None, "auto") and not Path(tuned, "journal").is_dir():
        raise ValueError(f"--tuned {tuned}: no journal/ folder in it (xrt tune writes <out>/journal/)")
    # one write from the first read to the judgement: another ingest waits, then sees all of this one
    rep = ingest(args.results_dir, args.db, args.repo, jobs=args.jobs, rev=args.rev, tuned=tuned,
                 then=None if args.no_judge else _judge_newest())
    print(f"xrt db ingest: {rep.summary()} -> {args.db}" + ("" if rep.wrote else " (nothing to write)"),
          file=sys.stderr)
    if args.strict and rep.errors:
        print(f"xrt db ingest: --strict: {len(rep.errors)} error(s)", file=sys.stderr)
        return 1
    return 0


def _judge_newest():
    """The newest commit of every series, judged by the gate's rules (xrt.track.newest) in the
    ingest's own write: after new rows, or whenever the stored judgements do not cover every series'
    newest commit (an ingest run with --no-judge). A judgement that fails on its own is reported and
    the ingest still commits; a database error aborts the whole write (the file stays as it was)."""
    import duckdb

    from xrt.db.ingest import Then
    from xrt.track import newest

    def run(con, rep) -> None:
        try:
            newest.after_ingest(con, echo=lambda s: print(f"xrt db ingest: {s}", file=sys.stderr))
        except duckdb.Error:
            raise
        except Exception as e:  # noqa: BLE001 - one line, whatever it was
            print(f"xrt db ingest: warning: the newest commits were not judged ({type(e).__name__}: {e}); "
                  "`xrt regressions` still detects every step", file=sys.stderr)

    return Then(due=newest.pending, run=run)


def run_query(args: argparse.Namespace) -> int:
    from xrt.db.query import format_rows, query

    names, rows = query(args.db, args.sql)
    sys.stdout.write(format_rows(names, rows, args.format))
    return 0


def run_export(args: argparse.Namespace) -> int:
    from xrt.db.export import export_parquet

    counts = export_parquet(args.db, args.parquet)
    print(f"xrt db export: {args.parquet}: " + ", ".join(f"{t} {n}" for t, n in counts.items()), file=sys.stderr)
    return 0


def run_stats(args: argparse.Namespace) -> int:
    from xrt.db.stats import format_stats, stats

    s = stats(args.db)
    sys.stdout.write(json.dumps(s, default=str, indent=1) + "\n" if args.json else format_stats(s))
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    """Every writer migrates; this writes nothing else. Readers of an older file read a migrated copy
    each time the file changes, so migrating once saves them that copy."""
    from xrt.db import schema, store

    store.using(args.db, lambda con: None, write=True)
    print(f"xrt db migrate: {args.db}: at schema version {schema.LATEST}", file=sys.stderr)
    return 0


def run_perf(args: argparse.Namespace) -> int:
    from xrt.db import perf

    # the command timings run `xrt db ingest` as a user would: its own process
    figures = perf.run(corpus=args.corpus, values=args.values, repeat=args.repeat, workdir=args.workdir,
                       echo=lambda s: print(s, file=sys.stderr),
                       ingest_cmd=[sys.executable, "-m", "xrt.cli", "db", "ingest"])
    sys.stdout.write(json.dumps(figures, indent=1) + "\n" if args.json else perf.markdown(figures))
    return 0
