"""The fused transformer ops, ``add_layernorm`` and ``linear_gelu``: forward and gradients of the
Triton kernels (interpreter) and the torch references against float64, opcheck, bad input."""

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import RTOL, check, poisoned_outputs

import xrt.pytorch as xp
from xrt.pytorch.ops.add_layernorm import add_layernorm_bwd_op, add_layernorm_op
from xrt.pytorch.ops.linear_gelu import linear_gelu_bwd_op, linear_gelu_op

DTYPES = [torch.float32, torch.float16]


# -- add_layernorm --------------------------------------------------------------------------------

def _add_ln(shape, dtype, provider, use_y=True, use_h=True, device="cpu"):
    n = shape[-1]
    x, r = ((torch.randn(shape, device=device) * 2 + 0.5).to(dtype) for _ in range(2))
    w = (torch.rand(n, device=device) + 0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype)
    dy, dh = torch.randn(shape, device=device).to(dtype), torch.randn(shape, device=device).to(dtype)
    ref = [t.double().requires_grad_() for t in (x, r, w, b)]
    hr = ref[0] + ref[1]
    yr = F.layer_norm(hr, (n,), ref[2], ref[3], 1e-5)
    mine = [t.clone().requires_grad_() for t in (x, r, w, b)]
    with poisoned_outputs():
        y, h = xp.ops.add_layernorm(*mine[:2], n, *mine[2:], provider=provider)
        outs = [(y, dy)] * use_y + [(h, dh)] * use_h
        torch.autograd.backward([o for o, _ in outs], [g for _, g in outs])
    check(h, hr.detach(), dtype, scale=hr.detach().abs() + 1, what="h")
    check(y, yr.detach(), dtype, scale=yr.detach().abs() + 1, what="y")
    routs = [(yr, dy)] * use_y + [(hr, dh)] * use_h
    torch.autograd.backward([o for o, _ in routs], [g.double() for _, g in routs])
    rows = x.numel() // n
    # dx carries rstd (as layernorm's test); h itself is rounded to the dtype before the statistics
    rstd = 1 / (hr.detach().var(-1, unbiased=False) + 1e-5).sqrt()
    dx_scale = (ref[0].grad.abs().max() + 1) * rstd.max().clamp(min=1)
    for name, i, scale in (("dx", 0, dx_scale), ("dresidual", 1, dx_scale), ("dweight", 2, (rows ** 0.5) * 4),
                           ("dbias", 3, (rows ** 0.5) * 4)):
        if ref[i].grad is None:
            assert mine[i].grad is None or not mine[i].grad.any(), name
            continue
        check(mine[i].grad, ref[i].grad, dtype, scale=scale, what=name)
    assert mine[0].grad.data_ptr() != mine[1].grad.data_ptr()  # x and residual own their gradients


@pytest.mark.parametrize("shape", [(1, 1), (7, 1023), (3, 5, 37)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_layernorm_triton_under_interpreter(interpreter, shape, dtype):
    _add_ln(shape, dtype, "triton")


@pytest.mark.parametrize("use_y, use_h", [(True, False), (False, True)])
def test_add_layernorm_one_output_used(interpreter, use_y, use_h):
    """h unused downstream (its gradient never comes: the kernel skips reading it), or y unused."""
    _add_ln((6, 40), torch.float32, "triton", use_y, use_h)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_add_layernorm_torch_reference(dtype):
    _add_ln((7, 129), dtype, "torch")


def test_add_layernorm_eager_calls_go_through_one_plan(interpreter, monkeypatch):
    """Eager calls of the Triton provider launch through a plan made once per input signature (the
    kernels' cached handles), forward and backward, with the custom op's results; a new signature
    makes a new plan."""
    from xrt.kernels.triton import add_layernorm as k

    made = []
    init = k.Plan.__init__
    monkeypatch.setattr(k.Plan, "__init__", lambda self, *a: made.append(a) or init(self, *a))
    x, r, dy, dh = (torch.randn(3, 4, 33) for _ in range(4))
    w, b = torch.rand(33) + 0.5, torch.randn(33)
    want = add_layernorm_op(x, r, w, b, 1e-5, "triton")
    want_grads = add_layernorm_bwd_op(dy, dh, want[1], w, want[2], want[3], "triton")
    for _ in range(3):
        leaves = [t.clone().requires_grad_() for t in (x, r, w, b)]
        y, h = xp.ops.add_layernorm(leaves[0], leaves[1], 33, *leaves[2:], provider="triton")
        assert "Lean" in type(y.grad_fn).__name__
        torch.testing.assert_close((y, h), want[:2], rtol=0, atol=0)
        torch.autograd.backward([y, h], [dy, dh])
        for got, ref in zip((leaves[0].grad, leaves[1].grad, leaves[2].grad, leaves[3].grad),
                            (want_grads[0], want_grads[0], *want_grads[1:])):
            torch.testing.assert_close(got, ref, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(xp.ops.add_layernorm(x, r, 33, w, b, provider="triton"), want[:2], rtol=0, atol=0)
    assert len(made) == 1 and made[0][:2] == (12, 33)
    xp.ops.add_layernorm(x[:2], r[:2], 33, w, b, provider="triton")
    assert len(made) == 2 and made[1][:2] == (8, 33)


def test_add_layernorm_general_path_where_the_plan_cannot_take_the_call(interpreter, monkeypatch):
    """A non-contiguous residual, a weight of another dtype (cast, its gradient flows back through the
    cast), the torch provider: the general path, with the same results as torch."""
    from xrt.kernels.triton import add_layernorm as k

    monkeypatch.setattr(k.Plan, "__init__", lambda *a: pytest.fail("no plan for this call"))
    x = torch.randn(5, 16, requires_grad=True)
    r = torch.randn(16, 5).T.requires_grad_()
    w64 = (torch.rand(16, dtype=torch.float64) + 0.5).requires_grad_()
    for args, provider in (((x, r, 16, torch.ones(16), torch.zeros(16)), "triton"),
                           ((x, r.detach().contiguous(), 16, w64, torch.zeros(16)), "triton"),
                           ((x, r.detach().contiguous(), 16, torch.ones(16), torch.zeros(16)), "torch")):
        y, h = xp.ops.add_layernorm(*args, provider=provider)
        ref_h = args[0] + args[1]
        torch.testing.assert_close(h, ref_h)
        torch.testing.assert_close(y, F.layer_norm(ref_h, (16,), args[3].float(), args[4]), rtol=1e-5, atol=1e-5)
        assert "Lean" not in type(y.grad_fn).__name__
    y, _ = xp.ops.add_layernorm(x, r.detach().contiguous(), 16, w64, torch.zeros(16), provider="triton")
    y.sum().backward()
    assert w64.grad is not None and w64.grad.dtype == torch.float64


# opcheck without its aot_dispatch test, which compiles for tens of seconds on this machine (the
# suites' compiled series run both ops under torch.compile)
_QUICK = ("test_schema", "test_autograd_registration", "test_faketensor")


def test_add_layernorm_opcheck(interpreter):
    x, r = torch.randn(4, 33), torch.randn(4, 33)
    w, b = torch.rand(33) + 0.5, torch.randn(33)
    grad = [t.clone().requires_grad_() for t in (x, r, w, b)]
    torch.library.opcheck(add_layernorm_op, (*grad, 1e-5, "triton"), test_utils=_QUICK)
    torch.library.opcheck(add_layernorm_op, (*grad, 1e-5, "torch"), test_utils=_QUICK)
    _, h, mean, rstd = add_layernorm_op(x, r, w, b, 1e-5, "triton")
    for dh in (torch.randn(4, 33), None):
        torch.library.opcheck(add_layernorm_bwd_op, (torch.randn(4, 33), dh, h, w, mean, rstd, "triton"),
                              test_utils=_QUICK)


def test_add_layernorm_bad_input_names_it():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"residual \(\(4, 9\).*must match x \(\(4, 8\)"):
        xp.ops.add_layernorm(x, torch.randn(4, 9), 8)
    with pytest.raises(ValueError, match=r"x.shape=\(4, 8\) must end with normalized_shape=\(5,\)"):
        xp.ops.add_layernorm(x, x, 5)
    with pytest.raises(ValueError, match=r"weight.shape=\(7,\) must equal normalized_shape=\(8,\)"):
        xp.ops.add_layernorm(x, x, 8, torch.ones(7))


# -- linear_gelu ----------------------------------------------------------------------------------

def _linear_gelu(lead, n, k, dtype, provider, approximate, bias=True, device="cpu"):
    x = torch.randn(*lead, k, device=device).to(dtype)
    w = (torch.randn(n, k, device=device) * k ** -0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype) if bias else None
    dy = torch.randn(*lead, n, device=device).to(dtype)
    ref = [None if t is None else t.double().requires_grad_() for t in (x, w, b)]
    zr = F.linear(ref[0], ref[1], ref[2])
    yr = F.gelu(zr, approximate=approximate)
    mine = [None if t is None else t.clone().requires_grad_() for t in (x, w, b)]
    with poisoned_outputs():
        y = xp.ops.linear_gelu(*mine, approximate=approximate, provider=provider)
        y.backward(dy)
    yr.backward(dy.double())
    # Bounds from the magnitudes summed (|x| @ |w|.T, ...): a GEMM's error is relative to them, not
    # to its result, which may cancel to zero. GELU's slope is at most 1.13.
    ax, aw, ady = x.double().abs(), w.double().abs(), dy.double().abs() * 1.13
    z_scale = ax @ aw.T + (b.double().abs() if bias else 0) + 1e-3
    # bf16 / fp16 GEMMs on a GPU round z once more (the stored z, the tile) than the float64 path
    check(y, yr.detach(), dtype, scale=z_scale, what="y")
    check(mine[0].grad, ref[0].grad, dtype, scale=ady @ aw + 1e-3, what="dx")
    flat_dy, flat_x = ady.reshape(-1, n), ax.reshape(-1, k)
    check(mine[1].grad, ref[1].grad, dtype, scale=flat_dy.T @ flat_x + 1e-3, what="dweight")
    if bias:
        check(mine[2].grad, ref[2].grad, dtype, scale=flat_dy.sum(0) + 1e-3, what="dbias")


@pytest.mark.parametrize("lead, n, k, dtype, approximate", [
    ((7,), 13, 33, torch.float32, "tanh"), ((7,), 13, 33, torch.float16, "none"),
    ((2, 3), 24, 17, torch.float16, "tanh"), ((2, 3), 24, 17, torch.float32, "none"),
    ((1,), 1, 1, torch.float16, "tanh")], ids=str)
def test_linear_gelu_triton_under_interpreter(interpreter, lead, n, k, dtype, approximate):
    _linear_gelu(lead, n, k, dtype, "triton", approximate)


def test_linear_gelu_without_bias(interpreter):
    _linear_gelu((5,), 9, 12, torch.float32, "triton", "tanh", bias=False)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_linear_gelu_torch_reference(approximate):
    _linear_gelu((6,), 10, 20, torch.float32, "torch", approximate)


def test_linear_gelu_saves_the_pre_activation_only_for_training(interpreter):
    """Inference runs the epilogue without storing z; the pre-activation the training forward
    stores is the GEMM plus bias before GELU."""
    from xrt.kernels.triton.linear_gelu import linear_gelu

    x, w, b = torch.randn(9, 16), torch.randn(20, 16) / 4, torch.randn(20)
    y, z = linear_gelu(x, w, b, "none", False)
    assert z.numel() == 0
    y2, z2 = linear_gelu(x, w, b, "none", True)
    torch.testing.assert_close(z2, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y, y2)
    with torch.no_grad():
        torch.testing.assert_close(xp.ops.linear_gelu(x, w, b, provider="triton"), F.gelu(F.linear(x, w, b)),
                                   rtol=1e-5, atol=1e-5)


def test_linear_gelu_k_zero(interpreter):
    x, w, b = torch.randn(3, 0), torch.randn(4, 0), torch.randn(4)
    torch.testing.assert_close(xp.ops.linear_gelu(x, w, b, provider="triton"), F.gelu(b).expand(3, 4))


def test_linear_gelu_opcheck(interpreter):
    x, w, b = torch.randn(5, 12), torch.randn(7, 12) / 3, torch.randn(7)
    grad = [t.clone().requires_grad_() for t in (x, w, b)]
    torch.library.opcheck(linear_gelu_op, (*grad, "tanh", True, "triton"), test_utils=_QUICK)
    torch.library.opcheck(linear_gelu_op, (*grad, "none", True, "torch"), test_utils=_QUICK)
    torch.library.opcheck(linear_gelu_op, (x, w, None, "none", False, "triton"), test_utils=_QUICK)
    z = F.linear(x, w, b)
    torch.library.opcheck(linear_gelu_bwd_op, (torch.randn(5, 7), x, w, z, "none", "triton"), test_utils=_QUICK)
    from xrt.pytorch.ops import dispatch  # torch.compile's twins (triton_ops) too

    torch.library.opcheck(dispatch.COMPILED[("linear_gelu", "triton")], (*grad, "tanh", True, "triton"),
                          test_utils=_QUICK)
    torch.library.opcheck(dispatch.COMPILED[("linear_gelu_bwd", "triton")],
                          (torch.randn(5, 7), x, w, z, "none", "triton"), test_utils=_QUICK)


def test_linear_gelu_backward_gemms_take_matmuls_layout_defaults(monkeypatch):
    """dx = dz @ weight ("nn") and dweight = dz.T @ x ("tn") launch with xp.ops.matmul's default for
    their layout and shape (the layout table's entry at a GPT shape), not one config for both."""
    from xrt.kernels import spaces
    from xrt.kernels.triton import linear_gelu as lg
    from xrt.kernels.triton.matmul import default_config

    seen = []
    monkeypatch.setattr(lg, "_grad", lambda *a, **k: None)  # dz as allocated: only the GEMMs' configs matter here
    monkeypatch.setattr(lg, "run", lambda a, b, cfg, *rest: seen.append((a, b, dict(cfg))) or a.new_empty(
        (a.shape[0], a.shape[1], b.shape[2])))
    m, n, k = 4097, 3000, 1000  # buckets 8192, 4096, 1024: a d-1024 model's MLP up-projection
    x, w = torch.empty(m, k, dtype=torch.bfloat16), torch.empty(n, k, dtype=torch.bfloat16)
    dy = z = torch.zeros(m, n, dtype=torch.bfloat16)
    dx, dw, _ = lg.linear_gelu_bwd(dy, x, w, z, "tanh")
    assert dx.shape == (m, k) and dw.shape == (n, k)
    (a1, b1, c1), (a2, b2, c2) = seen
    assert (a1.shape, b1.shape, a2.shape, b2.shape) == ((1, m, n), (1, n, k), (1, n, m), (1, m, k))
    assert c1 == dict(default_config(a1[0], b1[0], None)) == spaces.gemm_default("nn", m, k, n)
    assert c2 == dict(default_config(a2[0], b2[0], None)) == spaces.gemm_default("tn", n, k, m)


def test_linear_gelu_forward_default_follows_the_gelu(monkeypatch):
    """With no config asked for, the forward GEMM's tile follows the GELU (its epilogue's cost): the
    space's default for erf, LINEAR_GELU_TANH for tanh, the skinny default for both at M <= 64; a
    config asked for is kept, for either GELU."""
    from xrt.kernels import spaces
    from xrt.kernels.triton import linear_gelu as lg

    seen = []
    monkeypatch.setattr(lg, "run", lambda a, b, cfg, *rest: seen.append(dict(cfg)))
    asked = {"kernel": "tiled", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}
    for m, approximate, config in ((4097, "none", None), (4097, "tanh", None), (64, "none", None), (64, "tanh", None),
                                   (4097, "tanh", asked), (4097, "none", asked)):
        x, w = torch.empty(m, 40, dtype=torch.bfloat16), torch.empty(48, 40, dtype=torch.bfloat16)
        lg.linear_gelu(x, w, None, approximate, False, config)
    erf, tanh, skinny_erf, skinny_tanh, asked_tanh, asked_erf = seen
    assert erf == spaces.default("linear_gelu.triton") and (erf["BLOCK_N"], erf["num_stages"]) == (128, 4)
    assert tanh == spaces.check("linear_gelu.triton", spaces.LINEAR_GELU_TANH) != erf
    assert skinny_erf == skinny_tanh == spaces.default_for("linear_gelu.triton", 64) != erf
    assert asked_tanh == asked_erf == spaces.check("linear_gelu.triton", asked)


def test_linear_gelu_backward_bias_gradient_is_one_reduction(monkeypatch):
    """dbias is one torch reduction of dz (fp32 accumulation inside it), no separate cast: the
    backward runs on autograd's thread, where each extra kernel and allocation costs host time."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from xrt.kernels.triton import linear_gelu as lg

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(lg, "_grad", lambda grid, dy, z, dz, *a, **k: dz.copy_(dy))
    monkeypatch.setattr(lg, "run", lambda a, b, cfg, *rest: a.new_zeros((a.shape[0], a.shape[1], b.shape[2])))
    dy = torch.randn(33, 7, dtype=torch.bfloat16)
    x, w = torch.randn(33, 5, dtype=torch.bfloat16), torch.randn(7, 5, dtype=torch.bfloat16)
    with Ops() as ops:
        _, _, db = lg.linear_gelu_bwd(dy, x, w, torch.zeros_like(dy), "tanh")
    assert ops.seen.count("sum") == 1 and "_to_copy" not in ops.seen, ops.seen
    assert db.dtype == torch.bfloat16
    torch.testing.assert_close(db, dy.sum(0, dtype=torch.float32).to(torch.bfloat16), rtol=0, atol=0)


def test_linear_gelu_bad_input_names_it():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"approximate='fast' must be 'none' or 'tanh'"):
        xp.ops.linear_gelu(x, torch.randn(3, 8), approximate="fast")
    with pytest.raises(ValueError, match=r"x.shape=\(4, 8\) must end with weight.shape\[1\]"):
        xp.ops.linear_gelu(x, torch.randn(3, 9))
    with pytest.raises(ValueError, match=r"bias.shape=\(4,\) must be \(3,\)"):
        xp.ops.linear_gelu(x, torch.randn(3, 8), torch.randn(4))


@pytest.mark.parametrize("approximate, act, b_t", [("tanh", 1, True), ("none", 2, False)])
def test_gemm_epilogue_in_the_tma_kernel(interpreter, approximate, act, b_t):
    """The persistent TMA GEMM (Hopper's default) runs the same epilogue: bias, GELU, z stored; and
    reads B as a Linear's weight, [N, K] row-major, in place (a transposed view: ``b_t``)."""
    from xrt.kernels.triton.matmul import Epilogue, launch_tma

    a, bias = torch.randn(1, 70, 24), torch.randn(40)
    bmat = (torch.randn(1, 40, 24) / 5).mT if b_t else torch.randn(1, 24, 40) / 5
    c, z = torch.full((1, 70, 40), float("nan")), torch.full((1, 70, 40), float("nan"))
    launch_tma(a, bmat, c, 64, 32, 16, 8, 5, "ieee", epilogue=Epilogue(bias, act, z))
    want_z = (a.double() @ bmat.double() + bias.double()).float()
    check(z, want_z, torch.float32, scale=want_z.abs() + 1, what="z")
    check(c, F.gelu(want_z, approximate=approximate), torch.float32, scale=want_z.abs() + 1, what="c")
    assert RTOL[torch.float32] < 1e-4


# -- on a GPU (bf16 too; the shapes of a GPT block, and awkward ones) --------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", [(8192, 1024), (4, 512, 2048), (1023, 4097), (3, 5, 37)], ids=str)
def test_add_layernorm_on_gpu(dtype, shape):
    _add_ln(shape, dtype, "triton", device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("lead, n, k", [((8, 1024), 4096, 1024), ((1000,), 1030, 260), ((7,), 13, 33)], ids=str)
@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_linear_gelu_on_gpu(dtype, lead, n, k, approximate):
    _linear_gelu(lead, n, k, dtype, "triton", approximate, device="cuda")
