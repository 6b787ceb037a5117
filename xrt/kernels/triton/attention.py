"""``attention`` in Triton: flash-style forward and FlashAttention-2 backward, [B, H, S, D].

Forward (one program per BLOCK_M queries of one (batch, head)): walk the keys BLOCK_N at a time,
keep the running row max ``m``, the running sum ``l`` and the fp32 output accumulator, rescaling
both by ``exp(m_old - m_new)`` when the max grows (online softmax); exponentials are ``exp2`` of
scores pre-multiplied by ``scale * log2(e)``. Saves the natural-log log-sum-exp ``[B, H, S_q]``.

Backward (after FlashAttention-2 and Triton's fused-attention tutorial): a preprocess computes
``delta = rowsum(dO * O)``; one kernel holds a block of keys and values and walks the queries,
accumulating dK and dV; another holds a block of queries and walks the keys, accumulating dQ.
Probabilities are recomputed from the saved log-sum-exp, never stored. Both backward kernels also
come as TMA kernels (config ``tma``; contiguous inputs on Hopper), sharing each loop's step, the
ranges, the row statistics and the program order with the pointer kernels as jit helpers; the
options ``causal_pairs`` (a program takes block j and its mirror: equal causal work a program) and
``fuse_delta`` (the dQ kernel computes delta and runs first) apply to both.

Every loop is split into blocks that need no mask (full blocks wholly visible under causality)
and the few that do (the causal diagonal, the ragged end of a sequence not a multiple of the
block), so the common case pays for no ``where``. Causal masking is top-left aligned, as
``scaled_dot_product_attention(is_causal=True)``: query ``i`` sees keys ``j <= i`` also when
``S_q != S_k``; under it every row sees key 0, so no row is ever empty.

Inputs may have any strides (a ``[B, S, H, D]`` tensor viewed as ``[B, H, S, D]`` is read in
place). The forward's output is laid out as q (``reference.attention.empty_out``: [B, S, H, D] in
memory for such a view, so a model's ``out.transpose(1, 2).reshape(B, S, H * D)`` copies nothing);
the backward's gradients are contiguous. A ``torch.compile`` trace records the pointer kernels
(:func:`_tma_layouts`), with no warp specialization (:func:`_ws`), whatever the config says.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from xrt.kernels import checks, spaces
from xrt.kernels.launch_spec import Desc, LaunchSpec
from xrt.kernels.reference.attention import empty_out
from xrt.kernels.triton.launch import HostDesc, Kept, Launcher, cdiv, traced

HEAD_DIMS = (64, 128)  # head dims the kernels are built for (tl.dot and the register budget)
DTYPES = (torch.float16, torch.bfloat16)
LOG2E = 1.4426950408889634


@triton.jit
def _online_step(acc, l_i, m_i, s, v, offs_n, offs_m, S_k, qk_scale, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """One block of keys into the running (acc, l, m): the scores ``s`` [BLOCK_M, BLOCK_N] masked
    where asked (past ``S_k``; above the causal diagonal), then the online softmax."""
    if MASKED:
        keep = offs_n[None, :] < S_k
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
    # m stays finite: each row's first block holds key 0, which every row sees. The scale
    # (> 0, the launcher checks) is applied to the row max and then in one multiply-add.
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = tl.math.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def _key_range(start_m, S_k, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(n_full, hi) for a query block: keys [0, n_full) are whole blocks every query of the block
    sees; [n_full, hi) need masks (the causal diagonal, the ragged end)."""
    if CAUSAL:
        hi = tl.minimum(S_k, (start_m + 1) * BLOCK_M)
        n_full = (tl.minimum(start_m * BLOCK_M, S_k) // BLOCK_N) * BLOCK_N
    else:
        hi = S_k
        n_full = (S_k // BLOCK_N) * BLOCK_N
    return n_full, hi


@triton.jit
def _lse(m_i, l_i):
    """The rows' natural-log log-sum-exp from the running max (log2 domain) and sum."""
    return (m_i + tl.math.log2(l_i)) * 0.6931471805599453


@triton.jit
def _batch_head(bh, H):
    """(batch, head) of the program's ``bh = batch * H + head``, in 64 bits (the pointer kernels' offsets)."""
    return (bh // H).to(tl.int64), (bh % H).to(tl.int64)


@triton.jit
def _load_tile(ptr, b, h, sb, sh, sr, sd, offs_r, offs_d, rmask):
    """The rows ``offs_r`` (past the end: zeros) of the [S, D] tile of (b, h) of a [B, H, S, D] tensor."""
    return tl.load(ptr + b * sb + h * sh + offs_r[:, None] * sr + offs_d[None, :] * sd, mask=rmask[:, None], other=0.0)


@triton.jit
def _load_pair(a_ptrs, b_ptrs, a_mask, b_mask, MASKED: tl.constexpr):
    """Two loads, masked (zeros where a mask is off) with MASKED, else whole."""
    if MASKED:
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)
        b = tl.load(b_ptrs, mask=b_mask, other=0.0)
    else:
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
    return a, b


@triton.jit
def _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                offs_m, offs_d, lo, hi, S_k, qk_scale,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, WS: tl.constexpr):
    """Keys ``[lo, hi)`` into the running (acc, l, m) of one query block."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        offs_n = start_n + offs_n0
        kt_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd
        v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        kt, v = _load_pair(kt_ptrs, v_ptrs, offs_n[None, :] < S_k, offs_n[:, None] < S_k, MASKED)
        acc, l_i, m_i = _online_step(acc, l_i, m_i, tl.dot(q, kt), v, offs_n, offs_m, S_k, qk_scale, MASKED, CAUSAL)
    return acc, l_i, m_i


@triton.jit
def _fwd_tile(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
              sob, soh, som, sod, H, bh, start_m, S_q, S_k, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
              WS: tl.constexpr):
    """Query block ``start_m`` of ``bh``: its rows' outputs and log-sum-exps."""
    b, h = _batch_head(bh, H)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rmask = offs_m < S_q
    q = _load_tile(q_ptr, b, h, sqb, sqh, sqm, sqd, offs_m, offs_d, rmask)
    k_base = k_ptr + b * skb + h * skh
    v_base = v_ptr + b * svb + h * svh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    n_full, hi = _key_range(start_m, S_k, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, skn, skd, svn, svd, offs_m, offs_d,
                                0, n_full, S_k, qk_scale, BLOCK_N, False, CAUSAL, WS)
    acc, l_i, m_i = _fwd_blocks(acc, l_i, m_i, q, k_base, v_base, skn, skd, svn, svd, offs_m, offs_d,
                                n_full, hi, S_k, qk_scale, BLOCK_N, True, CAUSAL, WS)
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod,
             out.to(o_ptr.dtype.element_ty), mask=rmask[:, None])
    tl.store(lse_ptr + bh.to(tl.int64) * S_q + offs_m, _lse(m_i, l_i), mask=rmask)


@triton.jit
def _fwd_program(S_q, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr, ORDER: tl.constexpr):
    """(bh, query block) of a forward program that takes one block. The config's ``order`` of a
    causal forward (without causality every order is 0): 0, grid (query blocks, B*H), one head's
    blocks side by side, its longest first; 1, grid (query blocks * B*H,), every head's longest block
    before any head's next. (Order 2, grid (ceil(query blocks / 2), B*H): the backward's causal
    pairs, block j and its mirror n-1-j in one program, equal work: :func:`_program_block`.)"""
    n_m = tl.cdiv(S_q, BLOCK_M)
    if ORDER == 1:
        n_bh = tl.num_programs(0) // n_m
        pid = tl.program_id(0)
        return pid % n_bh, n_m - 1 - pid // n_bh
    start_m = tl.program_id(0)
    if CAUSAL:  # the last query blocks see the most keys: start them first, the short ones fill the tail
        start_m = n_m - 1 - start_m
    return tl.program_id(1), start_m


@triton.jit
def _attn_fwd_kernel(
    q_ptr,  # [B, H, S_q, D] queries, any strides
    k_ptr,  # [B, H, S_k, D] keys, any strides
    v_ptr,  # [B, H, S_k, D] values, any strides
    o_ptr,  # [B, H, S_q, D] output, q's dtype, any strides (contiguous from the launcher)
    lse_ptr,  # [B, H, S_q] fp32, contiguous: natural-log log-sum-exp of each row's scores
    sqb, sqh, sqm, sqd,  # q strides
    skb, skh, skn, skd,  # k strides
    svb, svh, svn, svd,  # v strides
    sob, soh, som, sod,  # o strides
    H, S_q, S_k,
    qk_scale,  # scale * log2(e)
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    WS: tl.constexpr,  # warp-specialize the key loop (Hopper and newer)
    ORDER: tl.constexpr,  # which query blocks a program takes (_fwd_program, order 2: _program_block)
):
    qk_scale = tl.cast(qk_scale, tl.float32)  # (Inductor passes a Python float as fp64: keep fp32 math)
    if ORDER == 2:  # causal pairs, the mirror (the longer) first; the key loops nested in this one
        pid, bh, n_m = _program_place(S_q, BLOCK_M)
        count = _program_count(pid, n_m, True)
        for t in range(count):
            start_m, _ = _program_block(pid, count - 1 - t, n_m, BLOCK_M, False, True)
            _fwd_tile(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn,
                      svd, sob, soh, som, sod, H, bh, start_m, S_q, S_k, qk_scale,
                      HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, WS)
    else:  # one query block, the key loops at the top level (warp specialization takes them there)
        bh, start_m = _fwd_program(S_q, BLOCK_M, CAUSAL, ORDER)
        _fwd_tile(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                  sob, soh, som, sod, H, bh, start_m, S_q, S_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, WS)


@triton.jit
def _fwd_blocks_tma(acc, l_i, m_i, q, desc_k, desc_v, b, h, offs_m, lo, hi, S_k, qk_scale,
                    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                    WS: tl.constexpr):
    """:func:`_fwd_blocks` with K and V fetched by the TMA engine (rows past S_k arrive as zeros)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        k = desc_k.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = desc_v.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc, l_i, m_i = _online_step(acc, l_i, m_i, tl.dot(q, tl.trans(k)), v, start_n + offs_n0, offs_m, S_k,
                                     qk_scale, MASKED, CAUSAL)
    return acc, l_i, m_i


@triton.jit
def _fwd_tma_tile(desc_q, desc_k, desc_v, desc_o, lse_ptr, bh, H, start_m, S_q, S_k, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                  WS: tl.constexpr):
    """Query block ``start_m`` of ``bh``: its rows' outputs and log-sum-exps."""
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    b, h = bh // H, bh % H
    q = desc_q.load([b, h, start_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    n_full, hi = _key_range(start_m, S_k, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = _fwd_blocks_tma(acc, l_i, m_i, q, desc_k, desc_v, b, h, offs_m, 0, n_full, S_k, qk_scale,
                                    HEAD_DIM, BLOCK_N, False, CAUSAL, WS)
    acc, l_i, m_i = _fwd_blocks_tma(acc, l_i, m_i, q, desc_k, desc_v, b, h, offs_m, n_full, hi, S_k, qk_scale,
                                    HEAD_DIM, BLOCK_N, True, CAUSAL, WS)
    # rows past S_q (zeros from the engine) see key 0 like every row: l > 0, and their stores are clipped
    desc_o.store([b, h, start_m * BLOCK_M, 0],
                 (acc / l_i[:, None]).to(desc_o.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM))
    tl.store(lse_ptr + bh.to(tl.int64) * S_q + offs_m, _lse(m_i, l_i), mask=offs_m < S_q)


@triton.jit
def _attn_fwd_tma_kernel(
    desc_q,  # TMA descriptor of q [B, H, S_q, D] (any strides TMA takes), block [1, 1, BLOCK_M, D]
    desc_k,  # k [B, H, S_k, D], block [1, 1, BLOCK_N, D]
    desc_v,  # v [B, H, S_k, D], block [1, 1, BLOCK_N, D]
    desc_o,  # o [B, H, S_q, D], block [1, 1, BLOCK_M, D]: stores past S_q are clipped by the engine
    lse_ptr,  # [B, H, S_q] fp32, contiguous
    H, S_q, S_k,
    qk_scale,  # scale * log2(e)
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    WS: tl.constexpr,
    ORDER: tl.constexpr,
):
    """The forward of :func:`_attn_fwd_kernel` with every tile moved by the TMA engine (Hopper):
    the same online softmax, the same unmasked / masked split of the key loop, the same orders."""
    qk_scale = tl.cast(qk_scale, tl.float32)
    if ORDER == 2:
        pid, bh, n_m = _program_place(S_q, BLOCK_M)
        count = _program_count(pid, n_m, True)
        for t in range(count):
            start_m, _ = _program_block(pid, count - 1 - t, n_m, BLOCK_M, False, True)
            _fwd_tma_tile(desc_q, desc_k, desc_v, desc_o, lse_ptr, bh, H, start_m, S_q, S_k, qk_scale,
                          HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, WS)
    else:
        bh, start_m = _fwd_program(S_q, BLOCK_M, CAUSAL, ORDER)
        _fwd_tma_tile(desc_q, desc_k, desc_v, desc_o, lse_ptr, bh, H, start_m, S_q, S_k, qk_scale,
                      HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL, WS)


@triton.jit
def _delta_rows(o_base, som, sod, do, offs_m, offs_d, rmask):
    """``rowsum(dO * O)`` of the rows ``offs_m`` (fp32), ``do`` already loaded."""
    o = tl.load(o_base + offs_m[:, None] * som + offs_d[None, :] * sod, mask=rmask[:, None], other=0.0)
    return tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)


@triton.jit
def _bwd_preprocess_kernel(
    o_ptr,  # [B, H, S_q, D] forward output, any strides
    do_ptr,  # [B, H, S_q, D] upstream gradient, any strides
    delta_ptr,  # [B, H, S_q] fp32 output, contiguous: rowsum(dO * O)
    sob, soh, som, sod,  # o strides
    sdb, sdh, sdm, sdd,  # do strides
    H, S_q,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    bh = tl.program_id(1)
    b, h = _batch_head(bh, H)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rmask = offs_m < S_q
    do = _load_tile(do_ptr, b, h, sdb, sdh, sdm, sdd, offs_m, offs_d, rmask)
    tl.store(delta_ptr + bh.to(tl.int64) * S_q + offs_m,
             _delta_rows(o_ptr + b * sob + h * soh, som, sod, do, offs_m, offs_d, rmask), mask=rmask)


@triton.jit
def _program_place(S, BLOCK: tl.constexpr):
    """(pid, bh, n_blocks) of a program on a grid (blocks along the sequence, B*H): its place along
    the sequence, its (batch, head) ``bh`` and the count of ``BLOCK``-blocks of a sequence of ``S``."""
    return tl.program_id(0), tl.program_id(1), tl.cdiv(S, BLOCK)


@triton.jit
def _row_bases(lse_ptr, delta_ptr, bh, S_q):
    """The saved log-sum-exp's and delta's rows of (batch, head) ``bh`` ([B, H, S_q], contiguous)."""
    return lse_ptr + bh.to(tl.int64) * S_q, delta_ptr + bh.to(tl.int64) * S_q


@triton.jit
def _program_count(pid, n_blocks, PAIRS: tl.constexpr):
    """Blocks this program takes: one, or with PAIRS block ``pid`` and its mirror ``n_blocks - 1 - pid``
    (one where they coincide, the middle block of an odd count)."""
    count = 1
    if PAIRS:
        count = tl.where(2 * pid + 1 == n_blocks, 1, 2)
    return count


@triton.jit
def _program_block(pid, t, n_blocks, BLOCK: tl.constexpr, REVERSE: tl.constexpr, PAIRS: tl.constexpr):
    """(blk, offs) of the ``t``-th block of program ``pid`` and its ``BLOCK`` rows: with PAIRS ``pid``
    then its mirror; else ``pid``, or ``n_blocks - 1 - pid`` with REVERSE (the heaviest causal blocks
    started first)."""
    blk = pid
    if PAIRS:
        blk = tl.where(t == 0, pid, n_blocks - 1 - pid)
    elif REVERSE:
        blk = n_blocks - 1 - pid
    return blk, blk * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def _query_ranges(start_n, S_q, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(lo, mid, m_full, tail) for a key block: queries [lo, mid) the causal diagonal (masked), [mid,
    m_full) whole blocks that see every key of the block, [tail, S_q) the ragged end (masked).
    Without causality lo = mid = 0 and tail = m_full."""
    m_full = (S_q // BLOCK_M) * BLOCK_M
    lo = 0
    mid = 0
    tail = m_full
    if CAUSAL:
        first = (start_n * BLOCK_N // BLOCK_M) * BLOCK_M
        lo = tl.minimum(first, m_full)
        mid = tl.minimum(tl.cdiv((start_n + 1) * BLOCK_N, BLOCK_M) * BLOCK_M, m_full)
        tail = tl.maximum(m_full, first)
    return lo, mid, m_full, tail


@triton.jit
def _row_stats(lse_base, delta_base, offs_m, S_q, MASKED: tl.constexpr):
    """The saved log-sum-exp (natural log) and delta of the rows ``offs_m``."""
    cmask = offs_m < S_q
    return _load_pair(lse_base + offs_m, delta_base + offs_m, cmask, cmask, MASKED)


@triton.jit
def _dkdv_step(dk, dv, k, v, qt, do, lse, delta, offs_n, offs_m, S_q, qk_scale,
               MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """One block of queries (``qt`` [D, BLOCK_M], ``do`` [BLOCK_M, D]) into the dK, dV of a key block
    (scores transposed: [keys, queries]); rows past S_q and, causal, above the diagonal masked."""
    pt = tl.math.exp2(tl.dot(k, qt) * qk_scale - (lse * 1.4426950408889634)[None, :])
    if MASKED:
        keep = offs_m[None, :] < S_q
        if CAUSAL:
            keep = keep & (offs_n[:, None] <= offs_m[None, :])
        pt = tl.where(keep, pt, 0.0)
    dv = tl.dot(pt.to(do.dtype), do, dv)
    dpt = tl.dot(v, tl.trans(do))
    dst = pt * (dpt - delta[None, :])
    dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), dk)
    return dk, dv


@triton.jit
def _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqm, sqd, sdm, sdd,
                 offs_n, offs_d, lo, hi, S_q, qk_scale,
                 BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Queries ``[lo, hi)`` into the dK, dV of one key block, loaded through pointers."""
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        cmask = offs_m < S_q
        qt_ptrs = q_base + offs_m[None, :] * sqm + offs_d[:, None] * sqd
        do_ptrs = do_base + offs_m[:, None] * sdm + offs_d[None, :] * sdd
        qt, do = _load_pair(qt_ptrs, do_ptrs, cmask[None, :], cmask[:, None], MASKED)
        lse, delta = _row_stats(lse_base, delta_base, offs_m, S_q, MASKED)
        dk, dv = _dkdv_step(dk, dv, k, v, qt, do, lse, delta, offs_n, offs_m, S_q, qk_scale, MASKED, CAUSAL)
    return dk, dv


@triton.jit
def _dkdv_blocks_tma(dk, dv, k, v, desc_q, desc_do, b, h, lse_base, delta_base, offs_n, lo, hi, S_q, qk_scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """:func:`_dkdv_blocks` with Q and dO fetched by the TMA engine (rows past S_q arrive as zeros)."""
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        q = desc_q.load([b, h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        do = desc_do.load([b, h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        lse, delta = _row_stats(lse_base, delta_base, offs_m, S_q, MASKED)
        dk, dv = _dkdv_step(dk, dv, k, v, tl.trans(q), do, lse, delta, offs_n, offs_m, S_q, qk_scale,
                            MASKED, CAUSAL)
    return dk, dv


@triton.jit
def _attn_bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr,  # [B, H, S_q | S_k, D] forward inputs, any strides
    do_ptr,  # [B, H, S_q, D] upstream gradient, any strides
    lse_ptr,  # [B, H, S_q] fp32 from the forward, contiguous
    delta_ptr,  # [B, H, S_q] fp32 from the preprocess, contiguous
    dk_ptr, dv_ptr,  # [B, H, S_k, D] outputs, contiguous, k's dtype
    sqb, sqh, sqm, sqd,
    skb, skh, skn, skd,
    svb, svh, svn, svd,
    sdb, sdh, sdm, sdd,  # do strides
    H, S_q, S_k,
    sm_scale,  # the softmax scale (dS is in scaled scores)
    qk_scale,  # sm_scale * log2(e)
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # queries a step
    BLOCK_N: tl.constexpr,  # keys a program
    CAUSAL: tl.constexpr,
    PAIRS: tl.constexpr,  # a program takes key block j and its mirror (causal: equal work per program)
):
    sm_scale, qk_scale = tl.cast(sm_scale, tl.float32), tl.cast(qk_scale, tl.float32)
    # Causal: the first key blocks see the most queries, so the plain order starts the heaviest first.
    pid, bh, n_blocks = _program_place(S_k, BLOCK_N)
    b, h = _batch_head(bh, H)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + b * sqb + h * sqh
    do_base = do_ptr + b * sdb + h * sdh
    lse_base, delta_base = _row_bases(lse_ptr, delta_ptr, bh, S_q)
    for t in range(_program_count(pid, n_blocks, PAIRS)):
        start_n, offs_n = _program_block(pid, t, n_blocks, BLOCK_N, False, PAIRS)
        nmask = offs_n < S_k
        k = _load_tile(k_ptr, b, h, skb, skh, skn, skd, offs_n, offs_d, nmask)
        v = _load_tile(v_ptr, b, h, svb, svh, svn, svd, offs_n, offs_d, nmask)
        dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        # Rows padded past S_k are never stored.
        lo, mid, m_full, tail = _query_ranges(start_n, S_q, BLOCK_M, BLOCK_N, CAUSAL)
        if CAUSAL:
            dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqm, sqd, sdm, sdd,
                                  offs_n, offs_d, lo, mid, S_q, qk_scale, BLOCK_M, True, CAUSAL)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqm, sqd, sdm, sdd,
                              offs_n, offs_d, mid, m_full, S_q, qk_scale, BLOCK_M, False, CAUSAL)
        dk, dv = _dkdv_blocks(dk, dv, k, v, q_base, do_base, lse_base, delta_base, sqm, sqd, sdm, sdd,
                              offs_n, offs_d, tail, S_q, S_q, qk_scale, BLOCK_M, True, CAUSAL)
        out = bh.to(tl.int64) * S_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        tl.store(dk_ptr + out, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=nmask[:, None])
        tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty), mask=nmask[:, None])


@triton.jit
def _attn_bwd_dkdv_tma_kernel(
    desc_q,  # TMA descriptor of q [B, H, S_q, D] (any strides TMA takes), block [1, 1, BLOCK_M, D]
    desc_k, desc_v,  # k, v [B, H, S_k, D], block [1, 1, BLOCK_N, D]
    desc_do,  # do [B, H, S_q, D], block [1, 1, BLOCK_M, D]
    lse_ptr, delta_ptr,  # [B, H, S_q] fp32, contiguous
    desc_dk, desc_dv,  # dk, dv [B, H, S_k, D], block [1, 1, BLOCK_N, D]: stores past S_k are clipped
    H, S_q, S_k,
    sm_scale,
    qk_scale,  # sm_scale * log2(e)
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    PAIRS: tl.constexpr,
):
    """:func:`_attn_bwd_dkdv_kernel` with every tile moved by the TMA engine (Hopper): the same
    step, the same query ranges, the same program order; the causal diagonal after the whole blocks."""
    sm_scale, qk_scale = tl.cast(sm_scale, tl.float32), tl.cast(qk_scale, tl.float32)
    pid, bh, n_blocks = _program_place(S_k, BLOCK_N)
    b, h = bh // H, bh % H
    lse_base, delta_base = _row_bases(lse_ptr, delta_ptr, bh, S_q)
    for t in range(_program_count(pid, n_blocks, PAIRS)):
        start_n, offs_n = _program_block(pid, t, n_blocks, BLOCK_N, False, PAIRS)
        k = desc_k.load([b, h, start_n * BLOCK_N, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = desc_v.load([b, h, start_n * BLOCK_N, 0]).reshape(BLOCK_N, HEAD_DIM)
        dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        lo, mid, m_full, tail = _query_ranges(start_n, S_q, BLOCK_M, BLOCK_N, CAUSAL)
        # The whole blocks before the causal diagonal (the pointer kernel's order is the other way
        # round): after the masked diagonal loop, ptxas (sm_90) serialized the whole-block loop's
        # wgmma (warning C7515) whenever it was pipelined; in this order it does not.
        dk, dv = _dkdv_blocks_tma(dk, dv, k, v, desc_q, desc_do, b, h, lse_base, delta_base, offs_n, mid, m_full,
                                  S_q, qk_scale, HEAD_DIM, BLOCK_M, False, CAUSAL)
        if CAUSAL:
            dk, dv = _dkdv_blocks_tma(dk, dv, k, v, desc_q, desc_do, b, h, lse_base, delta_base, offs_n, lo, mid,
                                      S_q, qk_scale, HEAD_DIM, BLOCK_M, True, CAUSAL)
        dk, dv = _dkdv_blocks_tma(dk, dv, k, v, desc_q, desc_do, b, h, lse_base, delta_base, offs_n, tail, S_q,
                                  S_q, qk_scale, HEAD_DIM, BLOCK_M, True, CAUSAL)
        desc_dk.store([b, h, start_n * BLOCK_N, 0],
                      (dk * sm_scale).to(desc_dk.dtype).reshape(1, 1, BLOCK_N, HEAD_DIM))
        desc_dv.store([b, h, start_n * BLOCK_N, 0], dv.to(desc_dv.dtype).reshape(1, 1, BLOCK_N, HEAD_DIM))


@triton.jit
def _dq_row_stats(lse_ptr, delta_ptr, o_base, som, sod, do, bh, offs_m, offs_d, S_q, FUSE_DELTA: tl.constexpr):
    """(log2-domain lse, delta) of a query block; with FUSE_DELTA delta is computed here from O and
    dO (the preprocess folded in) and stored for the dK/dV kernel, which then runs after this one."""
    rmask = offs_m < S_q
    row = bh.to(tl.int64) * S_q + offs_m
    lse2 = tl.load(lse_ptr + row, mask=rmask, other=0.0) * 1.4426950408889634
    if FUSE_DELTA:
        delta = _delta_rows(o_base, som, sod, do, offs_m, offs_d, rmask)
        tl.store(delta_ptr + row, delta, mask=rmask)
    else:
        delta = tl.load(delta_ptr + row, mask=rmask, other=0.0)
    return lse2, delta


@triton.jit
def _dq_step(dq, q, do, lse2, delta, kt, vt, offs_m, offs_n, S_k, qk_scale,
             MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """One block of keys (``kt``, ``vt`` [D, BLOCK_N]) into the dQ of a query block; keys past S_k
    and, causal, above the diagonal masked.

    dS is rounded to the inputs' dtype for its GEMM, as in FlashAttention-2. A row with many keys sums
    many small terms, and their rounding errors average out. A row with few keys (the first causal
    rows) sums a few large ones, and there that rounding was dQ's largest error: up to 2.5x SDPA's at
    S 4097, causal, hd 128 on an H100. So the masked blocks (the causal diagonal, a ragged end), where
    those rows' keys are, also add what the rounding lost, with a second GEMM. The backward's time
    moved within +-2 % on an H100. dK's GEMM (:func:`_dkdv_step`) still rounds its dS."""
    p = tl.math.exp2(tl.dot(q, kt) * qk_scale - lse2[:, None])
    if MASKED:
        keep = offs_n[None, :] < S_k
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        p = tl.where(keep, p, 0.0)
    dp = tl.dot(do, vt)
    ds = p * (dp - delta[:, None])
    ds_hi = ds.to(kt.dtype)
    if MASKED:
        dq = tl.dot((ds - ds_hi.to(tl.float32)).to(kt.dtype), tl.trans(kt), dq)
    return tl.dot(ds_hi, tl.trans(kt), dq)


@triton.jit
def _dq_blocks(dq, q, do, lse2, delta, k_base, v_base, skn, skd, svn, svd,
               offs_m, offs_d, lo, hi, S_k, qk_scale,
               BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Keys ``[lo, hi)`` into the dQ of one query block, loaded through pointers."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kt_ptrs = k_base + offs_n[None, :] * skn + offs_d[:, None] * skd
        vt_ptrs = v_base + offs_n[None, :] * svn + offs_d[:, None] * svd
        kt, vt = _load_pair(kt_ptrs, vt_ptrs, offs_n[None, :] < S_k, offs_n[None, :] < S_k, MASKED)
        dq = _dq_step(dq, q, do, lse2, delta, kt, vt, offs_m, offs_n, S_k, qk_scale, MASKED, CAUSAL)
    return dq


@triton.jit
def _dq_blocks_tma(dq, q, do, lse2, delta, desc_k, desc_v, b, h, offs_m, lo, hi, S_k, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """:func:`_dq_blocks` with K and V fetched by the TMA engine (rows past S_k arrive as zeros)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        k = desc_k.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        v = desc_v.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        dq = _dq_step(dq, q, do, lse2, delta, tl.trans(k), tl.trans(v), offs_m, start_n + offs_n0, S_k, qk_scale,
                      MASKED, CAUSAL)
    return dq


@triton.jit
def _attn_bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr,  # [B, H, S_q | S_k, D] forward inputs, any strides
    do_ptr,  # [B, H, S_q, D] upstream gradient, any strides
    o_ptr,  # [B, H, S_q, D] forward output, any strides (read only with FUSE_DELTA)
    lse_ptr,  # [B, H, S_q] fp32 from the forward, contiguous
    delta_ptr,  # [B, H, S_q] fp32, contiguous: read, or written with FUSE_DELTA
    dq_ptr,  # [B, H, S_q, D] output, contiguous, q's dtype
    sqb, sqh, sqm, sqd,
    skb, skh, skn, skd,
    svb, svh, svn, svd,
    sdb, sdh, sdm, sdd,  # do strides
    sob, soh, som, sod,  # o strides
    H, S_q, S_k,
    sm_scale,
    qk_scale,  # sm_scale * log2(e)
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,  # queries a program
    BLOCK_N: tl.constexpr,  # keys a step
    CAUSAL: tl.constexpr,
    PAIRS: tl.constexpr,  # a program takes query block j and its mirror (causal: equal work per program)
    FUSE_DELTA: tl.constexpr,  # compute delta here (no preprocess kernel)
):
    sm_scale, qk_scale = tl.cast(sm_scale, tl.float32), tl.cast(qk_scale, tl.float32)
    pid, bh, n_blocks = _program_place(S_q, BLOCK_M)
    b, h = _batch_head(bh, H)
    offs_d = tl.arange(0, HEAD_DIM)
    k_base = k_ptr + b * skb + h * skh
    v_base = v_ptr + b * svb + h * svh
    for t in range(_program_count(pid, n_blocks, PAIRS)):
        # causal: the last query blocks see the most keys: start them first, the short ones fill the tail
        start_m, offs_m = _program_block(pid, t, n_blocks, BLOCK_M, CAUSAL, PAIRS)
        rmask = offs_m < S_q
        q = _load_tile(q_ptr, b, h, sqb, sqh, sqm, sqd, offs_m, offs_d, rmask)
        do = _load_tile(do_ptr, b, h, sdb, sdh, sdm, sdd, offs_m, offs_d, rmask)
        lse2, delta = _dq_row_stats(lse_ptr, delta_ptr, o_ptr + b * sob + h * soh, som, sod, do, bh, offs_m, offs_d,
                                    S_q, FUSE_DELTA)
        dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        n_full, hi = _key_range(start_m, S_k, BLOCK_M, BLOCK_N, CAUSAL)
        dq = _dq_blocks(dq, q, do, lse2, delta, k_base, v_base, skn, skd, svn, svd, offs_m, offs_d,
                        0, n_full, S_k, qk_scale, BLOCK_N, False, CAUSAL)
        dq = _dq_blocks(dq, q, do, lse2, delta, k_base, v_base, skn, skd, svn, svd, offs_m, offs_d,
                        n_full, hi, S_k, qk_scale, BLOCK_N, True, CAUSAL)
        out = bh.to(tl.int64) * S_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        tl.store(dq_ptr + out, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=rmask[:, None])


@triton.jit
def _attn_bwd_dq_tma_kernel(
    desc_q,  # TMA descriptor of q [B, H, S_q, D] (any strides TMA takes), block [1, 1, BLOCK_M, D]
    desc_k, desc_v,  # k, v [B, H, S_k, D], block [1, 1, BLOCK_N, D]
    desc_do,  # do [B, H, S_q, D], block [1, 1, BLOCK_M, D]
    o_ptr,  # [B, H, S_q, D] forward output, any strides (read only with FUSE_DELTA)
    lse_ptr, delta_ptr,  # [B, H, S_q] fp32, contiguous
    desc_dq,  # dq [B, H, S_q, D], block [1, 1, BLOCK_M, D]: stores past S_q are clipped
    sob, soh, som, sod,  # o strides
    H, S_q, S_k,
    sm_scale,
    qk_scale,  # sm_scale * log2(e)
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    PAIRS: tl.constexpr,
    FUSE_DELTA: tl.constexpr,
):
    """:func:`_attn_bwd_dq_kernel` with every tile moved by the TMA engine (Hopper)."""
    sm_scale, qk_scale = tl.cast(sm_scale, tl.float32), tl.cast(qk_scale, tl.float32)
    pid, bh, n_blocks = _program_place(S_q, BLOCK_M)
    b, h = _batch_head(bh, H)
    tb, th = bh // H, bh % H  # the descriptors' coordinates (32 bits)
    offs_d = tl.arange(0, HEAD_DIM)
    for t in range(_program_count(pid, n_blocks, PAIRS)):
        start_m, offs_m = _program_block(pid, t, n_blocks, BLOCK_M, CAUSAL, PAIRS)
        q = desc_q.load([tb, th, start_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)
        do = desc_do.load([tb, th, start_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)
        lse2, delta = _dq_row_stats(lse_ptr, delta_ptr, o_ptr + b * sob + h * soh, som, sod, do, bh, offs_m, offs_d,
                                    S_q, FUSE_DELTA)
        dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        n_full, hi = _key_range(start_m, S_k, BLOCK_M, BLOCK_N, CAUSAL)
        dq = _dq_blocks_tma(dq, q, do, lse2, delta, desc_k, desc_v, tb, th, offs_m, 0, n_full, S_k, qk_scale,
                            HEAD_DIM, BLOCK_N, False, CAUSAL)
        dq = _dq_blocks_tma(dq, q, do, lse2, delta, desc_k, desc_v, tb, th, offs_m, n_full, hi, S_k, qk_scale,
                            HEAD_DIM, BLOCK_N, True, CAUSAL)
        desc_dq.store([tb, th, start_m * BLOCK_M, 0],
                      (dq * sm_scale).to(desc_dq.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM))


_fwd = Launcher(_attn_fwd_kernel)
_fwd_tma = Launcher(_attn_fwd_tma_kernel)
_pre = Launcher(_bwd_preprocess_kernel)
_dkdv = Launcher(_attn_bwd_dkdv_kernel)
_dkdv_tma = Launcher(_attn_bwd_dkdv_tma_kernel)
_dq = Launcher(_attn_bwd_dq_kernel)
_dq_tma = Launcher(_attn_bwd_dq_tma_kernel)

_WS_BROKEN: set[Any] = set()  # (device, config) where a warp-specialized compile failed


def missing(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str | None:
    """Why these kernels cannot take ``q, k, v`` (shape, dtype), naming the value; else ``None``."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return (f"query, key, value must be [B, H, S, D]; got query.shape={tuple(q.shape)}, "
                f"key.shape={tuple(k.shape)}, value.shape={tuple(v.shape)}")
    if q.dtype not in DTYPES:
        return f"query.dtype={q.dtype} is not one of float16, bfloat16"
    if k.dtype != q.dtype or v.dtype != q.dtype:
        return f"key.dtype={k.dtype} and value.dtype={v.dtype} must equal query.dtype={q.dtype}"
    d = q.shape[-1]
    if d not in HEAD_DIMS:
        return f"head_dim={d} is not one of {HEAD_DIMS}"
    if k.shape[-1] != d or v.shape[-1] != d:
        return f"key.shape[-1]={k.shape[-1]} and value.shape[-1]={v.shape[-1]} must equal head_dim={d}"
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3]:
        return (f"query.shape={tuple(q.shape)}, key.shape={tuple(k.shape)}, value.shape={tuple(v.shape)} "
                f"must share B and H, and key and value S_k")
    if k.shape[2] == 0:
        return "key has S_k=0 (no keys to attend to)"
    return None


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> None:
    why = missing(q, k, v) or (None if scale > 0 else f"scale={scale} must be > 0")
    if why:
        raise ValueError(f"Triton attention: {why}")


def _ws(q: torch.Tensor, cfg: Any) -> bool:
    """Warp specialization where asked for and the GPU is Hopper or newer (never the interpreter, nor
    a trace)."""
    if not cfg.get("warp_specialize") or not q.is_cuda or traced(q):
        return False  # (a trace's launch compiles later, where a failed specialization could not fall back)
    return torch.cuda.get_device_capability(q.device)[0] >= 9 and (q.device, tuple(cfg.items())) not in _WS_BROKEN


def forward_config(q: torch.Tensor, is_causal: bool, config: dict[str, Any] | None) -> checks.Tuning:
    """The forward's config: ``config`` where one is asked for (tuned or given); the default (none,
    or the op's defaults when no tuned config applies) is the model-shape table's for this head dim,
    mask and length (``spaces.attention_default``), else the head dim's."""
    cfg = checks.tuning("attention.triton", config)
    if not cfg.is_default:
        return cfg
    d, s_q = int(q.shape[-1]), checks.size_hint(q.shape[2])  # (a trace specializes on the head dim, a constexpr)
    found = spaces.attention_default(d, is_causal, s_q)
    return checks.tuning("attention.triton", found) if found else checks.effective_config("attention.triton", d, None)


class ForwardPlan(NamedTuple):
    """The forward launch of one signature (q, k, v shapes and strides, dtype, device, mask, scale
    and config), made once by :func:`attention_planned` and repeated: a call allocates the output
    and lse and launches the kept kernel (the TMA one, a model's ``qkv.view(...).permute(...)``
    included, or the pointer one for inputs TMA cannot describe), with no checks, config or
    descriptor made again."""

    kept: Kept
    grid: tuple[int, ...]
    specs: tuple | None  # TMA: (shape, strides, block) of the q, k, v and out descriptors ([B, H, S, D], rank 4)
    shape: tuple[int, int, int, int]  # the output's memory: [B, H, S_q, D], or [B, S_q, H, D] (reference.empty_out)
    tail: tuple  # the arguments after lse: (the pointer kernel's strides,) H, S_q, S_k, scale * log2(e)
    dtype: torch.dtype
    device: torch.device
    heads_inside: bool  # the output's memory is [B, S_q, H, D] (reference.empty_out)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(out, lse)`` for tensors of the plan's signature, or ``None`` where the launch cannot be
        repeated (an operand not 16-byte aligned, launch hooks set, another current device)."""
        if (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15 or not self.kept.ready():  # (specialised on aligned ones)
            return None
        o = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        if self.heads_inside:  # [B, S_q, H, D] in memory, seen per head
            o = o.transpose(1, 2)
        lse = torch.empty(o.shape[:3], dtype=torch.float32, device=self.device)

        def args() -> tuple:
            if self.specs is None:
                return (q, k, v, o, lse, *self.tail)
            sq, sk, sv, so = self.specs
            return (HostDesc(q, *sq), HostDesc(k, *sk), HostDesc(v, *sv), HostDesc(o, *so), lse, *self.tail)

        pointers = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
        return (o, lse) if self.kept.launch_memo(pointers, self.grid, args) else None

    def stale(self) -> bool:
        """Will it never launch again (its Launcher was cleared)? Its owner makes it anew."""
        return self.kept.stale()

    def native(self) -> tuple[LaunchSpec, tuple] | None:
        """This launch for a launcher outside Python (the native attention, ``xrt.pytorch.ops.native``):
        its :class:`LaunchSpec` and the template of the arguments :meth:`__call__` passes, the tensors
        named by the slots ``q``, ``k``, ``v``, ``o`` and ``lse``; ``None`` where it cannot be described."""
        spec = self.kept.native(self.grid)
        if spec is None:
            return None
        if self.specs is None:
            return spec, ("q", "k", "v", "o", "lse", *self.tail)
        return spec, (*(Desc(n, shape, strides) for n, (shape, strides, _) in zip("qkvo", self.specs)), "lse",
                      *self.tail)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float,
              config: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out [B, H, S_q, D] laid out as q (``reference.attention.empty_out``), lse [B, H, S_q] fp32)``;
    config from ``attention.triton``."""
    return attention_planned(q, k, v, is_causal, scale, config, plan=False)[:2]


def attention_planned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float,
                      config: dict[str, Any] | None = None, plan: bool = True
                      ) -> tuple[torch.Tensor, torch.Tensor, ForwardPlan | None]:
    """:func:`attention`, and the :class:`ForwardPlan` that repeats it for tensors of the same
    signature (``None`` where no kernel was kept: the interpreter, a trace, unaligned inputs; and
    where ``plan`` is false)."""
    _check(q, k, v, scale)
    cfg = forward_config(q, is_causal, config)
    bsz, h, s_q, d = q.shape
    d = int(d)
    s_k = k.shape[2]
    o = empty_out(q, d)
    lse = torch.empty((bsz, h, s_q), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse, None
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    grid = (cdiv(s_q, bm), bsz * h)
    tma = _tma_layouts(q, k, v, o) if cfg.get("tma") else None
    if tma is not None:
        from triton.tools.tensor_descriptor import TensorDescriptor

        rows = (bm, bn, bn, bm)
        descs = (TensorDescriptor(t, *lay, [1, 1, r, d]) for t, lay, r in zip((q, k, v, o), tma, rows))
        args = (*descs, lse, h, s_q, s_k, float(scale) * LOG2E)
        launch = _fwd_tma
    else:
        args = (q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(), h, s_q, s_k,
                float(scale) * LOG2E)
        launch = _fwd
    order = int(cfg.get("order", 0)) if is_causal else 0
    if order == 1:
        grid = (grid[0] * grid[1], 1)
    elif order == 2:
        grid = (cdiv(grid[0], 2), grid[1])
    meta = dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(is_causal), WS=_ws(q, cfg), ORDER=order)
    try:
        launch(grid, *args, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **meta)
    except Exception:
        if not meta["WS"]:
            raise
        # Triton's warp specialization does not compile this config here: plain loop from now on.
        _WS_BROKEN.add((q.device, tuple(cfg.items())))
        meta["WS"] = False
        launch(grid, *args, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **meta)
    if (not plan or not o.is_cuda or o.__class__ is not torch.Tensor
            or (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15):
        return o, lse, None
    kept = Kept.of(launch, args, cfg["num_warps"], cfg["num_stages"], meta)
    if kept is None:
        return o, lse, None
    specs = None if tma is None else tuple((tuple(a.shape), tuple(a.strides), list(a.block_shape)) for a in args[:4])
    inside = o.stride(1) < o.stride(2)
    shape = (bsz, s_q, h, d) if inside else (bsz, h, s_q, d)
    return o, lse, ForwardPlan(kept, grid, specs, shape, args[5:], q.dtype, q.device, inside)


def _tma_layouts(*ts: torch.Tensor) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] | None:
    """``(shape, strides)`` of each [B, H, S, D] tensor's TMA descriptor (rank 4, so a model's
    ``qkv.view(...).permute(...)`` and an output in q's layout are described as they are), or None
    where the TMA kernels cannot take them: a GPU before Hopper, a trace (torch.compile: its
    tensors have no address to check, and a host descriptor cannot be recorded), or a tensor outside
    the engine's rules (last stride 1, the other strides and the base 16-byte aligned). A size-1
    dimension's stride is never used: it is described as a contiguous tensor's would be. Under
    Triton's interpreter (CPU tensors) they run too."""
    if traced(ts[0]) or ts[0].is_cuda and torch.cuda.get_device_capability(ts[0].device)[0] < 9:
        return None
    out = []
    for t in ts:
        shape, es = tuple(t.shape), t.element_size()
        strides = tuple(st if n > 1 else math.prod(shape[i + 1:]) for i, (n, st) in enumerate(zip(shape, t.stride())))
        if strides[3] != 1 or t.data_ptr() % 16 or any(st <= 0 or st * es % 16 for st in strides[:3]):
            return None
        out.append((shape, strides))
    return tuple(out)


def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  lse: torch.Tensor, is_causal: bool, scale: float, config: dict[str, Any] | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)``, contiguous, shaped as ``q, k, v``; config from ``attention_bwd.triton``:
    blocks, warps and stages of the dK/dV kernel (``num_warps2``, ``num_stages2`` the dQ kernel's,
    ``"same"``: the dK/dV kernel's), ``tma`` (TMA kernels where the inputs allow, else the pointer
    ones), ``causal_pairs`` (causal only: each program takes a block and its mirror, equal work a
    program) and ``fuse_delta`` (delta computed by the dQ kernel, run first; no preprocess kernel)."""
    return attention_bwd_planned(do, q, k, v, o, lse, is_causal, scale, config, plan=False)[:3]


class BackwardPlan(NamedTuple):
    """The backward's launches of one signature (do, q, k, v, o and lse shapes and strides, dtype,
    device, mask, scale and config), made once by :func:`attention_bwd_planned` and repeated: a call
    allocates dq, dk, dv and delta and launches the kept kernels in the planned order, with no
    checks, config or descriptors made again. Each launch is ``(kept, grid, arguments)``, where an
    argument is a tensor's name (``"q"``: the tensor itself; ``("q", rows, D)``: its TMA descriptor,
    blocks of ``rows`` x ``D``) or a constant."""

    launches: tuple[tuple[Kept, tuple[int, ...], tuple], ...]
    layouts: dict[str, tuple] | None  # TMA: each tensor's descriptor (shape, strides), rank 4
    shapes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # dq, dk, dv ([B, H, S, D])
    dtype: torch.dtype
    device: torch.device

    def __call__(self, do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                 lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``(dq, dk, dv)`` for tensors of the plan's signature, or ``None`` where the launches
        cannot be repeated (an operand not 16-byte aligned, launch hooks set, another current device)."""
        if (do.data_ptr() | q.data_ptr() | k.data_ptr() | v.data_ptr() | o.data_ptr() | lse.data_ptr()) & 15:
            return None
        if not all(kept.ready() for kept, _, _ in self.launches):
            return None
        sq, sk, sv = self.shapes
        dev = self.device
        dq = torch.empty(sq, dtype=self.dtype, device=dev)
        dk = torch.empty(sk, dtype=self.dtype, device=dev)
        dv = torch.empty(sv, dtype=self.dtype, device=dev)
        delta = torch.empty(sq[:3], dtype=torch.float32, device=dev)
        named = {"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse, "delta": delta, "dq": dq, "dk": dk, "dv": dv}
        lay = self.layouts
        pointers = tuple(t.data_ptr() for t in named.values())
        for kept, grid, template in self.launches:
            def args(template: tuple = template) -> tuple:
                return tuple(named[a] if a.__class__ is str else HostDesc(named[a[0]], *lay[a[0]], [1, 1, a[1], a[2]])
                             if a.__class__ is tuple else a for a in template)

            if not kept.launch_memo(pointers, grid, args):
                return None
        return dq, dk, dv

    def stale(self) -> bool:
        """Will it never launch again (a Launcher of its kernels was cleared)? Its owner makes it anew."""
        return any(kept.stale() for kept, _, _ in self.launches)

    def native(self) -> list[tuple[LaunchSpec, tuple]] | None:
        """Its launches for a launcher outside Python, in order: each one's :class:`LaunchSpec` and
        template, the tensors named by the slots of :meth:`__call__`'s names (``do``, ``q``, ...,
        ``dv``); ``None`` where one cannot be described."""
        out = []
        for kept, grid, template in self.launches:
            spec = kept.native(grid)
            if spec is None:
                return None
            out.append((spec, tuple(Desc(a[0], *self.layouts[a[0]]) if a.__class__ is tuple else a for a in template)))
        return out


def attention_bwd_planned(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                          lse: torch.Tensor, is_causal: bool, scale: float, config: dict[str, Any] | None = None,
                          plan: bool = True
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, BackwardPlan | None]:
    """:func:`attention_bwd`, and the :class:`BackwardPlan` that repeats it for tensors of the same
    signature (``None`` where no kernel was kept: the interpreter, a trace, unaligned inputs; and
    where ``plan`` is false)."""
    _check(q, k, v, scale)
    if do.shape != o.shape or o.shape != q.shape:
        raise ValueError(f"do.shape={tuple(do.shape)} and o.shape={tuple(o.shape)} must equal "
                         f"query.shape={tuple(q.shape)}")
    cfg = checks.tuning("attention_bwd.triton", config)
    bsz, h, s_q, d = q.shape
    d = int(d)
    s_k = k.shape[2]
    lse_in = lse
    lse = lse.contiguous()
    dq = torch.empty((bsz, h, s_q, d), dtype=q.dtype, device=q.device)
    dk = torch.empty((bsz, h, s_k, d), dtype=k.dtype, device=q.device)
    dv = torch.empty((bsz, h, s_k, d), dtype=v.dtype, device=q.device)
    if s_q == 0:
        return dq, dk.zero_(), dv.zero_(), None
    if dq.numel() == 0:
        return dq, dk, dv, None
    delta = torch.empty((bsz, h, s_q), dtype=torch.float32, device=q.device)
    causal = bool(is_causal)
    pairs = causal and bool(cfg["causal_pairs"])
    fuse = bool(cfg["fuse_delta"])
    bm1, bn1, bm2, bn2 = cfg["BLOCK_M1"], cfg["BLOCK_N1"], cfg["BLOCK_M2"], cfg["BLOCK_N2"]
    warps, stages = cfg["num_warps"], cfg["num_stages"]
    warps2 = warps if cfg["num_warps2"] == "same" else cfg["num_warps2"]
    stages2 = stages if cfg["num_stages2"] == "same" else cfg["num_stages2"]
    g1 = cdiv(s_k, bn1)
    g2 = cdiv(s_q, bm2)
    grid1 = (cdiv(g1, 2) if pairs else g1, bsz * h)
    grid2 = (cdiv(g2, 2) if pairs else g2, bsz * h)
    scales = (float(scale), float(scale) * LOG2E)
    named = {"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse, "delta": delta, "dq": dq, "dk": dk, "dv": dv}
    names = ("q", "k", "v", "do", "dq", "dk", "dv")
    layouts = _tma_layouts(*(named[n] for n in names)) if cfg.get("tma") else None
    lay = None if layouts is None else dict(zip(names, layouts))
    meta1 = dict(HEAD_DIM=d, BLOCK_M=bm1, BLOCK_N=bn1, CAUSAL=causal, PAIRS=pairs)
    meta2 = dict(HEAD_DIM=d, BLOCK_M=bm2, BLOCK_N=bn2, CAUSAL=causal, PAIRS=pairs, FUSE_DELTA=fuse)
    tail = (h, s_q, s_k, *scales)
    # Each launch as (launcher, grid, template, warps, stages, constexprs); a template names the
    # tensors (a name: the tensor; (name, rows, D): its TMA descriptor) and holds the constants.
    if lay is not None:
        dkdv = (_dkdv_tma, grid1, (("q", bm1, d), ("k", bn1, d), ("v", bn1, d), ("do", bm1, d), "lse", "delta",
                                   ("dk", bn1, d), ("dv", bn1, d), *tail), warps, stages, meta1)
        dqk = (_dq_tma, grid2, (("q", bm2, d), ("k", bn2, d), ("v", bn2, d), ("do", bm2, d), "o", "lse", "delta",
                                ("dq", bm2, d), *o.stride(), *tail), warps2, stages2, meta2)
    else:
        strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
        dkdv = (_dkdv, grid1, ("q", "k", "v", "do", "lse", "delta", "dk", "dv", *strides, *tail), warps, stages, meta1)
        dqk = (_dq, grid2, ("q", "k", "v", "do", "o", "lse", "delta", "dq", *strides, *o.stride(), *tail),
               warps2, stages2, meta2)
    if fuse:  # the dQ kernel writes delta, which the dK/dV kernel reads
        order = (dqk, dkdv)
    else:
        pre_m = 64
        pre = (_pre, (cdiv(s_q, pre_m), bsz * h), ("o", "do", "delta", *o.stride(), *do.stride(), h, s_q), 4, None,
               dict(HEAD_DIM=d, BLOCK_M=pre_m))
        order = (pre, dkdv, dqk)

    def arg(a: Any) -> Any:
        if a.__class__ is str:
            return named[a]
        if a.__class__ is tuple:
            from triton.tools.tensor_descriptor import TensorDescriptor

            return TensorDescriptor(named[a[0]], *lay[a[0]], [1, 1, a[1], a[2]])
        return a

    made = []
    for launcher, grid, template, w, st, meta in order:
        args = tuple(arg(a) for a in template)
        if st is None:
            launcher(grid, *args, num_warps=w, **meta)
        else:
            launcher(grid, *args, num_warps=w, num_stages=st, **meta)
        made.append((launcher, grid, template, args, w, st, meta))
    if (not plan or not q.is_cuda or q.__class__ is not torch.Tensor or lse is not lse_in
            or (do.data_ptr() | q.data_ptr() | k.data_ptr() | v.data_ptr() | o.data_ptr() | lse.data_ptr()) & 15):
        return dq, dk, dv, None
    launches = []
    for launcher, grid, template, args, w, st, meta in made:
        kept = Kept.of(launcher, args, w, st, meta)
        if kept is None:
            return dq, dk, dv, None
        launches.append((kept, grid, template))
    return dq, dk, dv, BackwardPlan(tuple(launches), lay, (tuple(dq.shape), tuple(dk.shape), tuple(dv.shape)),
                                    q.dtype, q.device)


def flops(b: int, h: int, s_q: int, s_k: int, d: int, causal: bool, backward: bool = False) -> float:
    """FlashAttention's count: ``4 B H S_q S_k D`` forward (two matmuls), half of it when causal,
    2.5x for the backward (its four matmuls plus the recomputed scores)."""
    f = 4.0 * b * h * s_q * s_k * d
    if causal:
        f /= 2
    return f * 2.5 if backward else f

