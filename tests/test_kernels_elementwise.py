"""``vector_add`` and ``window_sum`` in every provider this machine has, against float64."""

import pytest
import torch
from kernel_checks import check, poisoned_outputs

import xrt.pytorch as xp
from xrt.pytorch.ops.vector_add import _vector_add_op
from xrt.pytorch.ops.window_sum import _window_sum_op

SHAPES = [(1,), (7,), (1023,), (4097,), (1, 4097), (4097, 1), (3, 5, 7), (0,)]
WSHAPES = [(3,), (1, 4097), (13, 3), (7, 1023), (2, 3, 37)]
CPU_DTYPES = [torch.float32, torch.float16]
ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _add(shape, dtype, device, provider):
    a, b = (torch.randn(shape, device=device) * 3).to(dtype), torch.randn(shape, device=device).to(dtype)
    with poisoned_outputs():
        y = xp.ops.vector_add(a, b, provider=provider)
    ref = a.double() + b.double()
    check(y, ref, dtype, scale=a.double().abs() + b.double().abs())  # a sum can cancel to ~0


def _wsum(shape, dtype, device, provider):
    x = torch.randn(shape, device=device).to(dtype)
    with poisoned_outputs():
        y = xp.ops.window_sum(x, provider=provider)
    xd = x.double()
    check(y, xd[..., :-2] + xd[..., 1:-1] + xd[..., 2:], dtype,
          scale=xd[..., :-2].abs() + xd[..., 1:-1].abs() + xd[..., 2:].abs())


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
def test_vector_add_triton_under_interpreter(interpreter, shape, dtype):
    _add(shape, dtype, "cpu", "triton")


@pytest.mark.parametrize("shape", WSHAPES, ids=str)
@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
def test_window_sum_triton_under_interpreter(interpreter, shape, dtype):
    _wsum(shape, dtype, "cpu", "triton")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_torch_references(dtype):
    _add((4097,), dtype, "cpu", "torch")
    _wsum((5, 1023), dtype, "cpu", "torch")


def test_window_sum_definition():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0])
    assert xp.ops.window_sum(x).tolist() == [6.0, 9.0, 17.0]


def test_gradients():
    a = torch.randn(5, 7, requires_grad=True)
    b = torch.randn(5, 7, requires_grad=True)
    g = torch.randn(5, 7)
    torch.autograd.backward(xp.ops.vector_add(a, b), g)
    assert torch.equal(a.grad, g) and torch.equal(b.grad, g)
    x = torch.randn(3, 11, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: xp.ops.window_sum(t, provider="torch"), (x,))


def test_opcheck_and_compile():
    for op, args in ((_vector_add_op, (torch.randn(17, requires_grad=True), torch.randn(17), "torch")),
                     (_window_sum_op, (torch.randn(3, 17, requires_grad=True), "torch"))):
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, result
    f = torch.compile(lambda a, b: xp.ops.window_sum(xp.ops.vector_add(a, b, provider="torch"), provider="torch"),
                      backend="aot_eager", fullgraph=True)
    a, b = torch.randn(4, 9), torch.randn(4, 9)
    s = a + b
    torch.testing.assert_close(f(a, b), s[:, :-2] + s[:, 1:-1] + s[:, 2:])


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"a.shape=\(3,\) must equal b.shape=\(4,\)"):
        xp.ops.vector_add(torch.randn(3), torch.randn(4))
    with pytest.raises(ValueError, match=r"x.shape\[-1\] >= 3, got x.shape=\(4, 2\)"):
        xp.ops.window_sum(torch.randn(4, 2))


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["torch", "triton", "cuda", "auto"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_on_gpu(provider, dtype):
    for shape in SHAPES + [(1 << 24,), (4096, 4099)]:
        _add(shape, dtype, "cuda", provider)
    # (1, 2**26 + 3): 65536 and more column blocks, over the 65535 of a grid's second axis
    for shape in WSHAPES + [(4096, 4099), (1, (1 << 22) + 1), (70000, 5), (1, (1 << 26) + 3)]:
        _wsum(shape, dtype, "cuda", provider)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_cuda_c_versions_on_gpu(version):
    from xrt.kernels.cuda.vector_add import vector_add
    from xrt.kernels.cuda.window_sum import window_sum

    for block in (128, 512):
        for items in (1, 8):
            for shape in [(3,), (4097,), (5, 1023), (3, 4099)]:
                x = torch.randn(shape, device="cuda", dtype=torch.float16)
                xd = x.double()
                with poisoned_outputs():
                    y = window_sum(x, {"version": version, "block": block, "items": items})
                check(y, xd[..., :-2] + xd[..., 1:-1] + xd[..., 2:], x.dtype, scale=3 * xd.abs().max())
        a = torch.randn(4099, device="cuda")[1:]  # unaligned: v2 falls back to v1
        b = torch.randn(4098, device="cuda")
        check(vector_add(a, b, {"version": version, "block": block}), a.double() + b.double(), a.dtype,
              scale=a.double().abs() + b.double().abs())


def test_launchers_reject_bad_inputs_with_the_shared_messages():
    # The launchers are entry points too (the tuner and the suites call them with configs).
    from xrt.kernels.triton.layernorm import layernorm
    from xrt.kernels.triton.vector_add import vector_add
    from xrt.kernels.triton.window_sum import window_sum

    with pytest.raises(ValueError, match=r"vector_add: a.shape=\(3,\) must equal b.shape=\(4,\)"):
        vector_add(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match=r"vector_add: a.dtype=torch.float32 must equal b.dtype=torch.float16"):
        vector_add(torch.ones(3), torch.ones(3, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"window_sum needs x.shape\[-1\] >= 3, got x.shape=\(4, 2\)"):
        window_sum(torch.ones(4, 2))
    with pytest.raises(ValueError, match=r"x.shape\[-1\]=8 must equal bias.shape\[0\]; got bias.shape=\(7,\)"):
        layernorm(torch.ones(2, 8), torch.ones(8), torch.ones(7), 1e-5)
    with pytest.raises(ValueError, match=r"layernorm kernels take x as \[M, N\]; got x.shape=\(8,\)"):
        layernorm(torch.ones(8), torch.ones(8), torch.ones(8), 1e-5)
