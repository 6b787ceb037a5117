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


_tiled = Launcher(_matmul_kernel)
_tma = Launcher(_matmul_tma_kernel)


def smem_bytes(cfg: dict[str, Any], esize: int, bk: int, stages: int) -> int:
    """Shared memory of a program: the pipelined A and B tiles, and the TMA kernel's C tile (half of
    it when the epilogue is subtiled)."""
    return spaces.gemm_smem(cfg, esize, bk, stages)


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


def major(t: torch.Tensor) -> str:
    """``"n"`` where ``t`` [(B,) rows, cols] is row-major (last stride 1), ``"t"`` where it is a
    column-major view (a transposed row-major tensor: ``W.T``, ``g.T``), ``"-"`` otherwise."""
    if t.stride(-1) == 1:
        return "n"
    return "t" if t.stride(-2) == 1 else "-"


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
    if not t0.is_cuda or t0.__class__ is not torch.Tensor:  # a trace's fake tensors have no address to check
        return False
    dev = t0.device.index if t0.device.index is not None else torch.cuda.current_device()
    ok = _TMA_DEVICES.get(dev)
    if ok is None:
        ok = _TMA_DEVICES[dev] = torch.cuda.get_device_capability(dev)[0] >= 9
    if not ok:
        return False
    for t in ts:
        es = t.element_size()
        kind = major(t)
        if kind == "-" or t.data_ptr() % 16:
            return False
        outer = (0, 1) if kind == "n" else (0, 2)
        if any((t.stride(d) * es) % 16 for d in outer):
            return False
    return True


def check_pair(op: str, a: torch.Tensor, b: torch.Tensor, rank: int) -> None:
    """:func:`xrt.kernels.checks.gemm`, and a dtype the kernels take."""
    checks.gemm(op, a, b, rank)
    if a.dtype not in DTYPES:
        raise ValueError(f"Triton {op}: dtype {a.dtype} is not supported; supported: {', '.join(map(str, DTYPES))}")


def launch_tma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bm: int, bn: int, bk: int, group: int,
               programs: int, precision: str, warps: int = 8, stages: int = 3, subtile: bool = False,
               warp_specialize: bool = False, epilogue: Epilogue | None = None) -> None:
    """The persistent TMA kernel over [B, M, K] x [B, K, N] -> ``epilogue(c)`` [B, M, N], ``programs``
    programs (one per SM; fewer when there are fewer tiles). ``a`` and ``b`` may each be row-major
    or a column-major view (:func:`major`): the descriptor then spans the stored tensor and the
    kernel transposes the tile, so no copy is made (a Linear's weight is read as it is stored).
    Also runs under the interpreter."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    batch, m, k = a.shape
    n = b.shape[2]
    a_t, b_t = major(a) == "t", major(b) == "t"
    sms = programs
    programs = min(programs, batch * cdiv(m, bm) * cdiv(n, bn))
    ep = epilogue or NO_EPILOGUE
    block_n = bn // 2 if subtile else bn
    a_desc = TensorDescriptor.from_tensor(a.mT, [1, bk, bm]) if a_t else TensorDescriptor.from_tensor(a, [1, bm, bk])
    b_desc = TensorDescriptor.from_tensor(b.mT, [1, bn, bk]) if b_t else TensorDescriptor.from_tensor(b, [1, bk, bn])
    c_desc = TensorDescriptor.from_tensor(c, [1, bm, block_n])
    z_desc = TensorDescriptor.from_tensor(ep.z, [1, bm, block_n]) if ep.z is not None else c_desc
    _tma((programs,), a_desc, b_desc, c_desc, ep.bias if ep.bias is not None else c, z_desc, m, n, k, batch,
         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, NUM_SMS=sms, PRECISION=precision,
         A_T=a_t, B_T=b_t, EPILOGUE_SUBTILE=subtile, WARP_SPECIALIZE=warp_specialize and c.is_cuda,
         HAS_BIAS=ep.bias is not None, ACT=ep.act, STORE_Z=ep.z is not None,
         num_warps=warps, num_stages=stages)


class Epilogue(NamedTuple):
    """What the GEMM does to its fp32 tile before storing C: add ``bias`` ([N], or None), apply
    ``act`` (``ACT_*``), and store the pre-activation into ``z`` (shaped as C, or None)."""

    bias: torch.Tensor | None = None
    act: int = ACT_NONE
    z: torch.Tensor | None = None


NO_EPILOGUE = Epilogue()


def run(a: torch.Tensor, b: torch.Tensor, cfg: dict[str, Any], epilogue: Epilogue | None = None,
        c: torch.Tensor | None = None) -> torch.Tensor:
    """C = epilogue(A @ B) for [B, M, K] x [B, K, N] views (batch strides may be 0), into ``c``
    ([B, M, N], contiguous; K > 0 and nothing empty) when given. A transposed view (``weight.mT``)
    is read as it is stored (:func:`launch_tma`)."""
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
    if cfg["kernel"] == "persistent_tma" and tma_ok(a, b, c, *z):
        from xrt.kernels.cuda import sm_count

        # linear_gelu's space has neither knob: off
        subtile = bool(cfg.get("EPILOGUE_SUBTILE", False))
        ws = bool(cfg.get("warp_specialize", False)) and (a.device, tuple(cfg.items())) not in _WS_BROKEN
        try:
            launch_tma(a, b, c, bm, bn, bk, group, sm_count(a.device), precision, warps, stages,
                       subtile, ws, ep)
        except Exception:
            if not ws:
                raise
            # Triton's warp specialization does not compile this config here: the plain loop from now on.
            _WS_BROKEN.add((a.device, tuple(cfg.items())))
            launch_tma(a, b, c, bm, bn, bk, group, sm_count(a.device), precision, warps, stages,
                       subtile, False, ep)
        return c
    # Unused epilogue pointers take the inputs, never c: a trace (torch.compile) must not see the
    # output passed as three arguments, or its functional copy of c may not be the one written.
    _tiled((cdiv(m, bm) * cdiv(n, bn), batch), a, b, c, ep.bias if ep.bias is not None else b,
           ep.z if ep.z is not None else a, m, n, k,
           a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
           c.stride(0), c.stride(1), c.stride(2),
           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, PRECISION=precision,
           HAS_BIAS=ep.bias is not None, ACT=ep.act, STORE_Z=ep.z is not None, num_warps=warps, num_stages=stages)
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
    check_pair("matmul", a, b, 2)
    return run(a.unsqueeze(0), b.unsqueeze(0), default_config(a, b, config))[0]


def bmm(a: torch.Tensor, b: torch.Tensor, config: dict[str, Any] | None = None) -> torch.Tensor:
    """``torch.bmm(a, b)`` for ``a`` [B, M, K] and ``b`` [B, K, N] (any strides) -> [B, M, N]
    contiguous; ``config`` from the ``bmm.triton`` space."""
    check_pair("bmm", a, b, 3)
    cfg = checks.tuning("bmm.triton", config)
    return run(a, b, cfg)
