"""``matmul`` ([M, K] x [K, N]) and ``bmm`` ([B, M, K] x [B, K, N]) in Triton.

Two kernels, picked by the config's ``kernel`` key:

* ``tiled``: one program per [BLOCK_M, BLOCK_N] tile of C (per batch: the batch is grid axis 1),
  a BLOCK_K loop with fp32 accumulation, tiles visited in groups of GROUP_M rows so neighbouring
  programs share A's rows and B's columns in L2. Any strides: a transposed input is read in place.
  Masks on K, and out-of-range rows/columns of A and B wrapped (``% M``, ``% N``) and never stored.
* ``persistent_tma`` (Hopper and later): one program per SM walks the tiles, loading A and B
  through TMA tensor descriptors (out-of-range reads are zeros, stores are clipped by the
  hardware). It needs a CUDA device of compute capability >= 9, row-major operands (last stride 1)
  and 16-byte-aligned base pointers and row strides; elsewhere the launch takes ``tiled``.

Both kernels share an epilogue on the fp32 accumulator (constexprs, all off for ``matmul``):
``HAS_BIAS`` adds a bias over N, ``ACT`` applies GELU (``ACT_GELU_TANH`` or ``ACT_GELU_ERF``) and
``STORE_Z`` also writes the pre-activation ``z = acc + bias`` (what GELU's backward needs).
``xrt.kernels.triton.linear_gelu`` launches them so.

Shared memory per program is ``num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * element size``, plus
the C tile the TMA kernel stores from; a config over ``SMEM_BUDGET`` (fp32 with the 16-bit tiles,
say) is shrunk by :func:`fit`: fewer stages first, then a smaller BLOCK_K.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from xrt.kernels import checks
from xrt.kernels.triton.launch import Launcher, cdiv

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
    a_desc,  # TMA descriptor of A [B, M, K], row-major, block [1, BLOCK_M, BLOCK_K]
    b_desc,  # TMA descriptor of B [B, K, N], row-major, block [1, BLOCK_K, BLOCK_N]; with B_T of B's
    # transpose [B, N, K], row-major, block [1, BLOCK_N, BLOCK_K] (a Linear's weight as it is stored)
    c_desc,  # TMA descriptor of C [B, M, N], row-major, block [1, BLOCK_M, BLOCK_N]
    bias_ptr,  # [N] bias (read when HAS_BIAS)
    z_desc,  # TMA descriptor of the pre-activation [B, M, N] as C (written when STORE_Z; else c_desc)
    M, N, K, BATCH,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,  # programs launched, one per SM
    PRECISION: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, STORE_Z: tl.constexpr,  # the epilogue, as _matmul_kernel's
    B_T: tl.constexpr,  # b_desc holds B transposed (K-major B tiles, transposed in registers for the dot)
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_batch = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), per_batch * BATCH, NUM_SMS, flatten=True):
        batch = tile // per_batch
        pid_m, pid_n = _tile_pid(tile % per_batch, num_pid_m, num_pid_n, GROUP_M)
        om = pid_m * BLOCK_M
        on = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            ok = kt * BLOCK_K
            a = a_desc.load([batch, om, ok]).reshape(BLOCK_M, BLOCK_K)
            if B_T:
                b = b_desc.load([batch, on, ok]).reshape(BLOCK_N, BLOCK_K).T
            else:
                b = b_desc.load([batch, ok, on]).reshape(BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        z, out = _epilogue(acc, bias_ptr, on + tl.arange(0, BLOCK_N), N, HAS_BIAS, ACT)
        if STORE_Z:
            z_desc.store([batch, om, on], z.to(z_desc.dtype).reshape(1, BLOCK_M, BLOCK_N))
        c_desc.store([batch, om, on], out.to(c_desc.dtype).reshape(1, BLOCK_M, BLOCK_N))


_tiled = Launcher(_matmul_kernel)
_tma = Launcher(_matmul_tma_kernel)


def smem_bytes(cfg: dict[str, Any], esize: int, bk: int, stages: int) -> int:
    """Shared memory of a program: the pipelined A and B tiles, and the TMA kernel's C tile."""
    c_tile = cfg["BLOCK_M"] * cfg["BLOCK_N"] * esize if cfg["kernel"] == "persistent_tma" else 0
    return stages * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * bk * esize + c_tile


def fit(cfg: dict[str, Any], esize: int) -> tuple[int, int]:
    """``(BLOCK_K, num_stages)`` of ``cfg`` shrunk until its tiles fit ``SMEM_BUDGET``."""
    bk, stages = int(cfg["BLOCK_K"]), int(cfg["num_stages"])
    while smem_bytes(cfg, esize, bk, stages) > SMEM_BUDGET:
        if stages > 2:
            stages -= 1
        elif bk > 16:
            bk //= 2
        else:
            break
    return bk, stages


_TMA_DEVICES: dict[Any, bool] = {}


def tma_ok(*ts: torch.Tensor) -> bool:
    """Can the TMA kernel take these [B, rows, cols] tensors: Hopper or later, last stride 1, the
    other strides and the base 16-byte aligned (TMA's rules)."""
    t0 = ts[0]
    if not t0.is_cuda:
        return False
    dev = t0.device.index if t0.device.index is not None else torch.cuda.current_device()
    ok = _TMA_DEVICES.get(dev)
    if ok is None:
        ok = _TMA_DEVICES[dev] = torch.cuda.get_device_capability(dev)[0] >= 9
    if not ok:
        return False
    for t in ts:
        es = t.element_size()
        if t.stride(2) != 1 or t.data_ptr() % 16 or any((t.stride(d) * es) % 16 for d in (0, 1)):
            return False
    return True


def check_pair(op: str, a: torch.Tensor, b: torch.Tensor, rank: int) -> None:
    """:func:`xrt.kernels.checks.gemm`, and a dtype the kernels take."""
    checks.gemm(op, a, b, rank)
    if a.dtype not in DTYPES:
        raise ValueError(f"Triton {op}: dtype {a.dtype} is not supported; supported: {', '.join(map(str, DTYPES))}")


def launch_tma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bm: int, bn: int, bk: int, group: int,
               programs: int, precision: str, warps: int = 8, stages: int = 3,
               epilogue: Epilogue | None = None, b_t: bool = False) -> None:
    """The persistent TMA kernel over [B, M, K] x [B, K, N] -> ``c`` [B, M, N], ``programs``
    programs (one per SM; fewer when there are fewer tiles). ``b_t``: ``b`` is the transpose of a
    row-major [B, N, K] tensor (``weight.mT``), read as it is stored. Also runs under the interpreter."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    batch, m, k = a.shape
    n = b.shape[2]
    sms = programs
    programs = min(programs, batch * cdiv(m, bm) * cdiv(n, bn))
    ep = epilogue or NO_EPILOGUE
    c_desc = TensorDescriptor.from_tensor(c, [1, bm, bn])
    z_desc = TensorDescriptor.from_tensor(ep.z, [1, bm, bn]) if ep.z is not None else c_desc
    _tma((programs,),
         TensorDescriptor.from_tensor(a, [1, bm, bk]),
         TensorDescriptor.from_tensor(b.mT, [1, bn, bk]) if b_t else TensorDescriptor.from_tensor(b, [1, bk, bn]),
         c_desc, ep.bias if ep.bias is not None else c, z_desc, m, n, k, batch,
         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, NUM_SMS=sms, PRECISION=precision,
         HAS_BIAS=ep.bias is not None, ACT=ep.act, STORE_Z=ep.z is not None, B_T=b_t, num_warps=warps,
         num_stages=stages)


class Epilogue(NamedTuple):
    """What the GEMM does to its fp32 tile before storing C: add ``bias`` ([N], or None), apply
    ``act`` (``ACT_*``), and store the pre-activation into ``z`` (shaped as C, or None)."""

    bias: torch.Tensor | None = None
    act: int = ACT_NONE
    z: torch.Tensor | None = None


NO_EPILOGUE = Epilogue()


def run(a: torch.Tensor, b: torch.Tensor, cfg: dict[str, Any], epilogue: Epilogue | None = None,
        c: torch.Tensor | None = None, b_t: bool = False) -> torch.Tensor:
    """C = epilogue(A @ B) for [B, M, K] x [B, K, N] views (batch strides may be 0), into ``c``
    ([B, M, N], contiguous; K > 0 and nothing empty) when given. ``b_t``: the TMA kernel may read
    a ``b`` that is a row-major tensor's transpose (``linear_gelu``'s weight) as it is stored."""
    batch, m, k = a.shape
    n = b.shape[2]
    ep = epilogue or NO_EPILOGUE
    if c is None:
        c, done = checks.gemm_output(a, b)
        if done:  # empty, or K = 0 (zeros): callers with an epilogue handle K = 0 themselves
            return c
    bm, bn, group, warps = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["GROUP_M"], cfg["num_warps"]
    bk, stages = fit(cfg, a.element_size())
    precision = "ieee" if a.dtype == torch.float32 else "tf32"
    z = () if ep.z is None else (ep.z,)
    transposed = b_t and b.stride(1) == 1 and b.stride(2) != 1
    if cfg["kernel"] == "persistent_tma" and tma_ok(a, b.mT if transposed else b, c, *z):
        from xrt.kernels.cuda import sm_count

        launch_tma(a, b, c, bm, bn, bk, group, sm_count(a.device), precision, warps, stages, ep, transposed)
        return c
    _tiled((cdiv(m, bm) * cdiv(n, bn), batch), a, b, c, ep.bias if ep.bias is not None else c,
           ep.z if ep.z is not None else c, m, n, k,
           a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
           c.stride(0), c.stride(1), c.stride(2),
           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, PRECISION=precision,
           HAS_BIAS=ep.bias is not None, ACT=ep.act, STORE_Z=ep.z is not None, num_warps=warps, num_stages=stages)
    return c


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``a @ b`` for ``a`` [M, K] and ``b`` [K, N] (fp16, bf16 or fp32, any strides) -> [M, N]
    contiguous, a's dtype; ``config`` from the ``matmul.triton`` space."""
    check_pair("matmul", a, b, 2)
    cfg = checks.effective_config("matmul.triton", a.shape[0], config)
    return run(a.unsqueeze(0), b.unsqueeze(0), cfg)[0]


def bmm(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``torch.bmm(a, b)`` for ``a`` [B, M, K] and ``b`` [B, K, N] (any strides) -> [B, M, N]
    contiguous; ``config`` from the ``bmm.triton`` space."""
    check_pair("bmm", a, b, 3)
    cfg = checks.tuning("bmm.triton", config)
    return run(a, b, cfg)
