"""The ``xrt`` command. Each stage of the pipeline adds its sub-command from its own package.

A sub-command module exposes ``register(subparsers)``, which adds one parser whose ``func``
default takes the parsed arguments and returns an exit code. Registration must stay cheap:
no torch, no DuckDB at import.
"""

from __future__ import annotations

from xrt.interrupt import INTERRUPT, end  # first: a Ctrl-C from here on ends the command with 130

if __name__ == "__main__":
    INTERRUPT.hold_until_main()

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from xrt import __version__
from xrt.db.store import DatabaseError  # stdlib-only at import (no DuckDB)

# (name, module that registers it): the order of `xrt --help`; each module gives its commands' help.
COMMANDS: list[tuple[str, str]] = [
    ("device", "xrt.commands.device"),
    ("diag", "xrt.bench.cli"),
    ("bench", "xrt.bench.cli"),
    ("db", "xrt.db.cli"),
    ("regressions", "xrt.track.cli"),
    ("gate", "xrt.track.cli"),
    ("report", "xrt.track.cli"),
    ("explain", "xrt.orchestrate.cli"),
    ("bisect", "xrt.orchestrate.cli"),
    ("culprit", "xrt.orchestrate.cli"),
    ("tune", "xrt.tune.cli"),
    ("dashboard", "xrt.commands.dashboard"),
    ("kernels", "xrt.commands.kernels"),
    ("demo", "xrt.commands.demo"),
]


class CLIError(Exception):
    """An error to show the user in one line (no traceback); exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xrt", description="xpuruntime: GPU kernels for PyTorch and "
                                     "the per-commit, per-GPU benchmark tracker that keeps them fast.")
    parser.add_argument("--version", action="version", version=f"xrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    registered: set[str] = set()
    for name, module in COMMANDS:
        if name in registered:
            continue
        before = set(sub.choices)
        importlib.import_module(module).register(sub)
        registered |= set(sub.choices) - before
        if name not in sub.choices:  # a module that forgot a command it is listed for: a bug, said at once
            raise RuntimeError(f"xrt: {module}.register() did not add the command {name!r}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    installed = INTERRUPT.install()
    try:
        return _main(argv)
    finally:
        if installed:
            INTERRUPT.uninstall()


def run() -> None:
    """The program (the ``xrt`` script, ``python -m xrt.cli``): main, then its exit code, with the
    signals' codes kept through the interpreter's exit (:func:`xrt.interrupt.end`)."""
    end(main())


def _main(argv: Sequence[str] | None) -> int:
    try:
        with INTERRUPT.held():  # a signal from the program's start on is raised here, at the latest
            INTERRUPT.release_main_hold()
            parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        return INTERRUPT.report()
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        try:
            rc = int(args.func(args) or 0)
        except Exception:
            INTERRUPT.check()  # the error a caught or lost signal left behind: the signal is the news
            raise
        INTERRUPT.check()  # lost on the way: the command ran on
    except KeyboardInterrupt:
        rc = INTERRUPT.report()
    except DatabaseError as e:  # a --db that cannot be used: one line naming it
        if os.environ.get("XRT_DEBUG"):
            traceback.print_exc()
        print(f"xrt: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a path the user gave that cannot be used (a directory, busy, full, absent): one line
        if os.environ.get("XRT_DEBUG"):
            traceback.print_exc()
        names = [str(f) for f in (e.filename, e.filename2) if f is not None]  # a rename names both
        where = f"{' -> '.join(names)}: " if names else ""
        print(f"xrt {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except (CLIError, ValueError, RuntimeError, ImportError) as e:
        if os.environ.get("XRT_DEBUG"):
            traceback.print_exc()
        print(f"xrt {args.command}: error: {e}", file=sys.stderr)
        return 2
    if argv is None and getattr(args, "exit_at_once", False):
        # A command whose record is durable when it returns (`xrt tune`: its journal is fsynced line by
        # line, its files replaced whole, its workers stopped) ends the program without the
        # interpreter's teardown of torch and Triton (most of a second). Called with argv (the tests),
        # it returns as any other.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


if __name__ == "__main__":
    # `python -m xrt.cli` runs this file as __main__: the commands raise xrt.cli's CLIError, a class
    # of the module imported by name, so run that module's main (else a CLIError is a traceback).
    from xrt import cli

    cli.run()
