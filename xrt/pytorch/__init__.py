"""The PyTorch runtime API of xpuruntime.

    import xrt.pytorch as xp
    xp.set_kernel_policy(matmul="cublasLt", attention="flash_v2", square="triton")
    with xp.autocast(torch.bfloat16):
        y = xp.ops.square(x)

Needs PyTorch: ``pip install -e '.[torch]' in an xpuruntime checkout``.
"""

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised in a venv without torch
    raise ImportError("xrt.pytorch requires PyTorch. Install with: "
                      "pip install -e '.[torch]' in an xpuruntime checkout") from e

from xrt.pytorch import ops
from xrt.pytorch.allocator import allocator_settings, reset_allocator, set_allocator
from xrt.pytorch.autocast import autocast, get_precision_hint
from xrt.pytorch.fusion import fuse, unfuse
from xrt.pytorch.graph import CUDAGraphWrapper, capture_graph
from xrt.pytorch.losses import LinearCrossEntropy, linear_cross_entropy
from xrt.pytorch.policy import (
    KernelPolicy,
    clear_kernel_policy,
    get_kernel_policy,
    kernel_policy,
    set_kernel_policy,
)
from xrt.pytorch.profiler import profile
from xrt.pytorch.routing import routed

__all__ = [
    "KernelPolicy",
    "set_kernel_policy",
    "get_kernel_policy",
    "clear_kernel_policy",
    "kernel_policy",
    "autocast",
    "get_precision_hint",
    "capture_graph",
    "CUDAGraphWrapper",
    "profile",
    "routed",
    "fuse",
    "unfuse",
    "set_allocator",
    "reset_allocator",
    "allocator_settings",
    "ops",
    "linear_cross_entropy",
    "LinearCrossEntropy",
]
