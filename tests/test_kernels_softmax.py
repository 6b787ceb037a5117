"""``softmax`` over the last dim in every provider this machine has, against float64."""

import pytest
import torch
from kernel_checks import check, poisoned_outputs

import xrt.pytorch as xp
from xrt.pytorch.ops.softmax import _softmax_op

SHAPES = [(1,), (1, 4097), (4097, 1), (7, 1023), (3, 5, 37), (0, 5)]
ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _check(shape, dtype, device, provider, **kw):
    x = (torch.randn(shape, device=device) * 4).to(dtype)
    with poisoned_outputs():
        y = xp.ops.softmax(x, provider=provider) if not kw else kw.pop("fn")(x, **kw)
    check(y, torch.softmax(x.double(), -1), dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_triton_under_interpreter(interpreter, shape, dtype):
    _check(shape, dtype, "cpu", "triton")


@pytest.mark.parametrize("shape", [(3, 1023), (2, 64), (1, 5)], ids=str)
def test_triton_looped_kernel_for_long_rows(interpreter, shape):
    from xrt.kernels.triton.softmax import softmax

    _check(shape, torch.float32, "cpu", None, fn=softmax, loop_block=64)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_torch_reference(dtype):
    _check((7, 1023), dtype, "cpu", "torch")


def test_gradient_against_float64(interpreter):
    x = torch.randn(5, 33, dtype=torch.float64)
    g = torch.randn(5, 33, dtype=torch.float64)
    xr = x.clone().requires_grad_()
    torch.autograd.backward(torch.softmax(xr, -1), g)
    for p in ("torch", "triton"):
        xf = x.float().requires_grad_()
        torch.autograd.backward(xp.ops.softmax(xf, provider=p), g.float())
        check(xf.grad, xr.grad, torch.float32, scale=xr.grad.abs().max(), what=f"dx[{p}]")


def test_opcheck_and_compile():
    result = torch.library.opcheck(_softmax_op, (torch.randn(3, 17, requires_grad=True), "torch"))
    assert set(result.values()) == {"SUCCESS"}, result
    f = torch.compile(lambda t: xp.ops.softmax(t, provider="torch") * 2, backend="aot_eager", fullgraph=True)
    x = torch.randn(4, 9)
    torch.testing.assert_close(f(x), x.softmax(-1) * 2)


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["torch", "triton", "cuda", "auto"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES + [(64, 4096), (16, 32768), (4, 65536 + 3), (2, 1 << 18), (9, 4104)],
                         ids=str)
def test_on_gpu(provider, dtype, shape):
    _check(shape, dtype, "cuda", provider)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("block", ["auto", 128, 1024])
def test_cuda_c_versions_on_gpu(version, block):
    from xrt.kernels.cuda.softmax import softmax

    for shape in [(3, 1023), (5, 4096), (2, 8192 * 8 + 8), (1, 8)]:
        _check(shape, torch.bfloat16, "cuda", None, fn=softmax, config={"version": version, "block": block})
