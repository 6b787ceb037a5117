"""What the CUDA C launchers share: the dtype suffix of the kernel names (``square_v2_bf16``) and the
check of the input they launch on."""

from __future__ import annotations

import torch

DTYPE_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def check_device(op: str, *tensors: torch.Tensor) -> None:
    """The first of ``tensors`` is a CUDA tensor of a dtype the kernels are built for (the launcher
    has checked that the others match it)."""
    x = tensors[0]
    if x.device.type != "cuda":
        what = "CUDA tensors, got them" if len(tensors) > 1 else "a CUDA tensor, got one"
        raise ValueError(f"CUDA C {op} needs {what} on {x.device}")
    if x.dtype not in DTYPE_SUFFIX:
        raise ValueError(f"CUDA C {op} supports {', '.join(map(str, DTYPE_SUFFIX))}; got {x.dtype}")
