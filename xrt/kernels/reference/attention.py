"""The torch reference for ``attention``: forward with the saved log-sum-exp, and backward.

Shapes: ``q`` ``[B, H, S_q, D]``, ``k`` and ``v`` ``[B, H, S_k, D]``, ``lse`` ``[B, H, S_q]`` fp32
(natural log). Causal masking is top-left aligned, as ``scaled_dot_product_attention``'s
``is_causal``: query ``i`` sees keys ``j <= i``. Computed in fp32 (fp64 for fp64 inputs).
"""

from __future__ import annotations

import torch


def _scores(q: torch.Tensor, k: torch.Tensor, is_causal: bool, scale: float) -> torch.Tensor:
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q.to(acc) @ k.to(acc).transpose(-1, -2)) * scale
    if is_causal:
        s_q, s_k = s.shape[-2:]
        keep = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s


def empty_out(q: torch.Tensor, d: int) -> torch.Tensor:
    """The output of attention over queries ``q`` [B, H, S_q, D] (or [..., S_q, D]): [..., S_q, d] in
    q's dtype, laid out as q is. Where q's head stride is below its row stride (a model's ``qkv`` projection viewed
    per head: [B, S, H, D] in memory), so is the output, and the model's ``out.transpose(1, 2)
    .reshape(B, S, H * d)`` is a view rather than a copy, as with SDPA. Otherwise contiguous."""
    if q.dim() == 4 and q.shape[1] > 1 and q.shape[2] > 1 and q.stride(1) < q.stride(2):
        b, h, s, _ = q.shape
        return q.new_empty((b, s, h, d)).transpose(1, 2)
    return q.new_empty((*q.shape[:-1], d))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float):
    """``(out, lse)``: ``out = softmax(q k^T * scale) v`` in q's dtype (laid out by :func:`empty_out`),
    ``lse`` the rows' log-sum-exp."""
    s = _scores(q, k, is_causal, scale)
    lse = torch.logsumexp(s, -1)
    out = torch.exp(s - lse[..., None]) @ v.to(s.dtype)
    return empty_out(q, v.shape[-1]).copy_(out), lse.float()


def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  lse: torch.Tensor, is_causal: bool, scale: float):
    """``(dq, dk, dv)`` from the saved ``lse``: ``dS = P * (dO V^T - rowsum(dO * O))``."""
    s = _scores(q, k, is_causal, scale)
    acc = s.dtype
    p = torch.exp(s - lse.to(acc)[..., None])
    dof = do.to(acc)
    dv = p.transpose(-1, -2) @ dof
    delta = (dof * o.to(acc)).sum(-1, keepdim=True)
    ds = p * (dof @ v.to(acc).transpose(-1, -2) - delta)
    dq = (ds @ k.to(acc)) * scale
    dk = (ds.transpose(-1, -2) @ q.to(acc)) * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
