"""The torch reference for ``linear_cross_entropy``: the logits materialized, the gradients by formula."""

from __future__ import annotations

import torch


def check_inputs(h: torch.Tensor, w: torch.Tensor, target: torch.Tensor) -> None:
    """``h`` [N, d], ``w`` [V, d] of one floating dtype on one device, ``target`` [N] int64."""
    if h.dim() != 2 or w.dim() != 2:
        raise ValueError(f"linear_cross_entropy takes h [N, d] and weight [V, d]; got h.shape={tuple(h.shape)}, "
                         f"weight.shape={tuple(w.shape)}")
    if h.shape[1] != w.shape[1]:
        raise ValueError(f"linear_cross_entropy: h.shape[1]={h.shape[1]} must equal weight.shape[1]={w.shape[1]}")
    if tuple(target.shape) != (h.shape[0],):
        raise ValueError(f"linear_cross_entropy: target.shape={tuple(target.shape)} must be (h.shape[0],) = "
                         f"({h.shape[0]},)")
    if h.dtype != w.dtype:
        raise ValueError(f"linear_cross_entropy: h.dtype={h.dtype} must equal weight.dtype={w.dtype}")
    if not h.dtype.is_floating_point:
        raise ValueError(f"linear_cross_entropy: h.dtype={h.dtype} must be a floating dtype")
    if h.device != w.device or target.device != h.device:
        raise ValueError(f"linear_cross_entropy: h ({h.device}), weight ({w.device}) and target ({target.device}) "
                         "must be on one device")
    if target.dtype != torch.int64:
        raise ValueError(f"linear_cross_entropy: target.dtype={target.dtype} must be torch.int64")


def linear_cross_entropy(h: torch.Tensor, w: torch.Tensor, target: torch.Tensor, ignore_index: int,
                         label_smoothing: float, grads: bool = True,
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, grad_h, grad_w)`` of the mean ``cross_entropy(h @ w.T, target)``, as the Triton launcher
    returns them (``h`` [N, d], ``w`` [V, d], ``target`` [N]): the loss in float32 (float64 for float64
    inputs), the gradients in the inputs' dtype; without ``grads`` the two are empty.

    The logits are computed in the inputs' dtype, as ``F.linear`` does, the softmax in float32 (float64
    for float64 inputs: the tests' reference). Holds the whole [N, V] logits: the memory the fused
    kernel saves.
    """
    check_inputs(h, w, target)
    acc = torch.float64 if h.dtype == torch.float64 else torch.float32
    logits = (h @ w.t()).to(acc)
    keep = target != ignore_index
    count = keep.sum().to(acc)
    v = w.shape[0]
    logp = torch.log_softmax(logits, dim=-1)
    safe = torch.where(keep, target, 0)
    nll = -logp.gather(1, safe[:, None])[:, 0]
    per_row = (1.0 - label_smoothing) * nll - label_smoothing / v * logp.sum(-1)
    loss = torch.where(keep, per_row, 0.0).sum() / count
    if not grads:
        return loss, h.new_empty(0), w.new_empty(0)
    grad = logp.exp() - label_smoothing / v
    grad.scatter_add_(1, safe[:, None], torch.full_like(grad[:, :1], label_smoothing - 1.0))
    grad = torch.where(keep[:, None], grad / count, 0.0).to(h.dtype)
    return loss, grad @ w, grad.t() @ h
