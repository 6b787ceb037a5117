"""``fused_layernorm`` forward and backward in every provider this machine has, against float64."""

import pytest
import torch
from kernel_checks import check, poisoned_outputs

import xrt.pytorch as xp
from xrt.pytorch.ops.layernorm import _layernorm_op, layernorm_bwd

# (1023, 1) on the CPU: the backward walks its rows one by one, slow in the interpreter.
SHAPES = [(1, 1), (1, 4097), (1023, 1), (7, 1023), (3, 5, 37), (13, 64)]
ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _run(shape, dtype, device, provider, grads=True):
    n = shape[-1]
    x = (torch.randn(shape, device=device) * 2 + 0.5).to(dtype)
    w = (torch.rand(n, device=device) + 0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype)
    dy = torch.randn(shape, device=device).to(dtype)
    ref = [t.double().requires_grad_() for t in (x, w, b)]
    yr = torch.nn.functional.layer_norm(ref[0], (n,), ref[1], ref[2], 1e-5)
    mine = [t.clone().requires_grad_() for t in (x, w, b)]
    with poisoned_outputs():
        y = xp.ops.fused_layernorm(mine[0], n, mine[1], mine[2], provider=provider)
        if grads:
            y.backward(dy)
    # |y| ~ 1 by construction: compare to the row scale, not to each element.
    check(y, yr, dtype, scale=yr.detach().abs() + 1, what="y")
    if not grads:
        return
    yr.backward(dy.double())
    rows = x.numel() // n
    # dx carries rstd: one rounding of w*dy - mean(w*dy) is amplified by it, and rstd is 1/sqrt(eps)
    # (316) when a row has one element or no spread.
    rstd = 1 / (x.double().var(-1, unbiased=False) + 1e-5).sqrt()
    dx_scale = (ref[0].grad.abs().max() + 1) * rstd.max().clamp(min=1)
    for name, got, want, scale in (("dx", mine[0].grad, ref[0].grad, dx_scale),
                                   ("dweight", mine[1].grad, ref[1].grad, (rows ** 0.5) * 4),
                                   ("dbias", mine[2].grad, ref[2].grad, (rows ** 0.5) * 4)):
        check(got, want.detach(), dtype, scale=scale, what=name)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_triton_under_interpreter(interpreter, shape, dtype):
    _run(shape, dtype, "cpu", "triton")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_torch_reference(dtype):
    _run((7, 1023), dtype, "cpu", "torch")


def test_multi_dim_normalized_shape_and_defaults(interpreter):
    x = torch.randn(3, 4, 5)
    for p in ("torch", "triton"):
        torch.testing.assert_close(xp.ops.fused_layernorm(x, (4, 5), provider=p),
                                   torch.nn.functional.layer_norm(x, (4, 5)), rtol=1e-5, atol=1e-5)


def test_opcheck_and_compile():
    x, w, b = torch.randn(6, 17, requires_grad=True), torch.randn(17, requires_grad=True), torch.randn(17)
    result = torch.library.opcheck(_layernorm_op, (x, [17], w, b, 1e-5, "torch"))
    assert set(result.values()) == {"SUCCESS"}, result
    _, mean, rstd = _layernorm_op(x, [17], w, b, 1e-5, "torch")
    result = torch.library.opcheck(layernorm_bwd, (torch.randn(6, 17), x.detach(), w.detach(), mean, rstd,
                                                   "torch"))
    assert set(result.values()) == {"SUCCESS"}, result
    f = torch.compile(lambda t: xp.ops.fused_layernorm(t, 17, w, b, provider="torch").sum(),
                      backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(f(x), torch.nn.functional.layer_norm(x, (17,), w, b).sum())


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"weight.shape=\(4096,\) must equal normalized_shape=\(4095,\)"):
        xp.ops.fused_layernorm(torch.randn(2, 4095), 4095, torch.randn(4096), None)
    with pytest.raises(ValueError, match=r"input.shape=\(2, 8\) must end with normalized_shape=\(7,\)"):
        xp.ops.fused_layernorm(torch.randn(2, 8), 7)


GPU_SHAPES = SHAPES + [(4097, 1), (4096, 4096), (64, 32768), (300, 8192), (5, 4104), (3, 65536)]


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["torch", "triton", "cuda", "auto"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_on_gpu(provider, dtype, shape):
    _run(shape, dtype, "cuda", provider)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["auto", "v1", "v2", "v3"])
@pytest.mark.parametrize("block", ["auto", 128, 1024])
def test_cuda_c_versions_on_gpu(version, block):
    from xrt.kernels.cuda.layernorm import layernorm, layernorm_bwd
    from xrt.kernels.reference import layernorm as ref

    for m, n in [(3, 1023), (257, 4096), (4, 8192 * 8 + 8), (1, 8)]:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w, b = torch.rand(n, device="cuda", dtype=x.dtype) + 0.5, torch.randn(n, device="cuda", dtype=x.dtype)
        dy = torch.randn_like(x)
        with poisoned_outputs():
            y, mean, rstd = layernorm(x, w, b, 1e-5, {"version": "v2" if version in ("auto", "v3") else version,
                                                      "block": block})
            got = layernorm_bwd(dy, x, w, mean, rstd, {"version": version, "block": block, "programs_per_sm": 1})
        want_y, _, _ = ref.layernorm(x.double(), w.double(), b.double(), 1e-5)
        check(y, want_y, x.dtype, scale=want_y.abs() + 1, what="y")
        want = ref.layernorm_bwd(dy.double(), x.double(), w.double(), mean.double(), rstd.double())
        for name, g, r in zip(("dx", "dweight", "dbias"), got, want):
            check(g, r, x.dtype, scale=r.abs().max() + 1, what=name)


def _bwd_direct(shape, dtype, device, **kw):
    """The Triton backward launcher on its own (long-row paths forced by ``kw``), against float64."""
    from xrt.kernels.reference import layernorm as ref
    from xrt.kernels.triton.layernorm import layernorm, layernorm_bwd

    m, n = shape
    x = (torch.randn(m, n, device=device) * 2 + 0.5).to(dtype)
    w = (torch.rand(n, device=device) + 0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype)
    dy = torch.randn(m, n, device=device).to(dtype)
    config = kw.pop("config", None)
    with poisoned_outputs():
        _, mean, rstd = layernorm(x, w, b, 1e-5)
        got = layernorm_bwd(dy, x, w, mean, rstd, config, **kw)
    want = ref.layernorm_bwd(dy.double(), x.double(), w.double(), mean.double(), rstd.double())
    rstd64 = 1 / (x.double().var(-1, unbiased=False) + 1e-5).sqrt()
    for name, g, r in zip(("dx", "dweight", "dbias"), got, want):
        scale = (r.abs().max() + 1) * (rstd64.max().clamp(min=1) if name == "dx" else 1)
        check(g, r, dtype, scale=scale, what=name)


# The column-tiled long-row backward on tiny shapes: tiles and steps smaller than the row, ragged
# last tile (37, 100), a row group of one row (m=1), more row groups than rows, several tiles.
@pytest.mark.parametrize("shape,tile,sum_block", [((5, 37), 16, 8), ((1, 100), 32, 64), ((9, 64), 16, 16),
                                                  ((3, 5), 4, 2), ((6, 130), 128, 32)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_triton_tiled_backward_under_interpreter(interpreter, shape, tile, sum_block, dtype):
    _bwd_direct(shape, dtype, "cpu", tile=tile, sum_block=sum_block)


@pytest.mark.parametrize("config", [{"path": "tiled"}, {"path": "rows", "programs_per_sm": 1},
                                    {"path": "tiled", "programs_per_sm": 4, "num_warps": 4}], ids=str)
def test_triton_backward_paths_by_config_under_interpreter(interpreter, config):
    _bwd_direct((7, 96), torch.float32, "cpu", config=config)


def test_triton_long_row_plans():
    """The defaults pick the tiled backward past TILED_FROM and the measured forward plans."""
    from xrt.kernels.triton import layernorm as triton_layernorm

    assert triton_layernorm.TILED_FROM == 8192
    assert triton_layernorm.bwd_programs_per_sm(4096, "auto") == 2
    assert triton_layernorm.bwd_programs_per_sm(8192, "auto") == 1
    assert triton_layernorm.bwd_programs_per_sm(32768, 4) == 4
    assert triton_layernorm.fwd_plan(4096, 16384, "auto", "auto") == (1, 8)
    assert triton_layernorm.fwd_plan(8192, 8192, "auto", "auto") == (1, 8)
    assert triton_layernorm.fwd_plan(16384, 4096, "auto", "auto") == (2, 32)
    assert triton_layernorm.fwd_plan(32768, 2048, "auto", "auto") == (1, 32)
    assert triton_layernorm.fwd_plan(16384, 1, "auto", "auto") == (1, 16)  # one row: no second row to share
    assert triton_layernorm.fwd_plan(1024, 7, 4, 1) == (1, 4)


def test_cuda_c_backward_plans():
    """CUDA C backward "auto": v2 with one vector a thread while the row fits, else v3."""
    from xrt.kernels.cuda.layernorm import bwd_plan

    assert bwd_plan(4096, 2, "auto", "auto", True) == ("v2", 512, 1)
    assert bwd_plan(8192, 2, "auto", "auto", True) == ("v2", 1024, 1)
    assert bwd_plan(16384, 2, "auto", "auto", True) == ("v3", 128, 1)
    assert bwd_plan(8192, 4, "auto", "auto", True) == ("v3", 128, 1)  # fp32: 2048 vectors
    assert bwd_plan(4097, 2, "auto", "auto", True) == ("v3", 128, 0)  # not a whole number of vectors
    assert bwd_plan(4096, 2, 256, "v3", False) == ("v3", 256, 0)
    assert bwd_plan(4096, 2, "auto", "v1", True)[0] == "v1"


@pytest.mark.parametrize("shape,tile,sum_block", [((300, 8192 * 2), None, None), ((64, 32768), None, None),
                                                  ((33, 1000), 128, 256), ((5, 40), 16, 16)], ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.gpu
def test_triton_tiled_backward_on_gpu(shape, tile, sum_block, dtype):
    kw = {"tile": tile, "sum_block": sum_block} if tile else {"config": {"path": "tiled"}}
    _bwd_direct(shape, dtype, "cuda", **kw)


@pytest.mark.parametrize("provider", ["torch", "triton"])
def test_the_eager_plan_is_never_traced_by_torch_compile(provider, interpreter):
    """Under torch.compile the call goes through the custom op: the eager fast path (its plan, which
    imports the kernel modules) must step aside before dynamo traces it (fullgraph: no graph break)."""
    x, w, b = torch.randn(4, 33), torch.randn(33), torch.randn(33)
    f = torch.compile(lambda t: xp.ops.fused_layernorm(t, 33, w, b, provider=provider), fullgraph=True)
    torch.testing.assert_close(f(x), torch.nn.functional.layer_norm(x, (33,), w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("g,n", [(600, 13), (5, 1030), (1, 1)])
def test_partial_sums_in_the_gpus_blocks(interpreter, g, n):
    """The GPU sums the backward's partials in narrow, tall blocks (``SUM_BLOCK_N`` x ``SUM_BLOCK_G``), the
    interpreter in wide ones (it pays per program): both give the columns' sums, masked where G or N
    is not a multiple of the block."""
    from xrt.kernels.triton import layernorm as kernels

    torch.manual_seed(3)
    part = torch.randn(2, g, n)
    for bn, bg in ((kernels.SUM_BLOCK_N, kernels.SUM_BLOCK_G), kernels.INTERPRETER_SUM_BLOCKS):
        dw, db = torch.empty(n), torch.empty(n)
        kernels._sum(((n + bn - 1) // bn,), part[0], part[1], dw, db, 0, 0, g, n, BLOCK_G=bg, BLOCK_N=bn, num_warps=4)
        want = part.double().sum(1)
        torch.testing.assert_close(dw.double(), want[0], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(db.double(), want[1], rtol=1e-5, atol=1e-4)
    bn, bg = kernels.INTERPRETER_SUM_BLOCKS  # CPU tensors: the wide blocks
    assert kernels.sum_grid(n, part) == (((n + bn - 1) // bn,), {"BLOCK_G": bg, "BLOCK_N": bn})
