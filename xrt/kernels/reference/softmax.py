"""The torch reference for ``softmax`` over the last dim."""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    """``softmax(x, dim=-1)`` (torch computes fp16/bf16 in fp32 internally)."""
    return torch.softmax(x, dim=-1)


def softmax_bwd(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient from the saved output: ``y * (dy - sum(dy * y, -1))``, computed in fp32."""
    yf, dyf = y.float(), dy.float()
    return (yf * (dyf - (dyf * yf).sum(-1, keepdim=True))).to(y.dtype)
