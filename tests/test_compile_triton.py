"""xrt's Triton kernels under torch.compile: the ``triton_op`` twins (``xrt::<op>_triton``) that
Inductor traces into, the CUDA C twins tagged ``cudagraph_unsafe``, and the provider read at trace time.

On the CPU the kernels run under Triton's interpreter and the graphs are checked after AOTAutograd
(what Inductor would get); on a GPU Inductor's own code is checked (tests marked ``gpu``)."""

from __future__ import annotations

import contextlib
import re

import pytest
import torch
from conftest import graph_keeper
from functorch.compile import make_boxed_func
from kernel_checks import within_twice_their_error

import xrt.pytorch as xp
from xrt.pytorch.ops import dispatch

N = 33  # an awkward row length


def test_importing_xrt_leaves_inductor_and_dynamo_unimported():
    """``import xrt.pytorch`` registers the triton_op twins without triton_op's source scan (which
    imports Inductor and Dynamo, 2.7 s); an eager user pays neither."""
    import subprocess
    import sys

    code = "import sys, xrt.pytorch; print(sorted(m for m in ('torch._inductor', 'torch._dynamo') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_skipped_scan_would_have_found_no_kernel():
    """triton_op's full scan finds no kernel in any twin's function (every twin launches through the
    Launcher), so skipping it loses nothing. A twin that called ``wrap_triton`` itself would fail
    here: its kernels would key the compile caches, and the scan must then run. What each twin
    records for the caches instead is :data:`dispatch.CACHE_KEY` (the next test)."""
    from torch._library import triton as triton_lib

    assert dispatch.SCANNED, "no triton_op twin registered"
    for name, fn in dispatch.SCANNED.items():
        assert triton_lib.get_inner_triton_kernels(fn) == [], name
        assert triton_lib.get_triton_kernels_for_op(name) == [dispatch.CACHE_KEY], name


def _aot_cache_sources(op) -> list[str]:
    """The kernel sources torch's AOTAutograd cache puts in the key of a graph that calls ``op``
    (its own code: ``AOTAutogradCacheDetails.get_triton_source_codes_from_gm``)."""
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCacheDetails

    g = torch.fx.Graph()
    q = g.placeholder("q")
    g.output(g.call_function(op, (q, q, q, True, 0.125, "triton")))
    details = object.__new__(AOTAutogradCacheDetails)  # (the method reads only the graph)
    return details.get_triton_source_codes_from_gm(torch.fx.GraphModule(torch.nn.Module(), g))


def test_the_compile_cache_key_follows_the_tuned_configs_and_xrts_code(monkeypatch):
    """A graph that calls a twin is keyed in torch's AOTAutograd cache on xrt's code and on the tuned
    configs in force: a retune, or another xrt, does not get a graph traced before it from a warm
    cache. (Without the key the twins' kernel list was empty, and the graph alone keyed it.)"""
    op = torch.ops.xrt.attention_triton.default
    base = _aot_cache_sources(op)
    assert len(base) == 1 and "xrt twins: code" in base[0]
    assert _aot_cache_sources(op) == base  # the same state, the same key
    tuned = xp.KernelPolicy()
    tuned.add_tuned("attention.triton", {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2})
    with xp.kernel_policy(tuned):
        retuned = _aot_cache_sources(op)
    assert retuned != base
    with xp.kernel_policy(tuned):
        assert _aot_cache_sources(op) == retuned
    assert _aot_cache_sources(op) == base
    monkeypatch.setattr(dispatch, "_SOURCES", ["another xrt"])
    assert _aot_cache_sources(op) != base


def test_the_code_hash_covers_the_kernels_and_the_ops(monkeypatch):
    """The hashed files: the kernel layer (kernels, launchers, spaces) and the ops' functions; an edit
    to one changes the hash."""
    from pathlib import Path

    import xrt

    read: list[str] = []
    real = Path.read_bytes

    def spy(self):
        read.append(self.as_posix())
        return real(self)

    monkeypatch.setattr(dispatch, "_SOURCES", [])
    monkeypatch.setattr(Path, "read_bytes", spy)
    first = dispatch._sources_hash()
    root = Path(xrt.__file__).resolve().parent.as_posix()
    for f in ("kernels/triton/attention.py", "kernels/triton/launch.py", "kernels/spaces.py",
              "kernels/checks.py", "pytorch/ops/attention.py", "pytorch/ops/dispatch.py"):
        assert f"{root}/{f}" in read, f
    monkeypatch.setattr(dispatch, "_SOURCES", [])
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + (b"#" if self.name == "spaces.py" else b""))
    assert dispatch._sources_hash() != first


@pytest.fixture
def traced(interpreter, monkeypatch):
    """CPU tensors take the triton_op twins under compile (the graphs are run by AOTAutograd's
    Python, not Inductor, which cannot launch Triton kernels on CPU tensors)."""
    monkeypatch.setattr(dispatch, "TRITON_OP_ON_CPU", True)
    torch._dynamo.reset()


def _inputs(op: str, device: str = "cpu", dtype: torch.dtype = torch.float32):
    torch.manual_seed(0)
    x = torch.randn(7, N, device=device, dtype=dtype, requires_grad=True)
    if op == "layernorm":
        w = torch.randn(N, device=device, dtype=dtype, requires_grad=True)
        b = torch.randn(N, device=device, dtype=dtype, requires_grad=True)
        return (x, w, b)
    return (x,)


def _xrt(op: str, provider: str):
    if op == "square":
        return lambda x: xp.ops.square(x, provider=provider)
    if op == "softmax":
        return lambda x: xp.ops.softmax(x, provider=provider)
    return lambda x, w, b: xp.ops.fused_layernorm(x, N, w, b, provider=provider)


def _torch(op: str):
    if op == "square":
        return lambda x: x * x
    if op == "softmax":
        return lambda x: torch.softmax(x, -1)
    return lambda x, w, b: torch.nn.functional.layer_norm(x, (N,), w, b)


def _capture(fn, *args):
    """``fn`` compiled (fullgraph) with AOTAutograd and no codegen (:func:`conftest.graph_keeper`): its
    output, the gradients of its inputs, the upstream gradient, and the code of the forward and
    backward graphs that Inductor would get."""
    codes: list[str] = []
    torch._dynamo.reset()
    y = torch.compile(fn, backend=graph_keeper(codes), fullgraph=True)(*args)
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, args, dy)
    return y, grads, dy, codes


def _matches_float64(got, args, reference) -> None:
    """A compiled step's output, gradients and upstream gradient (``got``) against ``reference`` run
    on ``args`` in float64."""
    out, grads, dout = got
    ref = [t.detach().double().requires_grad_() for t in args]
    want = reference(*ref)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, torch.autograd.grad(want, ref, dout.double())):
        torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["square", "softmax", "layernorm"])
def test_compiled_graph_launches_the_triton_kernels(traced, op):
    """Forward and backward graphs hold the kernels themselves (``triton_kernel_wrapper_functional``),
    no call of an xrt custom op; outputs and gradients match torch in float64."""
    args = _inputs(op)
    y, grads, dy, codes = _capture(_xrt(op, "triton"), *args)
    forward, backward = codes
    assert "triton_kernel_wrapper_functional" in forward
    assert "torch.ops.xrt" not in forward and "torch.ops.xrt" not in backward
    if op == "layernorm":  # its backward is xrt's kernels too
        assert "triton_kernel_wrapper_functional" in backward
    _matches_float64((y, grads, dy), args, _torch(op))


@pytest.mark.parametrize("op", ["square", "softmax", "layernorm"])
def test_both_options_trace_without_graph_breaks(traced, op):
    """The triton_op twin and the opaque custom op (``torch`` provider) each make one graph; only
    the custom op's graph calls ``xrt::<op>``."""
    targets = {}
    for provider in ("triton", "torch"):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(_xrt(op, provider))(*_inputs(op))
        assert explained.graph_break_count == 0 and explained.graph_count == 1, explained
        targets[provider] = {str(n.target) for n in explained.graphs[0].graph.nodes if n.op == "call_function"}
    assert f"xrt.{op}_triton.default" in targets["triton"]
    assert f"xrt.{op}.default" in targets["torch"]


@pytest.mark.parametrize("grad", ["no_grad", "inputs_without_grad"])
def test_a_compiled_layernorm_that_autograd_does_not_record_computes_no_statistics(traced, grad):
    """Under no_grad, or on inputs none of which requires grad, the compiled layer norm is the
    twin without statistics (``xrt::layernorm_infer_triton``: the kernel with STATS off, no mean or
    rstd buffer); with grad it stays the twin that saves them. Outputs match torch in float64."""
    torch.manual_seed(0)
    x, w, b = torch.randn(7, N), torch.randn(N), torch.randn(N)
    codes: list[str] = []
    torch._dynamo.reset()
    f = torch.compile(_xrt("layernorm", "triton"), backend=graph_keeper(codes), fullgraph=True)
    with torch.no_grad() if grad == "no_grad" else contextlib.nullcontext():
        y = f(x, w, b)
    torch.testing.assert_close(y.double(), _torch("layernorm")(x.double(), w.double(), b.double()),
                               rtol=1e-5, atol=1e-5)
    (code,) = codes
    assert "'STATS': False" in code and "'STATS': True" not in code and "torch.float32" not in code, code
    explained = torch._dynamo.explain(_xrt("layernorm", "triton"))(x, w, b)
    assert {str(n.target) for n in explained.graphs[0].graph.nodes if n.op == "call_function"} >= {
        "xrt.layernorm_infer_triton.default"}
    x.requires_grad_(True)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(_xrt("layernorm", "triton"))(x, w, b)
    assert "xrt.layernorm_triton.default" in {str(n.target) for n in explained.graphs[0].graph.nodes}


def test_matmul_forward_traces_into_the_kernel(traced):
    a, b = torch.randn(6, 11), torch.randn(11, 5)
    codes: list[str] = []
    torch._dynamo.reset()
    f = torch.compile(lambda p, q: xp.ops.matmul(p, q, provider="triton"), backend=graph_keeper(codes),
                      fullgraph=True)
    torch.testing.assert_close(f(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert "triton_kernel_wrapper_functional" in codes[0] and "torch.ops.xrt" not in codes[0]


@pytest.mark.parametrize("bias", [True, False])
def test_a_routed_linear_puts_its_bias_in_the_gemm_epilogue_under_compile(traced, bias):
    """Under torch.compile a routed ``nn.Linear`` with a bias records ``xrt::linear_triton``: one GEMM
    launch with the bias in its epilogue and no add in the forward graph; the backward is the two
    gradient GEMMs and the bias's row sum. Without a bias, the GEMM alone. Outputs and gradients
    match float64."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(11, 5, bias=bias)
    x = torch.randn(2, 3, 11, requires_grad=True)
    codes: list[str] = []
    torch._dynamo.reset()
    # (Inductor's partitioner. On the CPU torch cannot read which arguments a Triton kernel writes, with no
    # driver to compile its TTIR for, and takes every one as written; the default partitioner then fails.)
    f = torch.compile(lambda t: lin(t), backend=graph_keeper(codes), fullgraph=True)
    with xp.kernel_policy(matmul="triton"):
        explained = torch._dynamo.explain(lambda t: lin(t))(x)
        y = f(x)
    targets = {str(n.target) for n in explained.graphs[0].graph.nodes if n.op == "call_function"}
    assert ("xrt.linear_triton.default" in targets) == bias, targets
    params = (x, lin.weight, *([lin.bias] if bias else []))
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, params, dy)
    forward, backward = codes
    launch = "higher_order.triton_kernel_wrapper_functional("
    assert forward.count(launch) == 1 and f"'HAS_BIAS': {bias}" in forward, forward
    assert "aten.add" not in forward and "torch.ops.xrt" not in forward + backward
    assert backward.count(launch) == 2, backward  # dX and dW
    ref_params = [p.detach().double().requires_grad_() for p in params]
    want = torch.nn.functional.linear(*ref_params)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)
    for got, ref in zip(grads, torch.autograd.grad(want, ref_params, dy.double())):
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_a_compiled_linear_gelu_launches_its_kernels(traced, bias):
    """``xp.ops.linear_gelu`` (what ``xp.fuse`` puts in a model) under torch.compile: the graph calls its
    ``triton_op`` twin, so the forward is the GEMM with bias and GELU in its epilogue and the backward
    the gradient kernel and two GEMMs, launched by the graph, with no call of an xrt custom op left;
    outputs and gradients match float64."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 11, requires_grad=True)
    w = torch.randn(5, 11, requires_grad=True)
    params = [x, w, torch.randn(5, requires_grad=True)] if bias else [x, w]

    def f(t, weight, bb=None):
        return xp.ops.linear_gelu(t, weight, bb, "tanh", provider="triton")

    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(*params)
    assert "xrt.linear_gelu_triton.default" in {str(n.target) for n in explained.graphs[0].graph.nodes}
    got = _compiled_step(f, params, launches=(1, 3))
    _matches_float64(got, params, lambda *ref: torch.nn.functional.gelu(torch.nn.functional.linear(*ref),
                                                                        approximate="tanh"))


LAUNCH = "higher_order.triton_kernel_wrapper_functional("


def _compiled_step(f, args, launches: tuple[int, int]):
    """:func:`_capture` of ``f``, asserting the kernel launches of its forward and backward graphs
    (``launches``) and no xrt custom op in them: its output, gradients and upstream gradient."""
    out, grads, dout, (forward, backward) = _capture(f, *args)
    assert (forward.count(LAUNCH), backward.count(LAUNCH)) == launches, (forward, backward)
    assert "torch.ops.xrt" not in forward + backward
    return out, grads, dout


def test_a_traced_gemm_passes_the_models_tensors_not_views_of_them(interpreter):
    """A compiled backward feeds the GEMMs a gradient Inductor has not stored yet; it stores one copy
    for each kernel argument that is a view of it, in that view's layout (the [1, M, K] view the
    kernel's batch loop reads, an unused epilogue pointer, ``g.T`` as a transposed copy). So the
    kernel gets A and B as stored, and B for the unused bias and z pointers: in a trace of ``g @ W``
    and ``g.T @ x`` both launches take ``g`` in its own layout for A, and no other argument names ``g``."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from xrt.kernels.triton import matmul as mm

    def both(g, w, x):
        return mm.matmul(g, w), mm.matmul(g.mT, x)

    def split(g, w, x):  # a weight gradient whose config splits K (the layout table's, for 1024 x 1024 over 8192)
        cfg = spaces.gemm_default("tn", 1024, 1024, 8192)
        assert cfg["SPLIT_K"] > 1
        return mm.matmul(g, w), mm.matmul(g.mT, x, cfg)

    from xrt.kernels import spaces

    for fn, (m, n) in ((both, (6, 5)), (split, (8192, 1024))):
        gm = make_fx(fn, tracing_mode="fake")(torch.randn(m, n), torch.randn(n, 3), torch.randn(m, 1024))
        g, w, x = (p for p in gm.graph.nodes if p.op == "placeholder")
        launches = [p for p in gm.graph.nodes if p.op == "call_function" and "triton_kernel_wrapper" in str(p.target)]
        for launch, b in zip(launches, (w, x)):  # (the split's sum of its parts launches third)
            kw = launch.kwargs["kwargs"]
            a = kw["a_ptr"]  # g, or for g.T's kernel g as stored (the transpose of g.T)
            assert a.meta["val"].shape == (m, n) and a.meta["val"].is_contiguous(), a.format_node()
            assert a is g or a.args[0].args[0] is g, a.format_node()
            assert kw["b_ptr"] is b and kw["bias_ptr"] is b and kw["z_ptr"] is b, launch.format_node()


def _traced_gemm_kernels(x: torch.Tensor, w: torch.Tensor) -> list[str]:
    """The kernels a trace of ``x @ w.T`` (fake CUDA tensors, the layout table's TMA config) records."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    from torch.fx.experimental.proxy_tensor import make_fx

    from xrt.kernels import spaces
    from xrt.kernels.triton import matmul as mm

    cfg = spaces.gemm_default("nt", 8192, 3072, 1024)  # a linear's forward: the layout table's TMA tile
    assert cfg is not None and cfg["kernel"] == "persistent_tma"
    gm = make_fx(lambda p, q: mm.run(p.unsqueeze(0), q.mT.unsqueeze(0), cfg))(x, w)
    return [kernel_side_table.get_kernel(n.kwargs["kernel_idx"]).fn.__name__ for n in gm.graph.nodes
            if n.op == "call_function" and "triton_kernel_wrapper" in str(n.target)]


def test_a_trace_records_the_tma_kernel_that_makes_its_descriptors_on_the_device(monkeypatch):
    """Under torch.compile on Hopper a large GEMM's graph launches the TMA kernel whose descriptors
    are made on the device (no host descriptor a trace could not record); a view not 16-byte
    aligned, a GEMM below ``TRACED_TMA_MIN_WORK``, or the switch off record the tiled kernel. Fake
    CUDA tensors; the device's answer planted."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from xrt.kernels import cuda as kernels_cuda
    from xrt.kernels.triton import matmul as mm

    monkeypatch.setitem(mm._TMA_DEVICES, 0, True)
    monkeypatch.setattr(kernels_cuda, "sm_count", lambda device: 132)
    with FakeTensorMode():
        x = torch.empty(8192, 1024, dtype=torch.float16, device="cuda:0")
        w = torch.empty(3072, 1024, dtype=torch.float16, device="cuda:0")
        assert 8192 * 768 * 768 >= mm.TRACED_TMA_MIN_WORK > 256 * 3072 * 1024  # a width-768 GPT's GEMMs: TMA
        shifted = torch.empty(8192 * 1024 + 1, dtype=torch.float16, device="cuda:0")
        shifted = shifted.as_strided((8192, 1024), (1024, 1), 1)  # 2 bytes past an aligned base
        small = torch.empty(256, 1024, dtype=torch.float16, device="cuda:0")
        assert _traced_gemm_kernels(x, w) == ["_matmul_tma_dev_kernel"]
        x768, w768 = torch.empty(8192, 768, dtype=torch.float16, device="cuda:0"), torch.empty(
            768, 768, dtype=torch.float16, device="cuda:0")
        assert _traced_gemm_kernels(x768, w768) == ["_matmul_tma_dev_kernel"]
        assert _traced_gemm_kernels(shifted, w) == ["_matmul_kernel"]
        assert _traced_gemm_kernels(small, w) == ["_matmul_kernel"]
        monkeypatch.setattr(mm, "DEVICE_DESCRIPTORS", [False])
        assert _traced_gemm_kernels(x, w) == ["_matmul_kernel"]


def test_the_traced_tma_kernel_gives_triton_an_allocator_outside_inductor(monkeypatch):
    """A graph run by another backend (``aot_eager``) launches the recorded kernel itself. It needs
    Triton's scratch memory, so the recorded kernel sets torch's allocator first; and its descriptor
    bases must be 16-byte aligned, which Inductor ensures and another backend does not: one line
    names the argument."""
    import triton
    from triton.runtime.jit import JITFunction

    from xrt.kernels.triton import launch
    from xrt.kernels.triton import matmul as mm

    recorded = launch.Launcher(JITFunction(mm._matmul_tma_dev_kernel.fn), scratch=mm._tma_dev.scratch).jit()
    assert isinstance(recorded, JITFunction)
    calls: list[str] = []
    monkeypatch.setattr(triton, "set_allocator", lambda fn: calls.append(f"allocator {fn.__name__}"))
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, **k: calls.append("run"))
    aligned = torch.zeros(64, dtype=torch.float16)
    recorded[(1,)](aligned, aligned, aligned, aligned[1:], z_ptr=aligned)  # bias_ptr may be anywhere
    assert calls == ["allocator _scratch", "run"]
    with pytest.raises(ValueError, match="argument b_ptr is not 16-byte aligned"):
        recorded[(1,)](aligned, aligned[1:])
    with pytest.raises(ValueError, match="argument c_ptr is not 16-byte aligned"):
        recorded[(1,)](aligned, aligned, c_ptr=aligned[3:])
    assert calls == ["allocator _scratch", "run"]
    assert launch.Launcher(JITFunction(mm._matmul_kernel.fn)).jit().__class__ is JITFunction


@pytest.mark.parametrize("uses", ["y", "y and h"])
def test_a_compiled_add_layernorm_launches_its_kernels(traced, uses):
    """``xp.ops.add_layernorm`` under torch.compile: its ``triton_op`` twins, so the forward is one
    launch and the backward two (the row-group kernel and the partial sums), with no xrt custom op
    left; y and h and the four gradients match float64, h's own gradient added where h is used."""
    torch.manual_seed(0)
    args = [torch.randn(2, 5, N, requires_grad=True), torch.randn(2, 5, N, requires_grad=True),
            torch.randn(N, requires_grad=True), torch.randn(N, requires_grad=True)]
    f = _add_layernorm_step(uses)
    _matches_float64(_compiled_step(f, args, launches=(1, 2)), args, lambda *ref: f(*ref, fn=_unfused_add_layernorm))


def _add_layernorm_step(uses: str):
    """A step on ``add_layernorm``'s outputs (``fn``: xrt's Triton provider, or another of its
    signature): y alone, or y and h."""

    def f(x, r, w, b, fn=lambda *a: xp.ops.add_layernorm(*a[:2], N, *a[2:], provider="triton")):
        y, h = fn(x, r, w, b)
        return y if uses == "y" else y * 1.5 + h.sin()

    return f


def _unfused_add_layernorm(x, r, w, b):
    h = x + r
    return torch.nn.functional.layer_norm(h, (N,), w, b), h


def _add_layernorm_twins_opcheck(device: str, fwd_utils) -> None:
    """opcheck of add_layernorm's twins: the forward with ``fwd_utils`` (None: all), the backward with
    and without h's own gradient."""
    x, r = (torch.randn(3, 17, device=device, requires_grad=True) for _ in range(2))
    w, b = (torch.randn(17, device=device, requires_grad=True) for _ in range(2))
    fwd = dispatch.COMPILED[("add_layernorm", "triton")]
    kw = {} if fwd_utils is None else {"test_utils": fwd_utils}
    result = torch.library.opcheck(fwd, (x, r, w, b, 1e-5, "triton"), **kw)
    assert set(result.values()) == {"SUCCESS"}, result
    y, h, mean, rstd = (t.detach() for t in fwd(x, r, w, b, 1e-5, "triton"))
    bwd = dispatch.COMPILED[("add_layernorm_bwd", "triton")]
    for dh in (torch.randn(3, 17, device=device), None):
        dy = torch.randn(3, 17, device=device)
        result = torch.library.opcheck(bwd, (dy, dh, h, w.detach(), mean, rstd, "triton"))
        assert set(result.values()) - {"SKIP"} == {"SUCCESS"}, result


def test_add_layernorm_twins_pass_opcheck(interpreter):
    """On the CPU the forward's AOT checks are left to the GPU test below: without a driver torch
    cannot read which arguments a kernel writes and takes every one as written, so the backward
    kernel "writes" the saved h, a forward output, and the default partitioner refuses the graph."""
    _add_layernorm_twins_opcheck("cpu", ["test_schema", "test_autograd_registration", "test_faketensor"])


@pytest.mark.gpu
def test_add_layernorm_twins_pass_opcheck_on_gpu():
    _add_layernorm_twins_opcheck("cuda", None)


def _attention_inputs(device: str, dtype: torch.dtype, layout: str):
    """The step's inputs, what makes q, k, v [B, H, S, D] of them, and an upstream gradient: a model's
    ``qkv`` [B, S, 3, H, D] split and seen per head (strided views, made inside the step as a model
    does), or three contiguous tensors; fp16 or bf16."""
    torch.manual_seed(0)
    b, h, s, d = 2, 2, 37, 64
    if layout == "model":
        inputs = [torch.randn(b, s, 3, h, d, device=device).to(dtype).requires_grad_()]

        def make(qkv):
            return [qkv[:, :, i].transpose(1, 2) for i in range(3)]
    else:
        inputs = [torch.randn(b, h, s, d, device=device).to(dtype).requires_grad_() for _ in range(3)]

        def make(*qkv):
            return list(qkv)
    return inputs, make, torch.randn(b, h, s, d, device=device).to(dtype)


def _attention_within_sdpas_error(got, inputs, make, dout, causal) -> None:
    """A compiled attention step's output and its inputs' gradients against float64: at most 2x SDPA's
    own error at the inputs' precision, plus 1e-4 (the kernels' tests' bound)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def run(dtype):
        ts = [t.detach().to(dtype).requires_grad_() for t in inputs]
        o = sdpa(*make(*ts), is_causal=causal)
        return [o, *torch.autograd.grad(o, ts, dout.to(dtype))]

    names = ["out", *(f"grad {i}" for i in range(len(inputs)))]
    within_twice_their_error(names, got, run(inputs[0].dtype), run(torch.float64))


@pytest.mark.parametrize("layout", ["model", "contiguous"])
def test_a_compiled_attention_calls_its_twin(interpreter, monkeypatch, layout):
    """Dynamo records a routed ``F.scaled_dot_product_attention`` (and a direct ``fused_attention``)
    as the ``triton_op`` twin, in one graph, on a model's strided q, k, v and on contiguous ones."""
    monkeypatch.setattr(dispatch, "TRITON_OP_ON_CPU", True)
    inputs, make, _ = _attention_inputs("cpu", torch.float16, layout)
    F = torch.nn.functional  # (looked up at the call, as a model does: the policy routes the module's function)
    for f in (lambda *ts: xp.ops.fused_attention(*make(*ts), is_causal=True, provider="triton"),
              lambda *ts: F.scaled_dot_product_attention(*make(*ts), is_causal=True)):
        torch._dynamo.reset()
        with xp.kernel_policy(attention="triton"):
            explained = torch._dynamo.explain(f)(*inputs)
        assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
        assert "xrt.attention_triton.default" in {str(n.target) for n in explained.graphs[0].graph.nodes}


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_a_compiled_attention_launches_its_kernels(traced, causal):
    """``fused_attention`` under torch.compile: the forward is one kernel and the backward the dQ and
    dK/dV kernels (the default config fuses delta into dQ), launched by the graph with no xrt custom
    op left; within SDPA's error of float64. Contiguous inputs: on the CPU torch takes every kernel
    argument as written (no driver to read the kernel), and AOTAutograd refuses written views of one
    tensor, a model's q, k and v; the GPU test below runs those."""
    inputs, make, dout = _attention_inputs("cpu", torch.float16, "contiguous")

    def f(*ts):
        return xp.ops.fused_attention(*make(*ts), is_causal=causal, provider="triton")

    codes: list[str] = []
    torch._dynamo.reset()
    out = torch.compile(f, backend=graph_keeper(codes), fullgraph=True)(*inputs)
    grads = torch.autograd.grad(out, inputs, dout)
    forward, backward = codes
    assert (forward.count(LAUNCH), backward.count(LAUNCH)) == (1, 2), (forward, backward)
    assert "torch.ops.xrt" not in forward + backward
    _attention_within_sdpas_error([out, *grads], inputs, make, dout, causal)


def test_a_compiled_routed_gpt_calls_no_xrt_op(traced):
    """An unmodified GPT block (``xrt.pytorch.modules.gpt``: nn.Linear, nn.LayerNorm, causal SDPA with
    head dim 64) compiled under a policy naming every routed op's Triton provider: its forward and
    backward graphs launch xrt's kernels themselves, attention's included, with no xrt custom op and
    no torch GEMM, LayerNorm or SDPA left (forward: four GEMMs, two LayerNorms and attention).
    Output and input gradient within 2x the fp16 torch model's error of float64."""
    import copy

    from xrt.pytorch.modules import gpt

    torch.manual_seed(0)
    model = gpt(128, 2, 1)
    x, dy = torch.randn(1, 16, 128), torch.randn(1, 16, 128)

    def step(m, t, dt):
        t = t.to(dt).requires_grad_()
        y = m(t)
        return [y, *torch.autograd.grad(y, t, dy.to(dt))]

    codes: list[str] = []
    torch._dynamo.reset()
    half = copy.deepcopy(model).half()
    with xp.kernel_policy(matmul="triton", layernorm="triton", softmax="triton", attention="triton"):
        got = step(torch.compile(half, backend=graph_keeper(codes), fullgraph=True), x, torch.float16)
    forward, backward = codes
    for code in codes:
        assert "torch.ops.xrt" not in code
        for torch_op in ("aten.mm", "aten.addmm", "aten.native_layer_norm", "scaled_dot_product"):
            assert torch_op not in code, torch_op
    assert forward.count(LAUNCH) == 7, forward
    # backward: dX and dW of each GEMM (8), each LayerNorm's two kernels (4), attention's dQ and dK/dV (2)
    assert backward.count(LAUNCH) == 14, backward
    want = step(copy.deepcopy(model).double(), x, torch.float64)
    theirs = step(half, x, torch.float16)
    within_twice_their_error(("out", "grad x"), got, theirs, want, floor=2e-3)


def _attention_twins_opcheck(device: str, dtype: torch.dtype, utils) -> None:
    inputs, make, dout = _attention_inputs(device, dtype, "model")
    q, k, v = (t.detach().requires_grad_() for t in make(*inputs))  # (strided views; opcheck clones them)
    fwd, bwd = dispatch.COMPILED[("attention", "triton")], dispatch.COMPILED[("attention_bwd", "triton")]
    kw = {} if utils is None else {"test_utils": utils}
    for causal in (True, False):
        result = torch.library.opcheck(fwd, (q, k, v, causal, 0.125, "triton"), **kw)
        assert set(result.values()) - {"SKIP"} == {"SUCCESS"}, result
        o, lse = (t.detach() for t in fwd(q, k, v, causal, 0.125, "triton"))
        result = torch.library.opcheck(bwd, (dout, q.detach(), k.detach(), v.detach(), o, lse, causal, 0.125, "triton"),
                                       **kw)
        assert set(result.values()) - {"SKIP"} == {"SUCCESS"}, result


def test_attention_twins_pass_opcheck(interpreter):
    """As add_layernorm's: on the CPU the AOT checks are left to the GPU test."""
    _attention_twins_opcheck("cpu", torch.float16, ["test_schema", "test_autograd_registration", "test_faketensor"])


@pytest.mark.gpu
def test_attention_twins_pass_opcheck_on_gpu():
    _attention_twins_opcheck("cuda", torch.bfloat16, None)


@pytest.mark.parametrize("op", ["square", "softmax"])
def test_triton_twins_pass_opcheck(interpreter, op):
    x = torch.randn(3, 17, requires_grad=True)
    result = torch.library.opcheck(dispatch.COMPILED[(op, "triton")], (x, "triton"))
    assert set(result.values()) == {"SUCCESS"}, result


def test_layernorm_twin_passes_opcheck(interpreter):
    x, w, b = (torch.randn(3, 17, requires_grad=True), torch.randn(17, requires_grad=True),
               torch.randn(17, requires_grad=True))
    result = torch.library.opcheck(dispatch.COMPILED[("layernorm", "triton")], (x, [17], w, b, 1e-5, "triton"))
    assert set(result.values()) == {"SUCCESS"}, result
    x, w, b = (t.detach() for t in (x, w, b))
    infer = dispatch.COMPILED[("layernorm_infer", "triton")]
    result = torch.library.opcheck(infer, (x, [17], w, b, 1e-5, "triton"))
    assert set(result.values()) - {"SKIP"} == {"SUCCESS"}, result


def test_only_the_cuda_c_twins_are_cudagraph_unsafe():
    unsafe = torch.Tag.cudagraph_unsafe
    ops = ("square", "softmax", "layernorm", "layernorm_bwd", "matmul", "bmm")
    for op in ops:
        assert unsafe in dispatch.COMPILED[(op, "cuda")]._opoverload.tags, op
        assert unsafe not in dispatch.COMPILED[(op, "triton")]._opoverload.tags, op
        assert unsafe not in getattr(torch.ops.xrt, op).default.tags, op
    for op in ("attention", "attention_bwd", "add_layernorm", "add_layernorm_bwd", "linear_gelu"):
        assert unsafe not in dispatch.COMPILED[(op, "triton")]._opoverload.tags, op


def test_flop_counter_counts_the_attention_twins_as_sdpa(interpreter):
    """torch's FlopCounterMode counts ``xrt::attention_triton`` and its backward with SDPA's formulas,
    as it counts ``xrt::attention``: a compiled model's FLOPs read as torch's."""
    from torch.utils import flop_counter

    q, k, v = (torch.randn(1, 2, 17, 64).half() for _ in range(3))
    fwd, bwd = torch.ops.xrt.attention_triton, torch.ops.xrt.attention_bwd_triton
    with flop_counter.FlopCounterMode(display=False) as counter:
        o, lse = fwd(q, k, v, True, 0.125, "triton")
    assert counter.get_total_flops() == flop_counter.sdpa_flop_count(q.shape, k.shape, v.shape) > 0
    with flop_counter.FlopCounterMode(display=False) as counter:
        bwd(torch.randn_like(o), q, k, v, o, lse, True, 0.125, "triton")
    assert counter.get_total_flops() == flop_counter.sdpa_backward_flop_count(o.shape, q.shape, k.shape, v.shape) > 0


def test_cpu_tensors_keep_the_custom_op_under_inductor(interpreter):
    """Inductor cannot launch Triton kernels on CPU tensors: by default the opaque op stays there."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    x = torch.randn(8)
    f = torch.compile(lambda t: xp.ops.square(t, provider="triton"), backend=counter, fullgraph=True)
    torch.testing.assert_close(f(x), x * x)
    assert "xrt.square.default" in {str(n.target) for n in counter.graphs[0].graph.nodes}


def test_eager_calls_never_take_a_twin(interpreter):
    """Outside torch.compile the OP route keeps the custom op: the twins would only add dispatch."""
    from xrt.pytorch.ops.square import _square_op

    assert dispatch.compiled("square", "triton", _square_op, torch.empty(1)) is _square_op
    with torch._subclasses.fake_tensor.FakeTensorMode():  # the OP route in eager
        y = xp.ops.square(torch.empty(4, 5), provider="triton")
    assert y.shape == (4, 5)


def test_the_policy_is_read_when_tracing(traced):
    """The provider is chosen at trace time; a policy change recompiles (Dynamo guards on the policy)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda t: xp.ops.square(t), backend=counter, fullgraph=True)
    x = torch.randn(8)

    def targets(graph):
        return {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}

    with xp.kernel_policy(square="triton"):
        torch.testing.assert_close(f(x), x * x)
    with xp.kernel_policy(square="torch"):
        torch.testing.assert_close(f(x), x * x)
    assert counter.frame_count == 2
    assert "xrt.square_triton.default" in targets(counter.graphs[0])
    assert "xrt.square.default" in targets(counter.graphs[1])


def test_a_compiled_call_guards_on_the_policys_content(traced, monkeypatch):
    """Dynamo guards on three stamps of the policy (this thread's scopes, the global policy,
    XRT_KERNEL_POLICY), not on each layer: a scope of equal choices entered again reuses the graph;
    another choice in any layer, set on this thread or another, traces again."""
    import threading

    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda t: xp.ops.square(t), backend=counter, fullgraph=True)
    x = torch.randn(8)

    def provider_of_last_graph():
        targets = {str(n.target) for n in counter.graphs[-1].graph.nodes if n.op == "call_function"}
        return "triton" if "xrt.square_triton.default" in targets else "torch"

    def run():
        torch.testing.assert_close(f(x), x * x)
        return counter.frame_count, provider_of_last_graph()

    xp.clear_kernel_policy()
    try:
        with xp.kernel_policy(square="triton"):
            assert run() == (1, "triton")
        with xp.kernel_policy(xp.KernelPolicy(square="triton")):  # an equal scope: the same graph
            assert run() == (1, "triton")
        with xp.kernel_policy(square="torch"), xp.kernel_policy(softmax="torch"):  # inner scopes merge
            assert run() == (2, "torch")
        t = threading.Thread(target=lambda: xp.set_kernel_policy(square="triton"))  # the global, elsewhere
        t.start()
        t.join(10)
        assert run() == (3, "triton")
        with xp.kernel_policy(square="torch"):  # a scope wins over the global policy
            assert run() == (4, "torch")
        xp.clear_kernel_policy()
        monkeypatch.setenv("XRT_KERNEL_POLICY", "square=triton")
        assert run()[1] == "triton"
        monkeypatch.setenv("XRT_KERNEL_POLICY", "square=torch")
        assert run()[1] == "torch"
    finally:
        xp.clear_kernel_policy()


# -- on a GPU: Inductor's own code ----------------------------------------------------------------

KERNELS = {"square": ["_square_kernel"], "softmax": ["_softmax_kernel"],
           "layernorm": ["_layernorm_fwd_kernel", "_layernorm_bwd_kernel", "_sum_partials_kernel"]}


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["square", "softmax", "layernorm"])
def test_inductor_launches_the_kernels_directly_on_gpu(op):
    from torch._inductor.utils import run_and_get_code

    args = _inputs(op, "cuda")
    torch._dynamo.reset()
    compiled = torch.compile(_xrt(op, "triton"), fullgraph=True)

    def step():
        y = compiled(*args)
        dy = torch.ones_like(y) * 0.5 + torch.arange(y.numel(), device="cuda").view_as(y) / y.numel()
        return y, torch.autograd.grad(y, args, dy), dy

    (y, grads, dy), codes = run_and_get_code(step)
    code = "\n".join(codes)
    assert "torch.ops.xrt" not in code and "xrt." not in code.replace("xrt.kernels", "")
    for name in KERNELS[op]:
        assert name in code, name
    _matches_float64((y, grads, dy), args, _torch(op))


@pytest.mark.gpu
def test_inductor_launches_add_layernorms_kernels_on_gpu():
    """A compiled ``add_layernorm`` (y and h both used) on a GPU: Inductor's code launches the row
    kernel, the row-group kernel and the partial sums itself, no xrt op left; float64 numerics."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    args = [torch.randn(4, 9, N, device="cuda", requires_grad=True) for _ in range(2)]
    args += [torch.randn(N, device="cuda", requires_grad=True) for _ in range(2)]

    f = _add_layernorm_step("y and h")
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)

    def step():
        out = compiled(*args)
        dout = torch.randn_like(out)
        return out, torch.autograd.grad(out, args, dout), dout

    got, codes = run_and_get_code(step)
    code = "\n".join(codes)
    assert "torch.ops.xrt" not in code and "xrt." not in code.replace("xrt.kernels", "")
    for name in ("_add_layernorm_fwd_kernel", "_add_layernorm_bwd_kernel", "_sum_partials_kernel"):
        assert name in code, name
    _matches_float64(got, args, lambda *ref: f(*ref, fn=_unfused_add_layernorm))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_inductor_launches_attentions_kernels_on_gpu(causal):
    """A compiled ``fused_attention`` on a model's strided q, k, v (bf16, on a GPU): Inductor's code
    launches the forward, dQ and dK/dV kernels itself, no xrt op left; within SDPA's error of float64."""
    from torch._inductor.utils import run_and_get_code

    inputs, make, dout = _attention_inputs("cuda", torch.bfloat16, "model")
    torch._dynamo.reset()
    compiled = torch.compile(lambda qkv: xp.ops.fused_attention(*make(qkv), is_causal=causal, provider="triton"),
                             fullgraph=True)

    def step():
        out = compiled(*inputs)
        return [out, *torch.autograd.grad(out, inputs, dout)]

    got, codes = run_and_get_code(step)
    code = "\n".join(codes)
    assert "torch.ops.xrt" not in code and "xrt." not in code.replace("xrt.kernels", "")
    for name in ("_attn_fwd_kernel", "_attn_bwd_dq_kernel", "_attn_bwd_dkdv_kernel"):
        assert name in code, name
    _attention_within_sdpas_error(got, inputs, make, dout, causal)


@pytest.mark.gpu
def test_inductor_runs_a_layernorm_without_grad_as_one_kernel_and_one_buffer():
    """Inference on the GPU: Inductor's code launches the forward kernel with no statistics and
    allocates the output alone (no mean or rstd buffer, no copy of an input)."""
    from torch._inductor.utils import run_and_get_code

    x, w, b = (t.detach() for t in _inputs("layernorm", "cuda", torch.bfloat16))
    torch._dynamo.reset()
    compiled = torch.compile(_xrt("layernorm", "triton"), fullgraph=True)
    with torch.no_grad():
        y, codes = run_and_get_code(compiled, x, w, b)
    code = "\n".join(codes)
    assert "_layernorm_fwd_kernel" in code and "torch.ops.xrt" not in code
    assert code.count("empty_strided_cuda(") == 1 and "copy_" not in code and ".clone(" not in code, code
    want = torch.nn.functional.layer_norm(x.float(), (N,), w.float(), b.float())
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_compiled_matmul_training_on_gpu():
    from torch._inductor.utils import run_and_get_code

    a = torch.randn(64, 96, device="cuda", requires_grad=True)
    b = torch.randn(96, 40, device="cuda")  # only a needs a gradient
    torch._dynamo.reset()
    f = torch.compile(lambda p, q: xp.ops.matmul(p, q, provider="triton").relu(), fullgraph=True)
    (y, (da,)), codes = run_and_get_code(lambda: (lambda out: (out, torch.autograd.grad(out.sum(), (a,))))(f(a, b)))
    assert "torch.ops.xrt" not in "\n".join(codes) and "_matmul_kernel" in "\n".join(codes)
    want = (a.double() @ b.double()).relu()
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(da.double(), (want > 0).double() @ b.double().T, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_a_compiled_linear_trains_on_the_tma_kernel(backend):
    """A routed nn.Linear at a transformer's shape (above ``TRACED_TMA_MIN_WORK``) under torch.compile:
    its three GEMMs (x @ W.T, g @ W, g.T @ x) run the TMA kernel that makes its descriptors on the
    device, with no operand copied; outputs and gradients match float64. ``aot_eager`` launches the
    kernel outside Inductor (Triton's allocator set by the recorded kernel itself)."""
    from torch._inductor.utils import run_and_get_code

    from xrt.kernels.triton import matmul as mm

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the TMA kernel needs Hopper or later")
    torch.manual_seed(0)
    x = torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    lin = torch.nn.Linear(1024, 3072, device="cuda", dtype=torch.bfloat16)
    assert 8192 * 3072 * 1024 >= mm.TRACED_TMA_MIN_WORK
    dy = torch.randn(8192, 3072, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    f = torch.compile(lambda t: lin(t), backend=backend, fullgraph=True, dynamic=False)

    def step():
        y = f(x)
        return (y, *torch.autograd.grad(y, (x, lin.weight, lin.bias), dy))

    with xp.kernel_policy(matmul="triton"):
        if backend == "inductor":
            out, codes = run_and_get_code(step)
            code = "\n".join(codes)
            assert len(re.findall(r"_matmul_tma_dev_kernel(?:_\d+)?\.run\(", code)) == 3, code  # fwd, dX, dW
            assert ".clone(" not in code and "copy_" not in code
        else:
            out = step()
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, lin.weight, lin.bias))
    ref = torch.nn.functional.linear(xd, wd, bd)
    refs = (ref, *torch.autograd.grad(ref, (xd, wd, bd), dy.double()))
    for name, got, want in zip(("y", "dx", "dW", "db"), out, refs):
        err = ((got.double() - want).abs().max() / want.abs().max()).item()
        assert err < 2e-2, (name, err)


@pytest.mark.gpu
def test_reduce_overhead_captures_the_triton_kernels():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    f = torch.compile(lambda t: xp.ops.softmax(xp.ops.square(t, provider="triton"), provider="triton"),
                      mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # warm-up, record, replays; fresh values each time
        x = torch.randn(16, 200, device="cuda")
        torch.testing.assert_close(f(x), torch.softmax(x * x, -1))
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


@pytest.mark.gpu
def test_reduce_overhead_keeps_the_cuda_c_provider_out_of_the_graph():
    from xrt.kernels import cuda

    if cuda.missing():
        pytest.skip(cuda.missing())
    torch._dynamo.reset()
    f = torch.compile(lambda t: xp.ops.square(t, provider="cuda") + 1, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):
        x = torch.randn(4099, device="cuda")
        torch.testing.assert_close(f(x), x * x + 1)


DYNAMIC = {  # op: (the call, its inputs with M rows, torch's answer)
    "matmul": (lambda a, b: xp.ops.matmul(a, b, provider="triton"),
               lambda m: (torch.randn(m, 11), torch.randn(11, 5)), lambda a, b: a @ b),
    "bmm": (lambda a, b: xp.ops.bmm(a, b, provider="triton"),
            lambda m: (torch.randn(2, m, 11), torch.randn(2, 11, 5)), torch.bmm),
    "softmax": (lambda x: xp.ops.softmax(x, provider="triton"), lambda m: (torch.randn(m, N),),
                lambda x: torch.softmax(x, -1)),
    "layernorm": (_xrt("layernorm", "triton"), lambda m: (torch.randn(m, N), torch.randn(N), torch.randn(N)),
                  _torch("layernorm")),
    # M is the sequence length; the answer is the eager call's (its TMA forward; the trace records the
    # pointer one, which gives the same bits: test_kernels_attention.test_tma_and_pointer_forwards_agree)
    "attention": (lambda q, k, v: xp.ops.fused_attention(q, k, v, is_causal=True, provider="triton"),
                  lambda m: tuple(torch.randn(1, 2, m, 64).half() for _ in range(3)),
                  lambda q, k, v: xp.ops.fused_attention(q, k, v, is_causal=True, provider="triton")),
}


@pytest.mark.parametrize("op", sorted(DYNAMIC))
def test_twins_trace_once_with_dynamic_shapes(traced, op):
    """Under ``torch.compile(dynamic=True)`` sizes are SymInts. The configs are chosen from their
    hints, without a guard: one graph serves both row counts. (A SymInt cannot key the GEMM layout
    table: its fake pass raised "unhashable type"; softmax and layernorm recompiled for each M.)"""
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(gm, _inputs):
        graphs.append(gm)
        return make_boxed_func(gm)

    call, inputs, want = DYNAMIC[op]
    torch._dynamo.reset()
    f = torch.compile(call, backend=aot_autograd(fw_compiler=keep), fullgraph=True, dynamic=True)
    for m in (6, 9):
        args = inputs(m)
        torch.testing.assert_close(f(*args), want(*args), rtol=1e-5, atol=1e-5)
    assert len(graphs) == 1 and "triton_kernel_wrapper_functional" in graphs[0].code


@pytest.mark.parametrize("provider, error", [("nope", "unknown kernel 'nope' for op 'square'"),
                                             ("cuda", "provider 'cuda' is unavailable")])
def test_a_compiled_call_checks_its_provider_as_eager_does(interpreter, provider, error):
    """Under torch.compile the chosen provider is checked as Dynamo traces (a constant of the trace,
    ``dispatch._checked``): eager's errors still come, for an unknown provider and for one that
    cannot run the tensor here (CUDA C on the CPU)."""
    x = torch.randn(8)
    with pytest.raises(Exception, match=error):
        xp.ops.square(x, provider=provider)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=error):
        torch.compile(lambda t: xp.ops.square(t, provider=provider), backend="aot_eager", fullgraph=True)(x)
