"""The native (C++) attention op: how the kernels' plans describe their launches, the op's autograd
plumbing on the CPU, and on a GPU that a routed SDPA trains through it exactly as through the
Python path (the same kernels), on a model's strided q, k and v."""

import importlib
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import xrt.pytorch as xp
from xrt.kernels.launch_spec import Desc, LaunchSpec
from xrt.kernels.triton import attention as kernels
from xrt.pytorch.ops import native

attention_op = importlib.import_module("xrt.pytorch.ops.attention")



# -- the plans' descriptions (no library needed) ---------------------------------------------------

def test_the_plans_describe_their_launches_by_slot():
    spec = LaunchSpec(3, (8, 32, 1), (128, 1, 1), 0, ("desc", "desc", "desc", "desc", "ptr", "i32"))
    kept = SimpleNamespace(native=lambda grid: spec._replace(grid=(*grid, 1)))
    lay = ((2, 4, 64, 16), (4096, 1024, 16, 1))
    fwd = kernels.ForwardPlan(kept, (8, 32), (lay + ([1, 1, 64, 16],),) * 4, (2, 64, 4, 16), (4, 64, 64, 0.5),
                              torch.bfloat16, torch.device("cuda", 0), True)
    got, template = fwd.native()
    assert got.grid == (8, 32, 1)
    assert template == (*(Desc(n, *lay) for n in "qkvo"), "lse", 4, 64, 64, 0.5)
    pointer = fwd._replace(specs=None, tail=(1, 2, 4, 64, 64, 0.5))
    assert pointer.native()[1] == ("q", "k", "v", "o", "lse", 1, 2, 4, 64, 64, 0.5)
    bwd = kernels.BackwardPlan(((kept, (4, 8), (("q", 64, 16), "lse", "delta", ("dq", 64, 16), 7)),),
                               {"q": lay, "dq": lay}, ((2, 4, 64, 16),) * 3, torch.bfloat16, torch.device("cuda", 0))
    assert bwd.native() == [(spec._replace(grid=(4, 8, 1)), (Desc("q", *lay), "lse", "delta", Desc("dq", *lay), 7))]
    assert kernels.BackwardPlan(((SimpleNamespace(native=lambda grid: None), (1,), ("q",)),), None, (), torch.bfloat16,
                                torch.device("cuda", 0)).native() is None


# -- the library on the CPU -------------------------------------------------------------------------

def test_add_attention_plan_rejects_malformed_specs_with_a_clear_line(native_lib):
    strides = [60, 20, 4, 1, 84, 28, 4, 1, 84, 28, 4, 1, 60, 20, 4, 1, 60, 20, 4, 1]  # q, k, v, out, its gradient
    head = [2, 3, 5, 7, 4, -1, 0, *strides]  # b, h, s_q, s_k, d, device, heads_inside, strides
    for spec, what in (([2, 3], "ends before its s_q"), ([2, 3, 5, 7, 4, -1, 2, *strides], "heads_inside 0 or 1"),
                       ([2, 0, 5, 7, 4, -1, 0, *strides], "must be positive"), ([*head, 0, 0, 1], "1 values after"),
                       ([2, 3, 5, 7, 4, -1, 0, 60, 20], "ends before its strides"),
                       ([*head, 0, 1, 9, 1, 1, 1, 32, 1, 1, 0, 1, 0, 10, 0, 0], "slot 10 does not exist")):
        with pytest.raises(RuntimeError, match=what):
            native_lib.add_attention_plan(spec)


@pytest.mark.parametrize("inside", [False, True], ids=["heads_outside", "heads_inside"])
def test_the_attention_autograd_plumbing_without_kernels(native_lib, inside):
    """A plan with no launches (a CPU plan): the output is laid out as planned (q's layout), the
    gradients are shaped as q, k and v, its inputs are checked, and a second derivative fails as
    ``once_differentiable`` does."""
    b, h, s, d = 2, 3, 5, 4
    do_strides = [s * h * d, d, h * d, 1] if inside else [h * s * d, s * d, d, 1]
    qkv = [h * s * d, s * d, d, 1, h * 7 * d, 7 * d, d, 1, h * 7 * d, 7 * d, d, 1]
    pid = native_lib.add_attention_plan([b, h, s, 7, d, -1, int(inside), *qkv, *do_strides, *do_strides, 0, 0])
    q = torch.randn(b, h, s, d, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(b, h, 7, d, dtype=torch.float64, requires_grad=True) for _ in range(2))
    o = native_lib.attention(q, k, v, pid, 0)
    assert o.shape == (b, h, s, d) and "AttentionFunction" in o.grad_fn.name()
    assert list(o.stride()) == do_strides
    grads = torch.autograd.grad(o, (q, k, v), torch.randn(b, h, s, d, dtype=torch.float64), retain_graph=True)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    # saved-tensor hooks that hand the tensors back laid out otherwise (activation offloading): copied
    # back into the planned layouts (here, with no launches, only the plumbing shows)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.contiguous().clone(), lambda t: t):
        o2 = native_lib.attention(q, k, v, pid, 0)
    assert [g.shape for g in torch.autograd.grad(o2, (q, k, v), torch.ones_like(o2))] == [q.shape, k.shape, v.shape]
    gq, = torch.autograd.grad(o, q, torch.ones_like(o), create_graph=True)
    with pytest.raises(RuntimeError, match="not differentiable"):
        gq.sum().backward()
    with pytest.raises(RuntimeError, match=r"q must be \[2, 3, 5, 4\]"):
        native_lib.attention(q[:1], k, v, pid, 0)
    with pytest.raises(RuntimeError, match="must have q's dtype"):
        native_lib.attention(q, k.float(), v, pid, 0)
    with pytest.raises(RuntimeError, match="no plan 99999"):
        native_lib.attention(q, k, v, 99999, 0)


def test_cpu_attention_never_goes_native(interpreter, monkeypatch):
    monkeypatch.setattr(native, "ready", lambda: pytest.fail("a CPU attention asked for the native library"))
    q, k, v = (torch.randn(1, 2, 16, 16, requires_grad=True) for _ in range(3))
    with xp.kernel_policy(attention="triton"):
        for _ in range(2):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert "AttentionFunction" not in o.grad_fn.name()


# -- on the GPU: the native op against the Python path, bit for bit --------------------------------

def _train(qkv, heads, causal, dg):
    """A GPT block's attention on ``qkv`` [B, S, 3 D]: q, k, v as ``view(...).permute(...)``, the output
    back as [B, S, D]; its output, qkv's gradient and the output's autograd node."""
    x = qkv.detach().clone().requires_grad_(True)
    b, s, three_d = x.shape
    q, k, v = x.view(b, s, 3, heads, three_d // 3 // heads).permute(2, 0, 3, 1, 4)
    with xp.kernel_policy(attention="triton"):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        y = o.transpose(1, 2).reshape(b, s, three_d // 3)
        y.backward(dg)
    return y, x.grad, o.grad_fn.name()


def _python_path(monkeypatch, *args):
    with monkeypatch.context() as mp:
        mp.setattr(attention_op, "_native_attention", lambda *a: None)
        return _train(*args)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("b,s,heads,d", [(4, 512, 12, 64), (2, 1024, 16, 64), (2, 256, 8, 128)])
def test_native_attention_training_equals_the_python_path(b, s, heads, d, causal, monkeypatch):
    assert native.load(), native.why()
    xp.clear_kernel_policy()
    torch.manual_seed(0)
    qkv = torch.randn(b, s, 3 * heads * d, device="cuda", dtype=torch.bfloat16)
    dg = torch.randn(b, s, heads * d, device="cuda", dtype=torch.bfloat16)
    want = _python_path(monkeypatch, qkv, heads, causal, dg)
    assert "AttentionFunction" not in want[2]
    got = [_train(qkv, heads, causal, dg) for _ in range(3)][-1]
    assert "AttentionFunction" in got[2], (got[2], native.why())
    for a, e in zip(got[:2], want[:2], strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    # new data through the kept plans
    qkv2, dg2 = torch.randn_like(qkv), torch.randn_like(dg)
    got, want = _train(qkv2, heads, causal, dg2), _python_path(monkeypatch, qkv2, heads, causal, dg2)
    for a, e in zip(got[:2], want[:2], strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    q, k, v = qkv2.float().view(b, s, 3, heads, d).permute(2, 0, 3, 1, 4)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2).reshape(b, s, heads * d)
    torch.testing.assert_close(got[0].float(), ref, rtol=2e-2, atol=2e-2)
    xp.clear_kernel_policy()


@pytest.mark.gpu
def test_native_attention_takes_another_gradient_layout_and_a_side_stream(monkeypatch):
    """A gradient laid out otherwise than the plan's is copied into its layout first (the same
    values as the Python path's, which plans for that layout); a side stream gives the same bits."""
    assert native.load(), native.why()
    xp.clear_kernel_policy()
    torch.manual_seed(3)
    b, s, heads, d = 2, 512, 8, 64
    qkv = torch.randn(b, s, 3 * heads * d, device="cuda", dtype=torch.bfloat16)
    dg = torch.randn(b, s, heads * d, device="cuda", dtype=torch.bfloat16)
    want = _python_path(monkeypatch, qkv, heads, True, dg)
    [_train(qkv, heads, True, dg) for _ in range(2)]
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        got = _train(qkv, heads, True, dg)
    torch.cuda.current_stream().wait_stream(st)
    assert "AttentionFunction" in got[2]
    for a, e in zip(got[:2], want[:2], strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)

    def other(monkey=None):  # the output's gradient as a contiguous [B, H, S, D]
        x = qkv.detach().clone().requires_grad_(True)
        q, k, v = x.view(b, s, 3, heads, d).permute(2, 0, 3, 1, 4)
        with xp.kernel_policy(attention="triton"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(dg.view(b, s, heads, d).transpose(1, 2).contiguous())
        return o, x.grad, o.grad_fn.name()
    got = other()
    with monkeypatch.context() as mp:
        mp.setattr(attention_op, "_native_attention", lambda *a: None)
        want = other()
    assert "AttentionFunction" in got[2]
    for a, e in zip(got[:2], want[:2], strict=True):
        torch.testing.assert_close(a.float(), e.float(), rtol=1e-2, atol=1e-2)
    xp.clear_kernel_policy()
