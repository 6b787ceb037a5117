"""xrt's ops inside functorch transforms (``torch.func.grad``, ``jacrev``, ``vmap``): the same values
and gradients as torch's own functions, for the torch provider and for Triton's (in the interpreter,
fp16, tiny shapes). Torch's autograd of a custom op is an ``autograd.Function`` that functorch refuses
(no separate ``setup_context``); the ops take ``dispatch.transformable`` there instead."""

import warnings

import pytest
import torch

import xrt.pytorch as xp
from xrt.pytorch.ops import dispatch

F = torch.nn.functional


def _cases(p: str, dt: torch.dtype) -> dict:
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dt)

    x, res, w, b = r(4, 16), r(4, 16), r(16) + 1, r(16)
    wl, bl, tgt = r(8, 16), r(8), torch.randint(0, 8, (4,), generator=g)
    q, k, v = r(1, 2, 5, 64), r(1, 2, 5, 64), r(1, 2, 5, 64)
    return {
        "square": (lambda t: xp.ops.square(t, provider=p), lambda t: t * t, x),
        "softmax": (lambda t: xp.ops.softmax(t, provider=p), lambda t: torch.softmax(t, -1), x),
        "fused_layernorm": (lambda t: xp.ops.fused_layernorm(t, 16, w, b, provider=p),
                            lambda t: F.layer_norm(t, (16,), w, b), x),
        "matmul": (lambda t: xp.ops.matmul(t, wl.T, provider=p), lambda t: t @ wl.T, x),
        "add_layernorm": (lambda t: xp.ops.add_layernorm(t, res, 16, w, b, provider=p)[0],
                          lambda t: F.layer_norm(t + res, (16,), w, b), x),
        "linear_gelu": (lambda t: xp.ops.linear_gelu(t, wl, bl, provider=p), lambda t: F.gelu(F.linear(t, wl, bl)), x),
        "linear_cross_entropy": (lambda t: xp.ops.linear_cross_entropy(t, wl, tgt, provider=p),
                                 lambda t: F.cross_entropy(F.linear(t, wl).float(), tgt), x),
        "fused_attention": (lambda t: xp.ops.fused_attention(t, k, v, is_causal=True, provider=p),
                            lambda t: F.scaled_dot_product_attention(t, k, v, is_causal=True), q),
    }


PROVIDERS = [("torch", torch.float32, 1e-5), ("triton", torch.float16, 2e-2)]
OPS = list(_cases("torch", torch.float32))


def _provider(p: str, request) -> None:
    if p == "triton":
        request.getfixturevalue("interpreter")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("p,dt,tol", PROVIDERS, ids=[p for p, _, _ in PROVIDERS])
def test_grad_and_vmap_match_torch(op, p, dt, tol, request):
    _provider(p, request)
    mine, ref, x = _cases(p, dt)[op]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # vmap's batching fallback for a custom op warns of its speed
        for name, transform in (("grad", lambda f: torch.func.grad(lambda t: f(t).float().pow(2).sum())(x)),
                                ("vmap", lambda f: torch.func.vmap(f)(torch.stack([x, x * 2])))):
            got, want = transform(mine), transform(ref)
            scale = float(want.float().abs().max()) or 1.0
            assert got.shape == want.shape, (op, name)
            assert float((got.float() - want.float()).abs().max()) <= tol * scale, (op, name)


def test_jacrev_and_grad_of_vmap():
    """Nested transforms: a Jacobian (vmap over vjp) and a gradient through vmap."""
    x, w = torch.randn(3, 8), torch.randn(5, 8)

    def mine(t):
        return xp.ops.fused_layernorm(xp.ops.matmul(t, w.T, provider="torch"), 5, provider="torch")

    def ref(t):
        return F.layer_norm(t @ w.T, (5,))

    torch.testing.assert_close(torch.func.jacrev(mine)(x), torch.func.jacrev(ref)(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.func.grad(lambda t: torch.func.vmap(mine)(t[None].expand(2, 3, 8)).pow(2).sum())(x)
    want = torch.func.grad(lambda t: torch.func.vmap(ref)(t[None].expand(2, 3, 8)).pow(2).sum())(x)
    torch.testing.assert_close(got, want)


def test_transformable_only_inside_transforms():
    """Outside a transform the ops call the custom op itself (no extra Function); the transformable
    form is made once per op."""
    from xrt.pytorch.ops.square import _square_op

    assert dispatch.in_transforms(_square_op) is _square_op
    seen = []
    torch.func.grad(lambda t: (seen.append(dispatch.in_transforms(_square_op)), t.sum())[1])(torch.ones(2))
    assert seen[0] is dispatch.transformable(_square_op) is not _square_op
    with torch.no_grad():  # no_grad inside a transform: the custom op itself
        torch.func.vmap(lambda t: (seen.append(dispatch.in_transforms(_square_op)), t)[1])(torch.ones(2, 1))
    assert seen[1] is _square_op


def test_once_differentiable_ops_refuse_nested_gradients():
    """``linear_cross_entropy`` and ``conv_bn_relu`` in training save constants for their backward:
    a second derivative would read as zeros (inside transforms) or be wrong (conv in eager). Nested
    gradient transforms (and conv's eager double backward) raise instead; first derivatives stay
    torch's."""
    h, w, t = torch.randn(4, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64), torch.tensor([0, 1, 4, 2])

    def lce(x):
        return xp.ops.linear_cross_entropy(x, w, t, provider="torch")

    torch.testing.assert_close(torch.func.grad(lce)(h), torch.func.grad(lambda x: F.cross_entropy(x @ w.T, t))(h))
    with pytest.raises(RuntimeError, match="linear_cross_entropy: its gradient has no derivative"):
        torch.func.jacrev(torch.func.jacrev(lce))(h)


def test_conv_bn_relu_training_refuses_second_derivatives(interpreter):
    """The Triton provider's training backward (the torch provider's is torch's own ops, twice
    differentiable)."""
    x, cw = torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3)  # (conv_bn_relu takes fp32 at most)
    g, b = torch.rand(4) + 0.5, torch.randn(4)

    def conv(t_):
        return xp.ops.conv_bn_relu(t_, cw, g, b, None, None, training=True, provider="triton").pow(2).sum()

    with pytest.raises(RuntimeError, match="conv_bn_relu_train: its gradient has no derivative"):
        torch.func.grad(lambda t_: torch.func.grad(conv)(t_).pow(2).sum())(x)
    xg = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(conv(xg), xg, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(gx.sum(), xg)


def test_an_op_under_no_grad_inside_a_transform():
    """``no_grad`` inside ``grad``: the op runs without recording (torch's autograd of it runs
    nothing), as torch's own functions do."""
    x, w = torch.randn(3, 8), torch.randn(4, 8)

    def f(t):
        with torch.no_grad():
            z = xp.ops.linear_gelu(t, w, provider="torch")
        return (t * z.sum()).sum()

    torch.testing.assert_close(torch.func.grad(f)(x), torch.full_like(x, float(F.gelu(x @ w.T).sum())))


@pytest.mark.parametrize("transform", ["jvp", "grad", "vjp-of-vmap", "vmap"])
def test_compiling_a_gradient_transform_over_an_xrt_op_refuses_it(interpreter, monkeypatch, transform):
    """torch.compile of a torch.func gradient transform over an xrt op fails with a line that names
    the op (before, a compiled jvp gave zero tangents without a word); a compiled vmap runs, as it
    did (torch's per-sample fallback). A routed torch function in such a transform stays torch's,
    and its tangents are torch's."""
    import torch.nn.functional as F

    monkeypatch.setattr(dispatch, "TRITON_OP_ON_CPU", True)
    torch.manual_seed(0)
    x, t = torch.randn(7, 33), torch.randn(7, 33)
    sq = lambda a: xp.ops.square(a, provider="triton").sum()  # noqa: E731
    vsq = torch.func.vmap(lambda r: xp.ops.square(r, provider="triton"))
    traced = {"jvp": lambda a, b: torch.func.jvp(sq, (a,), (b,))[1],
              "grad": lambda a, b: torch.func.grad(sq)(a) * b,
              "vjp-of-vmap": lambda a, b: torch.func.vjp(vsq, a)[1](b)[0],
              "vmap": lambda a, b: vsq(a) + b}[transform]
    torch._dynamo.reset()
    if transform == "vmap":
        torch.testing.assert_close(torch.compile(traced, backend="aot_eager", fullgraph=True)(x, t), x * x + t)
    else:
        with pytest.raises(Exception) as info:
            torch.compile(traced, backend="aot_eager", fullgraph=True)(x, t)
        chain = [info.value]
        while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
            chain.append(chain[-1].__cause__ or chain[-1].__context__)
        assert any("xrt::square: torch.compile of forward-mode AD" in str(e) for e in chain), chain
    want = torch.func.jvp(lambda a: F.layer_norm(a, (33,)), (x,), (t,))[1]
    with xp.kernel_policy(layernorm="triton"):
        torch._dynamo.reset()
        got = torch.compile(lambda a, b: torch.func.jvp(lambda y: F.layer_norm(y, (33,)), (a,), (b,))[1],
                            backend="aot_eager", fullgraph=True)(x, t)
    torch.testing.assert_close(got, want)


def _chain(e: BaseException) -> list[BaseException]:
    out = [e]
    while out[-1].__cause__ is not None or out[-1].__context__ is not None:
        out.append(out[-1].__cause__ or out[-1].__context__)
    return out


def test_forward_mode_ad_refuses_xrt_ops_and_routes_to_torch(interpreter, monkeypatch):
    """Forward-mode AD (``torch.autograd.forward_ad``): an xrt op given a tensor with a tangent
    raises (its output came back without one), eager and compiled; a routed torch function stays
    torch's and its tangent is torch's, eager and compiled. Inside ``grad`` under ``no_grad`` a
    compiled xrt op runs (no derivative is asked of it)."""
    import torch.autograd.forward_ad as fwAD
    import torch.nn.functional as F

    monkeypatch.setattr(dispatch, "TRITON_OP_ON_CPU", True)
    torch.manual_seed(0)
    x, t = torch.randn(7, 33), torch.randn(7, 33)

    def tangent(f, compiled):
        fn = torch.compile(f, backend="aot_eager", fullgraph=True) if compiled else f
        with fwAD.dual_level():
            return fwAD.unpack_dual(fn(fwAD.make_dual(x, t))).tangent

    want = tangent(lambda a: F.layer_norm(a, (33,)), False)
    for compiled in (False, True):
        torch._dynamo.reset()
        with pytest.raises(Exception) as info:
            tangent(lambda a: xp.ops.square(a, provider="triton"), compiled)
        assert any("forward-mode" in str(e) for e in _chain(info.value)), _chain(info.value)
        with xp.kernel_policy(layernorm="triton"):
            torch._dynamo.reset()
            torch.testing.assert_close(tangent(lambda a: F.layer_norm(a, (33,)), compiled), want)
    with fwAD.dual_level():  # no tangent on the input: the op runs
        torch.testing.assert_close(xp.ops.square(x, provider="triton"), x * x)
    # an op whose compiled call keeps its custom op (dispatch.in_transforms) is refused alike
    w, b = torch.randn(33), torch.randn(33)
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(lambda a, c: torch.func.jvp(lambda y: xp.ops.add_layernorm(y, a, 33, w, b, provider="triton")[0],
                                                  (a,), (c,))[1], backend="aot_eager", fullgraph=True)(x, t)
    assert any("xrt::add_layernorm: torch.compile of forward-mode AD" in str(e) for e in _chain(info.value))

    def loss(a):
        with torch.no_grad():
            s = xp.ops.square(a, provider="triton")
        return (a * s).sum()

    torch._dynamo.reset()
    got = torch.compile(lambda a: torch.func.grad(loss)(a), backend="aot_eager", fullgraph=True)(x)
    torch.testing.assert_close(got, x * x)
