"""Input checks shared by the ops' public functions; messages name the values."""

from __future__ import annotations

import torch


def floating(name: str, op: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op} expects a torch.Tensor for {name}, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{op} expects a floating tensor for {name}, got dtype {t.dtype}")
    return t


def same(op: str, a: torch.Tensor, b: torch.Tensor, an: str = "a", bn: str = "b") -> None:
    if a.shape != b.shape:
        raise ValueError(f"{op}: {an}.shape={tuple(a.shape)} must equal {bn}.shape={tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"{op}: {an}.dtype={a.dtype} must equal {bn}.dtype={b.dtype}")
    if a.device != b.device:
        raise ValueError(f"{op}: {an} is on {a.device} but {bn} is on {b.device}")
