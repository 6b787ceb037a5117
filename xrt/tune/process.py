"""The tuner's worker processes as its driver sees them: :class:`Worker` starts one ``xrt.tune.worker``
process, sends it configs and reads its answers; the errors a worker raises. Apart from the search
(:mod:`xrt.tune.tuner`) so that :mod:`xrt.tune.distributed`, whose Ray actors each hold a Worker,
imports this and not the tuner that imports it."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xrt.interrupt import INTERRUPT
from xrt.tune import search
from xrt.tune.timeline import Timeline


class TuneError(RuntimeError):
    pass


class WorkerGone(Exception):
    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class Stopping(Exception):
    """A worker asked to start after its search began to stop (a Ctrl-C, an error): none starts, and
    nothing is recorded against the config it was to run."""


class Gate:
    """The start of a search's workers, shut by :meth:`shut` when the search stops: a worker starts
    under its lock, so one either starts before (and is stopped with the others) or not at all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._shut = False

    def shut(self) -> None:
        with self.lock:
            self._shut = True

    @property
    def stopping(self) -> bool:
        """Shut, or a signal came (the search is about to stop)."""
        return self._shut or INTERRUPT.seen


@dataclass
class Problem:
    op: str
    provider: str
    shape: str  # "4096x4096"
    dtype: str

    @property
    def space(self) -> str:
        from xrt.bench import specs

        spec = specs.get(self.op)
        if self.provider not in spec.spaces:
            have = ", ".join(sorted(spec.spaces)) or "none"
            raise TuneError(f"--provider {self.provider}: {self.op} has no tuning space for it (providers with "
                            f"one: {have})")
        return spec.spaces[self.provider]

    @property
    def name(self) -> str:
        return f"{self.space}-{self.dtype}-{self.shape}"


class Worker:
    """One ``xrt.tune.worker`` process; ``ask`` sends a config and waits for its answer."""

    def __init__(self, problem: Problem, mode: str, env: dict[str, str], log: Path, start_timeout: float,
                 timeline: Timeline | None = None, name: str = "", many: bool = False) -> None:
        self.cmd = [sys.executable, "-m", "xrt.tune.worker", "--op", problem.op, "--provider", problem.provider,
                    "--shape", problem.shape, "--dtype", problem.dtype, "--mode", mode]
        self.env, self.log, self.start_timeout = env, log, start_timeout
        self.proc: subprocess.Popen | None = None
        self.ready: dict[str, Any] = {}
        # its start on the tuner's timeline: one worker by its name, the first start only (a restart
        # after a crash is not start-up); one of a pool (many) as the pool's first and last
        self.timeline, self.name, self.many = timeline, name, many

    @classmethod
    def from_cmd(cls, cmd: list[str], env: dict[str, str], log: Path, start_timeout: float) -> Worker:
        """A worker for a command line made elsewhere (a Ray actor's, :mod:`xrt.tune.distributed`)."""
        w = cls.__new__(cls)
        w.cmd, w.env, w.log, w.start_timeout = cmd, env, log, start_timeout
        w.proc, w.ready = None, {}
        w.timeline, w.name, w.many = None, "", False
        return w

    def _mark(self, step: str, at: float | None = None) -> None:
        if self.timeline is not None:
            (self.timeline.span if self.many else self.timeline.first)(f"{self.name} {step}", at)

    def _start(self) -> None:
        self._spawn()
        self._await_ready()

    gate: Gate | None = None  # the search's (Tuner.stop shuts it)

    def _spawn(self) -> None:
        """Start the process, unless its search is stopping or a signal came (:class:`Stopping`)."""
        gate = self.gate
        if gate is None:
            return self._popen()
        with gate.lock:
            if gate.stopping:
                raise Stopping(f"{self.name or 'worker'}: not started, the search is stopping")
            self._popen()

    def _popen(self) -> None:
        """Start the process; its stderr goes to ``log``, or (``log`` None: an early worker, whose log's
        folder is not known yet) to memory until :meth:`adopt` names the file."""
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            self._logf: Any = open(self.log, "a")
        self._mark("spawned")
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._logf if self.log is not None else subprocess.PIPE,
                                     env=self.env, bufsize=0)
        if self.log is None:
            self._logf = _Pump(self.proc.stderr)

    def adopt(self, early: Worker) -> None:
        """Take over ``early``'s running, ready process (started before the tuner knew its devices);
        this worker's own environment stays the one a restart gets."""
        self.proc, self.ready, self._logf = early.proc, early.ready, early._logf
        early.proc = None
        self._logf.attach(self.log)

    def _await_ready(self) -> None:
        self.ready = self._read(self.start_timeout, "starting")
        if not self.ready.get("ready"):
            self.stop()
            raise TuneError(f"the tuning worker cannot run this problem: {self.ready.get('error')}")
        stamps = self.ready.get("t") or {}  # the worker's own clock: its process start, imports, ready
        for step, key in (("process started", "start"), ("imports done", "imports"), ("ready", "ready")):
            self._mark(step, stamps.get(key) if isinstance(stamps.get(key), (int, float)) else None)

    def _read(self, timeout: float, what: str) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        buf = b""
        deadline = time.monotonic() + timeout
        try:
            while not buf.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise WorkerGone("timeout", f"no answer within {timeout:.0f} s while {what}")
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    rc = self.proc.wait()
                    raise WorkerGone("crash", f"the worker died while {what} (exit {rc}{_signal_name(rc)})")
                buf += chunk
        finally:
            sel.close()
        return json.loads(buf.decode())

    def ask(self, cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(cfg) + "\n").encode())
        except BrokenPipeError:
            self.stop()
            raise WorkerGone("crash", "the worker had exited") from None
        try:
            ans = self._read(timeout, f"running {search.key(cfg)}")
        except WorkerGone:
            self.stop()  # the next ask starts a fresh worker
            raise
        if ans.get("status") == "crash":  # it said its CUDA context is lost, and exits
            self.stop()
        return ans

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                if f is not None:
                    f.close()
            self._logf.close()
        self.proc = None


class _Pump:
    """An early worker's stderr: kept in memory until its log file is named, then appended to it."""

    def __init__(self, pipe: Any) -> None:
        self._buf: list[bytes] = []
        self._f: Any = None
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, args=(pipe,), daemon=True)
        self._thread.start()

    def _run(self, pipe: Any) -> None:
        try:
            while chunk := os.read(pipe.fileno(), 65536):
                with self._lock:
                    if self._f is not None:
                        self._f.write(chunk)
                        self._f.flush()
                    elif not self._closed:
                        self._buf.append(chunk)
        except (OSError, ValueError):
            pass
        finally:
            pipe.close()

    def attach(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "ab")
        with self._lock:
            f.write(b"".join(self._buf))
            f.flush()
            self._buf, self._f = [], f

    def close(self) -> None:
        self._thread.join(timeout=2.0)  # the process is gone: its stderr ends
        with self._lock:
            self._closed = True
            if self._f is not None:
                self._f.close()
                self._f = None
            self._buf = []


def _signal_name(rc: int) -> str:
    import signal

    if rc < 0:
        try:
            return f", {signal.Signals(-rc).name}"
        except ValueError:
            return f", signal {-rc}"
    return ""
