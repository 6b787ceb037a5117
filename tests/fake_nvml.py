"""A stand-in for pynvml: clocks, clocks-event reasons, locked clocks, processes; records calls.

The clock-locking path is only ever tested against this: on shared GPU hosts the card's settings
must never change.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace


class NVMLError_NoPermission(Exception):  # noqa: N801  (pynvml's naming)
    pass


class FakeNVML:
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_CLOCK_LIMIT_ID_TDP = 0xFFFFFF01

    def __init__(self, sm=(1980,), mem=2619, reasons=(0,), root=True, log: Path | None = None,
                 mem_lock_supported=True):
        self.sm, self.mem, self.reasons = list(sm), mem, list(reasons)
        self.reads = 0
        self.root = root
        self.log = log
        self.mem_lock_supported = mem_lock_supported
        self.locked_sm = None
        self.locked_mem = None
        self.calls: list[str] = []

    def _note(self, call: str) -> None:
        self.calls.append(call)
        if self.log is not None:
            self.log.write_text(json.dumps({"calls": self.calls, "locked_sm": self.locked_sm,
                                            "locked_mem": self.locked_mem}))

    def nvmlInit(self):
        self._note("init")

    def nvmlShutdown(self):
        pass

    # Two GPUs by UUID; NVML's index order is PCI order, whatever CUDA_VISIBLE_DEVICES says.
    UUIDS = ("GPU-0a0a0a0a-0000-0000-0000-000000000000", "GPU-1b1b1b1b-1111-1111-1111-111111111111")

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.UUIDS:
            raise Exception("Not Found")
        return ("gpu", self.UUIDS.index(uuid))

    def nvmlDeviceGetClockInfo(self, h, which):
        if which == self.NVML_CLOCK_SM:
            v = self.sm[min(self.reads, len(self.sm) - 1)]
            return v
        return self.mem

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        v = self.reasons[min(self.reads, len(self.reasons) - 1)]
        self.reads += 1
        return v

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        return 1980 if which == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceSetGpuLockedClocks(self, h, lo, hi):
        if not self.root:
            raise NVMLError_NoPermission("Insufficient Permissions")
        self.locked_sm = (lo, hi)
        self._note(f"lock_sm {lo} {hi} on {h[1]}")

    def nvmlDeviceSetMemoryLockedClocks(self, h, lo, hi):
        if not self.mem_lock_supported:
            raise Exception("Not Supported")
        self.locked_mem = (lo, hi)
        self._note(f"lock_mem {lo} {hi}")

    def nvmlDeviceResetGpuLockedClocks(self, h):
        self.locked_sm = None
        self._note("reset_sm")

    def nvmlDeviceResetMemoryLockedClocks(self, h):
        self.locked_mem = None
        self._note("reset_mem")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=4242)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return []
