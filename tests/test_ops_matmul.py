"""``xp.ops.matmul`` / ``xp.ops.bmm``: routing by the matmul policy, gradients, the custom ops
under opcheck and torch.compile, tuned configs, bad inputs."""

import json
import sys

import pytest
import torch
from gemm_checks import check_gemm, operands

import xrt.pytorch as xp
from xrt.pytorch import policy
from xrt.pytorch.ops import kernel_providers
from xrt.pytorch.ops.matmul import _bmm_op, _matmul_op, choose_provider

pytestmark = pytest.mark.usefixtures("no_kernel_policy")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_torch_provider(dtype):
    a, b = operands(17, 13, 29, dtype, "cpu")
    check_gemm(xp.ops.matmul(a, b, provider="torch"), a, b, dtype)
    a, b = operands(5, 7, 3, dtype, "cpu", batch=4)
    check_gemm(xp.ops.bmm(a, b), a, b, dtype)


def test_triton_provider_under_interpreter(interpreter):
    a, b = operands(17, 13, 29, torch.float32, "cpu", transpose=True)
    check_gemm(xp.ops.matmul(a, b, provider="triton"), a, b, torch.float32)
    a, b = operands(5, 7, 3, torch.float16, "cpu", batch=4)
    check_gemm(xp.ops.bmm(a, b, provider="triton"), a, b, torch.float16)


def test_policy_routes_matmul():
    # Triton takes CPU tensors only under the interpreter: on a GPU host without it, a CUDA tensor.
    a = torch.randn(4, 5, device="cuda" if torch.cuda.is_available() else "cpu")
    assert choose_provider("matmul", a, None) == "torch"  # "default": torch's own matmul
    for choice, want in (("cublas", "torch"), ("cublasLt", "torch"), ("triton", "triton"), ("auto", "torch")):
        if choice.startswith("cublas") and torch.version.cuda is None:
            continue  # the BLAS switch needs a CUDA build (test_policy checks the error)
        with xp.kernel_policy(matmul=choice):
            assert choose_provider("matmul", a, None) == want, choice
            assert choose_provider("bmm", a, None) == want, choice
            assert choose_provider("matmul", a, "torch") == "torch"  # provider= wins
    with xp.kernel_policy(matmul="triton"):
        assert choose_provider("matmul", a, "default") == "torch"


def test_xrt_kernel_choices_need_no_cuda_build_and_keep_the_blas_switch():
    before = torch.backends.cuda.preferred_blas_library() if torch.version.cuda else None
    for choice in ("triton", "cuda", "auto"):
        xp.set_kernel_policy(matmul=choice)  # never raises, even where cuBLAS is absent
        if before is not None:
            assert torch.backends.cuda.preferred_blas_library() == before
    xp.clear_kernel_policy()
    assert "triton" in policy.known_ops()["matmul"] and "cublasLt" in policy.known_ops()["matmul"]


def test_policy_routes_triton_end_to_end(interpreter):
    a, b = operands(9, 10, 11, torch.float32, "cpu")
    calls = []
    fn = xp.ops.providers("matmul")["triton"].fn
    with xp.kernel_policy(matmul="triton"):
        from xrt.pytorch.ops import dispatch

        orig = dispatch._REGISTRY["matmul"]["triton"]
        dispatch._REGISTRY["matmul"]["triton"] = dispatch.Provider("matmul", "triton",
                                                                   lambda *t: calls.append(1) or fn(*t),
                                                                   orig.missing)
        try:
            check_gemm(xp.ops.matmul(a, b), a, b, torch.float32)
        finally:
            dispatch._REGISTRY["matmul"]["triton"] = orig
    assert calls == [1]


def test_gradcheck_float64_through_the_custom_ops():
    a = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    b = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: _matmul_op(x, y, "torch"), (a, b))
    a3 = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    b3 = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: _bmm_op(x, y, "torch"), (a3, b3))


@pytest.mark.parametrize("op", ["matmul", "bmm"])
def test_triton_gradients_against_float64(interpreter, op):
    lead = (3,) if op == "bmm" else ()
    a = torch.randn(*lead, 6, 11, dtype=torch.float64)
    b = torch.randn(*lead, 11, 5, dtype=torch.float64)
    g = torch.randn(*lead, 6, 5, dtype=torch.float64)
    ar, br = a.clone().requires_grad_(), b.clone().requires_grad_()
    torch.autograd.backward(ar @ br, g)
    fn = getattr(xp.ops, op)
    for compiled in (False, True):
        af, bf = a.float().requires_grad_(), b.float().requires_grad_()
        if compiled:  # through the custom op (the eager path skips its dispatch)
            y = (_bmm_op if op == "bmm" else _matmul_op)(af, bf, "triton")
        else:
            y = fn(af, bf, provider="triton")
        torch.autograd.backward(y, g.float())
        check_gemm(af.grad, g, br.mT.detach(), torch.float32, what=f"da compiled={compiled}")
        check_gemm(bf.grad, ar.mT.detach(), g, torch.float32, what=f"db compiled={compiled}")


def test_opcheck():
    for op, args in ((_matmul_op, (torch.randn(3, 17, requires_grad=True), torch.randn(17, 4, requires_grad=True))),
                     (_bmm_op, (torch.randn(2, 3, 5, requires_grad=True), torch.randn(2, 5, 4, requires_grad=True)))):
        result = torch.library.opcheck(op, (*args, "torch"))
        assert set(result.values()) == {"SUCCESS"}, result


def test_compile_fullgraph(interpreter):
    f = torch.compile(lambda x, y: xp.ops.matmul(x, y, provider="triton") * 2, backend="aot_eager", fullgraph=True)
    a, b = operands(6, 5, 7, torch.float32, "cpu")
    torch.testing.assert_close(f(a, b), (a @ b) * 2, rtol=1e-5, atol=1e-5)
    g = torch.compile(lambda x, y: xp.ops.bmm(x, y, provider="torch") + 1, backend="aot_eager", fullgraph=True)
    a, b = operands(6, 5, 7, torch.float32, "cpu", batch=2)
    torch.testing.assert_close(g(a, b), torch.bmm(a, b) + 1)


def test_tuned_config_reaches_the_kernel(tmp_path, monkeypatch):
    tuned = {"kernel": "tiled", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 4,
             "num_stages": 2}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps([{"op": "matmul.triton", "device": "*", "dtype": "float32", "shape": "16x8x32",
                                 "config": tuned}]))
    monkeypatch.setenv("XRT_TUNED", str(path))
    a = torch.randn(16, 20)
    cfg = kernel_providers.config("matmul", "matmul.triton", a, (16, 8, 20))  # (M, N, K): bucket 16x8x32
    assert {k: cfg[k] for k in tuned} == tuned  # the rest filled from the defaults
    other = kernel_providers.config("matmul", "matmul.triton", a, (16, 300, 20))
    assert other["kernel"] == "persistent_tma"  # another bucket: the default


@pytest.mark.parametrize("call, match", [
    (lambda: xp.ops.matmul(torch.randn(3, 4), torch.randn(5, 6)), r"a.shape\[-1\]=4 must equal b.shape\[-2\]=5"),
    (lambda: xp.ops.matmul(torch.randn(3, 4), torch.randn(4, 6).double()), r"a.dtype=torch.float32 must equal"),
    (lambda: xp.ops.matmul(torch.randn(4), torch.randn(4, 6)), r"\[M, K\] x \[K, N\]; got a.shape=\(4,\) \(1-D\)"),
    (lambda: xp.ops.matmul(torch.randn(2, 3, 4), torch.randn(4, 6)), r"got a.shape=\(2, 3, 4\) \(3-D\)"),
    (lambda: xp.ops.bmm(torch.randn(3, 4), torch.randn(4, 6)), r"\[B, M, K\] x \[B, K, N\]; got a.shape=\(3, 4\)"),
    (lambda: xp.ops.bmm(torch.randn(2, 3, 4), torch.randn(3, 4, 6)), r"a.shape\[0\]=2 must equal b.shape\[0\]=3"),
    (lambda: xp.ops.matmul(torch.randn(3, 4), torch.randn(4, 6), provider="cuda"), r"provider 'cuda' cannot take"),
    (lambda: xp.ops.matmul(torch.randn(3, 4), torch.randn(4, 6), provider="flash"), r"provider='flash'.*cublasLt"),
])
def test_bad_input_is_one_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_input_to_the_launchers():
    from xrt.kernels.cuda.matmul import matmul as cuda_matmul
    from xrt.kernels.cuda.matmul import plan
    from xrt.kernels.triton.matmul import matmul as triton_matmul

    a, b = torch.randn(3, 4), torch.randn(4, 6)
    with pytest.raises(ValueError, match=r"CUDA C matmul needs CUDA tensors; a is on cpu"):
        cuda_matmul(a, b)
    with pytest.raises(ValueError, match=r"BLOCK_M=96 is outside the tuning space \[64, 128, 256\]"):
        triton_matmul(a, b, {"BLOCK_M": 96})
    with pytest.raises(ValueError, match=r"unknown tuning parameter\(s\) \['BM'\]"):
        triton_matmul(a, b, {"BM": 64})
    with pytest.raises(ValueError, match=r"Triton matmul: dtype torch.float64 is not supported"):
        triton_matmul(a.double(), b.double())
    with pytest.raises(ValueError, match=r"v4: no warp layout fits BM=64, BN=64, TM=8, TN=8"):
        plan({"version": "v4", "BM": 64, "BN": 64, "BK": 8, "TM": 8, "TN": 8})


@pytest.mark.gpu
@pytest.mark.parametrize("choice", ["triton", "cuda", "cublas", "cublasLt", "auto"])
def test_policy_on_gpu(choice):
    before = torch.backends.cuda.preferred_blas_library()
    xp.set_kernel_policy(matmul="cublasLt")
    xp.set_kernel_policy(matmul=choice)
    want = {"cublas": torch._C._BlasBackend.Cublas, "cublasLt": torch._C._BlasBackend.Cublaslt}.get(choice, before)
    assert torch.backends.cuda.preferred_blas_library() == want
    a, b = operands(300, 200, 100, torch.float32, "cuda", transpose=True)
    a.requires_grad_()
    y = xp.ops.matmul(a, b)
    check_gemm(y.detach(), a.detach(), b, torch.float32, c=64 if choice.startswith("cublas") else 4)
    y.sum().backward()
    assert a.grad is not None
    xp.clear_kernel_policy()
    assert torch.backends.cuda.preferred_blas_library() == before


@pytest.mark.gpu
def test_compile_on_gpu():
    f = torch.compile(lambda x, y: xp.ops.matmul(x, y, provider="triton").relu(), fullgraph=True)
    a, b = operands(256, 512, 128, torch.bfloat16, "cuda")
    torch.testing.assert_close(f(a, b), (a.float() @ b.float()).relu().bfloat16(), rtol=2e-2, atol=2e-2)


# -- a routed nn.Linear: no hidden copies, gradients in their parameters' layout ----------------------

_COPIES = ("aten::copy_", "aten::contiguous", "aten::clone")


def _copies_outside_kernels(monkeypatch, fn) -> list[str]:
    """The copy ops the profiler saw while ``fn()`` ran, each with its callers, leaving out those the
    Triton interpreter makes inside a launch (it copies every argument's storage back after a run,
    where a GPU launch copies nothing)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from xrt.kernels.triton import launch

    call = launch.Launcher.__call__

    def marked(self, *args, **kwargs):
        with record_function("xrt.test.kernel_launch"):
            return call(self, *args, **kwargs)

    monkeypatch.setattr(launch.Launcher, "__call__", marked)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    found = []
    for e in prof.events():
        if e.name not in _COPIES:
            continue
        chain, p = [e.name], e.cpu_parent
        while p is not None:
            chain.append(p.name)
            p = p.cpu_parent
        if "xrt.test.kernel_launch" not in chain:
            found.append(" <- ".join(chain))
    return found


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_routed_linear_forward_and_backward_copy_nothing(interpreter, monkeypatch, bias):
    """x @ W.T reads W.T in place, dX = g @ W and dW = g.T @ x read g.T in place, and dW comes out
    row-major like W, so autograd's accumulation does not copy it into W's layout."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 40, bias=bias)
    x = torch.randn(3, 7, 24, requires_grad=True)
    g = torch.randn(3, 7, 40)

    def step():
        lin(x).backward(g)

    with xp.kernel_policy(matmul="triton"):
        step()  # first calls: anything that happens once
        lin.zero_grad(set_to_none=True)
        x.grad = None
        copies = _copies_outside_kernels(monkeypatch, step)
    assert copies == [], "\n".join(copies)
    assert lin.weight.grad.stride() == lin.weight.stride()
    assert x.grad.is_contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_routed_linear_gradients_against_float64(interpreter, dtype):
    """Forward and the three gradients of a routed nn.Linear (the nt, nn and tn GEMMs) within the
    GEMM bound of float64 products of the same rounded operands."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(37, 29).to(dtype)
    x = torch.randn(2, 11, 37).to(dtype).requires_grad_()
    g = torch.randn(2, 11, 29).to(dtype)
    with xp.kernel_policy(matmul="triton"):
        y = lin(x)
        y.backward(g)
    x2, g2, w = x.detach().reshape(-1, 37), g.reshape(-1, 29), lin.weight.detach()
    check_gemm((y.detach() - lin.bias.detach()).reshape(-1, 29), x2, w.T, dtype, c=8.0, what="y")
    check_gemm(x.grad.reshape(-1, 37), g2, w, dtype, what="dX")
    check_gemm(lin.weight.grad, g2.T, x2, dtype, what="dW")
    torch.testing.assert_close(lin.bias.grad.double(), g2.double().sum(0), rtol=1e-2, atol=1e-2)
    assert lin.weight.grad.is_contiguous()


def test_kept_plans_live_in_the_policy_state_and_are_made_anew_when_stale():
    """The ops' launch plans (GEMM, attention) are kept in the policy state's memo: none at first,
    ``False`` once none can be made, the plan itself after, none again once its kernel's Launcher
    was cleared (stale) or the policy state changed; the memo stays bounded."""
    class Plan:
        old = False

        def stale(self):
            return self.old

    key = ("test-plan", 1)
    with xp.kernel_policy(matmul="triton"):
        assert kernel_providers.kept_plan(key) is None
        kernel_providers.keep_plan(key, None)
        assert kernel_providers.kept_plan(key) is False
        plan = Plan()
        kernel_providers.keep_plan(key, plan)
        assert kernel_providers.kept_plan(key) is plan
        plan.old = True
        assert kernel_providers.kept_plan(key) is None
        kernel_providers.keep_plan(key, Plan())
        memo = policy.tuned_state().memo
        memo.update({("filler", i): False for i in range(4100)})
        kernel_providers.keep_plan(("test-plan", 2), Plan())
        assert len(memo) == 1 and kernel_providers.kept_plan(key) is None
    with xp.kernel_policy(matmul="triton"):  # the same policy again: its state and memo come back
        assert kernel_providers.kept_plan(("test-plan", 2)) is not None
    with xp.kernel_policy(matmul="triton", layernorm="triton"):  # another policy: another memo
        assert kernel_providers.kept_plan(("test-plan", 2)) is None


def _plans(kind: str) -> list:
    """The GEMM launch plans the merged policy's memo holds now, of ``kind`` ("linear-plan", "gemm-plan")."""
    return [v for k, v in policy.tuned_state().memo.items() if isinstance(k, tuple) and k and k[0] == kind]


@pytest.mark.gpu
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_routed_linear_repeats_its_plan_on_gpu(bias):
    """A routed nn.Linear's second call of one signature launches the kept plan (no checks, no
    view): its values are the first call's, within the GEMM bound of float64 for new data, and an
    operand of the same shape and strides that is not 16-byte aligned takes the general path."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 384, bias=bias).cuda().to(torch.bfloat16)
    w, b = lin.weight.detach(), lin.bias.detach() if bias else None
    x = torch.randn(4, 64, 256, device="cuda", dtype=torch.bfloat16)

    def check(y, x):
        ref_y = y.float() - b.float() if bias else y
        check_gemm(ref_y.to(torch.bfloat16).reshape(-1, 384) if bias else y.reshape(-1, 384),
                   x.reshape(-1, 256), w.T, torch.bfloat16, c=8.0 if bias else 4.0)

    with xp.kernel_policy(matmul="triton"), torch.no_grad():
        first = lin(x)
        assert len(_plans("linear-plan")) == 1 and _plans("linear-plan")[0] is not False
        again = lin(x)
        assert torch.equal(first, again) and again.shape == (4, 64, 384) and again._base is None
        check(again, x)
        x2 = torch.randn_like(x)
        check(lin(x2), x2)
        buf = torch.randn(x.numel() + 1, device="cuda", dtype=torch.bfloat16)
        skew = buf[1:].view(4, 64, 256)  # same shape and strides, 2 bytes off alignment
        check(lin(skew), skew)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            lin(x)
        assert "xrt::matmul[triton]" in {e.name for e in prof.events()}
    with xp.kernel_policy(matmul="triton"):
        assert _plans("linear-plan") != []  # the same policy entered again: the plan is kept
    with xp.kernel_policy(matmul="triton", softmax="triton"):
        assert _plans("linear-plan") == []  # another policy: another memo, no plan of the last one
    y = again.relu_()  # a tensor of its own: an in-place op under grad mode is fine
    assert y is again


@pytest.mark.gpu
def test_routed_linear_training_through_plans_on_gpu(monkeypatch):
    """Two training steps of a routed nn.Linear (the forward's plan, the backward's dX and dW plans):
    the second step's gradients equal the first's, and both are within the GEMM bound of float64."""
    from xrt.kernels.triton import matmul as tm

    launched = []
    call = tm.GemmPlan.__call__

    def counted(self, *args):
        y = call(self, *args)
        launched.append(y is not None)
        return y

    monkeypatch.setattr(tm.GemmPlan, "__call__", counted)  # (the backward's plans live on autograd's thread)
    # the Python path's plans (the native op, which launches them from C++, is test_native_linear's)
    monkeypatch.setattr(sys.modules["xrt.pytorch.ops.matmul"], "_native_linear", lambda *args: None)
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 384).cuda().to(torch.bfloat16)
    x = torch.randn(4, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(4, 64, 384, device="cuda", dtype=torch.bfloat16)
    grads = []
    with xp.kernel_policy(matmul="triton"):
        for _ in range(2):
            lin(x).backward(g)
            grads.append((x.grad, lin.weight.grad, lin.bias.grad))
            x.grad = None
            lin.zero_grad(set_to_none=True)
    assert launched.count(True) >= 2  # the second step's forward and its dX at least
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    dx, dw, _ = grads[1]
    g2, x2, w = g.reshape(-1, 384), x.detach().reshape(-1, 256), lin.weight.detach()
    check_gemm(dx.reshape(-1, 256), g2, w, torch.bfloat16, what="dX")
    check_gemm(dw, g2.T, x2, torch.bfloat16, what="dW")
