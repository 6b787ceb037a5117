"""``fused_layernorm``'s eager plan: one per input signature and policy state, the same kernels
(and results) as the general path, and the general path wherever the plan does not apply."""

import pytest
import torch
import torch.nn.functional as F

import xrt.pytorch as xp
from xrt.pytorch import policy as pol
from xrt.pytorch.ops import dispatch
from xrt.pytorch.ops import layernorm as layernorm_op


def _plans():
    return {k: v for k, v in pol.state().memo.items() if isinstance(k, tuple) and k[0] == "fused_layernorm"}


def _inputs(shape=(6, 40), dtype=torch.float32, grad=False, device="cpu"):
    torch.manual_seed(0)
    n = shape[-1]
    x = torch.randn(shape, dtype=dtype, device=device)
    w = torch.rand(n, dtype=dtype, device=device) + 0.5
    b = torch.randn(n, dtype=dtype, device=device)
    return [t.requires_grad_(grad) for t in (x, w, b)]


pytestmark = pytest.mark.usefixtures("no_kernel_policy")


def test_plan_is_made_once_per_signature_and_again_after_a_policy_change(interpreter, monkeypatch):
    x, w, b = _inputs()
    xp.ops.fused_layernorm(x, 40, w, b, provider="triton")
    xp.ops.fused_layernorm(x, 40, w, b, provider="triton")
    plans = [p for p in _plans().values() if p is not False]
    assert len(plans) == 1 and plans[0].provider == "triton"
    xp.ops.fused_layernorm(x[:3], 40, w, b, provider="triton")  # another shape, another plan
    assert len([p for p in _plans().values() if p is not False]) == 2
    # The policy now says torch: the next call must see it, not the kept Triton plan.
    seen = []
    torch_p = dispatch.get("layernorm", "torch")
    counted = dispatch.Provider("layernorm", "torch", lambda *a: seen.append(1) or torch_p.fn(*a), torch_p.missing)
    monkeypatch.setitem(dispatch._REGISTRY["layernorm"], "torch", counted)
    xp.set_kernel_policy(layernorm="torch")
    y = xp.ops.fused_layernorm(x, 40, w, b)
    assert seen, "the policy change did not reach the call"
    torch.testing.assert_close(y, F.layer_norm(x, (40,), w, b), rtol=1e-5, atol=1e-5)
    xp.clear_kernel_policy()
    with xp.kernel_policy(layernorm="triton"):
        seen.clear()
        xp.ops.fused_layernorm(x, 40, w, b)
        assert not seen
        assert [p.provider for p in _plans().values() if p is not False] == ["triton"]


def test_plan_runs_the_general_paths_kernels_to_the_bit(interpreter):
    """Forward and backward through the plan equal the custom op's (same kernels, same configs)."""
    x, w, b = _inputs((5, 3, 24), grad=True)
    dy = torch.randn(5, 3, 24)
    y = xp.ops.fused_layernorm(x, 24, w, b, provider="triton")
    assert type(y.grad_fn).__name__.startswith("_LeanLayerNorm")
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), dy)
    y2, _, _ = layernorm_op._layernorm_op(x, [24], w, b, 1e-5, "triton")
    gx2, gw2, gb2 = torch.autograd.grad(y2, (x, w, b), dy)
    for a, c in ((y, y2), (gx, gx2), (gw, gw2), (gb, gb2)):
        assert torch.equal(a, c)
    with torch.no_grad():
        assert torch.equal(xp.ops.fused_layernorm(x, 24, w, b, provider="triton"), y2)


def test_a_normalized_shape_of_several_dims_trains(interpreter):
    """normalized_shape (3, 5): the plan's kernels give flat dweight and dbias, which the backward
    returns shaped as the weight (torch's gradients, not an autograd shape error)."""
    x = torch.randn(2, 3, 5, requires_grad=True)
    w, b = torch.randn(3, 5, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    y = xp.ops.fused_layernorm(x, (3, 5), w, b, provider="triton")
    assert type(y.grad_fn).__name__ == "_LeanLayerNormBackward"
    y.pow(2).sum().backward()
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    F.layer_norm(x2, (3, 5), w2, b2).pow(2).sum().backward()
    for mine, ref in ((x, x2), (w, w2), (b, b2)):
        assert mine.grad.shape == ref.grad.shape
        torch.testing.assert_close(mine.grad, ref.grad, rtol=1e-4, atol=1e-4)


def test_a_second_backward_does_not_write_over_the_firsts_gradients(interpreter):
    """The forward allocates the backward's buffers for small inputs; only one backward may use them."""
    x, w, b = _inputs((4, 16), grad=True)
    y = xp.ops.fused_layernorm(x, 16, w, b, provider="triton")
    dy1, dy2 = torch.randn(4, 16), torch.randn(4, 16)
    first = torch.autograd.grad(y, (x, w, b), dy1, retain_graph=True)
    kept = [t.clone() for t in first]
    second = torch.autograd.grad(y, (x, w, b), dy2)
    for a, k in zip(first, kept):
        assert torch.equal(a, k)
    ref = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(F.layer_norm(ref[0], (16,), ref[1], ref[2]), ref, dy2)
    for g, r in zip(second, want):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["non-contiguous", "weight dtype", "list shape", "empty", "no bias", "torch"])
def test_inputs_the_plan_does_not_take_go_the_general_way(interpreter, case):
    x, w, b = _inputs((6, 40))
    ns, provider = 40, "triton"
    if case == "non-contiguous":
        x = torch.randn(40, 6).t()
    elif case == "weight dtype":
        w = w.double()
    elif case == "list shape":
        ns = [40]
    elif case == "empty":
        x = x[:0]
    elif case == "no bias":
        b = None
    else:
        provider = "torch"
    y = xp.ops.fused_layernorm(x, ns, w, b, provider=provider)
    want = F.layer_norm(x, (40,), w.float(), None if b is None else b)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    assert all(p is False for p in _plans().values())


def test_bad_input_still_gets_the_general_paths_message(interpreter):
    x, w, b = _inputs((6, 40))
    with pytest.raises(ValueError, match="must end with normalized_shape"):
        xp.ops.fused_layernorm(x, 41, w, b, provider="triton")
    with pytest.raises(ValueError, match="weight.shape"):
        xp.ops.fused_layernorm(x, 40, w[:39], b, provider="triton")


# -- GPU (run on the H100 host) -----------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["triton", "cuda"])
def test_plan_on_gpu_takes_its_sites_and_stays_right_when_misaligned(provider):
    import os

    if provider == "triton" and os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("compiled handles exist only without TRITON_INTERPRET=1")
    dtype = torch.bfloat16
    x, w, b = _inputs((64, 1024), dtype, grad=True, device="cuda")
    dy = torch.randn(64, 1024, dtype=dtype, device="cuda")
    for _ in range(3):
        y = xp.ops.fused_layernorm(x, 1024, w, b, provider=provider)
        got = torch.autograd.grad(y, (x, w, b), dy)
    (plan,) = [p for p in _plans().values() if p is not False]
    if provider == "triton":
        assert plan.fwd.sites[True].fast is not None and plan.bwd.rows.fast is not None
        # ... and takes it: no launch of this training step goes through the Launcher's lookup.
        from xrt.kernels.triton.launch import Launcher

        seen = []
        original = Launcher.__call__
        Launcher.__call__ = lambda self, *a, **k: seen.append(self) or original(self, *a, **k)
        try:
            torch.autograd.grad(xp.ops.fused_layernorm(x, 1024, w, b, provider=provider), (x, w, b), dy)
        finally:
            Launcher.__call__ = original
        assert seen == []
    ref = [t.detach().float().requires_grad_() for t in (x, w, b)]
    yr = F.layer_norm(ref[0], (1024,), ref[1], ref[2])
    want = torch.autograd.grad(yr, ref, dy.float())
    torch.testing.assert_close(y.float(), yr, rtol=2e-2, atol=2e-2)
    for g, r in zip(got, want):
        torch.testing.assert_close(g.float(), r, rtol=2e-2, atol=1e-1)
    # A contiguous input at an address that is not 16-byte aligned: the plan's fast launch must
    # not take it (same signature, so the same plan).
    buf = torch.randn(64 * 1024 + 1, dtype=dtype, device="cuda")
    xm = buf[1:].view(64, 1024)
    assert xm.data_ptr() % 16 and xm.stride() == x.stride()
    with torch.no_grad():
        torch.testing.assert_close(xp.ops.fused_layernorm(xm, 1024, w, b, provider=provider).float(),
                                   F.layer_norm(xm.float(), (1024,), w.float(), b.float()), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_site_honours_launch_hooks():
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("compiled handles exist only without TRITON_INTERPRET=1")
    from triton import knobs

    x, w, b = _inputs((64, 1024), torch.bfloat16, device="cuda")
    for _ in range(2):
        xp.ops.fused_layernorm(x, 1024, w, b, provider="triton")
    calls = []
    knobs.runtime.launch_enter_hook = lambda meta: calls.append(meta)
    try:
        xp.ops.fused_layernorm(x, 1024, w, b, provider="triton")
    finally:
        knobs.runtime.launch_enter_hook = None
    assert calls
