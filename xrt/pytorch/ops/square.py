"""``xrt.pytorch.ops.square``: y = x * x, the op every layer of xrt is first proven on.

The ladder: kernels (``xrt.kernels.{reference,triton,cuda}.square``) -> providers registered
here -> the ``xrt::square`` custom op (fake implementation for torch.compile, autograd formula)
-> :func:`square`, which applies the precision hint and the policy.
"""

from __future__ import annotations

import torch

from xrt.pytorch import policy
from xrt.pytorch.autocast import cast_for_hint
from xrt.pytorch.ops import _providers as P


def _config(x: torch.Tensor, space: str) -> dict:
    from xrt.kernels import spaces

    dev = _device_for(x)
    tuned = policy.lookup_tuned("square", device=dev, dtype=x.dtype, shape=(x.numel(),))
    return spaces.check(space, tuned or {})


def _device_for(x: torch.Tensor):
    if x.device.type != "cuda":
        return None
    from xrt.device import cuda_info

    return _cuda_info_cached(x.device.index or 0, cuda_info)


_INFO: dict[int, object] = {}


def _cuda_info_cached(index: int, fn):
    if index not in _INFO:
        _INFO[index] = fn(index)
    return _INFO[index]


@P.register("square", "torch", P.torch_missing)
def _square_torch(x: torch.Tensor) -> torch.Tensor:
    from xrt.kernels.reference.square import square

    return square(x)


@P.register("square", "triton", P.triton_missing)
def _square_triton(x: torch.Tensor) -> torch.Tensor:
    from xrt.kernels.triton.square import square

    return square(x, _config(x, "square.triton"))


@P.register("square", "cuda", P.cuda_missing)
def _square_cuda(x: torch.Tensor) -> torch.Tensor:
    from xrt.kernels.cuda.square import square

    return square(x, _config(x, "square.cuda"))


@P.register("square", "xpu", P.xpu_missing)
def _square_xpu(x: torch.Tensor) -> torch.Tensor:
    # Upstream torch.xpu: the Triton kernel compiles for Intel GPUs through Triton's XPU backend.
    from xrt.kernels.triton.square import square

    return square(x, _config(x, "square.triton"))


@torch.library.custom_op("xrt::square", mutates_args=())
def _square_op(x: torch.Tensor, provider: str) -> torch.Tensor:
    return P.get("square", provider).fn(x)


@_square_op.register_fake
def _(x: torch.Tensor, provider: str) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    x, _ = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad: torch.Tensor):
    (x,) = ctx.saved_tensors
    return grad * 2 * x, None


_square_op.register_autograd(_backward, setup_context=_setup_context)


def square(x: torch.Tensor, *, provider: str | None = None) -> torch.Tensor:
    """Elementwise ``x * x``.

    Args:
        x: a floating tensor of any shape, on the CPU, a CUDA GPU or an XPU.
        provider: ``"torch"``, ``"triton"``, ``"cuda"``, ``"xpu"`` or ``"auto"``; overrides the policy.

    Returns:
        A contiguous tensor of ``x``'s shape; under :func:`xrt.pytorch.autocast`, in its dtype.

    >>> square(torch.tensor([1.0, -2.0, 3.0]))
    tensor([1., 4., 9.])
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"square expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"square expects a floating tensor, got dtype {x.dtype}")
    x = cast_for_hint(x)
    chosen = P.choose("square", x, provider)
    with P.op_range("square", chosen.name):
        return _square_op(x, chosen.name)
