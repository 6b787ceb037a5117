"""Clock locking (``--lock-clocks base|max``), always restored on exit or signal.

Locked clocks remove boost variation from a run, which is why nvbench offers them; but they change
the card's settings for every user of the machine. So: only when the operator asks, only with
root, and always undone: on normal exit, on an exception, and on SIGINT / SIGTERM / SIGHUP.
On shared hosts (our GPU test hosts) never lock: the default mode only records clocks and
throttle reasons (:mod:`xrt.bench.timer`). Tests drive this module with a fake NVML.
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any

from xrt.bench.nvml import device_handle

MODES = ("base", "max")


class ClockLockError(RuntimeError):
    pass


class ClockLock:
    """Context manager: lock SM (and, where supported, memory) clocks of GPU ``index``.

    ``base``: the TDP (base) clock, which a GPU can hold under any load: the most repeatable.
    ``max``: the maximum SM clock: the fastest, but thermal/power limits may still pull it down.
    """

    def __init__(self, index: int, mode: str, nvml: Any = None, uuid: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"--lock-clocks {mode!r}: choose one of {', '.join(MODES)}")
        self.index, self.mode, self.uuid = index, mode, uuid
        self._nvml = nvml
        self.locked_sm: tuple[int, int] | None = None
        self.locked_mem = False
        self._old_handlers: dict[int, Any] = {}

    def _nv(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as e:
                raise ClockLockError("clock locking needs NVML: pip install nvidia-ml-py") from e
            self._nvml = pynvml
        return self._nvml

    def __enter__(self) -> ClockLock:
        nv = self._nv()
        if hasattr(os, "geteuid") and os.geteuid() != 0:
            raise ClockLockError("--lock-clocks needs root (NVML device commands are root-only); "
                                 "run without it to record clocks and throttle reasons instead")
        nv.nvmlInit()
        self.handle = device_handle(nv, self.index, self.uuid)
        self._install_handlers()
        try:
            if self.mode == "base":
                tdp = getattr(nv, "NVML_CLOCK_LIMIT_ID_TDP", 0xFFFFFF01)
                lo = hi = tdp
            else:
                lo = hi = int(nv.nvmlDeviceGetMaxClockInfo(self.handle, nv.NVML_CLOCK_SM))
            nv.nvmlDeviceSetGpuLockedClocks(self.handle, lo, hi)
            self.locked_sm = (lo, hi)
            if self.mode == "max":
                mem = int(nv.nvmlDeviceGetMaxClockInfo(self.handle, nv.NVML_CLOCK_MEM))
                try:
                    nv.nvmlDeviceSetMemoryLockedClocks(self.handle, mem, mem)
                    self.locked_mem = True
                except Exception:  # memory locking is Ampere+ and not on every SKU: SM lock stands
                    self.locked_mem = False
        except Exception as e:
            self.restore()
            if "permission" in str(e).lower() or "NoPermission" in type(e).__name__:
                raise ClockLockError(f"locking clocks on GPU {self.index} was refused: {e} (needs root)") from e
            raise ClockLockError(f"locking clocks on GPU {self.index} failed: {e}") from e
        return self

    def restore(self) -> None:
        """Undo whatever was locked; safe to call twice."""
        nv = self._nvml
        try:
            if self.locked_sm is not None and nv is not None:
                nv.nvmlDeviceResetGpuLockedClocks(self.handle)
                self.locked_sm = None
            if self.locked_mem and nv is not None:
                nv.nvmlDeviceResetMemoryLockedClocks(self.handle)
                self.locked_mem = False
        finally:
            self._remove_handlers()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    # -- signals: restore, then let the signal do what it would have done ------------------------
    def _install_handlers(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is None:
                continue
            try:
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: exit paths still restore
                pass

    def _remove_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        old = self._old_handlers.get(signum)
        self.restore()
        if callable(old):
            old(signum, frame)
        elif old == signal.SIG_IGN:
            return
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
