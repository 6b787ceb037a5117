"""When each step of one search happened, in seconds since the ``xrt tune`` process started.

The tuner marks its own steps (imports done, space built, workers spawned, first and last config
compiled and timed, results written, exit); each worker passes back its own timestamps (its process
start, its imports, ready) in its ``ready`` answer, so a worker's start-up is seen from inside too.
``xrt tune --verbose`` prints the timeline, ``--json`` carries it, ``scripts/tune_scale.py`` puts it
in its table: where the fixed part of a search (what one GPU more does not shorten) goes.

Standard library only: the tuner's CLI imports it before torch.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any


def process_start(pid: int | str = "self") -> float:
    """The wall-clock time (as :func:`time.time`) at which a process started: from ``/proc`` on
    Linux (to the clock tick, 10 ms), else now."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return time.time()


class Timeline:
    """Named instants of one process's run, relative to its start; thread-safe."""

    def __init__(self, start: float | None = None) -> None:
        self.t0 = process_start() if start is None else start
        self._events: dict[str, float] = {}
        self._lock = threading.Lock()

    def mark(self, what: str, at: float | None = None) -> None:
        """``what`` happened at ``at`` (wall clock; now by default). A name marked again moves."""
        t = time.time() if at is None else at
        with self._lock:
            self._events[what] = t - self.t0

    def first(self, what: str, at: float | None = None) -> None:
        """Keep the first time ``what`` happened only."""
        with self._lock:
            if what in self._events:
                return
        self.mark(what, at)

    def span(self, what: str, at: float | None = None) -> None:
        """The first and the last time ``what`` happened, as ``first what`` and ``last what``."""
        self.first(f"first {what}", at)
        self.mark(f"last {what}", at)

    def drop(self, prefix: str) -> None:
        """Forget the events whose names start with ``prefix`` (a worker that was not used after all)."""
        with self._lock:
            for k in [k for k in self._events if k.startswith(prefix)]:
                del self._events[k]

    def get(self, what: str) -> float | None:
        with self._lock:
            return self._events.get(what)

    def as_list(self) -> list[dict[str, Any]]:
        """``[{"event": ..., "s": seconds since the process started}, ...]`` in time order."""
        with self._lock:
            items = sorted(self._events.items(), key=lambda kv: kv[1])
        return [{"event": k, "s": round(v, 3)} for k, v in items]

    def lines(self) -> list[str]:
        return [f"{e['s']:8.2f} s  {e['event']}" for e in self.as_list()]
