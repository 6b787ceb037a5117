"""The torch reference for ``window_sum``: a 3-wide stencil over the last dim.

``y[..., i] = x[..., i] + x[..., i + 1] + x[..., i + 2]`` for ``i`` in ``[0, n - 2)``, ``n =
x.shape[-1] >= 3``: the TensorIR chapter's ``B[i] = A[i] + A[i+1] + A[i+2]`` (a convolution with
the fixed weights ``[1, 1, 1]`` and no padding), applied to every row.
"""

import torch


def window_sum(x: torch.Tensor) -> torch.Tensor:
    """``x[..., :-2] + x[..., 1:-1] + x[..., 2:]``, summed in fp32 for fp16/bf16 inputs."""
    acc = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (acc[..., :-2] + acc[..., 1:-1] + acc[..., 2:]).to(x.dtype)
