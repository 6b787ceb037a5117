"""``linear_cross_entropy`` in Triton: ``cross_entropy(h @ w.T, target)`` without the [tokens, vocab] logits.

After Liger-Kernel's FusedLinearCrossEntropy: the tokens are taken ``chunk`` rows at a time. For a chunk
a cuBLAS GEMM computes its logits, ``_lce_rows_kernel`` (one program a row) computes each row's loss
and overwrites the row's logits with their gradient ``(softmax - onehot) / n`` in place, then two more
GEMMs give the chunk's ``grad_h`` and add its share of ``grad_w``. The forward thus returns the
gradients too; the backward only scales them by the loss's gradient. Memory beyond the inputs and
gradients is one chunk's logits.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks
from xrt.kernels.reference.linear_cross_entropy import check_inputs
from xrt.kernels.triton.launch import Launcher, cdiv, next_power_of_2

BLOCK = 4096  # vocabulary entries a step of the row kernel
MIN_CHUNK = 1024  # the smallest automatic chunk: fewer read-modify-writes of grad_w, GEMMs that fill the GPU


@triton.jit
def _lce_rows_kernel(
    logits_ptr,  # [C, V] one chunk's logits, row-major, stride row_stride; overwritten by their gradient
    target_ptr,  # [C] int64 class of each row, or ignore_index
    loss_ptr,  # [C] fp32 each row's loss (0 for an ignored row)
    count_ptr,  # [1] fp32 the number of rows not ignored, over all chunks (the mean's divisor)
    V,  # vocabulary size
    row_stride,  # elements between rows of logits
    ignore_index,  # target value of a row that counts for nothing
    smoothing,  # label smoothing in [0, 1]
    BLOCK: tl.constexpr,  # vocabulary entries a step
):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * row_stride
    t = tl.load(target_ptr + row)
    cols = tl.arange(0, BLOCK)
    if t == ignore_index:  # no loss, no gradient
        tl.store(loss_ptr + row, 0.0)
        for start in range(0, V, BLOCK):
            tl.store(base + start + cols, tl.zeros([BLOCK], tl.float32).to(logits_ptr.dtype.element_ty),
                     mask=start + cols < V)
        return
    # Pass 1: online max and sum of exp (one lane per column residue), and the row's sum for smoothing.
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, V, BLOCK):
        mask = start + cols < V
        x = tl.load(base + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        live = m_new > -float("inf")  # a lane that has seen only padding stays (-inf, 0)
        s = tl.where(live, s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
        m = m_new
        total += tl.where(mask, x, 0.0)
    row_max = tl.max(m, 0)
    lse = row_max + tl.log(tl.sum(s * tl.exp(m - row_max), 0))
    # A target outside [0, V) is not checked (that would cost a host sync): it reads no memory and counts x_t = 0.
    x_t = tl.load(base + t, mask=(t >= 0) & (t < V), other=0.0).to(tl.float32)
    inv_n = 1.0 / tl.load(count_ptr)
    # loss = (1 - eps) (lse - x_t) + eps / V * sum_j (lse - x_j)
    loss = lse - (1.0 - smoothing) * x_t - smoothing / V * tl.sum(total, 0)
    tl.store(loss_ptr + row, loss)
    # Pass 2: the gradient of the mean loss, written over the logits it came from.
    for start in range(0, V, BLOCK):
        idx = start + cols
        mask = idx < V
        x = tl.load(base + idx, mask=mask, other=0.0).to(tl.float32)
        g = tl.exp(x - lse) - smoothing / V - tl.where(idx == t, 1.0 - smoothing, 0.0)
        tl.store(base + idx, (g * inv_n).to(logits_ptr.dtype.element_ty), mask=mask)


_rows = Launcher(_lce_rows_kernel)


def chunk_rows(n: int, v: int, d: int, chunk: int | str) -> int:
    """Tokens a chunk: ``chunk`` itself, or for ``"auto"`` Liger-Kernel's rule (a chunk's logits about
    the size of ``h``: ``n / ceil(v / d)`` rows, a power of two) raised to :data:`MIN_CHUNK`."""
    if chunk != "auto":
        return max(1, min(int(chunk), n))
    return max(1, min(n, max(MIN_CHUNK, next_power_of_2(cdiv(n, cdiv(v, d))))))


def linear_cross_entropy(h: torch.Tensor, w: torch.Tensor, target: torch.Tensor, ignore_index: int,
                         label_smoothing: float, grads: bool = True, config: dict[str, Any] | None = None,
                         *, chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(loss, grad_h, grad_w)`` of the mean ``cross_entropy(h @ w.T, target)``; ``config`` from
    ``linear_cross_entropy.triton``.

    ``h`` [N, d], ``w`` [V, d], ``target`` [N] int64. ``loss`` is a 0-d float32 tensor (nan when every
    row is ignored, as torch's), ``grad_h`` [N, d] and ``grad_w`` [V, d] the gradients of
    that loss, in the inputs' dtype (``grad_w`` accumulated over the chunks by cuBLAS in that dtype).
    Without ``grads`` (no backward to come) the gradient GEMMs are skipped and both are empty.
    ``chunk`` forces that many tokens a chunk, below the space's sizes (tests of several chunks).
    """
    check_inputs(h, w, target)
    cfg = checks.tuning("linear_cross_entropy.triton", config)
    h, w, target = h.contiguous(), w.contiguous(), target.contiguous()
    n, d = h.shape
    v = w.shape[0]
    grad_h = torch.empty_like(h) if grads else h.new_empty(0)
    grad_w = torch.empty_like(w) if grads else w.new_empty(0)  # the first chunk's GEMM writes it
    losses = torch.empty(n, device=h.device, dtype=torch.float32)
    count = (target != ignore_index).sum().to(torch.float32).reshape(1)  # on the device: no sync
    if n == 0:
        return losses.sum() / count[0], grad_h, grad_w.zero_()
    c = chunk_rows(n, v, d, chunk or cfg["chunk"])
    warps = (16 if v >= 16384 else 8) if cfg["num_warps"] == "auto" else cfg["num_warps"]
    block = min(BLOCK, next_power_of_2(v))
    logits = h.new_empty((c, v))
    for start in range(0, n, c):
        rows = min(c, n - start)
        hc, lg = h[start:start + rows], logits[:rows]
        torch.mm(hc, w.t(), out=lg)
        _rows((rows,), lg, target[start:start + rows], losses[start:start + rows], count, v, lg.stride(0),
              int(ignore_index), float(label_smoothing), BLOCK=block, num_warps=warps)
        if grads:
            torch.mm(lg, w, out=grad_h[start:start + rows])
            if start == 0:
                torch.mm(lg.t(), hc, out=grad_w)
            else:
                grad_w.addmm_(lg.t(), hc)
    return losses.sum() / count[0], grad_h, grad_w
