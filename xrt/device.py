"""Device discovery: what is this machine's accelerator, and what are its facts?

One :class:`DeviceInfo` per device, used by every later layer (timer, machine sidecar,
tuned-config lookup, diag). CUDA facts come from torch.cuda plus NVML (nvidia-ml-py),
XPU facts from torch.xpu, and the CPU is always there as the fallback.

Importing this module imports neither torch nor NVML; :func:`discover` does, lazily.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from xrt import device_env


@dataclass
class DeviceInfo:
    """Facts about one device. Fields that a backend cannot tell stay ``None``."""

    kind: str  # "cuda" | "xpu" | "cpu"
    index: int
    name: str
    compute_capability: str | None = None  # "9.0" on an H100
    sm_count: int | None = None  # SMs (CUDA) / execution units (XPU) / cores (CPU)
    l2_bytes: int | None = None
    total_memory_bytes: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    max_mem_clock_mhz: int | None = None
    power_limit_w: float | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    uuid: str | None = None  # "GPU-…": names the same GPU in torch and NVML, whatever CUDA_VISIBLE_DEVICES says
    # Launch limits the tuner prunes its spaces against (xrt/kernels/spaces.py CONSTRAINTS); None off CUDA.
    max_threads_per_block: int | None = None
    max_shared_memory_per_block: int | None = None  # bytes a block may opt in to (H100: 227 KiB)
    registers_per_block: int | None = None  # 32-bit registers
    warp_size: int | None = None
    host: str = field(default_factory=platform.node)

    @property
    def torch_device(self) -> str:
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    @property
    def model_key(self) -> str:
        """A short, filesystem-safe model name: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
        return "-".join(self.name.lower().replace("(", " ").replace(")", " ").split())

    @property
    def arch_key(self) -> str | None:
        """``sm_90`` for compute capability 9.0; ``None`` off CUDA."""
        if self.compute_capability is None:
            return None
        return "sm_" + self.compute_capability.replace(".", "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        facts = ((self.compute_capability, lambda v: f"cc {v}"),
                 (self.sm_count, lambda v: f"{v} {'SMs' if self.kind == 'cuda' else 'units'}"),
                 (self.l2_bytes, lambda v: f"L2 {v / 2**20:.0f} MiB"),
                 (self.total_memory_bytes, lambda v: f"{v / 2**30:.0f} GiB"),
                 (self.max_sm_clock_mhz, lambda v: f"SM clock max {v} MHz"),
                 (self.driver, lambda v: f"driver {v}"))
        return ", ".join([f"{self.torch_device}: {self.name}"] + [text(v) for v, text in facts if v])


def _installed(dist: str) -> str | None:
    """A package's version as its metadata says, without importing it (torch takes seconds)."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _versions(load: bool = True) -> dict[str, str | None]:
    """torch's, Triton's and torch's CUDA version. ``load=False``: from the packages' metadata where
    they are not imported yet (no CUDA version then), for the CPU's facts."""
    if not load:
        return {"torch": sys.modules["torch"].__version__ if "torch" in sys.modules else _installed("torch"),
                "triton": sys.modules["triton"].__version__ if "triton" in sys.modules else _installed("triton"),
                "cuda": None}
    out: dict[str, str | None] = {"torch": None, "triton": None, "cuda": None}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
    except ImportError:
        pass
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        pass
    return out


def cpu_info(load: bool = True) -> DeviceInfo:
    name = platform.processor() or platform.machine() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    v = _versions(load)
    return DeviceInfo(kind="cpu", index=0, name=name, sm_count=os.cpu_count(), torch=v["torch"],
                      triton=v["triton"])


def cuda_uuid(index: int) -> str | None:
    """``GPU-…`` (NVML's spelling) of torch CUDA device ``index``; ``None`` where torch can't tell."""
    try:
        import torch

        u = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    except Exception:
        return None
    if u is None:
        return None
    u = str(u)
    return u if u.startswith(("GPU-", "MIG-")) else f"GPU-{u}"


def nvml_facts(index: int, nvml: Any = None, uuid: str | None = None) -> dict[str, Any]:
    """Clocks, power limit, L2-independent facts from NVML for CUDA device ``index`` (or ``uuid``).

    ``nvml`` may be a stand-in module with pynvml's interface (tests use a fake NVML).
    Returns ``{}`` when NVML is unavailable: NVML is a nice-to-have, never a reason to fail.
    """
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return {}
    try:
        nvml.nvmlInit()
    except Exception:  # no driver, no NVML library
        return {}
    try:
        try:
            h = nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # NVML does not know this GPU: no facts rather than another GPU's
            return {}
        facts: dict[str, Any] = {}
        for key, fn in (
            ("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
            ("mem_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
            ("max_sm_clock_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM)),
            ("max_mem_clock_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_MEM)),
            ("power_limit_w", lambda: nvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0),
            ("driver", lambda: _text(nvml.nvmlSystemGetDriverVersion())),
        ):
            try:
                facts[key] = fn()
            except Exception:
                facts[key] = None
        return facts
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def cuda_info(index: int) -> DeviceInfo:
    import torch

    p = torch.cuda.get_device_properties(index)
    v = _versions()
    info = DeviceInfo(
        kind="cuda",
        index=index,
        name=p.name,
        compute_capability=f"{p.major}.{p.minor}",
        sm_count=p.multi_processor_count,
        l2_bytes=getattr(p, "L2_cache_size", None),
        total_memory_bytes=p.total_memory,
        torch=v["torch"],
        triton=v["triton"],
        cuda=v["cuda"],
        uuid=cuda_uuid(index),
        # CUDA's limit on every architecture since Fermi; torch does not expose it
        max_threads_per_block=1024,
        max_shared_memory_per_block=getattr(p, "shared_memory_per_block_optin", None)
        or getattr(p, "shared_memory_per_block", None),
        registers_per_block=min(getattr(p, "regs_per_multiprocessor", None) or 65536, 65536),
        warp_size=getattr(p, "warp_size", None) or 32,
    )
    for k, val in nvml_facts(index, uuid=info.uuid).items():
        setattr(info, k, val)
    return info


def xpu_info(index: int) -> DeviceInfo:
    import torch

    p = torch.xpu.get_device_properties(index)
    v = _versions()
    return DeviceInfo(
        kind="xpu",
        index=index,
        name=p.name,
        sm_count=getattr(p, "gpu_eu_count", None) or getattr(p, "max_compute_units", None),
        total_memory_bytes=getattr(p, "total_memory", None),
        driver=getattr(p, "driver_version", None),
        torch=v["torch"],
        triton=v["triton"],
    )


# The device nodes a GPU driver makes on Linux (NVIDIA, WSL's, ROCm's, Intel's and any DRM GPU's).
# Without any of them torch sees no accelerator, and finding that out costs no torch import.
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd", "/dev/dri")


def _no_gpu_nodes() -> bool:
    return sys.platform.startswith("linux") and not any(os.path.exists(p) for p in GPU_NODES)


def discover() -> list[DeviceInfo]:
    """Every accelerator torch can see (CUDA first, then XPU), and the CPU last. On a Linux machine
    with no GPU device node, the CPU alone, without importing torch (seconds of every command)."""
    if "torch" not in sys.modules and _no_gpu_nodes():
        return [cpu_info(load=False)]
    found: list[DeviceInfo] = []
    try:
        import torch
    except ImportError:
        return [cpu_info()]
    if torch.cuda.is_available():
        found += [cuda_info(i) for i in range(torch.cuda.device_count())]
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        found += [xpu_info(i) for i in range(xpu.device_count())]
    found.append(cpu_info())
    return found


def default_device() -> DeviceInfo:
    """The device xrt uses when none is named: the first accelerator, else the CPU.

    ``XRT_DEVICE=cpu`` (or ``cuda:1``, ``xpu:0``) overrides it.
    """
    want = device_env.requested()
    if want == "cpu":  # named: no accelerator to look for
        return cpu_info(load=False)
    devices = discover()
    if want:
        for d in devices:
            if d.torch_device == want or (want == d.kind and d.index == 0):
                return d
        have = ", ".join(d.torch_device for d in devices)
        raise ValueError(f"{device_env.DEVICE}={want!r} is not on this machine; devices here: {have}")
    return devices[0]
