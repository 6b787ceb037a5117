"""Routing unmodified models: torch's calls sent to xrt's kernels by the kernel policy.

On the CPU the Triton kernels run in Triton's interpreter (fp32, tiny shapes; attention fp16).
Results are bounded against float64: xrt's error at most 2x torch's own error at the same
precision, plus a small floor.
"""

import contextlib
import threading

import pytest
import torch
from torch import nn

import xrt.pytorch as xp
from xrt.pytorch import routing

F = torch.nn.functional
ALL_TRITON = {"matmul": "triton", "layernorm": "triton", "softmax": "triton"}
FLOOR = 1e-5


def _torch_functions():
    """Every routed attribute as it is now: (owner, name) -> (an attribute of the owner's own?, the object)."""
    return {(o, n): (n in vars(o), getattr(o, n)) for targets in routing.TARGETS.values() for o, n, _ in targets}


TORCH_FUNCTIONS = _torch_functions()  # torch's own, before any policy


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("XRT_KERNEL_POLICY", raising=False)
    xp.clear_kernel_policy()
    assert _torch_functions() == TORCH_FUNCTIONS
    yield
    xp.clear_kernel_policy()
    assert routing.patched() == {} and _torch_functions() == TORCH_FUNCTIONS, "a wrapper was left in torch"
    assert torch._C._len_torch_function_stack() == 0


class Block(nn.Module):
    """Linear, LayerNorm, self-attention scores through ``@`` and softmax, SDPA, a bias-free Linear."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(self.fc(x))
        h = (h @ h.transpose(-1, -2)).softmax(-1) @ h
        h = h + F.scaled_dot_product_attention(h[:, None], h[:, None], h[:, None])[:, 0]
        return F.softmax(self.out(h), dim=-1)


def _xrt_events(fn):
    """``fn()``'s result and the ``xrt::<op>[<provider>]`` ranges the profiler saw while it ran."""
    with xp.profile() as prof:
        out = fn()
    return out, {e.key for e in prof.key_averages() if e.key.startswith("xrt::") and "[" in e.key}


def _train_step(model, x, dy):
    """Output and the gradients of the input and every parameter."""
    model.zero_grad()
    x = x.detach().clone().requires_grad_()
    y = model(x)
    y.backward(dy)
    return [y.detach(), x.grad] + [p.grad.clone() for p in model.parameters()]


def _assert_within_twice_torch(got, torch32, torch64, names):
    for name, g, t, r in zip(names, got, torch32, torch64):
        err = (g.double() - r).abs().max().item()
        err_torch = (t.double() - r).abs().max().item()
        assert err <= 2 * err_torch + FLOOR, f"{name}: error {err:.3g} > 2 x torch's {err_torch:.3g} + {FLOOR}"


def test_unmodified_model_runs_xrt_ops_with_gradients(interpreter):
    torch.manual_seed(0)
    model = Block()
    x, dy = torch.randn(2, 7, 16), torch.randn(2, 7, 16)
    theirs = _train_step(model, x, dy)
    model64 = Block().double()
    model64.load_state_dict(model.state_dict())
    ref = _train_step(model64, x.double(), dy.double())
    with xp.kernel_policy(**ALL_TRITON):
        got, seen = _xrt_events(lambda: _train_step(model, x, dy))
    # linear -> matmul, scores and att @ h -> bmm; fp32 SDPA is not the Triton kernel's: torch's
    assert {"xrt::matmul[triton]", "xrt::bmm[triton]", "xrt::layernorm[triton]", "xrt::softmax[triton]"} <= seen
    assert not any(k.startswith("xrt::attention") for k in seen)
    names = ["out", "dx"] + [n for n, _ in model.named_parameters()]
    _assert_within_twice_torch(got, theirs, ref, names)


def test_outside_the_policy_torch_runs_untouched():
    torch.manual_seed(0)
    model, x = Block(), torch.randn(2, 5, 16)
    before = model(x)
    with xp.kernel_policy(**ALL_TRITON):
        assert routing.active() and set(routing.patched()) == {
            f for (o, n), (_, f) in TORCH_FUNCTIONS.items() if n != "scaled_dot_product_attention"}
        assert torch._C._len_torch_function_stack() == 0  # no mode: torch's other calls pay nothing
    # leaving the scope puts back torch's very functions (and no class attribute of its own)
    assert not routing.active() and routing.patched() == {} and _torch_functions() == TORCH_FUNCTIONS
    assert "matmul" not in vars(torch.Tensor) and "__matmul__" not in vars(torch.Tensor)
    after, seen = _xrt_events(lambda: model(x))
    assert seen == set() and torch.equal(before, after)
    # a policy that names no xrt provider of a routed op installs nothing
    with xp.kernel_policy(square="triton", layernorm="torch", matmul="default", attention="math"):
        assert routing.patched() == {} and not routing.active()


def test_no_route_installs_nothing_and_calls_torchs_function_itself(monkeypatch):
    """``auto`` where no table names an xrt provider (here: no GPU) installs nothing: a model's
    ``F.linear`` is torch's own function object, not a wrapper that forwards to it."""
    from xrt.pytorch import auto

    monkeypatch.setattr(auto, "devices", lambda: range(0))
    auto.clear()
    calls = []
    real = F.linear
    monkeypatch.setattr(F, "linear", lambda *a, **k: calls.append(1) or real(*a, **k))  # the function torch has
    mine = F.linear
    with xp.kernel_policy(matmul="auto", layernorm="auto", softmax="auto", attention="auto"):
        assert routing.patched() == {} and not routing.active()
        assert F.linear is mine and torch.matmul is TORCH_FUNCTIONS[(torch, "matmul")][1]
        nn.Linear(8, 3)(torch.randn(2, 8))
    assert calls == [1]
    # naming a provider installs the wrapper in front of whatever F.linear was, and puts it back
    with xp.kernel_policy(matmul="triton"):
        assert F.linear is not mine and F.linear.__wrapped__ is mine
    assert F.linear is mine
    monkeypatch.undo()
    auto.clear()


def test_wrapper_of_an_op_the_thread_does_not_route_calls_torch_with_the_arguments_as_given(monkeypatch):
    seen = []
    real = torch.Tensor.softmax
    with xp.kernel_policy(softmax="triton"):
        wrapper = torch.Tensor.softmax
        assert wrapper.__wrapped__ is real
        routing._tls.ops = frozenset({"layernorm"})  # as on a thread whose policy routes only layernorm
        try:
            monkeypatch.setattr(routing, "_state", lambda: seen.append(1))  # the routed path's first look
            x = torch.randn(3, 4)
            assert torch.equal(x.softmax(-1), real(x, -1)) and seen == []
        finally:
            routing._tls.ops = frozenset({"softmax"})


def test_torch_choice_calls_torch_itself_and_auto_asks_one_function(monkeypatch, interpreter):
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    calls = []
    real = routing.provider

    def spy(op, t, measured=None):
        calls.append(op)
        return real(op, t, measured)

    monkeypatch.setattr(routing, "provider", spy)
    from xrt.pytorch import auto

    monkeypatch.setattr(auto, "routes", lambda ops: True)  # as where a table names an xrt provider
    monkeypatch.setattr(auto, "torch_width", lambda op: -1)  # for rows of any width
    with xp.kernel_policy(softmax="triton", layernorm="auto"):  # matmul: nothing named, not routed
        y, seen = _xrt_events(lambda: (F.linear(x, w), F.layer_norm(x, (8,))))
    assert seen == set() and calls == ["layernorm"]  # F.layer_norm's wrapper asked once (not torch.layer_norm's)
    assert torch.equal(y[0], F.linear(x, w)) and torch.equal(y[1], F.layer_norm(x, (8,)))
    # a measured auto plugs in at auto_provider: layernorm=auto then runs xrt's op
    monkeypatch.setattr(routing, "auto_provider",
                        lambda op, t, shape=None, train=None: "torch" if op != "layernorm" else "triton")
    monkeypatch.setattr(routing, "auto_device", lambda t: True)  # as on a GPU
    with xp.kernel_policy(layernorm="auto"):
        _, seen = _xrt_events(lambda: F.layer_norm(x, (8,)))
    assert seen == {"xrt::layernorm[triton]"}


class Tagged(torch.Tensor):
    """A tensor subclass (as DTensor is one): routing leaves it to torch."""


def _fallback_cases():
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    q = torch.randn(1, 2, 5, 64).half()
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    a3, b3 = torch.randn(2, 3, 4), torch.randn(1, 4, 5)
    return {
        "softmax over dim 0": lambda: F.softmax(x, dim=0),
        "softmax to another dtype": lambda: x.softmax(-1, dtype=torch.float64),
        "torch.softmax, dtype given by position": lambda: torch.softmax(x, -1, torch.float64),
        "Tensor.softmax, dtype given by position": lambda: x.softmax(1, torch.float64),
        "F.softmax to another dtype": lambda: F.softmax(x, -1, 3, torch.float64),
        "linear in float64": lambda: F.linear(x.double(), w.double()),
        "linear, mixed dtypes raise torch's own error": lambda: _raises(lambda: F.linear(x, w.double())),
        "linear without a weight: torch's TypeError": lambda: _raises(lambda: F.linear(x), TypeError),
        "layer_norm in bfloat16 (interpreter)": lambda: F.layer_norm(x.bfloat16(), (8,)),
        "layer_norm, weight of another dtype: torch's error": lambda: _raises(
            lambda: F.layer_norm(x, (8,), torch.ones(8).double())),
        "matmul, broadcast batch": lambda: a3 @ b3,
        "matmul with a vector": lambda: x @ torch.randn(8),
        "matmul out=": lambda: torch.matmul(x, w.t(), out=torch.empty(4, 3)),
        "bmm with a matrix raises torch's error": lambda: _raises(lambda: torch.bmm(a3, w.t())),
        "a tensor subclass": lambda: F.linear(x.as_subclass(Tagged), w),
        "torch.autocast": lambda: _autocast(lambda: F.linear(x, w)),
        "vmap": lambda: torch.func.vmap(lambda r: F.linear(r, w))(x),
        "forward-mode AD": lambda: _forward_ad(lambda t: F.linear(t, w), x),
        "sdpa with a mask": lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=mask),
        "sdpa with dropout": lambda: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5) * 0,
        "sdpa in float32": lambda: F.scaled_dot_product_attention(q.float(), q.float(), q.float()),
        "sdpa head dim 59": lambda: F.scaled_dot_product_attention(q[..., :59], q[..., :59], q[..., :59]),
    }


def _raises(fn, error=RuntimeError):
    with pytest.raises(error) as e:
        fn()
    assert "xrt" not in str(e.value) and "Triton" not in str(e.value), f"not torch's error: {e.value}"
    return torch.zeros(1)


def _forward_ad(fn, x):
    import torch.autograd.forward_ad as fwad

    with fwad.dual_level():
        return fwad.unpack_dual(fn(fwad.make_dual(x, torch.ones_like(x)))).tangent


def _autocast(fn):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return fn()


@pytest.mark.parametrize("case", list(_fallback_cases()))
def test_calls_xrt_cannot_take_go_to_torch(interpreter, case):
    fn = _fallback_cases()[case]
    torch.manual_seed(1)
    theirs = fn()
    torch.manual_seed(1)
    with xp.kernel_policy(attention="triton", **ALL_TRITON):
        got, seen = _xrt_events(fn)
    assert seen == set(), f"{case}: {seen}"
    assert torch.equal(got, theirs)


def _routed_cases():
    x, w, b = torch.randn(4, 8), torch.randn(3, 8), torch.randn(3)
    a3, b3 = torch.randn(2, 4, 8), torch.randn(2, 8, 3)
    return {
        "F.softmax, positive last dim": (lambda: F.softmax(x, 1), "softmax"),
        "torch.softmax": (lambda: torch.softmax(x, -1), "softmax"),
        "Tensor.softmax, dim= and its own dtype": (lambda: x.softmax(dim=1, dtype=torch.float32), "softmax"),
        "torch.layer_norm, list shape, no weight": (lambda: torch.layer_norm(x, [8]), "layernorm"),
        "F.layer_norm over two dims": (lambda: F.layer_norm(a3, (4, 8), torch.randn(4, 8), None, 1e-3), "layernorm"),
        "F.linear, 1-D input": (lambda: F.linear(x[0], w, b), "matmul"),
        "torch.mm": (lambda: torch.mm(x, w.t()), "matmul"),
        "Tensor.bmm": (lambda: a3.bmm(b3), "bmm"),
    }


@pytest.mark.parametrize("case", list(_routed_cases()))
def test_each_spelling_is_routed(interpreter, case):
    fn, op = _routed_cases()[case]
    torch.manual_seed(2)
    theirs = fn()
    torch.manual_seed(2)
    with xp.kernel_policy(**ALL_TRITON):
        got, seen = _xrt_events(fn)
    assert seen == {f"xrt::{op}[triton]"}
    assert got.shape == theirs.shape and got.dtype == theirs.dtype
    torch.testing.assert_close(got, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("a_shape, b_shape, op", [((5, 8), (8, 3), "matmul"), ((2, 5, 8), (8, 3), "matmul"),
                                                  ((2, 3, 5, 8), (2, 3, 8, 4), "bmm"), ((8,), (8,), "matvec")])
def test_matmul_shapes(interpreter, a_shape, b_shape, op):
    a, b = torch.randn(a_shape, dtype=torch.float64), torch.randn(b_shape, dtype=torch.float64)
    with xp.kernel_policy(matmul="triton"):
        got, seen = _xrt_events(lambda: (a.float() @ b.float(), torch.matmul(a.float(), b.float())))
    want = a @ b
    assert seen == (set() if op == "matvec" else {f"xrt::{op}[triton]"})
    for g in got:
        assert g.shape == want.shape
        torch.testing.assert_close(g.double(), want, rtol=1e-4, atol=1e-5)


def test_sdpa_routes_to_the_triton_attention(interpreter):
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(1, 2, 9, 64).half() for _ in range(4))

    def run(a, b, c, g):
        ts = [t.clone().requires_grad_() for t in (a, b, c)]
        o = F.scaled_dot_product_attention(*ts, is_causal=True)
        o.backward(g.to(o.dtype))
        return [o.detach()] + [t.grad for t in ts]

    theirs = run(q, k, v, do)
    ref = run(q.double(), k.double(), v.double(), do.double())
    with xp.kernel_policy(attention="triton"):
        got, seen = _xrt_events(lambda: run(q, k, v, do))
    assert seen == {"xrt::attention[triton]"}
    for g in got:
        assert g.dtype == torch.float16
    _assert_within_twice_torch(got, theirs, ref, ["out", "dq", "dk", "dv"])


def test_nested_scopes_and_global_policy_restore():
    def ops():
        return {w.xrt_routed for w in routing.patched().values()}

    xp.set_kernel_policy(layernorm="triton")
    assert ops() == {"layernorm"} and F.layer_norm is not TORCH_FUNCTIONS[(F, "layer_norm")][1]
    with xp.kernel_policy(softmax="triton"):
        assert ops() == {"layernorm", "softmax"}  # one wrapper per function, whoever asked for it
        with xp.kernel_policy(layernorm="torch", softmax="torch"):
            assert ops() == set() and not routing.active()  # every routed op is torch's here
            assert _torch_functions() == TORCH_FUNCTIONS
        assert ops() == {"layernorm", "softmax"}
    assert ops() == {"layernorm"}
    with torch.device("cpu"):  # a mode of the user's own stays where it is
        xp.clear_kernel_policy()
        assert ops() == set() and isinstance(torch.overrides._get_current_function_mode_stack()[0],
                                             torch.utils._device.DeviceContext)
    assert torch._C._len_torch_function_stack() == 0


def test_a_rejected_policy_installs_nothing():
    if torch.version.cuda is not None:
        pytest.skip("matmul=cublasLt is accepted on a CUDA build")
    with pytest.raises(RuntimeError, match="cublasLt"):
        xp.set_kernel_policy(matmul="cublasLt", layernorm="triton")
    assert routing.patched() == {} and xp.get_kernel_policy() is None


def test_other_threads_route_inside_routed(interpreter):
    x = torch.randn(3, 8)
    xp.set_kernel_policy(layernorm="triton")
    seen = {}

    def worker():
        _, seen["plain"] = _xrt_events(lambda: F.layer_norm(x, (8,)))
        with xp.routed():
            _, seen["routed"] = _xrt_events(lambda: F.layer_norm(x, (8,)))
        seen["after"] = routing.active()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == {"plain": set(), "routed": {"xrt::layernorm[triton]"}, "after": False}
    assert {w.xrt_routed for w in routing.patched().values()} == {"layernorm"}  # this thread's, still


def test_threads_entering_and_leaving_scopes_together_leave_torch_as_it_was():
    """Scopes on several threads at once: each routes its own op while its scope lasts, and
    torch's own functions are back when the last one leaves."""
    x = torch.randn(3, 8)
    calls = {"softmax": ("softmax", lambda f: f(x, dim=-1)), "layernorm": ("layer_norm", lambda f: f(x, (8,)))}
    errors, barrier = [], threading.Barrier(4)

    def worker(op):
        name, call = calls[op]
        try:
            barrier.wait()
            for _ in range(30):
                with xp.kernel_policy(**{op: "cuda"}):  # cannot run a CPU tensor: each call stays torch's
                    assert routing._tls.ops == {op}
                    f = getattr(F, name)
                    assert f.__wrapped__ is TORCH_FUNCTIONS[(F, name)][1]
                    assert torch.equal(call(f), call(f.__wrapped__))
                assert not routing.active()
        except Exception as e:  # reported below, with the thread's op
            errors.append(f"{op}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(op,)) for op in ("softmax", "layernorm") * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert routing.patched() == {} and _torch_functions() == TORCH_FUNCTIONS


def test_torch_compile_fullgraph_puts_xrt_ops_in_the_graph(interpreter):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    model = Block()
    x, dy = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    theirs = _train_step(model, x, dy)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, fullgraph=True, backend=counter)

    def targets(graph):
        return {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}

    with xp.kernel_policy(**ALL_TRITON):
        got = _train_step(compiled, x, dy)
    # F.linear, F.layer_norm, F.softmax are routed in the graph; a @ b and tensor methods are graph
    # ops that Dynamo does not look up on the class (torch's under compile)
    assert {"xrt.matmul.default", "xrt.layernorm.default", "xrt.softmax.default"} <= targets(counter.graphs[0])
    for g, t in zip(got, theirs):
        torch.testing.assert_close(g, t, rtol=1e-4, atol=1e-5)
    # outside the scope Dynamo's guard on the mode stack fails: a recompile, with torch's ops
    again = _train_step(compiled, x, dy)
    assert counter.frame_count == 2 and not any(t.startswith("xrt.") for t in targets(counter.graphs[1]))
    for g, t in zip(again, theirs):
        torch.testing.assert_close(g, t)


def test_direct_op_calls_keep_their_provider_and_route_under_a_routing_policy(interpreter):
    from xrt.pytorch.ops import dispatch

    x, a, b = torch.randn(3, 8), torch.randn(4, 8), torch.randn(8, 5)
    with xp.kernel_policy(**ALL_TRITON):
        assert dispatch.route(x) == dispatch.DIRECT  # routing puts no mode on the stack
        with torch.device("cpu"):
            assert dispatch.route(x) == dispatch.OP  # a mode of the user's is
        # the torch provider's own torch.softmax / torch.mm are not routed back to xrt
        _, seen = _xrt_events(lambda: (xp.ops.softmax(x, provider="torch"), xp.ops.matmul(a, b, provider="torch"),
                                       xp.ops.fused_layernorm(x, 8, provider="torch")))
    assert seen == {"xrt::softmax[torch]", "xrt::layernorm[torch]"}


def _inplace_cases():
    x, w, b = torch.randn(2, 3, 8), torch.randn(5, 8), torch.randn(5)
    q = torch.randn(1, 2, 5, 64).half()
    return {
        "linear 3-D, no bias": ((x, w), lambda t, u: F.linear(t, u)),
        "linear 2-D, bias": ((x[0], w, b), lambda t, u, c: F.linear(t, u, c)),
        "matmul [..., M, K] @ [K, N]": ((x, w), lambda t, u: t @ u.t()),
        "matmul, batched": ((x,), lambda t: t[None] @ t[None].transpose(-1, -2)),
        "layer_norm, no weight": ((x,), lambda t: F.layer_norm(t, (8,))),
        "layer_norm, weight and bias": ((x, torch.randn(8), torch.randn(8)),
                                        lambda t, u, c: F.layer_norm(t, (8,), u, c)),
        "softmax (saves its output)": ((x,), lambda t: t.softmax(-1)),
        "sdpa (saves its output)": ((q,), lambda t: F.scaled_dot_product_attention(t, t, t)),
    }


def _inplace_step(inputs, fn):
    """``fn``'s output doubled in place (as ``nn.ReLU(inplace=True)`` would touch it), then
    backward: the gradients, or the type of the error autograd raised."""
    ts = [t.clone().requires_grad_() for t in inputs]
    y = fn(*ts)
    try:
        y.mul_(2)
        y.float().sum().backward()
    except RuntimeError as e:
        return "error: modified by an inplace operation" if "inplace operation" in str(e) else str(e)
    return [t.grad for t in ts]


@pytest.mark.parametrize("case", list(_inplace_cases()))
def test_in_place_on_a_routed_output_behaves_as_on_torchs(interpreter, case):
    inputs, fn = _inplace_cases()[case]
    theirs = _inplace_step(inputs, fn)
    with xp.kernel_policy(attention="triton", **ALL_TRITON):
        got, seen = _xrt_events(lambda: _inplace_step(inputs, fn))
    assert seen, f"{case}: not routed"
    if isinstance(theirs, str):
        assert got == theirs
    else:
        assert not isinstance(got, str), got
        for g, t in zip(got, theirs):
            torch.testing.assert_close(g, t, rtol=1e-3, atol=1e-3)


def _penalty_grads(x, w, b):
    """A gradient penalty through ``F.linear``: the weight's and bias's gradients of ``|d(y^2)/dx|^2``."""
    x, w, b = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y = F.linear(x, w, b)
    gx, = torch.autograd.grad(y.square().sum(), x, create_graph=True)
    gx.square().sum().backward()
    return y.detach(), w.grad, b.grad


def test_routed_linear_is_one_autograd_node_and_twice_differentiable(interpreter):
    """A routed ``F.linear`` that autograd records is one node (the fold of the rows, the weight's
    transpose and the bias inside it); its gradients and a gradient penalty's match torch's."""
    x, w, b = torch.randn(2, 3, 8), torch.randn(5, 8), torch.randn(5)
    theirs = _penalty_grads(x, w, b)
    with xp.kernel_policy(matmul="triton"):
        y = F.linear(*(t.detach().requires_grad_() for t in (x, w, b)))
        assert type(y.grad_fn).__name__ == "_EagerLinearBackward" and y._base is None and y.shape == (2, 3, 5)
        with torch.no_grad():
            z = F.linear(x, w, b)
        assert z.grad_fn is None and z._base is None
        got, seen = _xrt_events(lambda: _penalty_grads(x, w, b))
    assert seen == {"xrt::matmul[triton]"}
    for g, t in zip(got, theirs):
        torch.testing.assert_close(g, t, rtol=1e-4, atol=1e-4)


def _saved_shapes(fn, routed):
    """The shapes of the tensors autograd saves for ``fn()`` (``saved_tensors_hooks``)."""
    packed = []
    with xp.kernel_policy(matmul="triton") if routed else contextlib.nullcontext():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(tuple(t.shape)) or t, lambda t: t):
            fn()
    return packed


# Square operands ([8, 8] matrices), so that tensors saved in another order than torch's
# would pass the checkpoint's shape check and give wrong gradients.
_SAVE_FORMS = {  # name: (call, uses the bias)
    "linear 3-D, bias": (lambda x, w, b: F.linear(x, w, b), True),
    "linear 3-D, no bias": (lambda x, w, b: F.linear(x, w), False),
    "linear 2-D, no bias": (lambda x, w, b: F.linear(x[0], w), False),
    "linear 1-D, bias": (lambda x, w, b: F.linear(x[0, 0], w, b), True),
    "a @ b": (lambda x, w, b: x @ w, False),
    "bmm": (lambda x, w, b: torch.bmm(x, w[None]), False),
}


@pytest.mark.parametrize("mode", [None, "torch.device"])
@pytest.mark.parametrize("needs", ["x", "weight", "bias", "x weight bias"])
@pytest.mark.parametrize("form", list(_SAVE_FORMS))
def test_routed_gemm_saves_what_torch_saves(interpreter, form, needs, mode):
    """A routed GEMM call saves what torch's own saves, in its order (``F.linear``: the folded rows
    for the weight's gradient, ``W.T`` for the input's, in ``addmm``'s or ``mm``'s order), so that a
    non-reentrant checkpoint that recomputes with torch's op (backward outside the policy, or on
    CUDA's autograd device thread) finds the same tensors in the same places: same gradients; also
    under a torch-function mode (the calls go through the custom op). With only the bias to
    differentiate nothing is saved, so a second backward works as torch's does."""
    fn, uses_bias = _SAVE_FORMS[form]
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 8, 8), torch.randn(8, 8), torch.randn(8)
    x, w, b = (t.requires_grad_(name in needs.split()) for t, name in ((x, "x"), (w, "weight"), (b, "bias")))
    leaves = [t for t in (x, w, b) if t.requires_grad and (uses_bias or t is not b)]
    if not leaves:
        pytest.skip("nothing to differentiate")
    with (torch.device("cpu") if mode else contextlib.nullcontext()):
        assert _saved_shapes(lambda: fn(x, w, b), True) == _saved_shapes(lambda: fn(x, w, b), False)
    want = torch.autograd.grad(fn(x, w, b).square().sum(), leaves)
    in_mode = (lambda: torch.device("cpu")) if mode else contextlib.nullcontext
    with xp.kernel_policy(matmul="triton"), in_mode():
        y = torch.utils.checkpoint.checkpoint(lambda t: fn(t, w, b).square(), x, use_reentrant=False)
        assert type(y.grad_fn).__name__ == "PowBackward0"
    got = torch.autograd.grad(y.sum(), leaves)  # the recomputation runs torch's op: no policy here
    for g, t in zip(got, want):
        torch.testing.assert_close(g, t, rtol=1e-4, atol=1e-4)
    if needs == "bias" and uses_bias:
        y2 = _routed_linear(x, w, b)
        y2.sum().backward()
        y2.sum().backward()
        torch.testing.assert_close(b.grad, torch.full((8,), 2 * 8.0))  # two backwards of 8 rows


@pytest.mark.xfail(strict=True, raises=torch.utils.checkpoint.CheckpointError,
                   reason="a routed layer norm saves other tensors than torch's (docs/runtime.md, "
                          "Activation checkpointing)")
def test_routed_layer_norm_in_a_checkpoint_recomputed_by_torch(interpreter):
    """Backward outside the policy (as on CUDA's autograd device thread) recomputes with torch's
    ``F.layer_norm``; today xrt's op saved other shapes, and the checkpoint refuses."""
    x = torch.randn(2, 3, 8, requires_grad=True)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    with xp.kernel_policy(layernorm="triton"):
        y = torch.utils.checkpoint.checkpoint(lambda t: F.layer_norm(t, (8,), w, b).relu(), x, use_reentrant=False)
    y.sum().backward()


def _routed_linear(*args):
    with xp.kernel_policy(matmul="triton"):
        y = F.linear(*args)
    assert type(y.grad_fn).__name__ == "_EagerLinearBackward"
    return y


def test_routed_linear_takes_an_empty_weight(interpreter):
    """N = 0: an empty output, and its backward, as torch's."""
    x, w = torch.randn(3, 8, requires_grad=True), torch.randn(0, 8, requires_grad=True)
    y = _routed_linear(x, w)
    assert y.shape == (3, 0)
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros(3, 8)) and w.grad.shape == (0, 8)


def _flops(fn, policy=None):
    from torch.utils.flop_counter import FlopCounterMode

    with xp.kernel_policy(**policy) if policy else contextlib.nullcontext(), FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops(), {str(k) for k in fc.get_flop_counts()["Global"]}


def test_a_flop_counter_counts_routed_calls_as_torchs(interpreter):
    """``FlopCounterMode`` counts xrt's GEMMs as torch's mm / bmm and its attention as SDPA (torch's
    formulas), forward and backward: a routed model shows the FLOPs torch's own does."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    x, a, b = torch.randn(2, 5, 16, requires_grad=True), torch.randn(3, 4, 8, requires_grad=True), torch.randn(8, 6)
    for step in (lambda: model(x).sum().backward(), lambda: (a @ b).sum().backward(),
                 lambda: torch.bmm(a, a.transpose(1, 2)).sum().backward()):
        theirs, ops = _flops(step)
        mine, xrt_ops = _flops(step, {"matmul": "triton"})
        assert mine == theirs > 0 and xrt_ops <= {"xrt.matmul", "xrt.bmm"} and not ops & xrt_ops
    q = torch.randn(1, 2, 16, 64, dtype=torch.float16, requires_grad=True)
    count, ops = _flops(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True).float().sum().backward(),
                        {"attention": "triton"})
    shape = tuple(q.shape)
    assert ops == {"xrt.attention", "xrt.attention_bwd"}
    assert count == sdpa_flop_count(shape, shape, shape) + sdpa_backward_flop_count(shape, shape, shape, shape)


def test_fsdp2_wrapped_model_is_routed(interpreter):
    """FSDP2 (``fully_shard``, one CPU rank over gloo): its parameters are DTensors between steps
    and plain tensors while a module computes, so the calls are routed and its hooks still run."""
    import warnings

    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available in this torch build")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        plain, sharded = Block(), Block()
        sharded.load_state_dict(plain.state_dict())
        mesh = init_device_mesh("cpu", (1,))
        fully_shard(sharded.fc, mesh=mesh)
        fully_shard(sharded, mesh=mesh)
        x, dy = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
        theirs = _train_step(plain, x, dy)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*returned a view tensor.*")  # FSDP2's warning
            with xp.kernel_policy(**ALL_TRITON):
                got, seen = _xrt_events(lambda: _train_step(sharded, x, dy))
        assert {"xrt::matmul[triton]", "xrt::layernorm[triton]", "xrt::softmax[triton]"} <= seen
        for g, t in zip(got, theirs):
            torch.testing.assert_close(g.full_tensor() if hasattr(g, "full_tensor") else g, t, rtol=1e-4, atol=1e-5)
    finally:
        dist.destroy_process_group()


class AttentionBlock(nn.Module):
    """A pre-norm self-attention block with head dim 64, the shape xrt's attention kernel takes."""

    def __init__(self, d: int = 128, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        return x + self.proj(h).softmax(-1)


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_cuda_block_routed_within_twice_torchs_error(compiled):
    torch.manual_seed(0)
    model = AttentionBlock().cuda().half()
    model64 = AttentionBlock().cuda().double()
    model64.load_state_dict(model.state_dict())
    x, dy = torch.randn(2, 67, 128, device="cuda"), torch.randn(2, 67, 128, device="cuda")
    theirs = _train_step(model, x.half(), dy.half())
    ref = _train_step(model64, x.double(), dy.double())
    run = torch.compile(model, fullgraph=True) if compiled else model
    with xp.kernel_policy(matmul="triton", layernorm="triton", softmax="triton", attention="triton"):
        got, seen = _xrt_events(lambda: _train_step(run, x.half(), dy.half()))
    if not compiled:
        assert {"xrt::matmul[triton]", "xrt::layernorm[triton]", "xrt::softmax[triton]",
                "xrt::attention[triton]"} <= seen
    names = ["out", "dx"] + [n for n, _ in model.named_parameters()]
    for name, g, t, r in zip(names, got, theirs, ref):
        err = (g.double() - r).abs().max().item()
        err_torch = (t.double() - r).abs().max().item()
        floor = 1e-3 * r.abs().max().item()
        assert err <= 2 * err_torch + floor, f"{name}: error {err:.3g} > 2 x torch's {err_torch:.3g} + {floor:.3g}"


def test_a_policy_entered_again_installs_the_wrappers_it_made():
    """A loop that enters a policy every step installs the wrappers made at its first entry (no new
    closures per step); a function someone replaced while none was installed gets a wrapper of its own."""
    with xp.kernel_policy(softmax="triton"):
        first = routing.patched()
    with xp.kernel_policy(softmax="triton"):
        again = routing.patched()
    assert first and all(again[f] is w for f, w in first.items())
    real = F.softmax

    def mine(*args, **kwargs):
        return real(*args, **kwargs)

    F.softmax = mine
    try:
        with xp.kernel_policy(softmax="triton"):
            assert F.softmax.__wrapped__ is mine and F.softmax is not first[real]
        assert F.softmax is mine
    finally:
        F.softmax = real
