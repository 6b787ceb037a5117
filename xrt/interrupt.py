"""Ctrl-C and kill for the ``xrt`` command (stdlib only).

While a command runs, SIGINT raises KeyboardInterrupt, as Python's own handler does, and SIGTERM
and SIGHUP raise :class:`Terminated` (a KeyboardInterrupt), so every ``finally`` and ``with`` cleans up:
workers and asv stopped, worktrees removed, a database write rolled back. The signal is also
remembered (:meth:`Interrupt.check`), so the command ends with 130 ("xrt: interrupted") or 143
("xrt: terminated"; 129 for SIGHUP) even where a library turned the exception into another (DuckDB's "Query
interrupted") or lost it.

Never inside an import. An extension module's init is not written for an exception raised in it:
orjson's crashed, DuckDB's aborted, torch's lost the exception or left its module half loaded
("cannot load module more than once per process"). A signal that lands in an import is raised
when the import is done: SIGALRM looks again every ``RECHECK_S``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

RECHECK_S = 0.05
EXIT = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated"),
        signal.SIGHUP: (129, "hung up")}
CODES = {code for code, _ in EXIT.values()}


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (the terminal closed), raised like Ctrl-C so that the same cleanup runs."""


def _in_import(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class Interrupt:
    def __init__(self) -> None:
        self.signum: int | None = None
        self._held = 0
        self._main_hold = False
        self._installed: dict[int, object] = {}

    @property
    def seen(self) -> bool:
        return self.signum is not None

    def exception(self) -> KeyboardInterrupt:
        return KeyboardInterrupt() if self.signum in (None, signal.SIGINT) else Terminated()

    def check(self) -> None:
        """Raise the signal's exception if one came: after a library may have caught it."""
        if self.seen:
            raise self.exception()

    def report(self) -> int:
        """Say the signal seen (SIGINT where none was) in its one line; its exit code."""
        return said(self.signum if self.signum in EXIT else signal.SIGINT)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signum in (None, signal.SIGINT):  # a kill after a Ctrl-C is what the command ends by
            self.signum = signum
        self._raise_when_free(frame)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.seen:
            self._raise_when_free(frame)

    def _raise_when_free(self, frame: FrameType | None) -> None:
        if self._held or _in_import(frame):
            if signal.SIGALRM in self._installed:
                signal.setitimer(signal.ITIMER_REAL, RECHECK_S)
            return
        self.disarm()
        raise self.exception()

    def disarm(self) -> None:
        """No more looks after an import (one raise per signal; an armed timer survives an exec)."""
        if signal.SIGALRM in self._installed:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def install(self) -> bool:
        """Become the handler of SIGINT and SIGTERM where Python's defaults are in place (main thread
        only; a program's own handler, or a signal ignored, is left alone). True if it did."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return False
        defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                    signal.SIGHUP: signal.SIG_DFL, signal.SIGALRM: signal.SIG_DFL}
        for sig, default in defaults.items():
            if signal.getsignal(sig) is default:
                self._installed[sig] = signal.signal(sig, self._on_alarm if sig == signal.SIGALRM
                                                     else self._on_signal)
        if signal.SIGALRM in self._installed:
            signal.siginterrupt(signal.SIGALRM, False)  # a look after an import interrupts no system call
        self.signum = None
        return bool(self._installed)

    def uninstall(self) -> None:
        self.disarm()
        for sig, old in self._installed.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._installed = {}
        self.signum = None

    def hold_until_main(self) -> None:
        """``python -m xrt.cli``: installed before the program's own imports, a signal held until
        ``main`` (:meth:`release_main_hold`)."""
        if self.install():
            self._held += 1
            self._main_hold = True

    def release_main_hold(self) -> None:
        if self._main_hold:
            self._main_hold = False
            self._held -= 1

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A signal within the block raises when the block ends."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        if self.seen and not self._held:
            self.disarm()
            raise self.exception()


INTERRUPT = Interrupt()


def said(signum: int) -> int:
    """``xrt: interrupted`` (or the signal's word) on stderr; the signal's exit code."""
    code, word = EXIT[signum]
    with contextlib.suppress(Exception):
        print(f"xrt: {word}", file=sys.stderr, flush=True)
    return code


def end(rc: int) -> None:
    """End the program with ``rc``. After a signal, at once (``os._exit``): Python's exit after a
    KeyboardInterrupt that went through ``exec`` (a dataclass being made) can end the process by
    SIGINT instead of the code. A signal while threads are joined ends it with the signal's code and
    line; one in the interpreter's teardown after that (its modules freed) is ignored: the command's
    work is done, and the interpreter would otherwise die of it."""
    for f in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            f.flush()
    if rc in CODES:
        os._exit(rc)

    def late(signum: int, frame: FrameType | None) -> None:
        os._exit(said(signum))

    def done() -> None:  # the last Python to run: after it the interpreter sets SIG_DFL, ignored stays
        for sig in EXIT:
            signal.signal(sig, signal.SIG_IGN)

    if threading.current_thread() is threading.main_thread():
        for sig in EXIT:
            if signal.getsignal(sig) in (INTERRUPT._on_signal, signal.default_int_handler, signal.SIG_DFL):
                signal.signal(sig, late)
        atexit.register(done)  # atexit runs it first (last in), after the threads are joined
    sys.exit(rc)
