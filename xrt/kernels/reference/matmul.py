"""The torch reference for ``matmul`` and ``bmm`` (what cuBLAS / cuBLASLt compute on a GPU)."""

import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for [M, K] x [K, N]: ``torch.mm``."""
    return torch.mm(a, b)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm`` for [B, M, K] x [B, K, N]."""
    return torch.bmm(a, b)
