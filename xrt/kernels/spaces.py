"""Tuning spaces: every tunable parameter of every kernel is named here once.

Launchers read their defaults from here, the benchmark suites read the configs to time from
here, and the tuner searches these spaces. A space maps a parameter name to its candidate values;
``DEFAULTS`` holds the config used when no tuned config is found.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping
from typing import Any

from xrt.kernels import rawenv

# The conv output tiles, "THxTW" pixels (TH * TW a power of two, at least 16: tl.dot's minimum).
CONV_TILES = ["4x8", "4x16", "8x8", "8x16", "16x8", "16x16", "4x32"]

SPACES: dict[str, dict[str, list[Any]]] = {
    # Elementwise: how many elements one Triton program handles, and its warps.
    "square.triton": {"BLOCK_SIZE": [256, 512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8]},
    # CUDA C: threads per block, and which side-by-side version of xrt/kernels/cuda/square.cu.
    "square.cuda": {"block": [128, 256, 512, 1024], "version": ["v1", "v2"]},
    # vector_add: the same two knobs as square, for the same reasons.
    "vector_add.triton": {"BLOCK_SIZE": [256, 512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8]},
    "vector_add.cuda": {"block": [128, 256, 512, 1024], "version": ["v1", "v2"]},
    # window_sum: outputs per Triton program; CUDA C outputs per thread ("items": the shared-memory
    # segment is block * items + 2 inputs), threads per block, version of window_sum.cu.
    "window_sum.triton": {"BLOCK_SIZE": [512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8]},
    "window_sum.cuda": {"block": [128, 256, 512], "items": [1, 2, 4, 8], "version": ["v1", "v2"]},
    # Row kernels (softmax, layernorm): the whole row is one program / block; "auto" scales the
    # warps (Triton) or threads (CUDA C) with the row length, see the launchers.
    "softmax.triton": {"num_warps": ["auto", 4, 8, 16, 32]},
    "softmax.cuda": {"block": ["auto", 128, 256, 512, 1024], "version": ["v1", "v2"]},
    # layernorm forward, Triton: also the rows one program holds ("auto": several for short
    # rows, two for N = 16384; see xrt/kernels/triton/layernorm.py fwd_plan).
    "layernorm.triton": {"num_warps": ["auto", 4, 8, 16, 32], "rows": ["auto", 1, 2]},
    "layernorm.cuda": {"block": ["auto", 128, 256, 512, 1024], "version": ["v1", "v2"]},
    # Backward: row groups = SMs x programs_per_sm ("auto": 2 for N <= 4096, else 1), each
    # accumulating its rows' dweight/dbias partials. Triton "path": the row in registers ("rows")
    # or the column-tiled two-pass kernels ("tiled"); "auto" tiles rows longer than 8192. CUDA C
    # v3 is the tiled path; "auto" is v2 with one 16-byte vector a thread while the row is at most
    # 1024 vectors (bf16: N <= 8192, fp32: 4096) and aligned, else v3.
    "layernorm_bwd.triton": {"num_warps": ["auto", 4, 8, 16, 32], "programs_per_sm": ["auto", 1, 2, 4],
                             "path": ["auto", "rows", "tiled"]},
    "layernorm_bwd.cuda": {"block": ["auto", 128, 256, 512, 1024], "version": ["auto", "v1", "v2", "v3"],
                           "programs_per_sm": ["auto", 1, 2, 4]},
    # add_layernorm (xrt/kernels/triton/add_layernorm.py): layernorm's knobs; the backward has no
    # column-tiled path (rows up to 16384 elements). The values reach past what "auto" picks at a
    # transformer's widths (forward: 4 rows x 8 warps at N 1024; backward: 2 programs an SM, 4 warps),
    # so that a sweep around the defaults stays in the space (benchmarks/fusion_sweep.py).
    "add_layernorm.triton": {"num_warps": ["auto", 2, 4, 8, 16, 32], "rows": ["auto", 1, 2, 4, 8]},
    "add_layernorm_bwd.triton": {"num_warps": ["auto", 2, 4, 8, 16, 32], "programs_per_sm": ["auto", 1, 2, 4, 8]},
    # linear_gelu (xrt/kernels/triton/linear_gelu.py): the GEMM's space (its epilogue adds no knob);
    # the backward's own kernel is the elementwise GELU gradient (its GEMMs take matmul's defaults
    # for their layout).
    "linear_gelu.triton": {"kernel": ["tiled", "persistent_tma"], "BLOCK_M": [64, 128, 256],
                           "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [1, 8],
                           "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]},
    "linear_gelu_bwd.triton": {"BLOCK_SIZE": [256, 512, 1024, 2048, 4096], "num_warps": [2, 4, 8]},
    # GEMM, Triton (xrt/kernels/triton/matmul.py): the C tile one program computes, the K step, the
    # rows of tiles walked together (L2 reuse), warps, pipeline depth, and the kernel: "tiled" (a
    # program per tile, any strides) or "persistent_tma" (a program per SM, TMA loads; Hopper,
    # row-major or transposed-view operands with 16-byte-aligned rows, else "tiled"). fp32 tiles over
    # the shared-memory budget are shrunk by the launcher (fewer stages, then a smaller BLOCK_K).
    # The TMA kernel only: EPILOGUE_SUBTILE stores C in two halves (half the C buffer, room for a
    # stage), warp_specialize splits the tile loop into producer / consumer warps (Triton's
    # tl.range(warp_specialize=True)). matmul only: SPLIT_K cuts K into that many parts, a batch of
    # GEMMs into fp32 partials summed by one more kernel (a narrow C over a long K).
    "matmul.triton": {"kernel": ["tiled", "persistent_tma"], "BLOCK_M": [64, 128, 256],
                      "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [1, 8],
                      "num_warps": [4, 8], "num_stages": [2, 3, 4, 5], "EPILOGUE_SUBTILE": [False, True],
                      "warp_specialize": [False, True], "SPLIT_K": [1, 2, 4]},
    "bmm.triton": {"kernel": ["tiled", "persistent_tma"], "BLOCK_M": [64, 128, 256],
                   "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [1, 8],
                   "num_warps": [4, 8], "num_stages": [2, 3, 4, 5], "EPILOGUE_SUBTILE": [False, True],
                   "warp_specialize": [False, True]},
    # GEMM, CUDA C fp32 SIMT (xrt/kernels/cuda/matmul.cu): the version (v1 naive, v2 register blocking,
    # v3 shared-memory blocking, v4 warp tiling with double buffering), the block's C tile BM x BN,
    # its K step BK, and each thread's TM x TN outputs. v1 ignores the tiles; v2 takes BM, BN, TM,
    # TN; the launcher names the constraint a combination breaks.
    "matmul.cuda": {"version": ["v1", "v2", "v3", "v4"], "BM": [64, 128], "BN": [64, 128],
                    "BK": [8, 16], "TM": [4, 8], "TN": [4, 8]},
    "bmm.cuda": {"version": ["v1", "v2", "v3", "v4"], "BM": [64, 128], "BN": [64, 128],
                 "BK": [8, 16], "TM": [4, 8], "TN": [4, 8]},
    # Attention forward, Triton: queries a program (BLOCK_M), keys a step (BLOCK_N), warps, software
    # pipeline stages; "warp_specialize" splits the key loop into producer / consumer warps (Triton's
    # tl.range(warp_specialize=True)), honoured on Hopper and newer only, else the plain loop.
    # "tma": q, k, v and o tiles moved by the TMA engine (Hopper; contiguous inputs), else pointer loads.
    # "order" (causal only): which query blocks a program takes; 0, one head's blocks side by side,
    # longest first; 1, every head's longest block first; 2, a block and its mirror (equal work).
    "attention.triton": {"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "num_warps": [4, 8],
                         "num_stages": [1, 2, 3, 4, 5], "warp_specialize": [False, True], "tma": [False, True],
                         "order": [0, 1, 2]},
    # Attention backward: the dK/dV kernel holds BLOCK_N1 keys and steps BLOCK_M1 queries, the dQ
    # kernel holds BLOCK_M2 queries and steps BLOCK_N2 keys (FlashAttention-2's split). num_warps /
    # num_stages are the dK/dV kernel's, num_warps2 / num_stages2 the dQ kernel's ("same": the
    # dK/dV kernel's). tma: both kernels' tiles moved by the TMA engine (Hopper, contiguous inputs;
    # else the pointer kernels). causal_pairs (causal only): a program takes block j and its mirror
    # n-1-j, equal work a program. fuse_delta: the dQ kernel computes rowsum(dO * O) and runs first
    # (no preprocess kernel).
    "attention_bwd.triton": {"BLOCK_M1": [16, 32, 64], "BLOCK_N1": [16, 32, 64, 128],
                             "BLOCK_M2": [16, 32, 64, 128], "BLOCK_N2": [16, 32, 64],
                             "num_warps": [4, 8], "num_stages": [1, 2, 3, 4, 5],
                             "num_warps2": ["same", 4, 8], "num_stages2": ["same", 1, 2, 3, 4, 5],
                             "tma": [False, True], "causal_pairs": [False, True], "fuse_delta": [False, True]},
    # Fused conv3x3 + BatchNorm + ReLU on NHWC (xrt/kernels/triton/conv_bn_relu.py), one space per
    # stride so that each has its own defaults and tuned configs (the policy's per-stride override).
    # "path": the direct implicit-GEMM kernel or im2row + GEMM ("auto": direct for stride 1, im2row
    # for stride 2); "TILE": the output tile TH x TW pixels of a program (TS; "auto" picks the
    # candidate with the fewest masked lanes for Ho x Wo); CI_STEP: input channels a K step (BLOCK_K);
    # KO_STEP: output channels a program (BLOCK_N); HALF_TILE halves TH (more, smaller programs);
    # VEC: channels a vectorized load assumes contiguous and aligned (the path falls back to VEC 1
    # where C is not a multiple of it); warps and pipeline stages.
    "conv_bn_relu_s1.triton": {"path": ["auto", "direct", "im2row"], "TILE": ["auto", *CONV_TILES],
                               "CI_STEP": [16, 32, 64, 128], "KO_STEP": [16, 32, 64, 128],
                               "HALF_TILE": [False, True], "VEC": [1, 4, 8, 16], "num_warps": [2, 4, 8],
                               "num_stages": [1, 2, 3, 4]},
    "conv_bn_relu_s2.triton": {"path": ["auto", "direct", "im2row"], "TILE": ["auto", *CONV_TILES],
                               "CI_STEP": [16, 32, 64, 128], "KO_STEP": [16, 32, 64, 128],
                               "HALF_TILE": [False, True], "VEC": [1, 4, 8, 16], "num_warps": [2, 4, 8],
                               "num_stages": [1, 2, 3, 4]},
    # linear_cross_entropy (xrt/kernels/triton/linear_cross_entropy.py): tokens a chunk ("auto": a chunk's
    # logits about the size of h, at least 1024 tokens) and the row kernel's warps ("auto": 16 for
    # vocabularies of 16k and more, else 8).
    "linear_cross_entropy.triton": {"chunk": ["auto", 256, 512, 1024, 2048, 4096, 8192],
                                    "num_warps": ["auto", 4, 8, 16, 32]},
}

DEFAULTS: dict[str, dict[str, Any]] = {
    "square.triton": {"BLOCK_SIZE": 1024, "num_warps": 4},
    "square.cuda": {"block": 256, "version": "v2"},
    "vector_add.triton": {"BLOCK_SIZE": 1024, "num_warps": 4},
    "vector_add.cuda": {"block": 256, "version": "v2"},
    "window_sum.triton": {"BLOCK_SIZE": 2048, "num_warps": 4},
    "window_sum.cuda": {"block": 256, "items": 4, "version": "v2"},
    "softmax.triton": {"num_warps": "auto"},
    "softmax.cuda": {"block": "auto", "version": "v2"},
    "layernorm.triton": {"num_warps": "auto", "rows": "auto"},
    "layernorm.cuda": {"block": "auto", "version": "v2"},
    "layernorm_bwd.triton": {"num_warps": "auto", "programs_per_sm": "auto", "path": "auto"},
    "layernorm_bwd.cuda": {"block": "auto", "version": "auto", "programs_per_sm": "auto"},
    "add_layernorm.triton": {"num_warps": "auto", "rows": "auto"},
    "add_layernorm_bwd.triton": {"num_warps": "auto", "programs_per_sm": "auto"},
    # The TMA kernel reading the weight's K-major tiles (B_T). For the exact GELU (erf, F.gelu's
    # default) on 128 x 128 tiles in 4 stages: at 8192 x 4096 x 1024 it took 0.146-0.149 ms there
    # against 0.175 on matmul's 128 x 256 tile (H200, bf16, device time; the epilogue rows of
    # benchmarks/fusion_bench.py --sweep); at 8192 x 8192 x 2048 the two were within the run's
    # noise. The tanh GELU takes LINEAR_GELU_TANH.
    "linear_gelu.triton": {"kernel": "persistent_tma", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
                           "num_warps": 8, "num_stages": 4},
    "linear_gelu_bwd.triton": {"BLOCK_SIZE": 1024, "num_warps": 4},
    # Tutorial-09's H100 fp16 tile: 128 x 256 x 64, 3 stages, 8 warps.
    "matmul.triton": {"kernel": "persistent_tma", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                      "num_warps": 8, "num_stages": 3, "EPILOGUE_SUBTILE": False, "warp_specialize": False,
                      "SPLIT_K": 1},
    "bmm.triton": {"kernel": "persistent_tma", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                   "num_warps": 8, "num_stages": 3, "EPILOGUE_SUBTILE": False, "warp_specialize": False},
    # siboehm's warptiled SGEMM (kernel 10) tile: 128 x 128 x 16, 8 x 4 a thread per sub-tile.
    # (H100, fp32 4096^3: 4 x 8 a thread gave 41.7 TFLOP/s against 37.6 for 8 x 4; results/gpu/gemm-h100.md)
    "matmul.cuda": {"version": "v4", "BM": 128, "BN": 128, "BK": 16, "TM": 4, "TN": 8},
    "bmm.cuda": {"version": "v4", "BM": 128, "BN": 128, "BK": 16, "TM": 4, "TN": 8},
    # H100 sweep (benchmarks/attention_bench.py, bf16, S=4096): TMA with 128 x 128 blocks, 8 warps, 3 stages
    # was the best forward at hd128, causal or not (0.911 ms against 1.046 for 128 x 64); hd64 keeps
    # 128 x 64 (SHAPE_DEFAULTS: 0.600 ms against 0.762 for 128 x 128).
    "attention.triton": {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3, "warp_specialize": False,
                         "tma": True, "order": 0},
    # H100 sweep (benchmarks/attention_bench.py --bwd-sweep, bf16, S=4096, 2026-11-23): 64/64/64/64,
    # 4 warps, 2 stages with the TMA kernels was the best backward in every case (hd128 3.128 ms against
    # 3.182 with pointer loads, hd64 1.934 / 1.972); causal hd128 best with causal pairs and the fused
    # delta too: 1.708 ms against 1.765 (TMA alone) and 2.157 (pointers), 0.86 x SDPA. A separate warp
    # count for dQ (8 / 4) was slower everywhere.
    "attention_bwd.triton": {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 4,
                             "num_stages": 2, "num_warps2": "same", "num_stages2": "same", "tma": True,
                             "causal_pairs": True, "fuse_delta": True},
    # Untuned starting points (no GPU measurement yet, docs/kernels.md): a 128-pixel tile, 64 channels
    # a K step and 64 output channels a program, 16-byte channel vectors for fp16.
    # H100 (benchmarks/conv_bench.py, fp16): 16 x 8 pixels x 128 output channels, 8 warps was within the
    # 1.0 x cuDNN target at every stride-1 shape (0.57 / 0.87 / 0.77), the auto tile at 64 channels not
    # (1.10 x at N64 C256 14x14); stride 2 keeps the auto tile (0.67 / 0.84 / 0.81; 16 x 8: up to 1.05).
    "conv_bn_relu_s1.triton": {"path": "auto", "TILE": "16x8", "CI_STEP": 64, "KO_STEP": 128, "HALF_TILE": False,
                               "VEC": 8, "num_warps": 8, "num_stages": 3},
    "conv_bn_relu_s2.triton": {"path": "auto", "TILE": "auto", "CI_STEP": 64, "KO_STEP": 64, "HALF_TILE": False,
                               "VEC": 8, "num_warps": 4, "num_stages": 3},
    # Untuned (no GPU measurement yet).
    "linear_cross_entropy.triton": {"chunk": "auto", "num_warps": "auto"},
}


# Where one default cannot serve every shape: (largest M, config) pairs a launcher takes, first
# bound that holds, when it was given the default (no tuned or explicit config). Skinny GEMMs
# (M <= 64) on the square-shape default left three quarters of a 128-row tile idle: 0.65 x cuBLAS
# at 16 x 8192 x 8192 on the H100, against 0.99 x for this tile (results/gpu/gemm-h100.md).
SHAPE_DEFAULTS: dict[str, list[tuple[int, dict[str, Any]]]] = {
    "matmul.triton": [(64, {"kernel": "tiled", "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8,
                            "num_warps": 4, "num_stages": 4})],
    "linear_gelu.triton": [(64, {"kernel": "tiled", "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8,
                                 "num_warps": 4, "num_stages": 4})],
    # attention: the bound is the head dim
    "attention.triton": [(64, {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3,
                               "warp_specialize": False, "tma": True})],
}


# -- attention's forward defaults at a GPT model's shapes ----------------------------------------------
# (head dim, causal, S bucket: the next power of two of S_q) -> the attention.triton config used when
# none is tuned or asked for; elsewhere the head dim's default (SHAPE_DEFAULTS). From
# benchmarks/attention_bench.py --model-sweep on an H100 (B 8, H 16, bf16, each config beside SDPA;
# results/gpu/attention-model-sweep-h100.json, two runs): each shape's best config where it beat the
# default by 3 % or more. Short causal sequences gain most from 64-query blocks (7-15 % at S <= 2048):
# 128-query blocks leave few programs there. And from the program order (``order``, causal only:
# xrt/kernels/triton/attention.py, _fwd_program and _program_block): a program that takes a query block and its mirror
# (order 2) does equal work, so the last wave has no long programs left: SDPA / xrt at S 1024 hd 64
# 0.93 -> 0.96, S 512 0.90 -> 0.96 (128 x 64 blocks, 4 warps), S 2048 0.957 -> 0.964. At hd 128 and
# at S 4096 it lost.
_FWD_64 = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
_FWD_64_128 = {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2}
ATTENTION_FWD_TABLE: dict[tuple[int, bool, int], dict[str, Any]] = {
    (64, True, 512): {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "order": 2},
    (64, True, 1024): {**_FWD_64, "order": 2}, (64, True, 2048): {**_FWD_64, "order": 2},
    (64, True, 4096): _FWD_64_128, (64, False, 4096): _FWD_64_128,
    (128, True, 512): _FWD_64, (128, True, 1024): _FWD_64, (128, True, 2048): _FWD_64, (128, False, 512): _FWD_64,
}


def attention_default(head_dim: int, causal: bool, s_q: int) -> dict[str, Any] | None:
    """The forward's table config for this head dim, mask and sequence length, or ``None`` where the
    table has no entry (the head dim's default applies)."""
    found = ATTENTION_FWD_TABLE.get((head_dim, bool(causal), gemm_bucket(s_q)))
    return None if found is None else dict(found)


# -- GEMM defaults by layout: the transformer's nn.Linear --------------------------------------------
# A linear of in_features K and out_features N over T = batch x seq rows runs three GEMMs, each in its
# own operand layout (xrt/kernels/triton/matmul.py layout): the forward x @ W.T ("nt": T x N x K), the
# input gradient g @ W ("nn": T x K x N) and the weight gradient g.T @ x ("tn": N x K x T).
LINEAR_ROWS = (8192, 16384)  # T: batch x seq
LINEAR_FEATURES = ((1024, 3072), (1024, 1024), (1024, 4096), (4096, 1024), (2048, 6144), (4096, 16384),
                   (16384, 4096))  # (in_features K, out_features N): GPT-style d, 3d, 4d and MLP widths


def linear_gemms(t: int, k: int, n: int) -> list[tuple[str, int, int, int]]:
    """The three GEMMs of a linear ``[t, k] -> [t, n]``: ``(layout, M, N, K)`` of the forward, the
    input gradient and the weight gradient."""
    return [("nt", t, n, k), ("nn", t, k, n), ("tn", n, k, t)]


def gemm_bucket(x: int) -> int:
    """The coarse bucket of a GEMM dimension in :data:`GEMM_LAYOUT_DEFAULTS`: the next power of two."""
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def gemm_bucket_fine(x: int) -> int:
    """The fine bucket of a GEMM dimension: the next of 2^j and 3 x 2^(j-2) (..., 512, 768, 1024,
    1536, ...), so a model of width 768 (3072, 2304) has entries of its own beside 1024's (4096)."""
    p = gemm_bucket(x)
    return p * 3 // 4 if p >= 4 and x <= p * 3 // 4 else p


_TILE_256 = {"kernel": "persistent_tma", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
             "num_warps": 8, "num_stages": 3, "EPILOGUE_SUBTILE": False, "warp_specialize": False, "SPLIT_K": 1}

_SPLIT_2 = {"kernel": "persistent_tma", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8,
            "num_warps": 4, "num_stages": 4, "EPILOGUE_SUBTILE": False, "warp_specialize": False, "SPLIT_K": 2}
# Where another tile won the H100 sweep (benchmarks/gemm_linear_bench.py, results/gpu/gemm-linear-h100.json):
# the narrow weight gradients (a 1024 x 1024 output over a long K: 64 tiles of 128 x 128 for 132
# SMs) take K split in two (4 warps: 0.80 -> 0.83 and 0.91 -> 0.94 of cuBLAS against 8 warps in one
# run, gemm_linear_bench.py --narrow), three buckets the full-width C store.
_LINEAR_WINNERS = {
    ("tn", 1024, 1024, 8192): _SPLIT_2, ("tn", 1024, 1024, 16384): _SPLIT_2,
    ("nn", 8192, 16384, 4096): _TILE_256, ("nn", 16384, 4096, 1024): _TILE_256, ("nn", 16384, 4096, 16384): _TILE_256,
}


def _linear_table() -> dict[tuple[str, int, int, int], dict[str, Any]]:
    # Measured on an H100 (bf16, side by side with cuBLAS): Triton's persistent-matmul tile, 128 x 256
    # x 64 in 3 stages and 8 warps, with the C tile stored in two halves, won 31 of the 36 buckets;
    # _LINEAR_WINNERS holds the other five. benchmarks/gemm_linear_bench.py prints the winners in
    # this table's form.
    table = {}
    for t in LINEAR_ROWS:
        for k, n in LINEAR_FEATURES:
            for lay, gm, gn, gk in linear_gemms(t, k, n):
                key = (lay, gemm_bucket(gm), gemm_bucket(gn), gemm_bucket(gk))
                table[key] = dict(_LINEAR_WINNERS.get(key, {**_TILE_256, "EPILOGUE_SUBTILE": True}))
    return table


def _tma(bm: int, bn: int, warps: int, stages: int) -> dict[str, Any]:
    return {**_TILE_256, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}


# The linears of a GPT of width 768 (T 8192; K, N of 768, 2304, 3072), keyed by fine buckets
# (gemm_bucket_fine), where a tile beat the table's 128 x 256 on an H200 (bf16, beside cuBLAS,
# gemm_linear_bench.py --features 768:2304,768:768,768:3072,3072:768 --wide, 2026-11-29; the
# ratio to cuBLAS before -> after). Where two GEMMs share a bucket, the tile with the least time
# of the two won.
_WIDTH_768 = {
    ("nt", 8192, 768, 768): _tma(64, 256, 4, 4),  # 0.81 -> 0.92
    ("nn", 8192, 768, 768): _tma(64, 256, 4, 4),  # 0.80 -> 0.91
    ("nt", 8192, 768, 3072): _tma(128, 128, 8, 5),  # 0.73 -> 0.90
    ("nn", 8192, 768, 3072): _tma(128, 128, 8, 5),  # 2304: 0.78 -> 0.91; 3072: 0.76 -> 0.90
    ("tn", 3072, 768, 8192): _tma(64, 256, 4, 4),  # 2304 x 768: 0.55 -> 0.89; 3072 x 768: 0.67 -> 0.59
}

# (layout, M bucket, N bucket, K bucket) -> the matmul.triton config used when none is tuned or asked
# for, by fine buckets where the table has them, else by coarse ones; a problem outside the table
# takes SHAPE_DEFAULTS / DEFAULTS.
GEMM_LAYOUT_DEFAULTS: dict[tuple[str, int, int, int], dict[str, Any]] = {**_linear_table(), **_WIDTH_768}


def gemm_default(layout: str, m: int, n: int, k: int) -> dict[str, Any] | None:
    """The layout table's config for an ``M x N x K`` GEMM in ``layout`` (``"nn"``, ``"nt"``, ``"tn"``),
    or ``None`` where the table has no entry: its fine buckets' entry, else its coarse ones'."""
    found = GEMM_LAYOUT_DEFAULTS.get((layout, gemm_bucket_fine(m), gemm_bucket_fine(n), gemm_bucket_fine(k)))
    if found is None:
        found = GEMM_LAYOUT_DEFAULTS.get((layout, gemm_bucket(m), gemm_bucket(n), gemm_bucket(k)))
    return None if found is None else dict(found)


def gemm_smem(c: dict[str, Any], esize: int, bk: int | None = None, stages: int | None = None,
              c_esize: int | None = None) -> int:
    """Shared memory of a GEMM program (matmul.triton): the pipelined A and B tiles of ``stages``
    x ``bk`` (the config's unless given), and the TMA kernel's C tile (half of it when subtiled), of
    ``c_esize`` bytes an element (a split K's fp32 partials: 4; else the operands')."""
    bk = c["BLOCK_K"] if bk is None else bk
    stages = c["num_stages"] if stages is None else stages
    if c_esize is None:
        c_esize = 4 if c.get("SPLIT_K", 1) > 1 else esize
    c_tile = 0
    if c["kernel"] == "persistent_tma":
        c_tile = c["BLOCK_M"] * c["BLOCK_N"] * c_esize // (2 if c.get("EPILOGUE_SUBTILE") else 1)
    return stages * (c["BLOCK_M"] + c["BLOCK_N"]) * bk * esize + c_tile


# linear_gelu's forward default for the tanh GELU: matmul's 128 x 256 tile (same sweep, at
# 8192 x 4096 x 1024: 0.122 ms against 0.136 on the erf default's tile; with z stored 0.139
# against 0.151-0.152). At 8192 x 8192 x 2048 the two tiles were level (0.456 against 0.457, the
# other row of that tile reading 0.503).
LINEAR_GELU_TANH = {"kernel": "persistent_tma", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
                    "num_warps": 8, "num_stages": 3}


def linear_gelu_default(m: int, approximate: str) -> dict[str, Any]:
    """linear_gelu's forward config for ``m`` rows when none is tuned or asked for: the space's
    default for ``m`` (``default_for``), or ``LINEAR_GELU_TANH`` for the tanh GELU where that is
    the space's full-size default."""
    cfg = default_for("linear_gelu.triton", m)
    if approximate == "tanh" and cfg == default("linear_gelu.triton"):
        return check("linear_gelu.triton", LINEAR_GELU_TANH)
    return cfg


def default_for(key: str, m: int) -> dict[str, Any]:
    """The default config of ``key`` for a problem of ``m`` rows (``SHAPE_DEFAULTS``, else ``DEFAULTS``)."""
    for bound, config in SHAPE_DEFAULTS.get(key, ()):
        if m <= bound:
            return check(key, config)
    return default(key)


def space(key: str) -> dict[str, list[Any]]:
    if key not in SPACES:
        raise KeyError(f"no tuning space {key!r}; known: {', '.join(sorted(SPACES))}")
    return SPACES[key]


def default(key: str) -> dict[str, Any]:
    if key not in DEFAULTS:
        raise KeyError(f"no default config {key!r}; known: {', '.join(sorted(DEFAULTS))}")
    return dict(DEFAULTS[key])


def configs(key: str) -> Iterator[dict[str, Any]]:
    """Every config of a space, in a stable order."""
    s = space(key)
    names = list(s)
    for values in itertools.product(*(s[n] for n in names)):
        yield dict(zip(names, values))


def check(key: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` filled from the defaults; an unknown name or a value outside the space is an error."""
    s = space(key)
    unknown = set(config) - set(s)
    if unknown:
        raise ValueError(f"{key}: unknown tuning parameter(s) {sorted(unknown)}; known: {sorted(s)}")
    for name, value in config.items():
        if value not in s[name]:
            raise ValueError(f"{key}: {name}={value!r} is outside the tuning space {s[name]}")
    return {**default(key), **config}


# ---------------------------------------------------------------------------------------- pruning
# Constraints: which configs of a space can run well on a device for a problem. Each rule returns
# the reason it drops a config (one short phrase, counted by ``xrt tune space``), or None. Rules
# that need a device fact skip themselves when the device cannot tell it (the CPU).
# Bump CONSTRAINTS_VERSION when a rule changes: it is part of every space's hash, so journals and
# stored evaluations of the older pruning are never mixed in silently with the newer ones.
CONSTRAINTS_VERSION = 1

MAX_REGS_PER_THREAD = 255  # every CUDA architecture since Kepler
REG_OVERHEAD = 32  # registers a GEMM thread needs besides its accumulator (addresses, loop, fragments)


class Limits:
    """The device facts the rules check against (``DeviceInfo`` fields; None where unknown)."""

    def __init__(self, max_threads_per_block: int | None = None, max_shared_memory_per_block: int | None = None,
                 registers_per_block: int | None = None, warp_size: int | None = None,
                 compute_capability: str | None = None, sm_count: int | None = None) -> None:
        self.sm_count = sm_count
        self.max_threads_per_block = max_threads_per_block
        self.max_shared_memory_per_block = max_shared_memory_per_block
        self.registers_per_block = registers_per_block
        self.warp_size = warp_size or 32
        self.compute_capability = compute_capability

    @classmethod
    def of(cls, dev: Any) -> Limits:
        return cls(getattr(dev, "max_threads_per_block", None), getattr(dev, "max_shared_memory_per_block", None),
                   getattr(dev, "registers_per_block", None), getattr(dev, "warp_size", None),
                   getattr(dev, "compute_capability", None), getattr(dev, "sm_count", None))


class Problem:
    """What a rule may look at: the shape (a tuple), the element size in bytes, the device limits."""

    def __init__(self, shape: tuple[int, ...], esize: int, limits: Limits) -> None:
        self.shape, self.esize, self.limits = tuple(shape), esize, limits

    @property
    def gemm_mnk(self) -> tuple[int, int, int]:
        s = self.shape  # M x N x K, or B x M x N x K
        return (s[-3], s[-2], s[-1]) if len(s) >= 3 else (s[0], s[0], s[0])


def _threads(threads: int, p: Problem) -> str | None:
    lim = p.limits.max_threads_per_block
    return "threads per block over the device limit" if lim and threads > lim else None


def _smem(nbytes: int, p: Problem) -> str | None:
    lim = p.limits.max_shared_memory_per_block
    return "shared memory over the device limit" if lim and nbytes > lim else None


def _warps(c: dict[str, Any], p: Problem) -> str | None:
    w = c.get("num_warps")
    return None if not isinstance(w, int) else _threads(w * p.limits.warp_size, p)


def _block(c: dict[str, Any], p: Problem) -> str | None:
    b = c.get("block")
    return None if not isinstance(b, int) else _threads(b, p)


def _block_size_vs_threads(c: dict[str, Any], p: Problem) -> str | None:
    # fewer elements than threads: idle threads by construction (masked lanes)
    return ("BLOCK_SIZE smaller than the threads of a program"
            if c["BLOCK_SIZE"] < c["num_warps"] * p.limits.warp_size else None)


def _block_size_vs_shape(c: dict[str, Any], p: Problem) -> str | None:
    n = 1
    for d in p.shape:
        n *= d
    # one program holds the whole problem with room to spare: every larger block is the same launch
    return "BLOCK_SIZE over twice the problem's elements" if c["BLOCK_SIZE"] > 2 * max(n, 1) and \
        c["BLOCK_SIZE"] > 256 else None


def _window_smem(c: dict[str, Any], p: Problem) -> str | None:
    return _smem((c["block"] * c["items"] + 2) * p.esize, p)


def _gemm_smem(c: dict[str, Any], p: Problem) -> str | None:
    # the launcher (xrt/kernels/triton/matmul.py fit) shrinks a config over the budget into a smaller
    # one, so such a config would time another config of the space: dropped as a duplicate.
    return _smem(gemm_smem(c, p.esize), p)


def _gemm_regs(c: dict[str, Any], p: Problem) -> str | None:
    threads = c["num_warps"] * p.limits.warp_size
    per_thread = c["BLOCK_M"] * c["BLOCK_N"] // threads + REG_OVERHEAD  # fp32 accumulator, one register each
    if per_thread > MAX_REGS_PER_THREAD:
        return "registers per thread over 255 (accumulator spills)"
    lim = p.limits.registers_per_block
    return "registers per block over the device limit" if lim and per_thread * threads > lim else None


def _gemm_tile_vs_shape(c: dict[str, Any], p: Problem) -> str | None:
    m, n, k = p.gemm_mnk
    # a tile twice the size of its dimension is at least half padding; the next smaller tile does the same work
    for name, dim in (("BLOCK_M", m), ("BLOCK_N", n), ("BLOCK_K", k)):
        if c[name] > 64 and c[name] >= 2 * dim:
            return f"{name} at least twice the shape's dimension"
    return None


def _gemm_tma_arch(c: dict[str, Any], p: Problem) -> str | None:
    cc = p.limits.compute_capability
    # the launcher falls back to "tiled" before Hopper: the same kernel as the "tiled" config
    if c["kernel"] == "persistent_tma" and cc is not None and float(cc) < 9.0:
        return "persistent_tma needs Hopper (falls back to tiled)"
    return None


def _gemm_tma_only_knobs(c: dict[str, Any], p: Problem) -> str | None:
    # the tiled kernel has no C buffer to subtile and no warp-specialized loop: a duplicate
    if c["kernel"] == "tiled" and (c.get("EPILOGUE_SUBTILE") or c.get("warp_specialize")):
        return "EPILOGUE_SUBTILE / warp_specialize on the tiled kernel (no effect)"
    return None


def split_ok(k: int, split: int, bk: int) -> bool:
    """Can K be cut into ``split`` equal parts, each a whole number of 16-byte rows (8 elements) and
    at least one BLOCK_K long? Elsewhere the GEMM ignores ``SPLIT_K`` (one pass over K)."""
    return k % split == 0 and (k // split) % 8 == 0 and k // split >= bk


def split_k_why(c: dict[str, Any], m: int, n: int, k: int, sms: int, batch: int = 1) -> str | None:
    """Why config ``c``'s ``SPLIT_K`` has no use for an ``M x N x K`` GEMM (``batch`` of them) on a
    GPU of ``sms`` SMs, or None: K is split only where C leaves SMs idle (fewer tiles than two
    waves), and only for one matrix whose K splits (:func:`split_ok`)."""
    split = c.get("SPLIT_K", 1)
    if split == 1:
        return None
    if batch > 1:
        return "SPLIT_K on a batch (matmul only: ignored)"
    if not split_ok(k, split, c["BLOCK_K"]):
        return "SPLIT_K that K cannot take (ignored)"
    if -(-m // c["BLOCK_M"]) * -(-n // c["BLOCK_N"]) >= 2 * sms:
        return "SPLIT_K where C has two waves of tiles"
    return None


def _gemm_split_k(c: dict[str, Any], p: Problem) -> str | None:
    m, n, k = p.gemm_mnk
    return split_k_why(c, m, n, k, p.limits.sm_count or 132, p.shape[0] if len(p.shape) > 3 else 1)


def _gemm_group_one_tile_row(c: dict[str, Any], p: Problem) -> str | None:
    m, _, _ = p.gemm_mnk
    # with a single row of tiles, grouping rows changes nothing: GROUP_M > 1 is GROUP_M = 1
    return "GROUP_M > 1 with one row of tiles" if c["GROUP_M"] > 1 and m <= c["BLOCK_M"] else None


def _cuda_gemm_tiles(c: dict[str, Any], p: Problem) -> str | None:
    if c["version"] == "v1":
        return None
    threads = (c["BM"] // c["TM"]) * (c["BN"] // c["TN"])
    return _threads(threads, p) or _smem((c["BM"] + c["BN"]) * c["BK"] * 4 * (2 if c["version"] == "v4" else 1), p)


def _attention_smem(c: dict[str, Any], p: Problem) -> str | None:
    hd = p.shape[3] if len(p.shape) >= 4 else 64  # a shape is (B, H, S, D, causal)
    need = (c["BLOCK_M"] + c["num_stages"] * 2 * c["BLOCK_N"]) * hd * p.esize
    return _smem(need, p)


def _attention_order(c: dict[str, Any], p: Problem) -> str | None:
    # without causality every program does the same work: the kernels take order 0
    if c.get("order", 0) and len(p.shape) >= 5 and not p.shape[4]:
        return "order without causality (ignored: order 0)"
    return None


def _attention_bwd_same(c: dict[str, Any], p: Problem) -> str | None:
    # the dQ kernel's warps or stages given as the dK/dV kernel's: the launch of "same", timed twice
    if c.get("num_warps2") == c.get("num_warps") or c.get("num_stages2") == c.get("num_stages"):
        return "dQ warps / stages equal to the dK/dV kernel's (the 'same' config)"
    return None


_ELEMENTWISE = [_warps, _block_size_vs_threads, _block_size_vs_shape]
_GEMM = [_warps, _gemm_tma_only_knobs, _gemm_tma_arch, _gemm_smem, _gemm_regs, _gemm_tile_vs_shape,
         _gemm_group_one_tile_row, _gemm_split_k]
CONSTRAINTS: dict[str, list] = {
    "square.triton": _ELEMENTWISE, "vector_add.triton": _ELEMENTWISE,
    "window_sum.triton": [_warps, _block_size_vs_threads],
    "square.cuda": [_block], "vector_add.cuda": [_block], "window_sum.cuda": [_block, _window_smem],
    "softmax.triton": [_warps], "softmax.cuda": [_block], "layernorm.triton": [_warps], "layernorm.cuda": [_block],
    "layernorm_bwd.triton": [_warps], "layernorm_bwd.cuda": [_block],
    "matmul.triton": _GEMM, "bmm.triton": _GEMM, "linear_gelu.triton": _GEMM,
    "add_layernorm.triton": [_warps], "add_layernorm_bwd.triton": [_warps],
    "linear_gelu_bwd.triton": [_warps, _block_size_vs_threads],
    "matmul.cuda": [_cuda_gemm_tiles], "bmm.cuda": [_cuda_gemm_tiles],
    "attention.triton": [_warps, _attention_smem, _attention_order],
    "attention_bwd.triton": [_warps, _attention_bwd_same],
}


def why_dropped(key: str, config: dict[str, Any], problem: Problem) -> str | None:
    """The first rule of ``key`` that drops ``config`` for ``problem`` (its reason), or None: it stays."""
    for rule in CONSTRAINTS.get(key, ()):
        why = rule(config, problem)
        if why:
            return why
    return None


def space_hash(key: str) -> str:
    """A stable 16-hex name of the space: its values, its default, its rules and their version.

    Every journal record and stored evaluation carries it; a changed space (a value added, a rule
    renamed, CONSTRAINTS_VERSION bumped) has another hash, and the tuner refuses to mix the two.
    """
    import hashlib
    import json

    body = {"key": key, "space": space(key), "default": default(key), "version": CONSTRAINTS_VERSION,
            "rules": [r.__name__ for r in CONSTRAINTS.get(key, ())]}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


# Environment knobs that override a space's parameter (they win over tuned and explicit configs):
# name -> (the spaces it applies to, the parameter). The fused conv's, renamed from its design lab.
ENV_KNOBS: dict[str, tuple[tuple[str, ...], str]] = {
    "XRT_FUSED_LAYOUT": (("conv_bn_relu_s1.triton", "conv_bn_relu_s2.triton"), "path"),
    "XRT_FUSED_TILE_S1": (("conv_bn_relu_s1.triton",), "TILE"),
    "XRT_FUSED_TILE_S2": (("conv_bn_relu_s2.triton",), "TILE"),
    "XRT_FUSED_KO_STEP": (("conv_bn_relu_s1.triton",), "KO_STEP"),
    "XRT_FUSED_KO_STEP_S2": (("conv_bn_relu_s2.triton",), "KO_STEP"),
}
_ENV_MEMO: dict[Any, dict[str, tuple[Any, str]]] = {}
_KNOBS_OF: dict[str, list[tuple[str, str]]] = {}
_ENV_DATA = rawenv.DATA  # looked at on every launch (xrt.kernels.rawenv)
_ENV_KEYS = {var: rawenv.key(var) for var in ENV_KNOBS}


def env_overrides(key: str, environ: Mapping[str, str] | None = None) -> dict[str, tuple[Any, str]]:
    """The parameters of space ``key`` that ``ENV_KNOBS`` set: ``{name: (value, variable)}``,
    parsed once per distinct environment value. A value outside the space is a ``ValueError`` of
    one line naming the variable and what it may be."""
    knobs = _KNOBS_OF.get(key)
    if knobs is None:
        knobs = _KNOBS_OF[key] = [(var, param) for var, (keys, param) in ENV_KNOBS.items() if key in keys]
    if environ is None:
        raw = tuple(_ENV_DATA.get(_ENV_KEYS[var]) for var, _ in knobs)
    else:
        raw = tuple(environ.get(var) for var, _ in knobs)
    memo = (key, raw)
    hit = _ENV_MEMO.get(memo)
    if hit is not None:
        return hit
    raw = tuple(os.fsdecode(v) if isinstance(v, bytes) else v for v in raw)
    out: dict[str, tuple[Any, str]] = {}
    allowed = space(key)
    for (var, param), value in zip(knobs, raw):
        if value is None or not value.strip():
            continue
        text = value.strip()
        parsed: Any = int(text) if text.isdigit() else text
        if parsed not in allowed[param]:
            raise ValueError(f"{var}={value!r} is not one of {', '.join(map(str, allowed[param]))}")
        out[param] = (parsed, var)
    if len(_ENV_MEMO) > 256:
        _ENV_MEMO.clear()
    _ENV_MEMO[memo] = out
    return out
