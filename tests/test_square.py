"""``square`` in every provider this machine has, against a float64 reference."""


import pytest
import torch

import xrt.pytorch as xp
from xrt.pytorch.ops.square import _square_op

# Relative error bounds per dtype (one rounding of the product).
RTOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
SHAPES = [(1,), (7,), (1023,), (4097,), (1, 4097), (4097, 1), (3, 5, 7), (0,)]


def check(y: torch.Tensor, x: torch.Tensor) -> None:
    """Relative error against float64, where the result is a normal number of the dtype
    (below the smallest normal, fp16/bf16 results are subnormal and only absolutely close)."""
    ref = x.double() ** 2
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    if not x.numel():
        return
    err = (y.double() - ref).abs()
    bound = RTOL[x.dtype] * ref.abs() + torch.finfo(x.dtype).tiny
    worst = (err / bound).max()
    assert worst <= 1, f"error {worst:.3g}x the bound (rtol {RTOL[x.dtype]})"


def _providers(device: str):
    return [p for p, prov in xp.ops.providers("square").items() if device != "cpu" or p != "cuda"]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_triton_under_interpreter(interpreter, shape, dtype):
    x = torch.randn(shape).to(dtype) * 3
    check(xp.ops.square(x, provider="triton"), x)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_torch_reference(shape, dtype):
    x = torch.randn(shape).to(dtype)
    check(xp.ops.square(x, provider="torch"), x)


def test_non_contiguous_input(interpreter):
    x = torch.randn(64, 48)[:, ::3]
    for p in ("torch", "triton"):
        check(xp.ops.square(x, provider=p), x)


def test_autograd_through_triton(interpreter):
    x = torch.randn(1023, dtype=torch.float64).float().requires_grad_()
    y = xp.ops.square(x, provider="triton")
    g = torch.randn_like(y)
    y.backward(g)
    torch.testing.assert_close(x.grad, 2 * x.detach() * g)


def test_custom_op_registration_passes_opcheck():
    """Schema, fake (meta) implementation, autograd registration, AOT dispatch."""
    result = torch.library.opcheck(_square_op, (torch.randn(17, requires_grad=True), "torch"))
    assert set(result.values()) == {"SUCCESS"}, result


def test_runs_under_torch_compile():
    f = torch.compile(lambda t: xp.ops.square(t, provider="torch") + 1.0, backend="aot_eager", fullgraph=True)
    x = torch.randn(100)
    torch.testing.assert_close(f(x), x * x + 1)


def test_bad_inputs_are_named():
    with pytest.raises(TypeError, match="floating tensor, got dtype torch.int64"):
        xp.ops.square(torch.arange(4))
    with pytest.raises(TypeError, match="expects a torch.Tensor, got list"):
        xp.ops.square([1.0, 2.0])
    with pytest.raises(ValueError, match="unknown kernel 'cudnn' for op 'square'"):
        xp.ops.square(torch.randn(3), provider="cudnn")


def test_unavailable_providers_say_what_is_missing(monkeypatch):
    x = torch.randn(8)
    with pytest.raises(RuntimeError, match="provider 'xpu' is unavailable: .*XPU"):
        xp.ops.square(x, provider="xpu")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="only under TRITON_INTERPRET=1"):
        xp.ops.square(x, provider="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="cannot compute in bfloat16"):
        xp.ops.square(x.bfloat16(), provider="triton")


def test_auto_on_cpu_uses_torch():
    with xp.profile() as prof:
        xp.ops.square(torch.randn(8))
    assert "xrt::square[torch]" in {e.key for e in prof.key_averages()}


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["torch", "triton", "cuda", "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES + [(1 << 24,), (4096, 4099)], ids=str)
def test_square_on_gpu(provider, dtype, shape):
    x = (torch.randn(shape, device="cuda") * 3).to(dtype)
    check(xp.ops.square(x, provider=provider), x)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("block", [128, 1024])
def test_cuda_c_versions_on_gpu(version, block):
    from xrt.kernels.cuda.square import square

    for n in (1, 7, 4097, (1 << 20) + 3):
        x = torch.randn(n, device="cuda", dtype=torch.float16)
        check(square(x, {"version": version, "block": block}), x)
    # An unaligned view (offset 1 element) must still be right: v2 falls back to v1.
    x = torch.randn(4099, device="cuda")[1:]
    check(square(x, {"version": version, "block": block}), x)


@pytest.mark.gpu
def test_cuda_c_on_a_side_stream():
    x = torch.randn(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = xp.ops.square(x, provider="cuda")
    torch.cuda.synchronize()
    check(y, x)
