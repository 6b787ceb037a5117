"""The torch reference for ``square``: what every other provider must match."""

import torch


def square(x: torch.Tensor) -> torch.Tensor:
    """``x * x`` elementwise; any shape, any device, any floating dtype."""
    return x * x
