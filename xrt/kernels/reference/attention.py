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


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float):
    """``(out, lse)``: ``out = softmax(q k^T * scale) v`` in q's dtype, ``lse`` the rows' log-sum-exp."""
    s = _scores(q, k, is_causal, scale)
    lse = torch.logsumexp(s, -1)
    out = torch.exp(s - lse[..., None]) @ v.to(s.dtype)
    return out.to(q.dtype), lse.float()


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
