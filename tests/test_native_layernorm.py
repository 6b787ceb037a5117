"""The native (C++) layernorm op: its build, its autograd plumbing, how a plan is encoded, and on a
GPU that training through it equals the Python path's to the bit (the same kernels)."""

import shutil
import struct
import warnings

import pytest
import torch
import torch.nn.functional as F

import xrt.pytorch as xp
from xrt.kernels.launch_spec import LaunchSpec
from xrt.pytorch import policy as pol
from xrt.pytorch.ops import layernorm as layernorm_op
from xrt.pytorch.ops import native

# -- encoding a plan (no library needed) ------------------------------------------------------------

def test_encode_launch_packs_each_argument_by_its_kernel_type():
    spec = LaunchSpec(1234, (7, 1, 1), (128, 1, 1), 512, ("ptr", "ptr", None, "i32", "i64", "f32", "f32", "u64"))
    template = ("x", ("stats", 64), 1, 5, 2**40, "eps", 0.5, 3)
    got = native.encode_launch(spec, template, native.FWD_SLOTS, device=0)
    half = struct.unpack("<I", struct.pack("<f", 0.5))[0]
    assert got == [1234, 7, 1, 1, 128, 1, 1, 512, 7,
                   native.PTR, 0, 0, native.PTR, 4, 64,  # x; stats + 64 bytes (the constexpr 1 is not passed)
                   native.I32, 5, 0, native.I64, 2**40, 0, native.KIND_EPS, 0, 0, native.F32, half, 0,
                   native.U64, 3, 0, 0]  # (no host descriptor)


def test_encode_launch_refuses_a_template_that_does_not_fit():
    spec = LaunchSpec(1, (1, 1, 1), (32, 1, 1), 0, ("ptr", "i32"))
    with pytest.raises(ValueError, match="template of 1 arguments for a kernel call of 2"):
        native.encode_launch(spec, ("x",), native.FWD_SLOTS, 0)
    with pytest.raises(ValueError, match="eps passed as i32"):
        native.encode_launch(spec, ("x", "eps"), native.FWD_SLOTS, 0)
    with pytest.raises(ValueError):  # not a slot of the forward
        native.encode_launch(spec, ("dx", 1), native.FWD_SLOTS, 0)


class _Recorder:
    """A launch site that records the arguments of each call."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def _evaluate(template, addresses, eps):
    """What a template stands for, with slots at ``addresses``."""
    out = []
    for a in template:
        if isinstance(a, str):
            out.append(eps if a == "eps" else addresses[a])
        elif isinstance(a, tuple):
            out.append(addresses[a[0]] + a[1])
        else:
            out.append(a)
    return out


@pytest.mark.parametrize("m,n", [(6, 40), (1, 300), (33, 64)])
def test_triton_plans_templates_are_what_their_calls_pass(interpreter, m, n):
    """The templates the native op is built from must match the Python launches argument for
    argument (the Triton sites take tensors: compare by identity)."""
    from xrt.kernels import checks
    from xrt.kernels.triton import layernorm as tl_ln

    x = torch.randn(m, n)
    w, b = torch.randn(n), torch.randn(n)
    fwd = tl_ln.FwdPlan(m, n, checks.tuning("layernorm.triton", None))
    bwd = tl_ln.BwdPlan(m, n, checks.tuning("layernorm_bwd.triton", None), x)
    rec = _Recorder()
    fwd.sites[True] = rec
    y, stats = torch.empty_like(x), torch.empty(2, m)
    fwd(x, w, b, y, stats, 1e-5, True)
    (site, template), = fwd.native()
    assert site is rec
    slots = {"x": x, "w": w, "b": b, "y": y, "stats": stats}
    assert [a for a in rec.calls[0]] == _evaluate(template, slots, 1e-5)
    rows, total = _Recorder(), _Recorder()
    bwd.rows, bwd.total = rows, total
    dy = torch.randn(m, n)
    dx, part, dwdb, _, _ = bwd.buffers(x, w)
    bwd(dy, x, w, stats, (dx, part, dwdb, dwdb[0], dwdb[1]))
    slots = {"dy": dy, "x": x, "w": w, "stats": stats, "dx": dx, "part": part, "dwdb": dwdb}
    (s1, t1), (s2, t2) = bwd.native()
    assert (s1, s2) == (rows, total)
    assert list(rows.calls[0]) == _evaluate(t1, slots, None)
    assert list(total.calls[0]) == _evaluate(t2, slots, None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_c_plans_templates_are_what_their_calls_pass(dtype):
    """The same for the CUDA C plans, whose sites take addresses (built here without a GPU)."""
    from xrt.kernels.cuda import layernorm as cu_ln

    m, n, groups = 10, 64, 4
    x = torch.randn(m, n, dtype=dtype)
    w, b = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    fwd = object.__new__(cu_ln.FwdPlan)
    fwd.m, fwd.n, fwd.site = m, n, _Recorder()
    y, stats = torch.empty_like(x), torch.empty(2, m)
    assert fwd(x, w, b, y, stats, 1e-6)
    (site, template), = fwd.native()
    addr = {k: t.data_ptr() for k, t in {"x": x, "w": w, "b": b, "y": y, "stats": stats}.items()}
    assert list(site.calls[0]) == _evaluate(template, addr, 1e-6)
    bwd = object.__new__(cu_ln.BwdPlan)
    bwd.m, bwd.n, bwd.groups, bwd.esize = m, n, groups, x.element_size()
    bwd.kernel, bwd.total = _Recorder(), _Recorder()
    dy = torch.randn(m, n, dtype=dtype)
    bufs = cu_ln.checks.layernorm_bwd_buffers(x, w, groups)
    bwd(dy, x, w, stats, bufs)
    dx, part, dwdb = bufs[:3]
    addr = {k: t.data_ptr() for k, t in {"dy": dy, "x": x, "w": w, "stats": stats, "dx": dx, "part": part,
                                         "dwdb": dwdb}.items()}
    (s1, t1), (s2, t2) = bwd.native()
    assert list(s1.calls[0]) == _evaluate(t1, addr, None)
    assert list(s2.calls[0]) == _evaluate(t2, addr, None)


def test_triton_site_native_describes_its_compiled_kernel():
    from types import SimpleNamespace

    from xrt.kernels.triton import launch

    site = object.__new__(launch.Site)
    site.launcher = SimpleNamespace(epoch=0)
    site.epoch, site.grid = 0, (5, 1, 1)
    compiled = SimpleNamespace(function=99, metadata=SimpleNamespace(num_ctas=1, num_warps=4, shared=256),
                               src=SimpleNamespace(signature={"a": "*bf16", "b": "i32", "c": "constexpr",
                                                              "d": "fp32", "BLOCK": "constexpr"}))
    site.fast = (0, None, 99, 0, 0, None, (1024,), compiled)
    got = site.native()
    assert got == LaunchSpec(99, (5, 1, 1), (128, 1, 1), 256, ("ptr", "i32", None, "f32"), keep=compiled,
                             null_tail=2)
    assert native.encode_launch(got, ("x", 3, 1, "eps"), native.FWD_SLOTS, 0)[8:] == [
        5, native.PTR, 0, 0, native.I32, 3, 0, native.KIND_EPS, 0, 0, native.U64, 0, 0, native.U64, 0, 0, 0]
    compiled.src.signature["b"] = "fp16"  # a 16-bit scalar: not packed natively
    assert site.native() is None
    compiled.src.signature["b"] = "i32"
    compiled.metadata.num_ctas = 2  # clusters: not a plain launch
    assert site.native() is None
    compiled.metadata.num_ctas = 1
    site.fast = (0, None, 99, 1, 0, None, (1024,), compiled)  # cooperative
    assert site.native() is None
    site.fast = None  # never launched
    assert site.native() is None


def test_a_bad_xrt_native_value_is_named_and_leaves_it_off(monkeypatch):
    monkeypatch.setenv("XRT_NATIVE", "yes")
    with pytest.raises(ValueError, match="XRT_NATIVE='yes': must be 0"):
        native.enabled()
    monkeypatch.setattr(native, "_state", {"status": None, "why": None, "thread": None})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert native.load() is False
    assert any("XRT_NATIVE='yes'" in str(w.message) for w in caught)
    assert "XRT_NATIVE='yes'" in native.why()
    monkeypatch.setenv("XRT_NATIVE", "0")
    monkeypatch.setattr(native, "_state", {"status": None, "why": None, "thread": None})
    assert native.load() is False and native.why() == "RuntimeError: XRT_NATIVE=0"


def _fake_compiler(tmp_path, name, script):
    fake = tmp_path / name
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    return str(fake)


def test_a_failed_build_says_what_each_compiler_said(monkeypatch, tmp_path):
    monkeypatch.setenv("XRT_NATIVE_CACHE", str(tmp_path))
    refuses = _fake_compiler(tmp_path, "cxx1", "echo 'error: this compiler refuses' >&2\nexit 3\n")
    # one that "builds" a file that is no library: it fails the self-test
    junk = _fake_compiler(tmp_path, "cxx2", 'for a; do case $prev in -o) echo junk > "$a";; esac; prev=$a; done\n')
    monkeypatch.setattr(native, "_compilers", lambda: [refuses, junk])
    with pytest.raises(RuntimeError, match=r"attention.cpp failed: .*cxx1: exit 3: error: this compiler refuses; "
                                           r".*cxx2: the library failed its self-test"):
        native.build(quiet=True)
    assert not list(tmp_path.glob("*.so")), "a failed build left a library behind"


def test_a_failed_detached_build_says_what_the_builder_said(monkeypatch, tmp_path):
    """The background build runs in a process of its own; its failure comes back as its one line."""
    monkeypatch.setenv("XRT_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", _fake_compiler(tmp_path, "cxx1", "echo 'error: this compiler refuses' >&2\nexit 3\n"))
    monkeypatch.setenv("PATH", str(tmp_path))  # (no g++ or c++ to fall back on)
    with pytest.raises(RuntimeError, match=r"attention.cpp failed: .*cxx1: exit 3: error: this compiler refuses$"):
        native.build_detached(quiet=True)
    assert not list((tmp_path / "cache").glob("*.so")) and not list((tmp_path / "cache").glob("*.log"))


def test_the_background_build_outlives_the_process_that_asked(native_lib, tmp_path):
    """A short process that asks for the library and ends at once still leaves it in the cache for
    the next process (before, the build died with it and every short process began it again)."""
    import os
    import subprocess
    import sys
    import time

    real = native.library_path()  # built by the native_lib fixture, in the default cache
    slow = _fake_compiler(tmp_path, "slowcxx",
                          f'sleep 2\nfor a; do case $prev in -o) cp "{real}" "$a";; esac; prev=$a; done\n')
    env = dict(os.environ, XRT_NATIVE_CACHE=str(tmp_path / "cache"), CXX=slow)
    asked = subprocess.run([sys.executable, "-c", "from xrt.pytorch.ops import native; print(native.ready())"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert asked.returncode == 0 and asked.stdout.strip() == "False", asked.stderr
    want = tmp_path / "cache" / real.name
    assert not want.exists()  # the process ended before the build did
    deadline = time.monotonic() + 120
    while not want.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert want.exists(), "the build died with the process that asked for it"
    deadline = time.monotonic() + 10
    while list(want.parent.glob("*.log")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(want.parent.glob("*.log")), "the builder left its log behind"


def test_builders_started_together_build_once(native_lib, tmp_path, monkeypatch):
    """Two processes that ask at once start two builders; the second waits for the first and finds
    the library built."""
    real = native.library_path()
    runs = tmp_path / "runs"
    cxx = _fake_compiler(tmp_path, "countcxx", f'echo run >> "{runs}"\nsleep 1\n'
                         f'for a; do case $prev in -o) cp "{real}" "$a";; esac; prev=$a; done\n')
    monkeypatch.setenv("XRT_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", cxx)
    pending = [native._spawn_builder(quiet=True) for _ in range(2)]
    assert all(p is not None for p in pending)
    paths = {native._wait_builder(*p, timeout=120) for p in pending}
    assert paths == {tmp_path / "cache" / real.name}
    assert runs.read_text().splitlines() == ["run"] * (len(native.SOURCES) + 1)  # each source and the link, once


# -- the library on the CPU: build, plans, autograd plumbing ---------------------------------------

def test_add_plan_rejects_malformed_specs_with_a_clear_line(native_lib):
    for spec, what in (([4, 8], "ends before its groups"), ([4, 8, 2, -1, 0, 0, 9], "1 values after"),
                       ([0, 8, 2, -1, 0, 0], "must be positive"),
                       ([4, 8, 2, -1, 1, 5, 1, 1, 1, 32, 1, 1, 0, 1, 0, 7, 0, 0], "slot 7 does not exist"),
                       ([4, 8, 2, -1, 1, 5, 1, 1, 1, 32, 1, 1, 0, 1, 42, 0, 0, 0], "unknown parameter kind 42"),
                       ([4, 8, 2, -1, 1, 0, 1, 1, 1, 32, 1, 1, 0, 0, 0], "has no function")):
        with pytest.raises(RuntimeError, match=what):
            native_lib.add_plan(spec)


def test_the_autograd_plumbing_without_kernels(native_lib):
    """A plan with no launches (a CPU plan): the op's outputs, saved state and gradients have the
    right shapes and types, its inputs are checked, and a second derivative fails as
    ``once_differentiable`` does. (What the kernels compute is the GPU tests' part.)"""
    pid = native_lib.add_plan([4, 8, 3, -1, 0, 0])
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, dtype=torch.float64, requires_grad=True)
    y = native_lib.layernorm(x, w, b, 1e-5, pid, 0)
    assert y.shape == x.shape and y.dtype == x.dtype and y.grad_fn is not None
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), torch.ones_like(y), retain_graph=True)
    assert (gx.shape, gw.shape, gb.shape) == (x.shape, w.shape, b.shape) and gw.dtype == w.dtype
    torch.autograd.grad(y, (x,), torch.ones_like(y))  # retain_graph: the saved tensors are still there
    y = native_lib.layernorm(x, w, b, 1e-5, pid, 0)
    gx, = torch.autograd.grad(y, (x,), torch.ones_like(y), create_graph=True)
    with pytest.raises(RuntimeError, match="not differentiable"):
        gx.sum().backward()
    with pytest.raises(RuntimeError, match="no plan 99999"):
        native_lib.layernorm(x, w, b, 1e-5, 99999, 0)
    with pytest.raises(RuntimeError, match=r"4x8 elements \(the plan's\)"):
        native_lib.layernorm(x[:3], w, b, 1e-5, pid, 0)
    with pytest.raises(RuntimeError, match="must have x's dtype"):
        native_lib.layernorm(x, w.float(), b, 1e-5, pid, 0)
    with pytest.raises(RuntimeError, match="plan's device"):
        native_lib.layernorm(x, w, b, 1e-5, native_lib.add_plan([4, 8, 3, 0, 0, 0]), 0)


def test_a_launch_without_a_gpu_driver_fails_with_a_clear_line(native_lib):
    if shutil.which("nvidia-smi"):
        pytest.skip("a CUDA driver is installed here")
    spec = [4, 8, 1, -1, 1, 0xDEAD, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0]
    pid = native_lib.add_plan(spec)
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    with pytest.raises(RuntimeError, match="cannot launch: libcuda.so.1"):
        native_lib.layernorm(x, w, b, 1e-5, pid, 0)


def test_cpu_plans_never_go_native(interpreter):
    """The interpreter's plans keep the Python path, and never start a build on a CPU machine."""
    x, w, b = (t.requires_grad_(True) for t in (torch.randn(6, 40), torch.rand(40) + 0.5, torch.randn(40)))
    xp.clear_kernel_policy()
    xp.ops.fused_layernorm(x, 40, w, b, provider="triton").sum().backward()
    plans = [v for k, v in pol.state().memo.items() if isinstance(k, tuple) and k[0] == "fused_layernorm"]
    assert plans and all(p is False or p.native is False for p in plans)


# -- on the GPU: the native op against the Python path, bit for bit --------------------------------

def _train(x, w, b, provider, dy):
    xs, ws, bs = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    y = xp.ops.fused_layernorm(xs, x.shape[-1], ws, bs, provider=provider)
    y.backward(dy)
    return y, xs.grad, ws.grad, bs.grad, type(y.grad_fn).__name__


def _python_path(monkeypatch, *args):
    """``_train`` on the Python path (plans made while the library seems unavailable stay off it),
    then a fresh policy state, so that the next calls make new plans."""
    xp.clear_kernel_policy()
    with monkeypatch.context() as mp:
        mp.setattr(native, "ready", lambda: False)
        mp.setattr(native, "why", lambda: "off for this test")
        got = _train(*args)
    xp.clear_kernel_policy()
    return got


def _go_native(*args):
    """``_train`` until the plan has gone native (a Triton plan needs its kernels launched once)."""
    for _ in range(layernorm_op.NATIVE_TRIES):
        got = _train(*args)
        if got[4] != "_LeanLayerNormBackward":
            return got
    plans = [(v.provider, v.native, v.tries) for k, v in pol.state().memo.items()
             if isinstance(k, tuple) and k[0] == "fused_layernorm" and v is not False]
    raise AssertionError(f"training never went native: {plans}; {native.why()}")


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["triton", "cuda"])
@pytest.mark.parametrize("shape,dtype", [((64, 1024), torch.bfloat16), ((1, 4096), torch.float16),
                                         ((37, 300), torch.float32), ((4, 8, 768), torch.bfloat16),
                                         ((2048, 8192), torch.bfloat16)])
def test_native_training_equals_the_python_path(provider, shape, dtype, monkeypatch):
    assert native.load(), native.why()
    torch.manual_seed(0)
    n = shape[-1]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = (torch.rand(n, device="cuda") + 0.5).to(dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    dy = torch.randn(shape, device="cuda", dtype=dtype)
    want = _python_path(monkeypatch, x, w, b, provider, dy)
    assert want[4] == "_LeanLayerNormBackward"
    got = _go_native(x, w, b, provider, dy)
    for a, e in zip(got[:4], want[:4], strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    ref = F.layer_norm(x.float(), (n,), w.float(), b.float())
    torch.testing.assert_close(got[0].float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["triton", "cuda"])
def test_native_on_a_side_stream_misaligned_views_and_double_backward(provider, monkeypatch):
    assert native.load(), native.why()
    torch.manual_seed(1)
    n = 512
    x = torch.randn(65, n, device="cuda", dtype=torch.bfloat16)
    w = (torch.rand(n, device="cuda") + 0.5).to(torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(64, n, device="cuda", dtype=torch.bfloat16)
    want = _python_path(monkeypatch, x[:64], w, b, provider, dy)
    _go_native(x[:64], w, b, provider, dy)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = _train(x[:64], w, b, provider, dy)
    torch.cuda.current_stream().wait_stream(s)
    assert got[4] != "_LeanLayerNormBackward"
    for a, e in zip(got[:4], want[:4], strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    # A view 2 bytes past an aligned address: not the native op's to run (another plan, Python path).
    xv = x.view(-1)[1:1 + 64 * n].view(64, n)
    torch.testing.assert_close(_train(xv, w, b, provider, dy)[0],
                               F.layer_norm(xv.float(), (n,), w.float(), b.float()).to(xv.dtype),
                               rtol=2e-2, atol=2e-2)
    # dy a misaligned view: the native backward copies it first
    dyv = torch.randn(64 * n + 1, device="cuda", dtype=torch.bfloat16)[1:].view(64, n)
    got, ref = _train(x[:64], w, b, provider, dyv), _train(x[:64], w, b, provider, dyv.clone())
    assert got[4] == ref[4] != "_LeanLayerNormBackward"
    for a, e in zip(got[:4], ref[:4], strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    # retain_graph: a second backward equals the first; create_graph: a second derivative fails
    xs = x[:64].detach().clone().requires_grad_(True)
    y = xp.ops.fused_layernorm(xs, n, w, b, provider=provider)
    g1, = torch.autograd.grad(y, xs, dy, retain_graph=True)
    g2, = torch.autograd.grad(y, xs, dy, create_graph=True)
    torch.testing.assert_close(g1, g2, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="differentiate twice|not differentiable"):
        g2.float().sum().backward()
