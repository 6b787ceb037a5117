"""Input checks shared by the ops' public functions; messages name the values.

Checks the launchers make too (shapes, the window width) are in :mod:`xrt.kernels.checks`.
"""

from __future__ import annotations

import torch


def floating(name: str, op: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op} expects a torch.Tensor for {name}, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{op} expects a floating tensor for {name}, got dtype {t.dtype}")
    return t


def of_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` cast to ``dtype``; ``t`` itself when it has it. Under ``torch.compile`` a cast to the
    tensor's own dtype would still be traced into the graph (Inductor then handles an alias of the
    input); this traces nothing."""
    return t if t.dtype == dtype else t.to(dtype)
