"""Machine identity (one asv machine per GPU) and the facts recorded beside each run.

Timings are never compared across GPU models, so every GPU is its own asv machine:
``<host>-<gpu model>-<index>`` (``gpuhost-nvidia-h100-80gb-hbm3-0``); a CPU run is ``<host>-cpu``.
"""

from __future__ import annotations

import os
import platform
import re
import time
from typing import Any

from xrt.db import sidecar_keys
from xrt.device import DeviceInfo


def machine_name(dev: DeviceInfo, host: str | None = None) -> str:
    host = host or dev.host or platform.node() or "host"
    host = re.sub(r"[^A-Za-z0-9_.-]+", "-", host)
    if dev.kind == "cpu":
        return f"{host}-cpu"
    return f"{host}-{dev.model_key}-{dev.index}"


def cpu_load() -> dict[str, float]:
    """1-minute load average over the core count: above ~0.5 the host skews baselines."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return {}
    cores = os.cpu_count() or 1
    return {"load1": one, "load5": five, "cores": cores, "load_per_core": one / cores}


def _ram_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def asv_machine_info(dev: DeviceInfo) -> dict[str, str]:
    """The fields of asv's machine.json for this machine (what `asv machine` asks for)."""
    ram = _ram_bytes()
    gpu = "" if dev.kind == "cpu" else f" + {dev.name}"
    return {
        "machine": machine_name(dev),
        "os": f"{platform.system()} {platform.release()}",
        "arch": platform.machine(),
        "cpu": (_cpu_model() or platform.processor() or "unknown") + gpu,
        "num_cpu": str(os.cpu_count() or 1),
        "ram": str(ram or ""),
    }


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def sidecar(dev: DeviceInfo, **extra: Any) -> dict[str, Any]:
    """The GPU and software facts written beside each run's asv results (and ingested with them)."""
    facts = {
        sidecar_keys.SCHEMA_KEY: sidecar_keys.SCHEMA,
        "machine": machine_name(dev),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu_model": dev.name if dev.kind != "cpu" else None,
        "device_kind": dev.kind,
        "device_index": dev.index,
        "device_uuid": dev.uuid,
        "compute_capability": dev.compute_capability,
        "driver": dev.driver,
        "cuda": dev.cuda,
        "torch": dev.torch,
        "triton": dev.triton,
        "sm_count": dev.sm_count,
        "l2_bytes": dev.l2_bytes,
        "total_memory_bytes": dev.total_memory_bytes,
        "power_limit_w": dev.power_limit_w,
        "max_sm_clock_mhz": dev.max_sm_clock_mhz,
        "max_mem_clock_mhz": dev.max_mem_clock_mhz,
        "cpu_load": cpu_load(),
        "host": dev.host,
        # the host under the device: on the CPU it is the device; on a GPU host it times the launches.
        # xrt.track.env calls a change of either an environment change.
        "cpu_model": _cpu_model() or platform.processor() or None,
        "kernel": platform.release() or None,
    }
    facts.update(extra)
    return facts
