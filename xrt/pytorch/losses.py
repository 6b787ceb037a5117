"""A language model's loss through xrt's chunked ``linear_cross_entropy``: ``xp.linear_cross_entropy``.

A model's ``F.cross_entropy(lm_head(h), target)`` is two torch calls, the first of which materializes
the [tokens, vocab] logits before the loss sees them; no routing of single calls can fuse them. The
model's code calls :func:`linear_cross_entropy` (or :class:`LinearCrossEntropy`) with the hidden
states and the head instead::

    # before: loss = F.cross_entropy(model.lm_head(h).flatten(0, 1), labels.flatten())
    loss = xp.linear_cross_entropy(h, model.lm_head, labels)

For a causal language model the shift is the caller's, as with ``F.cross_entropy``:
``xp.linear_cross_entropy(h[:, :-1], model.lm_head, labels[:, 1:])``.
"""

from __future__ import annotations

import torch

from xrt.pytorch.ops.linear_cross_entropy import linear_cross_entropy as _op


def _weight(lm_head: torch.nn.Module | torch.Tensor) -> torch.Tensor:
    if isinstance(lm_head, torch.Tensor):
        return lm_head
    if not isinstance(lm_head, torch.nn.Linear):
        raise TypeError(f"linear_cross_entropy: lm_head must be a torch.nn.Linear or its weight tensor, "
                        f"got {type(lm_head).__name__}")
    if lm_head.bias is not None:
        raise ValueError(f"linear_cross_entropy: lm_head has a bias (shape {tuple(lm_head.bias.shape)}); the fused "
                         "loss takes a bias-free head (use F.cross_entropy(lm_head(h), target) for this one)")
    return lm_head.weight


def linear_cross_entropy(h: torch.Tensor, lm_head: torch.nn.Module | torch.Tensor, target: torch.Tensor, *,
                         ignore_index: int = -100, label_smoothing: float = 0.0,
                         provider: str | None = None) -> torch.Tensor:
    """``F.cross_entropy(lm_head(h).flatten(0, -2), target.flatten(), ...)`` (mean over the tokens not
    ignored) without the logits: :func:`xrt.pytorch.ops.linear_cross_entropy` on the head's weight.

    Args:
        h: ``[..., d]`` hidden states; ``target``: ``[...]`` int64, h's leading shape.
        lm_head: a bias-free ``torch.nn.Linear(d, V)`` (a tied embedding's is fine) or its ``[V, d]`` weight.
        ignore_index, label_smoothing: as ``F.cross_entropy``'s.
        provider: ``"torch"``, ``"triton"`` or ``"auto"`` (the chunked kernel on CUDA); overrides the policy.

    >>> head = torch.nn.Linear(8, 50, bias=False)
    >>> h, t = torch.randn(2, 3, 8), torch.randint(0, 50, (2, 3))
    >>> ref = torch.nn.functional.cross_entropy(head(h).flatten(0, 1), t.flatten())
    >>> torch.allclose(linear_cross_entropy(h, head, t), ref)
    True
    """
    return _op(h, _weight(lm_head), target, ignore_index=ignore_index, label_smoothing=label_smoothing,
               provider=provider)


class LinearCrossEntropy(torch.nn.Module):
    """The loss of ``lm_head`` as a module: ``LinearCrossEntropy(model.lm_head)(h, target)`` is
    :func:`linear_cross_entropy` on the head's current weight (shared, not copied)."""

    def __init__(self, lm_head: torch.nn.Linear, *, ignore_index: int = -100, label_smoothing: float = 0.0) -> None:
        super().__init__()
        _weight(lm_head)  # a bias or another module fails here, once
        self.lm_head = lm_head
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, h: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return linear_cross_entropy(h, self.lm_head, target, ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing)
