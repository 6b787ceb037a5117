"""The ``xrt`` command. Each stage of the pipeline adds its sub-command from its own package.

A sub-command module exposes ``register(subparsers)``, which adds one parser whose ``func``
default takes the parsed arguments and returns an exit code. Registration must stay cheap:
no torch, no DuckDB at import.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from xrt import __version__
from xrt.db.store import DatabaseError  # stdlib-only at import (no DuckDB)

# (name, module that registers it, one-line help): the order of `xrt --help`.
COMMANDS: list[tuple[str, str, str]] = [
    ("device", "xrt.commands.device", "show the devices xrt sees and their facts"),
    ("diag", "xrt.bench.cli", "the 'tuned it and it got slower?' checklist for an op"),
    ("bench", "xrt.bench.cli", "run the asv suites (per commit, per GPU)"),
    ("db", "xrt.db.cli", "the results database: ingest, query, export, stats"),
    ("regressions", "xrt.track.cli", "list, show and acknowledge detected regressions"),
    ("gate", "xrt.track.cli", "the nightly regression gate (exit 0 pass / 1 regression / 2 cannot judge)"),
    ("bisect", "xrt.track.cli", "measure the commits between a good and a bad one until one is to blame"),
    ("explain", "xrt.track.cli", "why a case got slower: NCU, profiler, compiled code and settings, base vs head"),
    ("tune", "xrt.tune.cli", "search a kernel's tuning space"),
    ("dashboard", "xrt.commands.dashboard", "serve the Streamlit dashboard"),
    ("kernels", "xrt.commands.kernels", "list kernels; dump PTX/SASS"),
    ("demo", "xrt.commands.demo", "the main job on this machine's default device, end to end"),
]


class CLIError(Exception):
    """An error to show the user in one line (no traceback); exit code 2."""


def _not_yet(name: str, module: str):
    def run(args: argparse.Namespace) -> int:
        print(f"xrt {name}: not available in this version yet ({module} is not built)", file=sys.stderr)
        return 2

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xrt", description="xpuruntime: GPU kernels for PyTorch and "
                                     "the per-commit, per-GPU benchmark tracker that keeps them fast.")
    parser.add_argument("--version", action="version", version=f"xrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    registered: set[str] = set()
    for name, module, help_text in COMMANDS:
        if name in registered:
            continue
        try:
            register = importlib.import_module(module).register
        except ModuleNotFoundError as e:
            if e.name != module:  # a real import error inside a built command must show
                raise
            p = sub.add_parser(name, help=help_text + " [not built yet]")
            p.set_defaults(func=_not_yet(name, module))
            registered.add(name)
            continue
        before = set(sub.choices)
        register(sub)
        registered |= set(sub.choices) - before
        if name not in sub.choices:
            p = sub.add_parser(name, help=help_text + " [not built yet]")
            p.set_defaults(func=_not_yet(name, module))
            registered.add(name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("xrt: interrupted", file=sys.stderr)
        return 130
    except DatabaseError as e:  # a --db that cannot be used: one line naming it
        if os.environ.get("XRT_DEBUG"):
            traceback.print_exc()
        print(f"xrt: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT) and not isinstance(e, (FileNotFoundError, PermissionError)):
            raise
        if os.environ.get("XRT_DEBUG"):
            traceback.print_exc()
        where = f"{e.filename}: " if e.filename else ""
        print(f"xrt {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except (CLIError, ValueError, RuntimeError, ImportError) as e:
        if os.environ.get("XRT_DEBUG"):
            traceback.print_exc()
        print(f"xrt {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
