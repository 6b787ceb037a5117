"""``matmul`` ([M, K] x [K, N]) and ``bmm`` ([B, M, K] x [B, K, N]) in Triton.

Two kernels, picked by the config's ``kernel`` key:

* ``tiled``: one program per [BLOCK_M, BLOCK_N] tile of C (per batch: the batch is grid axis 1),
  a BLOCK_K loop with fp32 accumulation, tiles visited in groups of GROUP_M rows so neighbouring
  programs share A's rows and B's columns in L2. Any strides: a transposed input is read in place.
  Masks on K, and out-of-range rows/columns of A and B wrapped (``% M``, ``% N``) and never stored.
* ``persistent_tma`` (Hopper and later): one program per SM walks the tiles, loading A and B
  through TMA tensor descriptors (out-of-range reads are zeros, stores are clipped by the
  hardware). Each operand may be row-major or a transposed view of a row-major tensor (the
  layouts of a linear: ``x @ W.T`` "nt", ``g @ W`` "nn", ``g.T @ x`` "tn"): the descriptor spans
  the stored tensor and the tile is transposed on the way to ``tl.dot``, as Triton's
  persistent-matmul tutorial loads B. It needs a CUDA device of compute capability >= 9,
  16-byte-aligned base pointers and row strides; elsewhere the launch takes ``tiled``.

With no config given, :func:`matmul` takes the layout table's config for the problem
(``spaces.gemm_default``: by layout and (M, N, K) bucket), else the skinny or square default.

Both kernels share an epilogue on the fp32 accumulator (constexprs, all off for ``matmul``):
``HAS_BIAS`` adds a bias over N, ``ACT`` applies GELU (``ACT_GELU_TANH`` or ``ACT_GELU_ERF``) and
``STORE_Z`` also writes the pre-activation ``z = acc + bias`` (what GELU's backward needs).
``xrt.kernels.triton.linear_gelu`` launches them so.

Shared memory per program is ``num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * element size``, plus
the C tile the TMA kernel stores from (half of it with ``EPILOGUE_SUBTILE``); a config over
``SMEM_BUDGET`` (fp32 with the 16-bit tiles, say) is shrunk by :func:`fit`: fewer stages first,
then a smaller BLOCK_K.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from xrt.kernels import checks, spaces
from xrt.kernels.launch_spec import Desc, LaunchSpec
from xrt.kernels.triton.launch import HostDesc, Kept, Launcher, cdiv, traced

# ACT values of the epilogue: none, GELU's tanh approximation, exact GELU (erf).
ACT_NONE, ACT_GELU_TANH, ACT_GELU_ERF = 0, 1, 2
SMEM_BUDGET = 220 * 1024  # bytes of tiles per program (H100: 227 KiB a block; the rest for barriers)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _tile_pid(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M rows of tiles are walked column by column (L2 reuse)."""
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % group_m
    pid_n = (tile % per_group) // group_m
    return pid_m, pid_n


@triton.jit
def gelu(z, ACT: tl.constexpr):
    """GELU of fp32 ``z``: the tanh approximation (``ACT_GELU_TANH``) or exact (erf)."""
    if ACT == 1:
        u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        t = 1.0 - 2.0 / (1.0 + tl.exp(2.0 * u))  # tanh(u), finite at both ends
        return 0.5 * z * (1.0 + t)
    return 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))


@triton.jit
def _epilogue(acc, bias_ptr, cn, N, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    """``(z, out)`` of an fp32 tile: z = acc + bias[cn] (when HAS_BIAS), out = act(z)."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cn, mask=cn < N, other=0.0).to(tl.float32)[None, :]
    if ACT != 0:
        return acc, gelu(acc, ACT)
    return acc, acc


@triton.jit
def _matmul_kernel(
    a_ptr,  # [B, M, K] (or [M, K], B = 1), any strides
    b_ptr,  # [B, K, N] (or [K, N]), any strides
    c_ptr,  # [B, M, N] output, a's dtype, any strides (the launcher passes a contiguous one)
    bias_ptr,  # [N] bias (read when HAS_BIAS; any pointer otherwise)
    z_ptr,  # [B, M, N] pre-activation output, c's strides (written when STORE_Z; any pointer otherwise)
    M, N, K,
    stride_ab, stride_am, stride_ak,  # A's strides in elements (stride_ab 0 for matmul)
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr,  # tl.dot input precision: "ieee" for fp32 (no tf32), "tf32" otherwise
    HAS_BIAS: tl.constexpr,  # epilogue: add bias over N
    ACT: tl.constexpr,  # epilogue: ACT_NONE, ACT_GELU_TANH or ACT_GELU_ERF
    STORE_Z: tl.constexpr,  # epilogue: also store the pre-activation to z_ptr
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _tile_pid(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
    batch = tl.program_id(1).to(tl.int64)
    a_ptr += batch * stride_ab
    b_ptr += batch * stride_bb
    c_ptr += batch * stride_cb
    # Rows past M and columns past N wrap onto valid ones: loads need no mask there, and the
    # results they produce are never stored.
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=rk[None, :] < left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs = cm[:, None] * stride_cm + cn[None, :] * stride_cn
    cmask = (cm[:, None] < M) & (cn[None, :] < N)
    z, out = _epilogue(acc, bias_ptr, cn, N, HAS_BIAS, ACT)
    if STORE_Z:
        tl.store(z_ptr + batch * stride_cb + offs, z.to(z_ptr.dtype.element_ty), mask=cmask)
    tl.store(c_ptr + offs, out.to(c_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _matmul_tma_kernel(
    a_desc,  # TMA descriptor of A [B, M, K] row-major, block [1, BLOCK_M, BLOCK_K]; A_T: of A^T [B, K, M]
    b_desc,  # TMA descriptor of B [B, K, N] row-major, block [1, BLOCK_K, BLOCK_N]; B_T: of B^T [B, N, K]
    c_desc,  # TMA descriptor of C [B, M, N], row-major, block [1, BLOCK_M, BLOCK_N] (subtiled: BLOCK_N // 2)
    bias_ptr,  # [N] bias (read when HAS_BIAS)
    z_desc,  # TMA descriptor of the pre-activation [B, M, N], blocks as C's (written when STORE_Z; else c_desc)
    M, N, K, BATCH,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,  # programs launched, one per SM
    PRECISION: tl.constexpr,
    A_T: tl.constexpr,  # A is a column-major view (g.T of a weight gradient): its tile is loaded [K, M]
    B_T: tl.constexpr,  # B is a column-major view (W.T of a linear): its tile is loaded [N, K]
    EPILOGUE_SUBTILE: tl.constexpr,  # store C in two [BLOCK_M, BLOCK_N / 2] halves (a smaller C buffer)
    WARP_SPECIALIZE: tl.constexpr,  # producer / consumer warps on the tile loop (where Triton does it)
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, STORE_Z: tl.constexpr,  # the epilogue, as _matmul_kernel's
):
    _tma_tiles(a_desc, b_desc, c_desc, bias_ptr, z_desc, M, N, K, BATCH, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
               NUM_SMS, PRECISION, A_T, B_T, EPILOGUE_SUBTILE, WARP_SPECIALIZE, HAS_BIAS, ACT, STORE_Z)


@triton.jit
def _matmul_tma_dev_kernel(
    a_ptr, b_ptr, c_ptr,  # A, B (each as stored: A^T [B, K, M] where A_T, B^T [B, N, K] where B_T) and C [B, M, N]
    bias_ptr,  # [N] bias (read when HAS_BIAS)
    z_ptr,  # the pre-activation [B, M, N], C's strides (written when STORE_Z)
    M, N, K, BATCH,
    stride_a0, stride_a1, stride_b0, stride_b1, stride_c0, stride_c1,  # batch and row strides; the last are 1
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, PRECISION: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, STORE_Z: tl.constexpr,
):
    """``_matmul_tma_kernel`` with its descriptors made on the device (``tl.make_tensor_descriptor``,
    in Triton's scratch memory): what a compiled graph launches, where no host descriptor is made
    per call. The launcher must give Triton an allocator (Inductor's does)."""
    if A_T:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[BATCH, K, M], strides=[stride_a0, stride_a1, 1],
                                           block_shape=[1, BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[BATCH, M, K], strides=[stride_a0, stride_a1, 1],
                                           block_shape=[1, BLOCK_M, BLOCK_K])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[BATCH, N, K], strides=[stride_b0, stride_b1, 1],
                                           block_shape=[1, BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[BATCH, K, N], strides=[stride_b0, stride_b1, 1],
                                           block_shape=[1, BLOCK_K, BLOCK_N])
    c_desc = _out_desc(c_ptr, M, N, BATCH, stride_c0, stride_c1, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
    if STORE_Z:
        z_desc = _out_desc(z_ptr, M, N, BATCH, stride_c0, stride_c1, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
    else:
        z_desc = c_desc
    _tma_tiles(a_desc, b_desc, c_desc, bias_ptr, z_desc, M, N, K, BATCH, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
               NUM_SMS, PRECISION, A_T, B_T, EPILOGUE_SUBTILE, WARP_SPECIALIZE, HAS_BIAS, ACT, STORE_Z)


@triton.jit
def _out_desc(ptr, M, N, BATCH, stride0, stride1, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              SUBTILE: tl.constexpr):
    """The device descriptor of an output [BATCH, M, N]: blocks of [1, BLOCK_M, BLOCK_N] (halves when subtiled)."""
    if SUBTILE:
        desc = tl.make_tensor_descriptor(ptr, shape=[BATCH, M, N], strides=[stride0, stride1, 1],
                                         block_shape=[1, BLOCK_M, BLOCK_N // 2])
    else:
        desc = tl.make_tensor_descriptor(ptr, shape=[BATCH, M, N], strides=[stride0, stride1, 1],
                                         block_shape=[1, BLOCK_M, BLOCK_N])
    return desc


@triton.jit
def _tma_tiles(a_desc, b_desc, c_desc, bias_ptr, z_desc, M, N, K, BATCH,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               NUM_SMS: tl.constexpr, PRECISION: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
               EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
               HAS_BIAS: tl.constexpr, ACT: tl.constexpr, STORE_Z: tl.constexpr):
    """The persistent TMA GEMM's loop over this program's tiles, on descriptors made by its caller."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_batch = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), per_batch * BATCH, NUM_SMS, flatten=True,
                         warp_specialize=WARP_SPECIALIZE):
        batch = tile // per_batch
        pid_m, pid_n = _tile_pid(tile % per_batch, num_pid_m, num_pid_n, GROUP_M)
        om = pid_m * BLOCK_M
        on = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            ok = kt * BLOCK_K
            # A transposed 16-bit tile in shared memory is an operand layout wgmma reads as it is.
            if A_T:
                a = a_desc.load([batch, ok, om]).reshape(BLOCK_K, BLOCK_M).T
            else:
                a = a_desc.load([batch, om, ok]).reshape(BLOCK_M, BLOCK_K)
            if B_T:
                b = b_desc.load([batch, on, ok]).reshape(BLOCK_N, BLOCK_K).T
            else:
                b = b_desc.load([batch, ok, on]).reshape(BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        z, out = _epilogue(acc, bias_ptr, on + tl.arange(0, BLOCK_N), N, HAS_BIAS, ACT)
        if EPILOGUE_SUBTILE:
            out0, out1 = tl.split(tl.permute(tl.reshape(out, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([batch, om, on], out0.to(c_desc.dtype).reshape(1, BLOCK_M, BLOCK_N // 2))
            c_desc.store([batch, om, on + BLOCK_N // 2], out1.to(c_desc.dtype).reshape(1, BLOCK_M, BLOCK_N // 2))
            if STORE_Z:
                z0, z1 = tl.split(tl.permute(tl.reshape(z, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
                z_desc.store([batch, om, on], z0.to(z_desc.dtype).reshape(1, BLOCK_M, BLOCK_N // 2))
                z_desc.store([batch, om, on + BLOCK_N // 2], z1.to(z_desc.dtype).reshape(1, BLOCK_M, BLOCK_N // 2))
        else:
            if STORE_Z:
                z_desc.store([batch, om, on], z.to(z_desc.dtype).reshape(1, BLOCK_M, BLOCK_N))
            c_desc.store([batch, om, on], out.to(c_desc.dtype).reshape(1, BLOCK_M, BLOCK_N))


@triton.jit
def _sum_splits_kernel(part_ptr, c_ptr, numel, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    # C = the sum of SPLIT fp32 partial products [SPLIT, numel], in fp32, stored in C's dtype
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.load(part_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        acc += tl.load(part_ptr + s * numel + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


_tiled = Launcher(_matmul_kernel)
_tma = Launcher(_matmul_tma_kernel)
_tma_dev = Launcher(_matmul_tma_dev_kernel, scratch=("a_ptr", "b_ptr", "c_ptr", "z_ptr"))  # the descriptor bases
# Whether a trace (torch.compile) records the TMA kernel, which makes its descriptors on the device,
# where the operands allow it (:func:`_traced_tma_ok`); false: the tiled kernel, as eager off Hopper.
# It needs Triton's device descriptors and scratch allocator, and a torch whose trace sees a
# descriptor store as a write to its tensor (torch 2.8).
DEVICE_DESCRIPTORS = [hasattr(triton, "set_allocator") and hasattr(tl, "make_tensor_descriptor")
                      and tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 8)]
# The multiply-adds (B M N K) from which a trace takes the TMA kernel. A compiled graph launches it
# with scratch memory for its descriptors, which costs host time a launch: below this bound a GEMM
# takes a few µs on Hopper and the tiled kernel is kept. Measured on the H200 (compiled GPT steps,
# benchmarks/compiled_tma_ab.py, docs/kernels.md): with every GEMM of the d 768 model on TMA (each
# at least 4.8e9), its inference step took 1.46 ms where the tiled kernels took 1.77, and its train
# step's GPU time fell from 5.28 to 5.01 ms; at d 1024 the out projection (8.6e9) did not move.
TRACED_TMA_MIN_WORK = 2**30
_sum_splits = Launcher(_sum_splits_kernel)
SUM_BLOCK = 1024


def smem_bytes(cfg: dict[str, Any], esize: int, bk: int, stages: int, c_esize: int | None = None) -> int:
    """Shared memory of a program: the pipelined A and B tiles, and the TMA kernel's C tile (half of
    it when the epilogue is subtiled; ``c_esize`` bytes an element, the operands' unless given)."""
    return spaces.gemm_smem(cfg, esize, bk, stages, c_esize)


def fit(cfg: dict[str, Any], esize: int, c_esize: int | None = None) -> tuple[int, int]:
    """``(BLOCK_K, num_stages)`` of ``cfg`` shrunk until its tiles fit ``SMEM_BUDGET``."""
    bk, stages = int(cfg["BLOCK_K"]), int(cfg["num_stages"])
    while smem_bytes(cfg, esize, bk, stages, c_esize) > SMEM_BUDGET:
        if stages > 2:
            stages -= 1
        elif bk > 16:
            bk //= 2
        else:
            break
    return bk, stages


def major(t: torch.Tensor) -> str:
    """``"n"`` where ``t`` [(B,) rows, cols] is row-major (last stride 1), ``"t"`` where it is a
    column-major view (a transposed row-major tensor: ``W.T``, ``g.T``), ``"-"`` otherwise."""
    if t.stride(-1) == 1:
        return "n"
    return "t" if t.stride(-2) == 1 else "-"


def _stored(t: torch.Tensor) -> torch.Tensor:
    """``t`` [rows, cols] as stored: ``t.mT`` for a column-major view (the same address and memory)."""
    return t.mT if major(t) == "t" else t


def layout(a: torch.Tensor, b: torch.Tensor) -> str:
    """The BLAS layout of ``a @ b`` ([(B,) M, K] x [(B,) K, N] views): ``"nn"`` (both row-major),
    ``"nt"`` (``x @ W.T``: a linear's forward), ``"tn"`` (``g.T @ x``: its weight gradient), ``"tt"``;
    ``"-"`` in a letter's place for a view that is neither (the tiled kernel reads it)."""
    return major(a) + major(b)


_TMA_DEVICES: dict[Any, bool] = {}
_WS_BROKEN: set[Any] = set()  # (device, config) where a warp-specialized compile failed


def tma_ok(*ts: torch.Tensor) -> bool:
    """Can the TMA kernel take these [B, rows, cols] tensors: Hopper or later, each row-major or a
    column-major view (:func:`major`), its other strides and its base 16-byte aligned (TMA's rules)."""
    t0 = ts[0]
    if not t0.is_cuda:
        return False
    if traced(t0):
        return _traced_tma_ok(ts)
    return _tma_device(t0.device) and all(_tma_layout_ok(t, t.data_ptr()) for t in ts)


def _tma_layout_ok(t: torch.Tensor, address: int) -> bool:
    """TMA's rules for one [B, rows, cols] operand at byte ``address``: row-major or a column-major
    view (:func:`major`), the address and the outer strides 16-byte aligned."""
    kind = major(t)
    if kind == "-" or address % 16:
        return False
    es = t.element_size()
    return not any((t.stride(d) * es) % 16 for d in ((0, 1) if kind == "n" else (0, 2)))


def _tma_device(device: torch.device) -> bool:
    """Is ``device`` (CUDA) Hopper or later?"""
    dev = device.index if device.index is not None else torch.cuda.current_device()
    ok = _TMA_DEVICES.get(dev)
    if ok is None:
        ok = _TMA_DEVICES[dev] = torch.cuda.get_device_capability(dev)[0] >= 9
    return ok


def _traced_tma_ok(ts: tuple[torch.Tensor, ...]) -> bool:
    """:func:`tma_ok` for a trace's tensors (``torch.compile``), whose graph launches
    ``_matmul_tma_dev_kernel``: no address to read, so the view's offset into its storage must be
    16-byte aligned. Inductor keeps its buffers aligned and copies a misaligned input; a graph run
    by another backend checks its inputs when it launches (``launch.Launcher``'s scratch kernels).
    Static sizes, strides and offsets only, and at least
    ``TRACED_TMA_MIN_WORK`` multiply-adds."""
    if not DEVICE_DESCRIPTORS[0] or not _tma_device(ts[0].device):
        return False
    for t in ts:
        if not all(type(x) is int for x in (*t.shape, *t.stride(), t.storage_offset())):
            return False
    (batch, m, k), n = ts[0].shape, ts[1].shape[2]
    if batch * m * n * k < TRACED_TMA_MIN_WORK:
        return False
    return all(_tma_layout_ok(t, t.storage_offset() * t.element_size()) for t in ts)


def check_pair(op: str, a: torch.Tensor, b: torch.Tensor, rank: int) -> None:
    """:func:`xrt.kernels.checks.gemm`, and a dtype the kernels take."""
    checks.gemm(op, a, b, rank)
    if a.dtype not in DTYPES:
        raise ValueError(f"Triton {op}: dtype {a.dtype} is not supported; supported: {', '.join(map(str, DTYPES))}")


def _desc_spec(t: torch.Tensor, rows: int, cols: int) -> tuple[tuple, tuple, list[int]]:
    """(shape, strides, block) of the host TMA descriptor of a [B, rows, cols] tile of ``t``: the
    stored tensor's, so a column-major view (``W.T``) is described as its row-major transpose."""
    if major(t) == "t":
        return (t.shape[0], t.shape[2], t.shape[1]), (t.stride(0), t.stride(2), t.stride(1)), [1, cols, rows]
    return tuple(t.shape), tuple(t.stride()), [1, rows, cols]


def launch_tma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bm: int, bn: int, bk: int, group: int,
               programs: int, precision: str, warps: int = 8, stages: int = 3, subtile: bool = False,
               warp_specialize: bool = False, epilogue: Epilogue | None = None,
               device_descriptors: bool | None = None,
               operands: tuple[torch.Tensor, torch.Tensor] | None = None) -> _TmaPlan | None:
    """The persistent TMA kernel over [B, M, K] x [B, K, N] -> ``epilogue(c)`` [B, M, N], ``programs``
    programs (one per SM; fewer when there are fewer tiles). ``a`` and ``b`` may each be row-major
    or a column-major view (:func:`major`): the descriptor then spans the stored tensor and the
    kernel transposes the tile, so no copy is made (a Linear's weight is read as it is stored).
    Also runs under the interpreter. Returns the plan that repeats this launch for tensors of the
    same shapes, strides and dtypes (:class:`_TmaPlan`), where the Launcher kept a compiled kernel.
    ``device_descriptors`` (default: in a trace) launches ``_matmul_tma_dev_kernel`` instead, which
    makes its descriptors on the device (no plan); it takes ``operands`` (2-D tensors that ``a`` and
    ``b`` view) for A and B where given."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    batch, m, k = a.shape
    n = b.shape[2]
    sms = programs
    programs = min(programs, batch * cdiv(m, bm) * cdiv(n, bn))
    ep = epilogue or NO_EPILOGUE
    block_n = bn // 2 if subtile else bn
    specs = (_desc_spec(a, bm, bk), _desc_spec(b, bk, bn), _desc_spec(c, bm, block_n))
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, NUM_SMS=sms, PRECISION=precision,
                A_T=major(a) == "t", B_T=major(b) == "t", EPILOGUE_SUBTILE=subtile,
                WARP_SPECIALIZE=warp_specialize and c.is_cuda, HAS_BIAS=ep.bias is not None, ACT=ep.act,
                STORE_Z=ep.z is not None)
    if device_descriptors is None:
        device_descriptors = traced(c)
    if device_descriptors:
        # A trace (torch.compile): the graph launches the kernel that makes its descriptors on the
        # device. A host descriptor would be made before each launch by the graph's Python, tens
        # of microseconds a GEMM.
        strides = [st for _, st, _ in specs]
        pa, pb = operands or (a, b)
        spare_bias, spare_z = _spare(pa, pb)
        _tma_dev((programs,), pa, pb, c, ep.bias if ep.bias is not None else spare_bias,
                 ep.z if ep.z is not None else spare_z, m, n, k, batch, strides[0][0], strides[0][1],
                 strides[1][0], strides[1][1], strides[2][0], strides[2][1], num_warps=warps, num_stages=stages,
                 **meta)
        return None
    descs = [TensorDescriptor(t, *spec) for t, spec in zip((a, b, c), specs)]
    z_desc = TensorDescriptor(ep.z, *specs[2]) if ep.z is not None else descs[2]
    args = (*descs, ep.bias if ep.bias is not None else c, z_desc, m, n, k, batch)
    _tma((programs,), *args, num_warps=warps, num_stages=stages, **meta)
    if not c.is_cuda:
        return None
    kept = Kept.of(_tma, args, warps, stages, meta)
    return None if kept is None else _TmaPlan(kept, (programs,), specs, (m, n, k, batch))


def _spare(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What a launch passes for the epilogue pointers it does not use (bias, z): B for both. Never C:
    a trace (torch.compile) must not see the output passed as three arguments, or its functional
    copy of C may not be the one written. Not A: in a compiled backward A is often a pointwise
    result (a gradient) that Inductor has not stored yet, and it stores it once more for each
    argument that names it (measured: four stores of the MLP's [8192, 4096] gradient, not two). B is
    a weight or a saved activation, a buffer the graph already holds."""
    return b, b


class _TmaPlan(NamedTuple):
    """A TMA GEMM launch made once for a signature (:func:`plan_key`) and repeated: the kept
    compiled kernel, its grid, the descriptors' (shape, strides, block) of A, B and C, and the
    sizes. A call then checks the tensors' alignment and launches (tens of microseconds less
    than :func:`run`'s first path, which the model's GEMMs paid on every call)."""

    kept: Kept
    grid: tuple[int]
    specs: tuple
    sizes: tuple[int, int, int, int]

    def __call__(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None = None,
                 z: torch.Tensor | None = None) -> bool:
        """Launch on these tensors (only their addresses are read: ``a``, ``b`` and ``c`` may be
        any tensors that start where the planned views start), or ``False`` where one is not
        16-byte aligned or the kept kernel cannot launch now."""
        pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
        pz = z.data_ptr() if z is not None else 0
        pbias = bias.data_ptr() if bias is not None else 0
        if (pa | pb | pc | pz | pbias) & 15:  # the kept kernel was specialised on 16-byte-aligned pointers
            return False

        def args() -> tuple:
            (sa, sb, sc) = self.specs
            cd = HostDesc(c, *sc)
            return (HostDesc(a, *sa), HostDesc(b, *sb), cd, bias if bias is not None else c,
                    HostDesc(z, *sc) if z is not None else cd, *self.sizes)

        return self.kept.launch_memo((pa, pb, pc, pz, pbias), self.grid, args)

    def native(self, a: str, b: str, c: str, bias: str | None = None) -> tuple[LaunchSpec, tuple] | None:
        """This launch for a launcher outside Python (the native linear, ``xrt.pytorch.ops.native``):
        its :class:`LaunchSpec` and the template of the arguments :meth:`__call__` passes, the
        tensors named by slots ``a``, ``b``, ``c`` (and ``bias``, where the plan has one; no z).
        ``None`` where it cannot be described (:meth:`Kept.native`)."""
        spec = self.kept.native(self.grid)
        if spec is None:
            return None
        (sa, sb, sc) = ((shape, strides) for shape, strides, _ in self.specs)
        cd = Desc(c, *sc)
        return spec, (Desc(a, *sa), Desc(b, *sb), cd, bias if bias is not None else c, cd, *self.sizes)


def plan_key(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, cfg: dict[str, Any], ep: Epilogue) -> tuple:
    """What a TMA launch's plan depends on besides the pointers: shapes, strides, dtypes (C's may be
    another: split K's fp32 partials), device, config and epilogue (a bias is [N] and contiguous, of
    C's dtype; z is shaped, strided and typed as C)."""
    return (a.shape, a.stride(), b.shape, b.stride(), c.stride(), a.dtype, b.dtype, c.dtype, a.device,
            tuple(cfg.items()), ep.bias is not None, ep.act, ep.z is not None)


_PLANS: dict[tuple, _TmaPlan | None] = {}


class Epilogue(NamedTuple):
    """What the GEMM does to its fp32 tile before storing C: add ``bias`` ([N], or None), apply
    ``act`` (``ACT_*``), and store the pre-activation into ``z`` (shaped as C, or None)."""

    bias: torch.Tensor | None = None
    act: int = ACT_NONE
    z: torch.Tensor | None = None


NO_EPILOGUE = Epilogue()


def _launch_tma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, cfg: dict[str, Any], bm: int, bn: int,
                bk: int, stages: int, group: int, warps: int, precision: str, ep: Epilogue,
                operands: tuple[torch.Tensor, torch.Tensor] | None = None) -> _TmaPlan | None:
    """:func:`launch_tma` with ``cfg``'s knobs; where Triton cannot compile its warp specialization
    here, the plain loop from then on."""
    from xrt.kernels.cuda import sm_count

    subtile = bool(cfg.get("EPILOGUE_SUBTILE", False))  # linear_gelu's space has neither knob: off
    # A trace's launch compiles later, where a failed warp specialization could not fall back: off.
    ws = (bool(cfg.get("warp_specialize", False)) and (a.device, tuple(cfg.items())) not in _WS_BROKEN
          and not traced(a))
    try:
        return launch_tma(a, b, c, bm, bn, bk, group, sm_count(a.device), precision, warps, stages, subtile, ws, ep,
                          operands=operands)
    except Exception:
        if not ws:
            raise
        _WS_BROKEN.add((a.device, tuple(cfg.items())))
        return launch_tma(a, b, c, bm, bn, bk, group, sm_count(a.device), precision, warps, stages, subtile,
                          False, ep, operands=operands)


def run(a: torch.Tensor, b: torch.Tensor, cfg: dict[str, Any], epilogue: Epilogue | None = None,
        c: torch.Tensor | None = None, operands: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """C = epilogue(A @ B) for [B, M, K] x [B, K, N] views (batch strides may be 0), into ``c``
    ([B, M, N], contiguous; K > 0 and nothing empty) when given. A transposed view (``weight.mT``)
    is read as it is stored (:func:`launch_tma`). ``operands``: the 2-D tensors that ``a`` and ``b``
    ([1, ...]) view, passed to the kernel in their place (:func:`gemm_planned`)."""
    batch, m, k = a.shape
    n = b.shape[2]
    ep = epilogue or NO_EPILOGUE
    if c is None:
        c, done = checks.gemm_output(a, b)
        if done:  # empty, or K = 0 (zeros): callers with an epilogue handle K = 0 themselves
            return c
    split = cfg.get("SPLIT_K", 1)
    if split > 1 and batch == 1 and epilogue is None and spaces.split_ok(k, split, cfg["BLOCK_K"]):
        return _split_k(a, b, c, cfg, split, operands)
    bm, bn, group, warps = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["GROUP_M"], cfg["num_warps"]
    bk, stages = fit(cfg, a.element_size(), c.element_size())
    precision = "ieee" if a.dtype == torch.float32 else "tf32"
    z = () if ep.z is None else (ep.z,)
    if cfg["kernel"] == "persistent_tma":
        # A plan for real CUDA tensors only (a trace's fake tensors have no address to launch with)
        key = plan_key(a, b, c, cfg, ep) if a.__class__ is torch.Tensor and a.is_cuda else None
        plan = _PLANS.get(key) if key is not None else None
        if plan is not None and plan(a, b, c, ep.bias, ep.z):
            return c
        if tma_ok(a, b, c, *z):
            plan = _launch_tma(a, b, c, cfg, bm, bn, bk, stages, group, warps, precision, ep, operands)
            if key is not None:
                if len(_PLANS) > 4096:
                    _PLANS.clear()
                _PLANS[key] = plan
            return c
    pa, pb = operands or (a, b)
    spare_bias, spare_z = _spare(pa, pb)
    _tiled((cdiv(m, bm) * cdiv(n, bn), batch), pa, pb, c, ep.bias if ep.bias is not None else spare_bias,
           ep.z if ep.z is not None else spare_z, m, n, k,
           a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
           c.stride(0), c.stride(1), c.stride(2),
           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, PRECISION=precision,
           HAS_BIAS=ep.bias is not None, ACT=ep.act, STORE_Z=ep.z is not None, num_warps=warps, num_stages=stages)
    return c


def _split_k(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, cfg: dict[str, Any], split: int,
             operands: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """C [1, M, N] = A @ B with K cut into ``split`` parts: the parts are a batch of ``split`` GEMMs
    (views of A and B, batch stride K / split, no copy) into fp32 partial products, which one more
    kernel sums into C. For a narrow C over a long K (a linear's weight gradient, 1024 x 1024 over
    K = 8192: 64 tiles for 132 SMs), ``split`` times the tiles, at the cost of the partials'
    traffic (``split`` x M x N x 4 bytes written and read)."""
    _, m, k = a.shape
    n = b.shape[2]
    ks = k // split
    a2 = a.as_strided((split, m, ks), (ks * a.stride(2), a.stride(1), a.stride(2)))
    b2 = b.as_strided((split, ks, n), (ks * b.stride(1), b.stride(1), b.stride(2)))
    part = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    one = dict(cfg)
    one["SPLIT_K"] = 1
    run(a2, b2, one, c=part, operands=operands)  # (the parts start where a and b do)
    numel = m * n
    _sum_splits((cdiv(numel, SUM_BLOCK),), part, c, numel, SPLIT=split, BLOCK=SUM_BLOCK, num_warps=4)
    return c


_LAYOUT_DEFAULTS: dict[tuple[str, int, int, int], Any] = {}


def default_config(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None) -> Any:
    """``config`` checked (``matmul.triton``); where it is the default, the layout table's config
    for this problem (``spaces.gemm_default``: by layout and (M, N, K) bucket), else the skinny or
    square default (``spaces.SHAPE_DEFAULTS``). Memoized per (layout, M, N, K)."""
    cfg = checks.tuning("matmul.triton", config)
    if not cfg.is_default:
        return cfg
    m, n, k = (checks.size_hint(d) for d in (a.shape[0], b.shape[1], a.shape[1]))
    key = (layout(a, b), m, n, k)
    hit = _LAYOUT_DEFAULTS.get(key)
    if hit is None:
        found = spaces.gemm_default(key[0], m, n, k)
        hit = checks.tuning("matmul.triton", found) if found else checks.effective_config("matmul.triton", m, None)
        if len(_LAYOUT_DEFAULTS) > 4096:
            _LAYOUT_DEFAULTS.clear()
        _LAYOUT_DEFAULTS[key] = hit
    return hit


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``a @ b`` for ``a`` [M, K] and ``b`` [K, N] (fp16, bf16 or fp32, any strides) -> [M, N]
    contiguous, a's dtype; ``config`` from the ``matmul.triton`` space (default: the layout table's)."""
    return gemm_planned(a, b, None, config, plan=False)[0]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, config: dict[str, Any] | None = None
           ) -> torch.Tensor | None:
    """``x @ weight.T + bias`` for ``x`` [M, K], ``weight`` [N, K] and ``bias`` [N] (one dtype) -> [M, N]
    contiguous: :func:`matmul` of ``x`` and ``weight.mT`` with the bias added in the GEMM's epilogue
    (no second pass over the output). ``config`` as :func:`matmul`'s. ``None`` where that config
    splits K (split K has no epilogue), and for K = 0 (no GEMM runs): then the caller adds the bias."""
    return gemm_planned(x, weight.mT, bias.contiguous(), config, plan=False)[0]


class GemmPlan(NamedTuple):
    """``a @ b (+ bias)`` for 2-D operands of one signature (shapes, strides, dtype, device): made
    once by :func:`gemm_planned`, then each call allocates C and launches the kept TMA kernel. Its
    owner keys it by that signature and keeps the config's owner's lifetime (a tuned config that
    changes must drop it). The launch reads only the operands' addresses, so a call may pass the
    tensors the planned views were made of (``x`` for its rows ``x.reshape(-1, K)``, ``W`` for
    ``W.T``), and C is allocated in ``shape``: [M, N], or [..., N] for rows folded from more dims."""

    tma: _TmaPlan
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    def __call__(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor | None:
        """C for these operands of the plan's signature, or ``None`` where the launch cannot be
        repeated (an operand not 16-byte aligned, launch hooks set, another current device, a
        cleared Launcher: then :meth:`stale`)."""
        if not self.tma.kept.ready():
            return None
        c = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        return c if self.tma(a, b, c, bias) else None

    def stale(self) -> bool:
        """Will it never launch again (its Launcher was cleared)? Its owner makes it anew."""
        return self.tma.kept.stale()


def gemm_planned(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, config: dict[str, Any] | None = None,
                 shape: tuple[int, ...] | None = None, plan: bool = True
                 ) -> tuple[torch.Tensor | None, GemmPlan | None]:
    """``a @ b`` for ``a`` [M, K] and ``b`` [K, N], plus ``bias`` ([N], contiguous) in the epilogue
    when given (:func:`linear` and :func:`matmul` are this without the plan), and the
    :class:`GemmPlan` that repeats it; ``(None, None)`` where :func:`linear` returns ``None``. The
    plan is ``None`` where the launch took no kept TMA kernel (the tiled kernel, split K, the
    interpreter, an unaligned operand) and where ``plan`` is false. ``shape``: the plan's output
    shape (default [M, N]; its product must be M N)."""
    check_pair("linear" if bias is not None else "matmul", a, b, 2)
    if bias is not None and (bias.dim() != 1 or bias.stride(0) != 1 and bias.numel() > 1):
        raise ValueError(f"Triton linear: bias must be a contiguous [N] tensor, got shape {tuple(bias.shape)} "
                         f"and strides {bias.stride()}")
    cfg = default_config(a, b, config)
    if bias is not None and (cfg.get("SPLIT_K", 1) > 1 or a.shape[1] == 0):
        return None, None
    a3, b3 = a.unsqueeze(0), b.unsqueeze(0)
    c3, done = checks.gemm_output(a3, b3)
    if done:
        return c3[0], None
    ep = Epilogue(bias) if bias is not None else NO_EPILOGUE
    # The kernel gets the tensors as stored (g for a g.T operand): in a compiled graph Inductor stores
    # a gradient it has not stored yet once for each view of it a kernel takes, in that view's layout
    # (the [1, M, K] view, and g.T as a transposed copy). As stored, the copies are row-major.
    run(a3, b3, cfg, ep if bias is not None else None, c=c3, operands=(_stored(a), _stored(b)))  # (split K may run)
    key = plan_key(a3, b3, c3, cfg, ep) if plan and a3.__class__ is torch.Tensor and a.is_cuda else None
    tma = _PLANS.get(key) if key is not None else None
    out = (a.shape[0], b.shape[1]) if shape is None else tuple(shape)
    return c3[0], None if tma is None else GemmPlan(tma, out, a.dtype, a.device)


def gemm_launches(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None, names: tuple[str, str, str],
                  part: str) -> tuple[list[tuple[LaunchSpec, tuple]], int] | None:
    """Run ``a @ b`` once (:func:`gemm_planned`, on CUDA) and describe its launches for a launcher
    outside Python: ``([(LaunchSpec, template), ...], partials)``, the tensors named by the slots
    ``names`` (A, B, C) and ``part``. One kept TMA launch (``partials`` 0), or split K's two: the
    batched TMA GEMM into fp32 partials (``partials`` elements, slot ``part``, which the caller
    allocates) and their sum into C. ``None`` where it took another path or a launch was not kept."""
    c, plan = gemm_planned(a, b, None, config)
    if plan is not None:
        described = plan.tma.native(*names)
        return None if described is None else ([described], 0)
    cfg = default_config(a, b, config)
    split, k = cfg.get("SPLIT_K", 1), a.shape[1]
    if c is None or split == 1 or not spaces.split_ok(k, split, cfg["BLOCK_K"]) or not a.is_cuda:
        return None
    # the views _split_k launched on: the same shapes and strides key the same kept launches
    a3, b3 = a.unsqueeze(0), b.unsqueeze(0)
    m, n, ks = a.shape[0], b.shape[1], k // split
    a2 = a3.as_strided((split, m, ks), (ks * a3.stride(2), a3.stride(1), a3.stride(2)))
    b2 = b3.as_strided((split, ks, n), (ks * b3.stride(1), b3.stride(1), b3.stride(2)))
    partials = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    one = dict(cfg)
    one["SPLIT_K"] = 1
    tma = _PLANS.get(plan_key(a2, b2, partials, one, NO_EPILOGUE))
    numel = m * n
    summed = Kept.of(_sum_splits, (partials, c, numel), 4, None, {"SPLIT": split, "BLOCK": SUM_BLOCK})
    gemm = tma.native(names[0], names[1], part) if tma is not None else None
    total = summed.native((cdiv(numel, SUM_BLOCK),)) if summed is not None else None
    if gemm is None or total is None:
        return None
    return [gemm, (total, (part, names[2], numel))], split * numel


def bmm(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``torch.bmm(a, b)`` for ``a`` [B, M, K] and ``b`` [B, K, N] (any strides) -> [B, M, N]
    contiguous; ``config`` from the ``bmm.triton`` space."""
    check_pair("bmm", a, b, 3)
    cfg = checks.tuning("bmm.triton", config)
    return run(a, b, cfg)
