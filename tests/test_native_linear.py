"""The native (C++) linear op: how a launch with host TMA descriptors is encoded, the op's autograd
plumbing on the CPU, and on a GPU that a routed model trains through it exactly as through the
Python path (the same kernels), on any stream, falling back where it cannot run."""

import importlib
import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import xrt.pytorch as xp
from xrt.kernels.launch_spec import Desc, LaunchSpec
from xrt.pytorch.ops import native

matmul_op = importlib.import_module("xrt.pytorch.ops.matmul")  # (the package exports the function matmul)



# A descriptor's metadata as Triton 3.6 keeps it in a compiled kernel (bf16: element type 10 on the
# device side, which its launcher maps to 9 for cuTensorMapEncodeTiled).
MD = {"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [1, 64, 128], "fp4_padded": False}



# -- encoding (no library needed) -------------------------------------------------------------------

def test_a_host_descriptor_is_encoded_as_tritons_launcher_expands_it():
    """The CUtensorMap's parameter, then the shape as i32 and the strides as i64; the descriptor's
    dims, byte strides and box innermost first, its element type as the launcher maps it."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    spec = LaunchSpec(77, (132, 1, 1), (256, 1, 1), 1024, ("desc", "ptr", None, "i32"), null_tail=2, descs=(MD,))
    template = (Desc("w", (1, 384, 256), (98304, 256, 1)), "y", 1, 9)
    got = native.encode_launch(spec, template, native.LINEAR_FWD_SLOTS, 0)
    assert got == [77, 132, 1, 1, 256, 1, 1, 1024, 11,
                   native.TMA, 0, 0, native.I32, 1, 0, native.I32, 384, 0, native.I32, 256, 0,
                   native.I64, 98304, 0, native.I64, 256, 0, native.I64, 1, 0,
                   native.PTR, 3, 0, native.I32, 9, 0, native.U64, 0, 0, native.U64, 0, 0,
                   1, 1, 0, TMA_DTYPE_DEVICE_TO_HOST[10], 3, 0, 3, 256, 384, 1, 512, 196608, 128, 64, 1]
    assert TMA_DTYPE_DEVICE_TO_HOST[10] == 9


def test_a_descriptor_that_does_not_fit_is_refused():
    spec = LaunchSpec(1, (1, 1, 1), (32, 1, 1), 0, ("desc",), descs=(MD,))
    with pytest.raises(ValueError, match="not a Desc"):
        native.encode_launch(spec, ("w",), native.LINEAR_FWD_SLOTS, 0)
    with pytest.raises(ValueError, match="not a row-major innermost"):
        native.encode_launch(spec, (Desc("w", (1, 8, 8), (64, 1, 8)),), native.LINEAR_FWD_SLOTS, 0)
    fp4 = LaunchSpec(1, (1, 1, 1), (32, 1, 1), 0, ("desc",), descs=({**MD, "fp4_padded": True},))
    with pytest.raises(ValueError, match="fp4 padded"):
        native.encode_launch(fp4, (Desc("w", (1, 8, 8), (64, 8, 1)),), native.LINEAR_FWD_SLOTS, 0)
    with pytest.raises(ValueError, match="more descriptor arguments"):
        native.encode_launch(spec._replace(descs=()), (Desc("w", (1, 8, 8), (64, 8, 1)),),
                             native.LINEAR_FWD_SLOTS, 0)


def test_a_kept_kernel_describes_its_launch_with_its_descriptors():
    from xrt.kernels.triton import launch

    kept = object.__new__(launch.Kept)
    kept.launcher, kept.epoch, kept.meta = SimpleNamespace(epoch=0), 0, (128, 64)
    run = SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False)
    kept.compiled = SimpleNamespace(
        function=5, run=run, packed_metadata=(8, 1, 4096), metadata=SimpleNamespace(num_ctas=1),
        src=SimpleNamespace(signature={"a": "tensordesc<bf16[1, 64, 128]>", "bias": "*bf16", "M": "i32",
                                       "B": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}))
    kept.direct = (print, {0: (MD, "md")})
    got = kept.native((132,))
    assert got == LaunchSpec(5, (132, 1, 1), (256, 1, 1), 4096, ("desc", "ptr", "i32", None), keep=kept,
                             null_tail=2, descs=(MD,))
    kept.direct = (print, {0: (None, "None")})  # a descriptor not lowered to a CUtensorMap
    assert kept.native((132,)) is None
    kept.direct = (print, {0: (MD, "md")})
    run.launch_pdl = True
    assert kept.native((132,)) is None
    run.launch_pdl = False
    kept.launcher.epoch = 1  # a cleared Launcher
    assert kept.native((132,)) is None


# -- the library on the CPU -------------------------------------------------------------------------

def _launch(*params, descs=()):
    return [9, 1, 1, 1, 32, 1, 1, 0, len(params) // 3, *params, len(descs), *(v for d in descs for v in d)]


def test_add_linear_plan_rejects_malformed_specs_with_a_clear_line(native_lib):
    desc = [0, 0, 9, 3, 0, 2, 64, 8, 128, 64, 8]
    head = [8, 4, 2, -1, 0, 0, 0]  # m, n, k, device, bias, dX's and dW's partials
    for spec, what in (([8, 4], "ends before its k"), ([8, 4, 2, -1, 2, 0, 0], "bias 0 or 1"),
                       ([8, 4, 2, -1, 0, 0, -1], "partials not negative"), ([*head, 0, 0, 0, 5], "1 values after"),
                       ([*head, 1, *_launch(native.TMA, 1, 0, descs=[desc]), 0, 0], "descriptor 1 does not"),
                       ([*head, 1, *_launch(descs=[[6, *desc[1:]]]), 0, 0], "slot 6 does not exist"),
                       ([*head, 1, *_launch(descs=[[0, 0, 9, 3, 0, 2, 64, 8, 100, 64, 8]]), 0, 0], "stride 100 bytes"),
                       ([*head, 1, *_launch(descs=[[0, 0, 9, 3, 0, 6]]), 0, 0], "rank 6"),
                       ([*head, 0, 1, *_launch(native.PTR, 6, 0), 0], "slot 6 does not exist")):
        with pytest.raises(RuntimeError, match=what):
            native_lib.add_linear_plan(spec)


def _grads(y, inputs, dy, **kw):
    return torch.autograd.grad(y, [t for t in inputs if t.requires_grad], dy, **kw)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_the_linear_autograd_plumbing_without_kernels(native_lib, bias):
    """A plan with no launches (a CPU plan): the output and gradients have the right shapes, the bias
    gradient is the rows' sum, only the inputs that need one get a gradient, the saved tensors are
    torch's F.linear's, and under create_graph the backward is torch's differentiable GEMMs (a
    gradient penalty's gradients equal torch's)."""
    m, n, k = 6, 5, 8
    pid = native_lib.add_linear_plan([m, n, k, -1, int(bias), 0, 0, 0, 0, 0])
    x = torch.randn(2, 3, k, dtype=torch.float64, requires_grad=True)
    w = torch.randn(n, k, dtype=torch.float64, requires_grad=True)
    b = torch.randn(n, dtype=torch.float64, requires_grad=True) if bias else None
    y = native_lib.linear(x, w, b, pid, 0)
    assert y.shape == (2, 3, n) and y.dtype == x.dtype and "LinearFunction" in y.grad_fn.name()
    dy = torch.randn_like(y)
    got = _grads(y, (x, w, *([b] if bias else [])), dy, retain_graph=True)
    assert [g.shape for g in got] == [x.shape, w.shape, *([b.shape] if bias else [])]
    if bias:
        torch.testing.assert_close(got[2], dy.sum((0, 1)), rtol=0, atol=0)
    xs = x.detach()  # only the weight (and bias) need a gradient
    y = native_lib.linear(xs, w, b, pid, 0)
    assert [g.shape for g in _grads(y, (xs, w, *([b] if bias else [])), dy)] == [w.shape, *([b.shape] if bias else [])]

    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        native_lib.linear(x, w, b, pid, 0)
    # hooks that hand the saved tensors back laid out otherwise (W.T made contiguous): re-laid, no error
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.contiguous().clone(), lambda t: t):
        y = native_lib.linear(x, w, b, pid, 0)
    assert [g.shape for g in _grads(y, (x, w), torch.ones_like(y))] == [x.shape, w.shape]
    assert saved == ([(m, k), (k, n)] if bias else [(k, n), (m, k)])  # addmm's order, or mm's

    def penalty(fn):  # |dy/dx . v|^2, whose gradients do not read y (no kernel computed it here)
        xx, ww = x.detach().requires_grad_(), w.detach().requires_grad_()
        bb = b.detach().requires_grad_() if bias else None
        y = fn(xx, ww, bb)
        gx, = torch.autograd.grad(y, xx, dy, create_graph=True)
        gx.square().sum().backward()
        return gx.detach(), ww.grad
    for a, e in zip(penalty(lambda *t: native_lib.linear(*t, pid, 0)), penalty(F.linear), strict=True):
        torch.testing.assert_close(a, e)


def test_the_linear_op_checks_its_inputs(native_lib):
    pid = native_lib.add_linear_plan([6, 5, 8, -1, 1, 0, 0, 0, 0, 0])
    x, w, b = torch.randn(6, 8), torch.randn(5, 8), torch.randn(5)
    for args, what in (((x[:5], w, b), r"6 rows of 8 \(the plan's\)"), ((x, w[:4], b), r"contiguous \[5, 8\]"),
                       ((x, w, None), "has a bias and none was given"), ((x, w.double(), b), "must have x's dtype"),
                       ((x.t().contiguous().t(), w, b), "contiguous with 6 rows")):
        with pytest.raises(RuntimeError, match=what):
            native_lib.linear(*args, pid, 0)
    with pytest.raises(RuntimeError, match="no plan 99999"):
        native_lib.linear(x, w, b, 99999, 0)
    with pytest.raises(RuntimeError, match="a bias was given to a plan without one"):
        native_lib.linear(x, w, b, native_lib.add_linear_plan([6, 5, 8, -1, 0, 0, 0, 0, 0, 0]), 0)
    with pytest.raises(RuntimeError, match="plan's device"):
        native_lib.linear(x, w, b, native_lib.add_linear_plan([6, 5, 8, 0, 1, 0, 0, 0, 0, 0]), 0)


def test_a_linear_launch_without_a_gpu_driver_fails_with_a_clear_line(native_lib):
    if shutil.which("nvidia-smi"):
        pytest.skip("a CUDA driver is installed here")
    pid = native_lib.add_linear_plan([6, 5, 8, -1, 0, 0, 0, 1, *_launch(), 0, 0])
    with pytest.raises(RuntimeError, match="xrt_native.linear: cannot launch: libcuda.so.1"):
        native_lib.linear(torch.randn(6, 8), torch.randn(5, 8), None, pid, 0)


def test_cpu_linears_never_go_native(interpreter, monkeypatch):
    """On the CPU (the interpreter) a routed linear keeps the Python path and asks for no build."""
    monkeypatch.setattr(native, "ready", lambda: pytest.fail("a CPU linear asked for the native library"))
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(5, 8, requires_grad=True)
    with xp.kernel_policy(matmul="triton"):
        y = F.linear(x, w)
    assert type(y.grad_fn).__name__ == "_EagerLinearBackward"


def test_strided_operands_keep_the_python_plan(monkeypatch):
    """Rows of a wider tensor fold without a copy, so the Python path keeps a plan for them; the
    native op takes its tensors as stored, so no native plan is made for them (nor for a transposed
    weight)."""
    monkeypatch.setattr(matmul_op.kernel_providers, "kept_plan", lambda key: SimpleNamespace())
    wide = torch.randn(6, 16)
    assert matmul_op._make_native_linear(wide[:, :8], torch.randn(5, 8), None) is False
    assert matmul_op._make_native_linear(torch.randn(6, 8), torch.randn(8, 5).t(), None) is False


# -- on the GPU: the native op against the Python path, bit for bit --------------------------------

def _train(x, w, b, dy, need_x=True):
    xs = x.detach().clone().requires_grad_(need_x)
    ws = w.detach().clone().requires_grad_(True)
    bs = b.detach().clone().requires_grad_(True) if b is not None else None
    with xp.kernel_policy(matmul="triton"):
        y = F.linear(xs, ws, bs)
        y.backward(dy)
    return y, xs.grad, ws.grad, bs.grad if bs is not None else None, y.grad_fn.name()


def _python_path(monkeypatch, *args, **kw):
    with monkeypatch.context() as mp:
        mp.setattr(matmul_op, "_native_linear", lambda *a: None)
        return _train(*args, **kw)


def _native(*args, **kw):
    """``_train`` until the linear has gone native (its first call makes the forward's plan)."""
    for _ in range(3):
        got = _train(*args, **kw)
        if "LinearFunction" in got[4]:
            return got
    raise AssertionError(f"the linear never went native ({got[4]}): {native.why()}")


def _same(got, want):
    for a, e in zip(got[:4], want[:4], strict=True):
        assert (a is None) == (e is None)
        if a is not None:
            torch.testing.assert_close(a, e, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("shape,n,dtype", [((8, 128, 768), 2304, torch.bfloat16), ((1024, 1024), 4096, torch.bfloat16),
                                           ((4, 256, 512), 384, torch.float16), ((2, 64, 256), 256, torch.float16)])
def test_native_linear_training_equals_the_python_path(bias, shape, n, dtype, monkeypatch):
    assert native.load(), native.why()
    xp.clear_kernel_policy()
    torch.manual_seed(0)
    k = shape[-1]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
    b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
    dy = torch.randn(*shape[:-1], n, device="cuda", dtype=dtype)
    want = _python_path(monkeypatch, x, w, b, dy)
    assert want[4] == "_EagerLinearBackward"
    got = _native(x, w, b, dy)
    _same(got, want)
    ref = F.linear(x.float(), w.float(), None if b is None else b.float())
    torch.testing.assert_close(got[0].float(), ref, rtol=2e-2, atol=2e-2 * k**0.5)
    # new data through the kept plan (other addresses: new descriptors), then x without a gradient
    x2, dy2 = torch.randn_like(x), torch.randn_like(dy)
    want2 = _python_path(monkeypatch, x2, w, b, dy2)
    _same(_train(x2, w, b, dy2), want2)
    _same(_native(x2, w, b, dy2, need_x=False), _python_path(monkeypatch, x2, w, b, dy2, need_x=False))
    # inference keeps the Python path's kept GEMM plan (cheaper there than the native op)
    monkeypatch.setattr(native, "op", lambda name: pytest.fail(f"inference went native ({name})"))
    with torch.no_grad(), xp.kernel_policy(matmul="triton"):
        torch.testing.assert_close(F.linear(x2, w, b), want2[0].detach(), rtol=0, atol=0)


@pytest.mark.gpu
def test_a_weight_gradient_that_splits_k_goes_native(monkeypatch):
    """A 1024 x 1024 linear over 8192 rows: its weight gradient splits K (the layout table's entry), two
    launches (the batched GEMM into fp32 partials the backward allocates, their sum); still equal to
    the Python path to the bit."""
    from xrt.pytorch import policy

    assert native.load(), native.why()
    xp.clear_kernel_policy()
    torch.manual_seed(2)
    x = torch.randn(8, 1024, 1024, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(1024, 1024, device="cuda") / 32).to(torch.bfloat16)
    b = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(8, 1024, 1024, device="cuda", dtype=torch.bfloat16)
    want = _python_path(monkeypatch, x, w, b, dy)
    got = _native(x, w, b, dy)
    _same(got, want)
    with xp.kernel_policy(matmul="triton"):
        plans = [v for k, v in policy.tuned_state().memo.items() if isinstance(k, tuple) and k[0] == "linear-native"]
    assert [len(p.kept) for p in plans] == [4]  # the forward, dX, dW's GEMM and its sum
    xp.clear_kernel_policy()


@pytest.mark.gpu
def test_native_linear_on_a_side_stream_misaligned_views_and_double_backward(monkeypatch):
    assert native.load(), native.why()
    xp.clear_kernel_policy()
    torch.manual_seed(1)
    x = torch.randn(257, 512, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(768, 512, device="cuda") / 23).to(torch.bfloat16)
    b = torch.randn(768, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(256, 768, device="cuda", dtype=torch.bfloat16)
    want = _python_path(monkeypatch, x[:256], w, b, dy)
    _native(x[:256], w, b, dy)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = _train(x[:256], w, b, dy)
    torch.cuda.current_stream().wait_stream(s)
    assert "LinearFunction" in got[4]
    _same(got, want)
    # x a view 2 bytes past an aligned address, same shape and strides: the Python path
    xv = x.view(-1)[1:1 + 256 * 512].view(256, 512)
    with xp.kernel_policy(matmul="triton"):
        y = F.linear(xv, w.detach().clone().requires_grad_(True), b)
    assert y.grad_fn.name() == "_EagerLinearBackward"
    torch.testing.assert_close(y.float(), F.linear(xv.float(), w.float(), b.float()), rtol=2e-2, atol=0.5)
    # dy a misaligned view: the native backward copies it first
    dyv = torch.randn(256 * 768 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(256, 768)
    _same(_train(x[:256], w, b, dyv), _train(x[:256], w, b, dyv.clone()))
    # retain_graph: a second backward equals the first; create_graph: torch's GEMMs, twice differentiable
    xs = x[:256].detach().clone().requires_grad_(True)
    ws = w.detach().clone().requires_grad_(True)
    with xp.kernel_policy(matmul="triton"):
        y = F.linear(xs, ws, b)
    assert "LinearFunction" in y.grad_fn.name()
    g1, = torch.autograd.grad(y, xs, dy, retain_graph=True)
    g2, = torch.autograd.grad(y, xs, dy, create_graph=True)
    torch.testing.assert_close(g1.float(), g2.float(), rtol=2e-2, atol=0.5)
    g2.float().square().sum().backward()
    torch.testing.assert_close(ws.grad.float(), 2 * dy.float().T @ (dy.float() @ ws.detach().float()),
                               rtol=3e-2, atol=2.0)
    xp.clear_kernel_policy()
