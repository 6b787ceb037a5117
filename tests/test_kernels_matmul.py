"""GEMM kernels (``matmul``, ``bmm``) of every provider against float64: Triton under the CPU
interpreter on tiny shapes, everything on the GPU; the CUDA C plan and compile."""

import subprocess

import pytest
import torch
from gemm_checks import check_gemm, operands
from kernel_checks import poisoned_outputs

from xrt.kernels import cuda_source, spaces

# (M, N, K): ones, primes, M = 1, K below one BLOCK_K, N below a vector, K = 0.
TINY = [(1, 1, 1), (17, 13, 29), (1, 33, 7), (37, 64, 5), (5, 3, 70), (4, 6, 0)]
TILED_SMALL = {"kernel": "tiled", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4,
               "num_stages": 2}


@pytest.mark.parametrize("config", [None, TILED_SMALL], ids=["default", "tiled64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("mnk", TINY, ids=str)
def test_triton_matmul_under_interpreter(interpreter, mnk, dtype, config):
    from xrt.kernels.triton.matmul import matmul

    a, b = operands(*mnk, dtype, "cpu")
    with poisoned_outputs():
        y = matmul(a, b, config)
    check_gemm(y, a, b, dtype)


@pytest.mark.parametrize("mnk", [(17, 13, 29), (1, 40, 9)], ids=str)
def test_triton_reads_transposed_views_in_place(interpreter, mnk):
    from xrt.kernels.triton.matmul import matmul

    a, b = operands(*mnk, torch.float32, "cpu", transpose=True)
    assert not b.is_contiguous()
    check_gemm(matmul(a, b, TILED_SMALL), a, b, torch.float32)


@pytest.mark.parametrize("mnk", [(17, 13, 29), (1, 40, 9)], ids=str)
def test_triton_linear_adds_the_bias_in_the_epilogue(interpreter, mnk):
    """``linear``: x @ W.T + bias in one GEMM, W read transposed in place; no answer where the
    config splits K (split K has no epilogue) or K is 0, so the caller adds the bias itself."""
    from xrt.kernels.triton.matmul import linear

    m, n, k = mnk
    x, w, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    with poisoned_outputs():
        y = linear(x, w, bias, TILED_SMALL)
    want = x.double() @ w.double().T + bias.double()
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)
    assert linear(x, w, bias, {**TILED_SMALL, "SPLIT_K": 2}) is None
    assert linear(x[:, :0], w[:, :0], bias, TILED_SMALL) is None  # K = 0: no GEMM to add it in


def test_triton_bmm_under_interpreter(interpreter):
    from xrt.kernels.triton.matmul import bmm

    a, b = operands(17, 5, 9, torch.float16, "cpu", batch=3)
    with poisoned_outputs():
        check_gemm(bmm(a, b, TILED_SMALL), a, b, torch.float16)
    # A broadcast operand (batch stride 0) and a transposed one are read in place.
    b1 = torch.randn(1, 9, 5).expand(3, 9, 5)
    at = torch.randn(3, 9, 17).mT
    check_gemm(bmm(at, b1), at, b1, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_triton_tma_kernel_under_interpreter(interpreter, dtype):
    """The persistent TMA kernel's indexing (the interpreter runs its descriptors): tiles past M and
    N in every batch entry, more tiles than programs, NaN-poisoned C fully written."""
    from xrt.kernels.triton.matmul import launch_tma

    for bsz, m, n, k in [(1, 17, 24, 40), (3, 70, 40, 24), (1, 1, 8, 8)]:
        a, b = operands(m, n, k, dtype, "cpu", batch=bsz)
        c = torch.full((bsz, m, n), float("nan"), dtype=dtype)
        launch_tma(a, b, c, 64, 32, 16, 8, 5, "ieee" if dtype == torch.float32 else "tf32")
        check_gemm(c, a, b, dtype)


def _layout_operands(lay: str, m: int, n: int, k: int, dtype: torch.dtype, batch: int = 1):
    """``a`` [B, M, K] and ``b`` [B, K, N] in layout ``lay``: "n" a row-major tensor, "t" the
    transposed view of a row-major one (``W.T``, ``g.T``)."""
    a = torch.randn(batch, k, m).to(dtype).mT if lay[0] == "t" else torch.randn(batch, m, k).to(dtype)
    b = torch.randn(batch, n, k).to(dtype).mT if lay[1] == "t" else torch.randn(batch, k, n).to(dtype)
    return a, b


LAYOUTS = ["nn", "nt", "tn", "tt"]


@pytest.mark.parametrize("lay", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_triton_tma_kernel_reads_each_layout_in_place(interpreter, lay, dtype):
    """The TMA kernel's transposed descriptors (x @ W.T, g.T @ x): tiles past M, N and K, more
    tiles than programs, the C store whole or in two halves; NaN-poisoned C fully written."""
    from xrt.kernels.triton.matmul import launch_tma, layout

    for bsz, m, n, k in [(1, 40, 48, 56), (2, 24, 40, 24)]:  # TMA: 16-byte row strides
        a, b = _layout_operands(lay, m, n, k, dtype, bsz)
        assert layout(a, b) == lay and (lay == "nn" or not (a.is_contiguous() and b.is_contiguous()))
        for subtile in (False, True):
            c = torch.full((bsz, m, n), float("nan"), dtype=dtype)
            launch_tma(a, b, c, 32, 32, 16, 8, 3, "ieee" if dtype == torch.float32 else "tf32", subtile=subtile)
            check_gemm(c, a, b, dtype, what=f"C {lay} subtile={subtile}")


@pytest.mark.parametrize("lay", LAYOUTS)
def test_device_descriptor_kernel_reads_each_layout_in_place(interpreter, lay):
    """The kernel a compiled graph launches, which makes its TMA descriptors on the device: each
    layout, C whole or in two halves, and the epilogue (bias, GELU, the pre-activation stored)."""
    from xrt.kernels.triton.matmul import ACT_GELU_TANH, Epilogue, launch_tma

    for bsz, m, n, k in [(1, 40, 48, 56), (2, 24, 40, 24)]:
        a, b = _layout_operands(lay, m, n, k, torch.float16, bsz)
        for subtile in (False, True):
            c = torch.full((bsz, m, n), float("nan"), dtype=torch.float16)
            launch_tma(a, b, c, 32, 32, 16, 8, 3, "tf32", subtile=subtile, device_descriptors=True)
            check_gemm(c, a, b, torch.float16, what=f"C {lay} subtile={subtile}")
    a, b = _layout_operands(lay, 40, 48, 56, torch.float32)
    bias = torch.randn(48)
    c, z = (torch.full((1, 40, 48), float("nan")) for _ in range(2))
    launch_tma(a, b, c, 32, 32, 16, 8, 3, "ieee", epilogue=Epilogue(bias, ACT_GELU_TANH, z), device_descriptors=True)
    want = a.double() @ b.double() + bias.double()
    torch.testing.assert_close(z.double(), want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(c.double(), torch.nn.functional.gelu(want, approximate="tanh"), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("lay", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_triton_matmul_each_layout_under_interpreter(interpreter, lay, dtype):
    """The launcher on every layout, default (the layout table's) and tiled configs: no operand copied."""
    from xrt.kernels.triton.matmul import matmul

    a, b = _layout_operands(lay, 29, 19, 23, dtype)
    for config in (None, TILED_SMALL):
        with poisoned_outputs():
            y = matmul(a[0], b[0], config)
        check_gemm(y, a[0], b[0], dtype, what=f"C {lay} {config}")


@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("lay", ["nn", "nt", "tn"])
def test_split_k_under_interpreter(interpreter, lay, split):
    """SPLIT_K: K in equal parts as a batch of strided views into fp32 partials, summed into C; right
    on each layout of a linear (the tiled kernel here; the TMA one on the GPU), one K tile per part
    included; a K that does not split into 16-byte parts runs unsplit (also right)."""
    from xrt.kernels.triton import matmul as tm

    for k in (64 * split, 32 * split, 100):
        a, b = _layout_operands(lay, 40, 24, k, torch.float16)
        sums = tm._sum_splits.compiles  # each interpreted launch counts
        with poisoned_outputs():
            y = tm.matmul(a[0], b[0], {**TILED_SMALL, "SPLIT_K": split})
        check_gemm(y, a[0], b[0], torch.float16, what=f"C {lay} K {k} split {split}")
        assert tm._sum_splits.compiles - sums == (0 if k == 100 else 1)


def test_fine_buckets_give_width_768_its_entries_and_fall_back_to_coarse_ones():
    """A GPT of width 768 (K, N of 768, 2304, 3072) takes its own entries, keyed by the fine
    buckets (768 is not 1024's bucket there); a GEMM without a fine entry takes its coarse one, so
    width 1024's keep theirs. Every entry is in the tuning space and fits shared memory as it is."""
    from xrt.kernels.triton.matmul import SMEM_BUDGET, fit, smem_bytes

    assert [spaces.gemm_bucket_fine(x) for x in (1, 5, 768, 769, 1024, 2304, 3072, 4096, 6144, 8192)] == [
        1, 6, 768, 1024, 1024, 3072, 3072, 4096, 6144, 8192]
    for lay, gm, gn, gk in spaces.linear_gemms(8192, 768, 768):
        fine = spaces.gemm_default(lay, gm, gn, gk)
        coarse = spaces.GEMM_LAYOUT_DEFAULTS[(lay, *(spaces.gemm_bucket(x) for x in (gm, gn, gk)))]
        fine_key = (lay, *(spaces.gemm_bucket_fine(x) for x in (gm, gn, gk)))
        assert fine == spaces.GEMM_LAYOUT_DEFAULTS.get(fine_key, coarse), lay
    assert spaces.gemm_default("nt", 8192, 768, 768)["BLOCK_M"] == 64  # its own entry
    assert spaces.gemm_default("nt", 8192, 1024, 1024) == spaces.GEMM_LAYOUT_DEFAULTS[("nt", 8192, 1024, 1024)]
    assert spaces.gemm_default("tn", 768, 768, 8192) == spaces.GEMM_LAYOUT_DEFAULTS[("tn", 1024, 1024, 8192)]
    for key, cfg in spaces.GEMM_LAYOUT_DEFAULTS.items():
        checked = spaces.check("matmul.triton", cfg)
        assert fit(checked, 2) == (checked["BLOCK_K"], checked["num_stages"]), key
        assert smem_bytes(checked, 2, checked["BLOCK_K"], checked["num_stages"]) <= SMEM_BUDGET, key


def test_layout_table_covers_the_linear_shapes_and_is_the_default():
    """Each GEMM of each transformer linear has a table entry in the tuning space that fits shared
    memory as it is (bf16), and the launcher takes it when no config is given."""
    from xrt.kernels import checks
    from xrt.kernels.triton.matmul import SMEM_BUDGET, default_config, fit, smem_bytes

    seen = set()
    for t in spaces.LINEAR_ROWS:
        for k, n in spaces.LINEAR_FEATURES:
            for lay, gm, gn, gk in spaces.linear_gemms(t, k, n):
                cfg = spaces.gemm_default(lay, gm, gn, gk)
                assert cfg is not None, (lay, gm, gn, gk)
                checked = spaces.check("matmul.triton", cfg)
                assert fit(checked, 2) == (checked["BLOCK_K"], checked["num_stages"])
                assert smem_bytes(checked, 2, checked["BLOCK_K"], checked["num_stages"]) <= SMEM_BUDGET
                seen.add(lay)
    assert seen == {"nt", "nn", "tn"}
    # the launcher's choice: the table's entry for the layout and (M, N, K), else the old defaults
    w = torch.empty(3072, 1024, dtype=torch.bfloat16)
    x = torch.empty(8192, 1024, dtype=torch.bfloat16)
    table = spaces.check("matmul.triton", spaces.gemm_default("nt", 8192, 3072, 1024))
    assert dict(default_config(x, w.T, None)) == table
    g = torch.empty(8192, 3072, dtype=torch.bfloat16)
    table = spaces.check("matmul.triton", spaces.gemm_default("tn", 3072, 1024, 8192))
    assert dict(default_config(g.T, x, None)) == table
    assert spaces.gemm_default("nn", 4096, 4096, 4096) is None
    skinny = checks.effective_config("matmul.triton", 16, None)
    assert default_config(torch.empty(16, 64), torch.empty(64, 8), None) == skinny
    mine = {"kernel": "tiled"}
    assert default_config(x, w.T, mine)["kernel"] == "tiled"  # asked for: kept


def test_triton_fit_shrinks_fp32_tiles_to_the_shared_memory_budget():
    from xrt.kernels.triton.matmul import SMEM_BUDGET, fit, smem_bytes

    for cfg in spaces.configs("matmul.triton"):
        for esize in (2, 4):
            bk, stages = fit(cfg, esize)
            assert bk <= cfg["BLOCK_K"] and 2 <= stages <= cfg["num_stages"]
            if bk > 16:
                assert smem_bytes(cfg, esize, bk, stages) <= SMEM_BUDGET, cfg
    default = spaces.default("matmul.triton")
    assert fit(default, 2) == (default["BLOCK_K"], default["num_stages"])  # bf16's default is untouched


def test_cuda_plan_covers_the_space():
    """Every ``matmul.cuda`` config is planned or refused with a ValueError naming the rule."""
    from xrt.kernels.cuda.matmul import plan

    planned = refused = 0
    for cfg in spaces.configs("matmul.cuda"):
        try:
            entry, threads, bm, bn, defines = plan(cfg)
        except ValueError as e:
            assert "BM=" in str(e) and cfg["version"] in ("v2", "v3", "v4")
            refused += 1
            continue
        planned += 1
        assert entry == f"matmul_{cfg['version']}_f32" and 32 <= threads <= 1024
        assert dict(defines)["XRT_ONLY"] == int(cfg["version"][1])
    assert planned > refused
    assert plan(spaces.default("matmul.cuda"))[1] == 128


def test_cuda_configs_compile(nvcc, tmp_path):
    """The default and two more configs compile with their -D defines (the whole file without
    defines is checked in test_kernels_cuda_c.py)."""
    from xrt.kernels.cuda.matmul import plan

    src = tmp_path / "matmul.cu"
    src.write_text(cuda_source("matmul.cu"))
    for cfg in ({"version": "v3", "BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4},
                {"version": "v4", "BM": 128, "BN": 64, "BK": 8, "TM": 4, "TN": 8}):
        entry, _, _, _, defines = plan(spaces.check("matmul.cuda", cfg))
        ptx = tmp_path / "out.ptx"
        subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-std=c++17", *(f"-D{k}={v}" for k, v in defines), "-o",
                        str(ptx), str(src)], check=True, capture_output=True)
        entries = {ln.split()[-1].rstrip("(") for ln in ptx.read_text().splitlines() if ".entry" in ln}
        assert entries == {entry}


# -- on the GPU -----------------------------------------------------------------------------------

GPU_SHAPES = TINY + [(4097, 4096, 4096), (16, 8192, 1024), (129, 260, 132), (256, 256, 64), (1000, 24, 4100)]
KERNELS = [{"kernel": "persistent_tma"}, {"kernel": "tiled"}, TILED_SMALL,
           {"kernel": "persistent_tma", "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4}]


@pytest.mark.gpu
@pytest.mark.parametrize("config", KERNELS, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("mnk", GPU_SHAPES, ids=str)
def test_triton_matmul_on_gpu(mnk, dtype, config):
    from xrt.kernels.triton.matmul import matmul

    for transpose in (False, True):
        a, b = operands(*mnk, dtype, "cuda", transpose=transpose)
        with poisoned_outputs():
            y = matmul(a, b, config)
        check_gemm(y, a, b, dtype, what=f"C transpose={transpose}")


@pytest.mark.gpu
@pytest.mark.parametrize("config", KERNELS, ids=str)
@pytest.mark.parametrize("bmnk", [(3, 17, 13, 29), (64, 100, 72, 64), (2, 130, 264, 40), (5, 1, 8, 8)], ids=str)
def test_triton_bmm_on_gpu(bmnk, config):
    """M not a multiple of BLOCK_M: the TMA kernel's 3-D tiles must stop at each matrix's edge."""
    from xrt.kernels.triton.matmul import bmm

    bsz, m, n, k = bmnk
    for dtype in (torch.bfloat16, torch.float32):
        a, b = operands(m, n, k, dtype, "cuda", batch=bsz)
        with poisoned_outputs():
            check_gemm(bmm(a, b, config), a, b, dtype)


LAYOUT_CONFIGS = [None, {"kernel": "persistent_tma", "EPILOGUE_SUBTILE": True},
                  {"kernel": "persistent_tma", "BLOCK_N": 128, "num_stages": 4, "warp_specialize": True},
                  {"kernel": "persistent_tma", "BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 4}]


@pytest.mark.gpu
@pytest.mark.parametrize("config", LAYOUT_CONFIGS, ids=str)
@pytest.mark.parametrize("lay", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_triton_matmul_layouts_on_gpu(lay, dtype, config):
    """The TMA kernel on transposed views (aligned shapes, so that TMA takes them), edges included."""
    from xrt.kernels.triton.matmul import matmul, tma_ok

    for m, n, k in [(1000, 264, 520), (256, 256, 64), (8, 1024, 4104)]:
        a, b = _layout_operands(lay, m, n, k, dtype)
        a, b = a.cuda(), b.cuda()
        assert tma_ok(a, b)
        with poisoned_outputs():
            y = matmul(a[0], b[0], config)
        check_gemm(y, a[0], b[0], dtype, what=f"C {lay} {m}x{n}x{k}")


@pytest.mark.gpu
@pytest.mark.parametrize("kn", [(768, 2304), (768, 768), (768, 3072), (3072, 768)], ids=str)
def test_width_768_table_entries_on_gpu(kn):
    """The width-768 linears' table configs (fine buckets), each on its layout's views at a
    shorter T (the config passed as the table gives it at T 8192), edges included, bf16."""
    from xrt.kernels.triton.matmul import matmul, tma_ok

    k_in, n_out = kn
    for lay, gm, gn, gk in spaces.linear_gemms(8192, k_in, n_out):
        cfg = spaces.gemm_default(lay, gm, gn, gk)
        m, n, k = (1000 if d == 8192 else d for d in (gm, gn, gk))
        a, b = _layout_operands(lay, m, n, k, torch.bfloat16)
        a, b = a.cuda(), b.cuda()
        assert tma_ok(a, b)
        with poisoned_outputs():
            y = matmul(a[0], b[0], cfg)
        check_gemm(y, a[0], b[0], torch.bfloat16, what=f"C {lay} {m}x{n}x{k} {cfg}")


@pytest.mark.gpu
@pytest.mark.parametrize("lay", LAYOUTS)
def test_tma_plan_repeats_a_launch_on_new_tensors(lay):
    """The second call of a signature takes the kept plan (no new compile, no Launcher key): each
    call on fresh tensors of the same shapes is right, and a base that is not 16-byte aligned where
    the plan's was (same shape and strides) leaves the plan for the tiled kernel, also right."""
    from xrt.kernels.triton import matmul as tm

    m, n, k = 1000, 264, 520
    dtype = torch.bfloat16
    calls = []
    for i in range(3):
        a, b = (t.cuda() for t in _layout_operands(lay, m, n, k, dtype))
        with poisoned_outputs():
            check_gemm(tm.matmul(a[0], b[0]), a[0], b[0], dtype, what=f"C {lay} call {i}")
        calls.append(tm._tma.compiles)
    assert calls[1] == calls[2], calls
    assert any(key[0] == a.shape and key[2] == b.shape and plan is not None for key, plan in tm._PLANS.items())
    # C of another dtype for the same A and B (split K's fp32 partials): another plan, not this one
    a, b = (t.cuda() for t in _layout_operands(lay, m, n, k, dtype))
    c32 = torch.full((1, m, n), float("nan"), dtype=torch.float32, device="cuda")
    tm.run(a, b, tm.default_config(a[0], b[0], None), c=c32)
    check_gemm(c32[0], a[0], b[0], torch.float32, what=f"fp32 C {lay}")
    # The same shape and strides twice (a row 8 elements longer than the view): the first view's base
    # is aligned, the second's is one column in, 2 bytes off, where the kept kernel must not run.
    big = torch.randn(m, k + 8, dtype=dtype, device="cuda") if lay[0] == "n" else \
        torch.randn(k, m + 8, dtype=dtype, device="cuda")
    for off in (0, 1):
        view = big[:, off:off + k] if lay[0] == "n" else big[:, off:off + m].T
        assert bool(view.data_ptr() % 16) == bool(off)
        check_gemm(tm.matmul(view, b[0]), view, b[0], dtype, what=f"C {lay} base {2 * off} bytes in")


@pytest.mark.gpu
@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("lay", ["nn", "nt", "tn"])
def test_split_k_on_gpu(lay, split):
    """SPLIT_K through the TMA kernel (the layout table's tile) at a narrow weight gradient's shape,
    and a K that does not split (unsplit, also right)."""
    from xrt.kernels.triton.matmul import matmul

    for m, n, k in [(1024, 1024, 8192), (264, 136, 1000 * split + 4)]:
        a, b = (t.cuda() for t in _layout_operands(lay, m, n, k, torch.bfloat16))
        for config in ({"kernel": "persistent_tma", "SPLIT_K": split},
                       {"kernel": "persistent_tma", "BLOCK_N": 64, "num_warps": 4, "num_stages": 5, "SPLIT_K": split}):
            with poisoned_outputs():
                check_gemm(matmul(a[0], b[0], config), a[0], b[0], torch.bfloat16, what=f"C {lay} {m}x{n}x{k} {config}")


CUDA_CONFIGS = [{"version": "v1"}, {"version": "v2"}, {"version": "v3"}, {"version": "v4"},
                {"version": "v2", "BM": 64, "BN": 64, "TM": 4, "TN": 4},
                {"version": "v3", "BM": 64, "BN": 128, "BK": 8, "TM": 8, "TN": 8},
                {"version": "v4", "BM": 128, "BN": 64, "BK": 8, "TM": 4, "TN": 8},
                {"version": "v4", "BM": 64, "BN": 128, "BK": 16, "TM": 4, "TN": 4}]


@pytest.mark.gpu
@pytest.mark.parametrize("config", CUDA_CONFIGS, ids=str)
def test_cuda_c_matmul_on_gpu(config):
    from xrt.kernels.cuda.matmul import bmm, matmul

    for mnk in TINY + [(129, 260, 132), (256, 256, 64), (130, 67, 33), (1, 4096, 4097), (1024, 1024, 1024)]:
        a, b = operands(*mnk, torch.float32, "cuda", transpose=mnk[0] == 130)
        with poisoned_outputs():
            check_gemm(matmul(a, b, config), a, b, torch.float32, what=f"C {mnk}")
    a, b = operands(67, 129, 36, torch.float32, "cuda", batch=3)
    with poisoned_outputs():
        check_gemm(bmm(a, b, config), a, b, torch.float32, what="bmm")


def test_skinny_problems_get_their_own_default_and_explicit_configs_are_kept():
    from xrt.kernels import checks
    from xrt.kernels.checks import effective_config

    skinny = effective_config("matmul.triton", 16, None)
    assert skinny["BLOCK_M"] == 64 and skinny["kernel"] == "tiled"
    # The op passes the checked defaults when no tuned config applies: the same choice.
    assert effective_config("matmul.triton", 16, checks.tuning("matmul.triton", None)) is skinny
    assert effective_config("matmul.triton", 65, None) == spaces.default("matmul.triton")
    kept = checks.tuning("matmul.triton", None)  # what the op's memo holds
    checks._TUNINGS.clear()  # the memo of checked configs emptied (it is, past 4096 entries)
    assert effective_config("matmul.triton", 16, kept) == skinny  # the kept default is still the default
    assert not checks.tuning("matmul.triton", dict(spaces.default("matmul.triton"))).is_default  # asked for
    mine = {"BLOCK_M": 128, "kernel": "tiled"}
    assert effective_config("matmul.triton", 16, mine)["BLOCK_M"] == 128  # asked for: kept


def test_skinny_default_computes_the_product(interpreter):
    from xrt.kernels.triton.matmul import matmul

    a, b = operands(5, 33, 17, torch.float32, "cpu")
    check_gemm(matmul(a, b), a, b, torch.float32)
