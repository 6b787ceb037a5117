"""3x3 convolution + bias + ReLU on NHWC in Triton: the kernels of the fused conv + BatchNorm + ReLU.

BatchNorm reaches these kernels folded into the weight and a per-channel bias (inference; see
``xrt.kernels.reference.conv_bn_relu.fold_bn``), so one kernel reads x once and writes y once. Both
paths are a GEMM of M = N * Ho * Wo output pixels by K output channels over 9 * C taps, accumulated
in fp32, with the bias and the ReLU applied to the accumulator before the only store:

* ``direct`` (stride 1 by default): implicit GEMM. A program owns a TH x TW tile of output pixels
  of one image and KO_STEP output channels; it walks the 9 taps x C channels in CI_STEP steps,
  loading a [pixels, CI_STEP] slab of x straight from NHWC (the channels of a pixel are contiguous:
  with C a multiple of VEC the kernel takes C as VEC x C // VEC, so the compiler sees VEC-aligned
  runs and vectorizes the loads; otherwise the masked scalar fallback, VEC = 1, runs) and a
  [CI_STEP, KO_STEP] slab of the RSCK weight. Out-of-image taps are masked to zero (the padding),
  never materialised.
* ``im2row`` (stride 2 by default): the taps of every output pixel are gathered once into a
  row-major [M, 9 C] matrix, then a tiled GEMM with the same epilogue. A stride-2 window hops
  over every other pixel, which the direct kernel's tiles read poorly; the gather reads each
  input pixel's channels as one contiguous run and the GEMM then streams rows.

Tunable parameters (``conv_bn_relu_s1.triton`` / ``_s2`` in :mod:`xrt.kernels.spaces`) and the
environment knobs that override them (``spaces.ENV_KNOBS``) are resolved by :func:`resolve`.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from xrt.kernels import checks, spaces, stats
from xrt.kernels.triton.launch import Launcher, cdiv, next_power_of_2
from xrt.kernels.triton.matmul import SMEM_BUDGET

SPACE = {1: "conv_bn_relu_s1.triton", 2: "conv_bn_relu_s2.triton"}


@triton.jit
def _conv3x3_direct_kernel(
    x_ptr,  # [N, H, W, C] input, NHWC contiguous (a channels_last [N, C, H, W])
    w_ptr,  # [3, 3, C, K] weight, RSCK contiguous: row (r * 3 + s) * C + c of a [9 C, K] matrix
    b_ptr,  # [K] fp32 bias (the folded BatchNorm shift); not read when HAS_BIAS is False
    y_ptr,  # [N, Ho, Wo, K] output, NHWC contiguous, x's dtype
    H, W,
    CV,  # C // VEC: the input channels in VEC-wide vectors
    K, Ho, Wo, tiles_h, tiles_w,
    STRIDE: tl.constexpr, PAD: tl.constexpr,
    TH: tl.constexpr, TW: tl.constexpr,  # the output tile of a program, TH x TW pixels of one image
    BLOCK_N: tl.constexpr,  # output channels a program (KO_STEP)
    BLOCK_K: tl.constexpr,  # input channels a step (CI_STEP)
    VEC: tl.constexpr,  # C % VEC == 0: a pixel's channels start VEC-aligned (1: the fallback)
    HAS_BIAS: tl.constexpr, RELU: tl.constexpr,
    PRECISION: tl.constexpr,  # tl.dot input precision: "ieee" for fp32, "tf32" otherwise (ignored)
):
    # C as a multiple of the constexpr VEC: the compiler then knows that the channel mask is constant
    # over VEC lanes and a pixel's offset VEC-aligned, and vectorizes the loads of x.
    C = CV * VEC
    pid = tl.program_id(0)
    per_image = tiles_h * tiles_w
    n = pid // per_image
    t = pid % per_image
    rm = tl.arange(0, TH * TW)
    oh = (t // tiles_w) * TH + rm // TW
    ow = (t % tiles_w) * TW + rm % TW
    m_ok = (oh < Ho) & (ow < Wo)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < K
    rk = tl.arange(0, BLOCK_K)
    x_img = x_ptr + n.to(tl.int64) * H * W * C
    acc = tl.zeros((TH * TW, BLOCK_N), dtype=tl.float32)
    kc = tl.cdiv(C, BLOCK_K)
    for step in range(0, 9 * kc):
        tap = step // kc
        c0 = (step % kc) * BLOCK_K
        ih = oh * STRIDE - PAD + tap // 3
        iw = ow * STRIDE - PAD + tap % 3
        ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        pix = (ih * W + iw) * C
        c = c0 + rk
        c_ok = c < C
        a = tl.load(x_img + pix[:, None] + c[None, :], mask=ok[:, None] & c_ok[None, :], other=0.0)
        b = tl.load(w_ptr + (tap * C + c)[:, None] * K + rn[None, :], mask=c_ok[:, None] & n_ok[None, :],
                    other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=n_ok, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    y_row = ((n.to(tl.int64) * Ho + oh) * Wo + ow) * K
    tl.store(y_ptr + y_row[:, None] + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _im2row_kernel(
    x_ptr,  # [N, H, W, C] input, NHWC contiguous
    a_ptr,  # [M, 9 C] output rows, row-major: row (n, oh, ow), column (r * 3 + s) * C + c
    M, H, W,
    CV,  # C // VEC: the input channels in VEC-wide vectors
    Ho, Wo,
    STRIDE: tl.constexpr, PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
    VEC: tl.constexpr,  # C % VEC == 0 (1: the fallback)
):
    C = CV * VEC  # as in the direct kernel: the loads and stores vectorize by VEC
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    tap = tl.program_id(1)
    m_ok = rm < M
    ow = rm % Wo
    oh = (rm // Wo) % Ho
    n = (rm // (Wo * Ho)).to(tl.int64)
    ih = oh * STRIDE - PAD + tap // 3
    iw = ow * STRIDE - PAD + tap % 3
    ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    src = ((n * H + ih) * W + iw) * C
    dst = rm.to(tl.int64) * 9 * C + tap * C
    rc = tl.arange(0, BLOCK_C)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + rc
        c_ok = c < C
        v = tl.load(x_ptr + src[:, None] + c[None, :], mask=ok[:, None] & c_ok[None, :], other=0.0)
        tl.store(a_ptr + dst[:, None] + c[None, :], v, mask=m_ok[:, None] & c_ok[None, :])


@triton.jit
def _gemm_bias_relu_kernel(
    a_ptr,  # [M, Kk] im2row rows, row-major
    w_ptr,  # [Kk, K] weight (RSCK viewed as [9 C, K]), row-major
    b_ptr,  # [K] fp32 bias; not read when HAS_BIAS is False
    y_ptr,  # [M, K] output (NHWC of [N, Ho, Wo, K]), row-major, a's dtype
    M, K, Kk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, RELU: tl.constexpr, PRECISION: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < K
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm.to(tl.int64)[:, None] * Kk + rk[None, :]
    w_ptrs = w_ptr + rk[:, None] * K + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, Kk, BLOCK_K):
        k_ok = k0 + rk < Kk
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K * K
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=n_ok, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + rm.to(tl.int64)[:, None] * K + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


_direct = Launcher(_conv3x3_direct_kernel)
_im2row = Launcher(_im2row_kernel)
_gemm = Launcher(_gemm_bias_relu_kernel)


# -- settings ---------------------------------------------------------------------------------------

def parse_tile(tile: str) -> tuple[int, int]:
    th, tw = tile.split("x")
    return int(th), int(tw)


def auto_tile(ho: int, wo: int, pixels: int = 128) -> str:
    """The candidate tile of ``pixels`` pixels (or fewer, for small images) that wastes the fewest
    lanes on Ho x Wo: the least masked fraction, then the widest (rows of NHWC are contiguous)."""
    best, best_key = None, None
    for tile in spaces.CONV_TILES:
        th, tw = parse_tile(tile)
        if th * tw > pixels:
            continue
        slots = cdiv(ho, th) * th * cdiv(wo, tw) * tw
        key = ((slots - ho * wo) / slots, -(th * tw), -tw)
        if best_key is None or key < best_key:
            best, best_key = tile, key
    return best or spaces.CONV_TILES[0]


def resolve(stride: int, config: dict[str, Any] | None = None) -> tuple[checks.Tuning, dict[str, str]]:
    """The config in force for ``stride``: ``config`` (tuned or explicit, checked against
    ``SPACE[stride]``) with the environment knobs over it, and where each parameter came from
    (``"env XRT_FUSED_TILE_S1"``, ``"config"`` or ``"default"``)."""
    key = SPACE[stride]
    cfg = checks.tuning(key, config)
    env = spaces.env_overrides(key)
    given = set(config or ()) if not cfg.is_default else set()
    source = {p: (f"env {env[p][1]}" if p in env else "config" if p in given else "default") for p in cfg}
    if env:
        cfg = checks.tuning(key, {**cfg, **{p: v for p, (v, _) in env.items()}})
    return cfg, source


def plan(x_shape: tuple[int, ...], k: int, stride: int, padding: int, esize: int, cfg: dict[str, Any],
         aligned: bool = True) -> dict[str, Any]:
    """What a launch runs for NCHW shape ``x_shape`` and ``k`` output channels: the path, the tile
    (TH, TW), the BLOCK sizes, whether the loads vectorize, the grid and the masked lanes (``xrt diag``
    reads it too). ``aligned``: x's address is a multiple of VEC elements."""
    n, c, h, w = x_shape
    ho, wo = checks.conv_out(h, w, stride, padding)
    # auto: the direct kernel at both strides. The design takes stride 2 through im2row; on the H100
    # the direct kernel beat it at every stride-2 shape of the benchmark (0.67 / 0.84 / 0.81 x cuDNN
    # against 1.61 / 1.08 / 0.93 x, docs/kernels.md), so im2row is there when asked (XRT_FUSED_LAYOUT).
    path = cfg["path"] if cfg["path"] != "auto" else "direct"
    pixels = 64 if cfg["HALF_TILE"] else 128
    if cfg["TILE"] == "auto":
        th, tw = parse_tile(auto_tile(ho, wo, pixels))
    else:
        th, tw = parse_tile(cfg["TILE"])
        if cfg["HALF_TILE"] and th > 1 and (th // 2) * tw >= 16:
            th //= 2
    block_n = max(16, min(int(cfg["KO_STEP"]), next_power_of_2(k)))
    block_k = max(16, min(int(cfg["CI_STEP"]), next_power_of_2(c)))
    stages = int(cfg["num_stages"])
    # Shrink a config over the shared-memory budget as the GEMM does: fewer stages, then a smaller K step.
    while stages * (th * tw + block_n) * block_k * esize > SMEM_BUDGET:
        if stages > 2:
            stages -= 1
        elif block_k > 16:
            block_k //= 2
        else:
            break
    vec = int(cfg["VEC"])
    vectorized = vec > 1 and c % vec == 0 and aligned
    m = n * ho * wo
    if path == "direct":
        tiles_h, tiles_w = cdiv(ho, th), cdiv(wo, tw)
        grid = (n * tiles_h * tiles_w, cdiv(k, block_n))
        slots = n * tiles_h * th * tiles_w * tw
    else:
        tiles_h = tiles_w = 0
        grid = (cdiv(m, th * tw), cdiv(k, block_n))
        slots = grid[0] * th * tw
    return {"path": path, "TH": th, "TW": tw, "BLOCK_M": th * tw, "BLOCK_N": block_n, "BLOCK_K": block_k,
            "VEC": vec if vectorized else 1, "vectorized": vectorized, "grid": grid, "tiles": (tiles_h, tiles_w),
            "Ho": ho, "Wo": wo, "M": m, "masked_pixels": (slots - m) / slots if slots else 0.0,
            "masked_channels": (grid[1] * block_n - k) / (grid[1] * block_n),
            "num_warps": int(cfg["num_warps"]), "num_stages": stages}


# -- the launcher -----------------------------------------------------------------------------------

_PLANS: dict[tuple, tuple[checks.Tuning, dict[str, Any]]] = {}  # (id(config), shape, ...) -> (config, plan)


def conv_bias_relu(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: int, padding: int,
                   relu: bool = True, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``relu(conv2d(x, w) + bias)`` for ``x`` [N, C, H, W] (channels_last; another layout is copied
    to it) and ``w`` [3, 3, C, K] (RSCK, x's dtype), ``bias`` fp32 [K] or ``None``; ``relu=False``
    skips the ReLU. Returns [N, K, Ho, Wo] channels_last in x's dtype. ``config`` from
    ``conv_bn_relu_s{stride}.triton``; the environment knobs override it."""
    ho, wo = checks.conv3x3("conv_bn_relu", x, w, stride, padding, layout="RSCK")
    k = w.shape[3]
    checks.channel_vectors("conv_bn_relu", k, bias=bias)
    cfg, _ = resolve(stride, config)
    x = x.contiguous(memory_format=torch.channels_last)
    w = w.contiguous()
    n, c, h, wd = x.shape
    y = torch.empty((n, ho, wo, k), dtype=x.dtype, device=x.device).permute(0, 3, 1, 2)
    if y.numel() == 0:
        return y
    esize = x.element_size()
    aligned = x.data_ptr() % (int(cfg["VEC"]) * esize) == 0
    key = (id(cfg), tuple(x.shape), k, stride, padding, esize, aligned)
    hit = _PLANS.get(key)
    if hit is None or hit[0] is not cfg:  # planned once per config and shape, not on every call
        if len(_PLANS) > 1024:
            _PLANS.clear()
        hit = _PLANS[key] = (cfg, plan(tuple(x.shape), k, stride, padding, esize, cfg, aligned))
    p = hit[1]
    precision = "ieee" if x.dtype == torch.float32 else "tf32"
    b = bias if bias is not None else w  # a placeholder pointer: HAS_BIAS=False never reads it
    stats.count(f"conv_bn_relu.{p['path']}.{'vec' if p['vectorized'] else 'fallback'}")
    if p["path"] == "direct":
        _direct(p["grid"], x, w, b, y, h, wd, c // p["VEC"], k, ho, wo, *p["tiles"],
                STRIDE=stride, PAD=padding, TH=p["TH"], TW=p["TW"], BLOCK_N=p["BLOCK_N"], BLOCK_K=p["BLOCK_K"],
                VEC=p["VEC"], HAS_BIAS=bias is not None, RELU=relu, PRECISION=precision,
                num_warps=p["num_warps"], num_stages=p["num_stages"])
        return y
    m = p["M"]
    rows = torch.empty((m, 9 * c), dtype=x.dtype, device=x.device)
    _im2row((cdiv(m, 64), 9), x, rows, m, h, wd, c // p["VEC"], ho, wo, STRIDE=stride, PAD=padding, BLOCK_M=64,
            BLOCK_C=max(16, min(64, next_power_of_2(c))), VEC=p["VEC"], num_warps=4)
    _gemm(p["grid"], rows, w, b, y, m, k, 9 * c,
          BLOCK_M=p["BLOCK_M"], BLOCK_N=p["BLOCK_N"], BLOCK_K=p["BLOCK_K"], HAS_BIAS=bias is not None, RELU=relu,
          PRECISION=precision, num_warps=p["num_warps"], num_stages=p["num_stages"])
    return y
