"""The torch reference for ``vector_add``: what every other provider must match."""

import torch


def vector_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` elementwise; ``a`` and ``b`` of one shape and dtype."""
    return a + b
