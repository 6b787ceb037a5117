"""NVML access for the timer: clocks and clocks-event (throttle) reasons, per sample.

Everything goes through an injectable module with pynvml's interface, so tests use a fake NVML
and the clock-locking path is never exercised on a real, shared GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# nvmlClocksEventReasons bits (formerly "throttle reasons").
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# A sample taken under any of these ran slower than the code alone would make it.
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def decode(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit] + (
        [f"unknown_0x{mask & ~sum(REASONS):x}"] if mask & ~sum(REASONS) else [])


def is_slowdown(mask: int) -> bool:
    return bool(mask & SLOWDOWN_MASK)


@dataclass
class ClockSample:
    sm_mhz: int | None
    mem_mhz: int | None
    reasons: int  # the clocks-event reasons bitmask (0 when unknown)

    @property
    def throttled(self) -> bool:
        return is_slowdown(self.reasons)


def load(nvml: Any = None) -> Any | None:
    """The NVML module (pynvml, or the given stand-in), initialised; ``None`` without NVML."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    return nvml


def device_handle(nv: Any, index: int, uuid: str | None = None) -> Any:
    """NVML's handle for a GPU: by UUID when known, else by index.

    NVML numbers GPUs by PCI order and ignores ``CUDA_VISIBLE_DEVICES``, so under
    ``CUDA_VISIBLE_DEVICES=1`` torch's ``cuda:0`` is NVML's GPU 1: only the UUID names the same
    GPU in both. An unknown UUID raises rather than silently reading another GPU.
    """
    if uuid:
        return nv.nvmlDeviceGetHandleByUUID(uuid)
    return nv.nvmlDeviceGetHandleByIndex(index)


class DeviceClocks:
    """Reads one GPU's clocks and event reasons. ``read()`` never raises: NVML is optional."""

    def __init__(self, index: int, nvml: Any = None, uuid: str | None = None) -> None:
        self.nvml = load(nvml)
        self.handle = None
        if self.nvml is not None:
            try:
                self.handle = device_handle(self.nvml, index, uuid)
            except Exception:
                self.nvml = None

    @property
    def available(self) -> bool:
        return self.nvml is not None

    def _reasons(self) -> int:
        nv = self.nvml
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(fn(self.handle))

    def read(self) -> ClockSample:
        if self.nvml is None:
            return ClockSample(None, None, 0)
        nv = self.nvml
        try:
            return ClockSample(int(nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM)),
                               int(nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_MEM)),
                               self._reasons())
        except Exception:
            return ClockSample(None, None, 0)

    def other_processes(self) -> list[int]:
        """PIDs of other processes with a context on this GPU (they share its time)."""
        if self.nvml is None:
            return []
        import os

        pids = []
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                pids += [p.pid for p in getattr(self.nvml, fn)(self.handle)]
            except Exception:
                pass
        return sorted({p for p in pids if p != os.getpid()})
