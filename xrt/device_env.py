"""The environment that names and pins xrt's device, defined once.

``XRT_DEVICE`` names the device xrt uses (``cpu``, ``cuda:1``, ``xpu:0``; :func:`xrt.device.default_device`).
A process is shown one device only, as its device 0, by ``CUDA_VISIBLE_DEVICES`` (CUDA) or
``ZE_AFFINITY_MASK`` (XPU) with ``XRT_DEVICE`` (:func:`xrt.bench.runner.pin_env`, the tuner's workers).

Standard library only and nothing else: the tuner reads it before its own imports (its early timing
workers start first), and the asv suites without importing torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

DEVICE = "XRT_DEVICE"
CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"
XPU_AFFINITY = "ZE_AFFINITY_MASK"
PIN_KEYS = frozenset({CUDA_VISIBLE, XPU_AFFINITY, DEVICE})  # all that pins a process to its device


def requested(env: Mapping[str, str] | None = None) -> str | None:
    """The device ``XRT_DEVICE`` names (``cpu``, ``cuda:1``, ``xpu:0``), or None when it is unset or empty."""
    return (os.environ if env is None else env).get(DEVICE) or None


def requested_kind(env: Mapping[str, str] | None = None) -> str | None:
    """The kind of device ``XRT_DEVICE`` names (``cpu``, ``cuda``, ``xpu``), or None when it names none."""
    want = requested(env)
    return want.split(":")[0] if want else None


def cuda_pin(visible: str) -> dict[str, str]:
    """The environment that shows a process only the CUDA device ``visible`` (a UUID, or an index into
    the ``CUDA_VISIBLE_DEVICES`` the process would otherwise get), as its ``cuda:0``."""
    return {CUDA_VISIBLE: visible, DEVICE: "cuda:0"}
